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
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// requestState travels with a request: who made it, and what it turned out to be (filled
// by the resource handler, read by metrics and the audit log).
type requestState struct {
	log *slog.Logger
	// user is who the request acts as; authenticated is who made it when that differs
	// (impersonation).
	user, authenticated *auth.User
	verb                string
	resource            string
	subresource         string
	// info is the resource request, when it is one (the audit log reads the name a
	// create learns from its body).
	info *requestInfo
	// decision and reason are the authorizer's answer, for the audit log.
	decision, reason string
	// annotations are what admission plugins add to the audit event (PodSecurity).
	annotations map[string]string
}

type stateKey struct{}

func stateFrom(ctx context.Context) *requestState {
	if st, ok := ctx.Value(stateKey{}).(*requestState); ok {
		return st
	}
	return &requestState{}
}

// publicPaths answer without a token, as kube-apiserver's system:public-info-viewer lets
// anyone read health and version: probes and load balancers carry no credentials. They are
// authorized like every other path, as system:anonymous.
var publicPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

// withAuthentication authenticates every request (401 when that fails), applies
// impersonation, and authorizes what is not a resource (discovery, OpenAPI, metrics):
// resources are authorized by their handler, which knows the verb and the object.
func (s *Server) withAuthentication(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateFrom(r.Context())
		if st.user == nil {
			u, err := s.authenticateRequest(r)
			if err != nil {
				s.log.Debug("request not authenticated", "path", r.URL.Path, "err", err)
				writeStatus(w, unauthorizedStatus())
				return
			}
			st.user = u
		}
		imp, err := s.impersonate(r, st.user)
		if err != nil {
			st.decision = "forbid"
			writeError(w, r, err, groupResourceNone, "")
			return
		}
		if imp != nil {
			st.authenticated, st.user = st.user, imp
		}
		if !isResourcePath(r.URL.Path) {
			a := auth.Attributes{Verb: nonResourceVerb(r.Method), NonResourcePath: r.URL.Path}
			d, reason := s.authorize(st.user, a)
			st.decision, st.reason = decisionAnnotation(d), reason
			if d != auth.Allow {
				writeStatus(w, &forbiddenError(st.user, a, reason).ErrStatus)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// withInsecureAdmin marks every request on the opt-in plain-HTTP listener as coming from
// an administrator: it is only allowed on loopback, where the user already owns the host.
// It must run inside withRecovery, which makes the state it marks.
func (s *Server) withInsecureAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stateFrom(r.Context()).user = &auth.User{Name: "system:insecure-loopback",
			Groups: append(append([]string(nil), s.cfg.AdminGroups...), user.AllAuthenticated)}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) withRecovery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		growStack(len(r.URL.Path)) // see stack.go
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
