package ui

import (
	"net/http"
	"path"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// forwardedHeaders are the request headers a proxied call keeps. Everything else — the
// cookie, the CSRF token, any Authorization or Impersonate-* header the page might send — is
// dropped, and the session's bearer token is put in.
var forwardedHeaders = []string{"Accept", "Content-Type", "User-Agent"}

// serveProxy hands a Kubernetes API call from the page to the API server's ordinary
// handler as the session's user: /ui/proxy/apis/apps/v1/daemonsets is
// /apis/apps/v1/daemonsets with the user's bearer token, so authentication, authorization,
// admission, in-flight limits and watch streaming are exactly kubectl's. The response,
// including a watch's stream, is written straight to the browser.
func (h *Handler) serveProxy(w http.ResponseWriter, r *http.Request) {
	sess, _, ok := h.sessionFrom(r)
	if !ok {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "not signed in to the browser view")
		return
	}
	// Reads need the token too: then nothing but the page itself can make the server act
	// on the session, whatever a browser's cookie rules.
	if !csrfOK(r, sess) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "missing or wrong "+CSRFHeader+" header")
		return
	}
	if !safeMethod(r.Method) && !sameOrigin(r) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "changes must come from the browser view's own origin")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, proxyPrefix)
	// A path with . or .. segments could step out of the resource API once cleaned.
	if (!strings.HasPrefix(rest, "/api/") && !strings.HasPrefix(rest, "/apis/")) || path.Clean(rest) != rest {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "only the resource API (/api/, /apis/) is reachable from the browser view")
		return
	}
	out := r.Clone(r.Context())
	out.URL.Path = rest
	out.URL.RawPath = strings.TrimPrefix(r.URL.RawPath, proxyPrefix)
	out.RequestURI = out.URL.RequestURI()
	out.Header = http.Header{}
	for _, k := range forwardedHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			out.Header[k] = v
		}
	}
	out.Header.Set("Authorization", "Bearer "+sess.token)
	h.api.ServeHTTP(w, out)
}
