package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// Authentication, in kube-apiserver's order: a bearer token is looked up in the static
// token file, else verified as a ServiceAccount token; a request without one is anonymous
// where anonymous requests are allowed. Every authenticated user is also in
// system:authenticated. Then the Impersonate-* headers, if any, replace the user by the
// one they name, when the authenticated user may impersonate it.

// errUnauthenticated is why a request gets 401; the reason goes to the debug log only.
var errUnauthenticated = errors.New("unauthenticated")

// anonymousUser is who a request without credentials is.
func anonymousUser() *auth.User {
	return &auth.User{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
}

// authenticateRequest returns who r comes from.
func (s *Server) authenticateRequest(r *http.Request) (*auth.User, error) {
	header := r.Header.Get("Authorization")
	token, ok := auth.BearerToken(header)
	if !ok {
		if strings.TrimSpace(header) != "" && strings.HasPrefix(strings.ToLower(header), "bearer") {
			return nil, fmt.Errorf("%w: empty bearer token", errUnauthenticated)
		}
		if s.cfg.AnonymousAuth || publicPaths[r.URL.Path] {
			return anonymousUser(), nil
		}
		return nil, fmt.Errorf("%w: no bearer token", errUnauthenticated)
	}
	u, _, err := s.authenticateToken(r.Context(), token, s.cfg.Audiences())
	return u, err
}

// authenticateToken returns who token identifies, and for a ServiceAccount token the
// audiences (of those asked for) it was issued for.
func (s *Server) authenticateToken(ctx context.Context, token string, audiences []string) (*auth.User, []string, error) {
	if u := s.authn.Lookup(token); u != nil {
		return u.WithGroups(user.AllAuthenticated), audiences, nil
	}
	claims, err := s.saVerifier.VerifyFor(token, audiences)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errUnauthenticated, err)
	}
	if err := s.checkTokenObjects(ctx, claims); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errUnauthenticated, err)
	}
	return claims.User().WithGroups(user.AllAuthenticated), claims.Audiences, nil
}

// checkTokenObjects makes a ServiceAccount token die with what it names: the
// ServiceAccount (deleting it, or recreating it under the same name, ends every token
// issued for it) and the pod, secret or node it is bound to.
func (s *Server) checkTokenObjects(ctx context.Context, c *auth.TokenClaims) error {
	check := func(gr schema.GroupResource, namespace string, ref *auth.ObjectRef) error {
		if ref == nil {
			return nil
		}
		obj, err := s.lookup(ctx, gr, namespace, ref.Name)
		if err != nil {
			return fmt.Errorf("%s %s/%s of the token: %w", gr.Resource, namespace, ref.Name, err)
		}
		m := obj.(metav1.Object)
		if string(m.GetUID()) != ref.UID {
			return fmt.Errorf("%s %s/%s is not the one the token was issued for (UID %s, token says %s)", gr.Resource, namespace, ref.Name, m.GetUID(), ref.UID)
		}
		if dt := m.GetDeletionTimestamp(); dt != nil && !dt.After(s.clock.Now()) {
			return fmt.Errorf("%s %s/%s of the token has been deleted", gr.Resource, namespace, ref.Name)
		}
		return nil
	}
	return errors.Join(
		check(serviceAccountsResource, c.Namespace, &c.ServiceAccount),
		check(podsResource, c.Namespace, c.Pod),
		check(secretsResource, c.Namespace, c.Secret),
		check(nodesResource, "", c.Node),
	)
}

var (
	secretsResource = corev1.Resource("secrets")
	nodesResource   = corev1.Resource("nodes")
)

// impersonation is what Impersonate-* headers ask to act as.
type impersonation struct {
	user   string
	uid    string
	hasUID bool
	groups []string
	extra  map[string][]string
}

// impersonationOf reads the Impersonate-* headers; ok is false without any.
func impersonationOf(h http.Header) (imp impersonation, ok bool) {
	for key, values := range h {
		switch {
		case key == authenticationv1.ImpersonateUserHeader:
			imp.user, ok = values[0], true
		case key == authenticationv1.ImpersonateUIDHeader:
			imp.uid, imp.hasUID, ok = values[0], true, true
		case key == authenticationv1.ImpersonateGroupHeader:
			imp.groups, ok = append(imp.groups, values...), true
		case strings.HasPrefix(key, authenticationv1.ImpersonateUserExtraHeaderPrefix):
			name := strings.ToLower(key[len(authenticationv1.ImpersonateUserExtraHeaderPrefix):])
			if unescaped, err := url.PathUnescape(name); err == nil {
				name = unescaped
			}
			if imp.extra == nil {
				imp.extra = map[string][]string{}
			}
			imp.extra[name], ok = append(imp.extra[name], values...), true
		}
	}
	slices.Sort(imp.groups)
	return imp, ok
}

// impersonate returns the user r's Impersonate-* headers name, or nil when there are
// none, once u may impersonate every part of it (the impersonate verb on users or
// serviceaccounts, groups, uids and userextras, as kube-apiserver checks it). The headers
// are then removed: nothing further down sees them.
func (s *Server) impersonate(r *http.Request, u *auth.User) (*auth.User, error) {
	imp, ok := impersonationOf(r.Header)
	if !ok {
		return nil, nil
	}
	if imp.user == "" {
		return nil, badRequest("requested impersonation of groups, a UID or extra values without impersonating a user")
	}
	allowed := func(a auth.Attributes) error {
		a.Verb = "impersonate"
		if d, reason := s.authorize(u, a); d != auth.Allow {
			return forbiddenError(u, a, reason)
		}
		return nil
	}
	out := &auth.User{Name: imp.user, Groups: append([]string(nil), imp.groups...), Extra: imp.extra}
	if ns, name, err := serviceaccount.SplitUsername(imp.user); err == nil {
		if err := allowed(auth.Attributes{Resource: "serviceaccounts", Namespace: ns, Name: name}); err != nil {
			return nil, err
		}
		if len(imp.groups) == 0 {
			// A ServiceAccount's groups follow from its name.
			out.Groups = serviceaccount.MakeGroupNames(ns)
		}
	} else if err := allowed(auth.Attributes{Resource: "users", Name: imp.user}); err != nil {
		return nil, err
	}
	for _, g := range imp.groups {
		if err := allowed(auth.Attributes{Resource: "groups", Name: g}); err != nil {
			return nil, err
		}
	}
	for key, values := range imp.extra {
		for _, v := range values {
			if err := allowed(auth.Attributes{Group: authenticationv1.GroupName, Resource: "userextras", Subresource: key, Name: v}); err != nil {
				return nil, err
			}
		}
	}
	if imp.hasUID {
		if err := allowed(auth.Attributes{Group: authenticationv1.GroupName, Resource: "uids", Name: imp.uid}); err != nil {
			return nil, err
		}
		out.UID = imp.uid
	}
	if out.Name != user.Anonymous {
		out = out.WithGroups(user.AllAuthenticated)
	}
	for key := range r.Header {
		if strings.HasPrefix(key, "Impersonate-") {
			r.Header.Del(key)
		}
	}
	return out, nil
}

// unauthorizedStatus is the 401 every authentication failure gets, whatever the cause.
func unauthorizedStatus() *metav1.Status {
	return &metav1.Status{Code: http.StatusUnauthorized, Reason: metav1.StatusReasonUnauthorized, Message: "Unauthorized"}
}
