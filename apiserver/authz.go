package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// Authorization is kube-apiserver's chain for --authorization-mode=Node,RBAC, preceded by
// the privileged groups (system:masters): the node authorizer, then RBAC over the RBAC
// objects as the watch caches hold them. RBAC is a snapshot (auth.Policy) rebuilt on
// the first request after any Role, ClusterRole or binding changed, so a change takes
// effect as soon as this server's cache has seen it, without a restart.

var (
	rolesResource               = rbacv1.Resource("roles")
	clusterRolesResource        = rbacv1.Resource("clusterroles")
	roleBindingsResource        = rbacv1.Resource("rolebindings")
	clusterRoleBindingsResource = rbacv1.Resource("clusterrolebindings")
)

// isRBACResource reports whether gr is one of the four kinds RBAC decides from.
func isRBACResource(gr schema.GroupResource) bool {
	return gr == rolesResource || gr == clusterRolesResource || gr == roleBindingsResource || gr == clusterRoleBindingsResource
}

// rbacAuthorizer serves the current RBAC snapshot.
type rbacAuthorizer struct {
	// newPolicy builds a snapshot from what the caches hold.
	newPolicy func() *auth.Policy
	// changes counts changes to RBAC objects seen by the caches; a snapshot built after
	// reading changes == n reflects at least every change up to n.
	changes atomic.Uint64
	current atomic.Pointer[policySnapshot]
	// build serializes rebuilds, so that a burst of requests after a change builds once.
	buildMu sync.Mutex
	// rebuilds counts snapshots built, for tests and metrics.
	rebuilds atomic.Uint64
}

type policySnapshot struct {
	policy  *auth.Policy
	changes uint64
}

var (
	_ auth.Authorizer   = (*rbacAuthorizer)(nil)
	_ auth.RuleResolver = (*rbacAuthorizer)(nil)
)

// changed is called by the RBAC kinds' watch caches on every change (under the cache's
// lock: it only counts).
func (z *rbacAuthorizer) changed() { z.changes.Add(1) }

// policy returns a snapshot at least as new as every change seen so far.
func (z *rbacAuthorizer) policy() *auth.Policy {
	want := z.changes.Load()
	if p := z.current.Load(); p != nil && p.changes >= want {
		return p.policy
	}
	z.buildMu.Lock()
	defer z.buildMu.Unlock()
	want = z.changes.Load()
	if p := z.current.Load(); p != nil && p.changes >= want {
		return p.policy
	}
	p := &policySnapshot{policy: z.newPolicy(), changes: want}
	z.current.Store(p)
	z.rebuilds.Add(1)
	return p.policy
}

// Authorize implements auth.Authorizer.
func (z *rbacAuthorizer) Authorize(u *auth.User, a auth.Attributes) (auth.Decision, string) {
	return z.policy().Authorize(u, a)
}

// RulesFor implements auth.RuleResolver.
func (z *rbacAuthorizer) RulesFor(u *auth.User, namespace string) ([]rbacv1.PolicyRule, bool) {
	return z.policy().RulesFor(u, namespace)
}

// buildPolicy indexes the RBAC objects the watch caches hold.
func (s *Server) buildPolicy() *auth.Policy {
	var crs []*rbacv1.ClusterRole
	for _, o := range s.cached(clusterRolesResource, "") {
		crs = append(crs, o.(*rbacv1.ClusterRole))
	}
	var roles []*rbacv1.Role
	for _, o := range s.cached(rolesResource, "") {
		roles = append(roles, o.(*rbacv1.Role))
	}
	var crbs []*rbacv1.ClusterRoleBinding
	for _, o := range s.cached(clusterRoleBindingsResource, "") {
		crbs = append(crbs, o.(*rbacv1.ClusterRoleBinding))
	}
	var rbs []*rbacv1.RoleBinding
	for _, o := range s.cached(roleBindingsResource, "") {
		rbs = append(rbs, o.(*rbacv1.RoleBinding))
	}
	return auth.NewPolicy(crs, roles, crbs, rbs)
}

// newAuthorizer builds the chain.
func (s *Server) newAuthorizer() auth.Chain {
	return auth.Chain{auth.PrivilegedGroups(s.cfg.AdminGroups), auth.NodeAuthorizer{}, s.rbac}
}

// authorize asks the chain.
func (s *Server) authorize(u *auth.User, a auth.Attributes) (auth.Decision, string) {
	return s.authz.Authorize(u, a)
}

// forbiddenError is kube-apiserver's 403 for a: the message names the user, the verb and
// what it is about, never whether the object exists.
func forbiddenError(u *auth.User, a auth.Attributes, reason string) *apierrors.StatusError {
	name := ""
	if u != nil {
		name = u.Name
	}
	var msg string
	gr := schema.GroupResource{}
	if !a.IsResourceRequest() {
		msg = fmt.Sprintf("User %q cannot %s path %q", name, a.Verb, a.NonResourcePath)
	} else {
		gr = schema.GroupResource{Group: a.Group, Resource: a.Resource}
		resource := a.Resource
		if a.Subresource != "" {
			resource += "/" + a.Subresource
		}
		if a.Namespace != "" {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", name, a.Verb, resource, a.Group, a.Namespace)
		} else {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", name, a.Verb, resource, a.Group)
		}
	}
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(gr, a.Name, errors.New(msg))
}

// nonResourceVerb is the verb of a request to a path outside the resource tree: its
// method, lower-cased, as kube-apiserver names it.
func nonResourceVerb(method string) string {
	if method == http.MethodHead {
		return "get"
	}
	return strings.ToLower(method)
}

// decisionAnnotation is what an audit event says about how a request was authorized.
func decisionAnnotation(d auth.Decision) string {
	if d == auth.Allow || d == auth.NodeObjectCheck {
		return "allow"
	}
	return "forbid"
}
