package apiserver

import (
	"context"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// fullAuthority is what setting an aggregationRule takes: an aggregated role can gather
// any permission, so only who holds them all may define one.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// admitRBACEscalation is RBAC's privilege-escalation check. A user may write a Role or
// ClusterRole only with rules it holds itself (in the role's namespace, or cluster-wide),
// unless it may `escalate` on it; and a binding only to a role whose rules it holds
// where the binding applies, unless it may `bind` that role. The privileged groups and
// the server's own writes (no user) pass, as do updates that only touch what the garbage
// collector changes.
func admitRBACEscalation(s *Server, ctx context.Context, a *admission) error {
	if !isRBACResource(a.res.groupResource()) {
		return nil
	}
	u := stateFrom(ctx).user
	if u == nil || u.InGroup(s.cfg.AdminGroups...) {
		return nil
	}
	if a.old != nil && onlyGCFieldsChanged(a.obj, a.old) {
		return nil
	}
	may := func(verb string, gr schema.GroupResource, namespace, name string) bool {
		d, _ := s.authorize(u, auth.Attributes{Verb: verb, Group: gr.Group, Resource: gr.Resource, Namespace: namespace, Name: name})
		return d == auth.Allow
	}
	switch obj := a.obj.(type) {
	case *rbacv1.Role:
		if may("escalate", rolesResource, a.namespace, a.name) {
			return nil
		}
		return s.confirmNoEscalation(a, u, a.namespace, obj.Rules, "")
	case *rbacv1.ClusterRole:
		if may("escalate", clusterRolesResource, "", a.name) {
			return nil
		}
		var oldRule *rbacv1.AggregationRule
		if old, ok := a.old.(*rbacv1.ClusterRole); ok {
			oldRule = old.AggregationRule
		}
		if !apiequality.Semantic.DeepEqual(oldRule, obj.AggregationRule) {
			if err := s.confirmNoEscalation(a, u, "", fullAuthority, "must have cluster-admin privileges to use the aggregationRule"); err != nil {
				return err
			}
		}
		return s.confirmNoEscalation(a, u, "", obj.Rules, "")
	case *rbacv1.RoleBinding:
		return s.checkBinding(ctx, a, u, obj.RoleRef, a.namespace, may)
	case *rbacv1.ClusterRoleBinding:
		return s.checkBinding(ctx, a, u, obj.RoleRef, "", may)
	}
	return nil
}

// checkBinding lets u bind ref where namespace ("" cluster-wide) says.
func (s *Server) checkBinding(ctx context.Context, a *admission, u *auth.User, ref rbacv1.RoleRef, namespace string,
	may func(string, schema.GroupResource, string, string) bool) error {
	roleGR := clusterRolesResource
	if ref.Kind == "Role" {
		roleGR = rolesResource
	}
	if may("bind", roleGR, namespace, ref.Name) {
		return nil
	}
	roleNamespace := ""
	if ref.Kind == "Role" {
		roleNamespace = namespace
	}
	role, err := s.lookup(ctx, roleGR, roleNamespace, ref.Name)
	if err != nil {
		return err
	}
	var rules []rbacv1.PolicyRule
	switch r := role.(type) {
	case *rbacv1.Role:
		rules = r.Rules
	case *rbacv1.ClusterRole:
		rules = r.Rules
	}
	return s.confirmNoEscalation(a, u, namespace, rules, "")
}

// confirmNoEscalation refuses the write unless u holds every one of rules in namespace.
func (s *Server) confirmNoEscalation(a *admission, u *auth.User, namespace string, rules []rbacv1.PolicyRule, message string) error {
	held, _ := s.rbac.RulesFor(u, namespace)
	ok, missing := validation.Covers(held, rules)
	if ok {
		return nil
	}
	if message == "" {
		var b strings.Builder
		fmt.Fprintf(&b, "user %q (groups=%q) is attempting to grant RBAC permissions not currently held:", u.Name, u.Groups)
		for _, r := range missing {
			b.WriteString("\n" + compactRule(r))
		}
		message = b.String()
	}
	return a.forbidden(fmt.Errorf("%s", message))
}

// compactRule shows a rule as upstream's escalation errors do.
func compactRule(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, values []string) {
		if len(values) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, values))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("ResourceNames", r.ResourceNames)
	add("NonResourceURLs", r.NonResourceURLs)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}

// onlyGCFieldsChanged reports whether obj differs from old only in owner references and
// finalizers, what the garbage collector writes on any object.
func onlyGCFieldsChanged(obj, old runtime.Object) bool {
	a, b := obj.DeepCopyObject(), old.DeepCopyObject()
	am, bm := a.(metav1.Object), b.(metav1.Object)
	bm.SetOwnerReferences(am.GetOwnerReferences())
	bm.SetFinalizers(am.GetFinalizers())
	a.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	b.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return apiequality.Semantic.DeepEqual(a, b)
}
