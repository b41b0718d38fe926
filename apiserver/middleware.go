package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// requestState travels with a request: who made it, and what it turned out to be (filled
// by the resource handler, read by metrics).
type requestState struct {
	log         *slog.Logger
	user        *auth.User
	verb        string
	resource    string
	subresource string
}

type stateKey struct{}

func stateFrom(ctx context.Context) *requestState {
	if st, ok := ctx.Value(stateKey{}).(*requestState); ok {
		return st
	}
	return &requestState{}
}

// publicPaths answer without a token, as kube-apiserver's system:public-info-viewer lets
// anyone read health and version: probes and load balancers carry no credentials.
var publicPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

func (s *Server) withAuthentication(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateFrom(r.Context())
		if st.user == nil {
			st.user = s.authn.Authenticate(r.Header.Get("Authorization"))
		}
		if st.user == nil && !publicPaths[r.URL.Path] {
			writeStatus(w, &metav1.Status{Code: http.StatusUnauthorized, Reason: metav1.StatusReasonUnauthorized, Message: "Unauthorized"})
			return
		}
		// Discovery, OpenAPI and metrics are authorized here; resources in their handler,
		// which knows the verb and the object.
		if st.user != nil && !isResourcePath(r.URL.Path) && !publicPaths[r.URL.Path] {
			if d, reason := s.authz.Authorize(st.user, auth.Attributes{NonResourcePath: r.URL.Path}); d != auth.Allow {
				writeStatus(w, forbiddenStatus(st.user, fmt.Sprintf("%s %q", lowerVerb(r.Method), r.URL.Path), reason))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// withInsecureAdmin marks every request on the opt-in plain-HTTP listener as coming from
// an administrator: it is only allowed on loopback, where the user already owns the host.
func (s *Server) withInsecureAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stateFrom(r.Context()).user = &auth.User{Name: "system:insecure-loopback", Groups: s.cfg.AdminGroups}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) withRecovery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), stateKey{}, &requestState{log: s.log})
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				writeStatus(w, &metav1.Status{Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError,
					Message: "Internal error occurred: the server could not handle the request"})
			}
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func forbiddenStatus(u *auth.User, what, reason string) *metav1.Status {
	msg := fmt.Sprintf("User %q cannot %s", u.Name, what)
	if reason != "" {
		msg += ": " + reason
	}
	return &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: msg}
}

func lowerVerb(method string) string {
	switch method {
	case http.MethodGet:
		return "get"
	case http.MethodPost:
		return "post"
	case http.MethodPut:
		return "put"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return method
}

// isResourcePath reports whether path is under the resource tree (/api/v1/…, /apis/g/v/…)
// rather than discovery of it (/api, /api/v1, /apis, /apis/g, /apis/g/v).
func isResourcePath(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case parts[0] == "api":
		return len(parts) > 2
	case parts[0] == "apis":
		return len(parts) > 3
	}
	return false
}
