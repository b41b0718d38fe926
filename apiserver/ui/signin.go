package ui

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxSignInBody bounds the sign-in form: a bearer token and little else.
const maxSignInBody = 64 << 10

// Why a sign-in failed, carried to the page in the query of the redirect (never the token).
const (
	signInExpired = "expired" // the link was used already, is too old or was never issued
	signInDenied  = "denied"  // the API server did not accept the token
)

// serveSignIn redeems a sign-in link (GET ?link=…) or a bearer token pasted into the form
// (POST), then redirects to the page, which the new cookie now opens.
func (h *Handler) serveSignIn(w http.ResponseWriter, r *http.Request) {
	var token, failure string
	switch r.Method {
	case http.MethodGet:
		var ok bool
		if token, ok = h.sessions.redeemLink(r.URL.Query().Get("link")); !ok {
			failure = signInExpired
		}
	case http.MethodPost:
		// A page elsewhere must not sign a browser in under an identity of its choosing.
		if !sameOrigin(r) {
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "sign-in must come from the sign-in form of this server")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxSignInBody)
		if err := r.ParseForm(); err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the sign-in form could not be read")
			return
		}
		token = strings.TrimSpace(r.PostForm.Get("token"))
		if token == "" {
			failure = signInDenied
		}
	default:
		methodNotAllowed(w, r)
		return
	}
	if failure == "" {
		user, groups, err := h.whoami(r.Context(), r, token)
		if err == nil {
			secret, _ := h.sessions.create(token, user, groups)
			h.setCookie(w, secret, h.sessions.sessionTTL)
			h.log.Info("signed in to the browser view", "user", user)
			http.Redirect(w, r, Prefix, http.StatusSeeOther)
			return
		}
		h.log.Info("browser view sign-in refused", "err", err)
		failure = signInDenied
	}
	http.Redirect(w, r, Prefix+"?signin="+failure, http.StatusSeeOther)
}

// whoami asks the API server who token is, through its ordinary handler, as
// `kubectl auth whoami` does.
func (h *Handler) whoami(ctx context.Context, from *http.Request, token string) (string, []string, error) {
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.RemoteAddr, req.TLS, req.Host = from.RemoteAddr, from.TLS, from.Host
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	rec := newRecorder()
	h.api.ServeHTTP(rec, req)
	if rec.code != http.StatusCreated && rec.code != http.StatusOK {
		return "", nil, fmt.Errorf("selfsubjectreview: %d %s", rec.code, bytes.TrimSpace(rec.body.Bytes()))
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal(rec.body.Bytes(), &review); err != nil {
		return "", nil, fmt.Errorf("selfsubjectreview: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", nil, errors.New("selfsubjectreview: no user name in the answer")
	}
	return review.Status.UserInfo.Username, review.Status.UserInfo.Groups, nil
}

// sessionInfo is what the page learns about its session.
type sessionInfo struct {
	User      string    `json:"user"`
	Groups    []string  `json:"groups"`
	CSRFToken string    `json:"csrfToken"`
	Expires   time.Time `json:"expires"`
}

// serveSession tells the page who is signed in and the CSRF token its calls must carry, or
// answers 401, upon which the page shows the sign-in form. Another origin cannot read it:
// the server sends no CORS headers.
func (h *Handler) serveSession(w http.ResponseWriter, r *http.Request) {
	if !safeMethod(r.Method) {
		methodNotAllowed(w, r)
		return
	}
	sess, _, ok := h.sessionFrom(r)
	if !ok {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "not signed in")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(sessionInfo{User: sess.user, Groups: sess.groups, CSRFToken: sess.csrf, Expires: sess.expires})
}

// serveSignOut ends the session.
func (h *Handler) serveSignOut(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r)
		return
	}
	sess, secret, ok := h.sessionFrom(r)
	if !ok {
		clearCookie(w)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !csrfOK(r, sess) || !sameOrigin(r) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "missing or wrong "+CSRFHeader+" header, or not from this origin")
		return
	}
	h.sessions.end(secret)
	clearCookie(w)
	w.WriteHeader(http.StatusNoContent)
}

func csrfOK(r *http.Request, sess *session) bool {
	got := r.Header.Get(CSRFHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

// recorder collects a response written in-process.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}, code: http.StatusOK} }

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
