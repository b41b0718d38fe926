package auth

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// Policy is RBAC over one snapshot of the Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings, with kube-apiserver's rule semantics. It is immutable: the server
// builds a new one when any of those objects changes.
//
// Upstream's authorizer walks every binding on every request. A Policy instead indexes
// the bindings by subject when it is built, with the rules of the role each names already
// looked up, so a request costs as many rule checks as its user's own bindings hold,
// however many bindings others have.
type Policy struct {
	cluster    grantIndex
	namespaces map[string]*grantIndex
}

// grantIndex holds the grants of one scope: cluster-wide (ClusterRoleBindings) or one
// namespace (its RoleBindings).
type grantIndex struct {
	// byUser is keyed by user name: User subjects, and ServiceAccount subjects as the user
	// name their tokens authenticate as.
	byUser  map[string][]*grant
	byGroup map[string][]*grant
}

// grant is one subject of one binding, with the rules of the role it refers to.
type grant struct {
	binding string // how a reason names it: ClusterRoleBinding "x" or RoleBinding "x/ns"
	role    string // Role "r" or ClusterRole "r"
	subject string // User "u", Group "g" or ServiceAccount "sa/ns"
	rules   []rbacv1.PolicyRule
}

func (g *grant) describe() string {
	return fmt.Sprintf("%s of %s to %s", g.binding, g.role, g.subject)
}

// NewPolicy indexes the given objects. A binding whose role does not exist grants
// nothing (the role may be created later, and the binding then takes effect).
func NewPolicy(clusterRoles []*rbacv1.ClusterRole, roles []*rbacv1.Role,
	clusterBindings []*rbacv1.ClusterRoleBinding, bindings []*rbacv1.RoleBinding) *Policy {
	crs := make(map[string][]rbacv1.PolicyRule, len(clusterRoles))
	for _, r := range clusterRoles {
		crs[r.Name] = r.Rules
	}
	rs := make(map[string][]rbacv1.PolicyRule, len(roles))
	for _, r := range roles {
		rs[r.Namespace+"/"+r.Name] = r.Rules
	}
	p := &Policy{cluster: newGrantIndex(), namespaces: map[string]*grantIndex{}}
	for _, b := range clusterBindings {
		if b.RoleRef.Kind != "ClusterRole" {
			continue
		}
		rules, ok := crs[b.RoleRef.Name]
		if !ok || len(rules) == 0 {
			continue
		}
		p.cluster.add(fmt.Sprintf("ClusterRoleBinding %q", b.Name), fmt.Sprintf("ClusterRole %q", b.RoleRef.Name), "", b.Subjects, rules)
	}
	for _, b := range bindings {
		var rules []rbacv1.PolicyRule
		switch b.RoleRef.Kind {
		case "ClusterRole":
			rules = crs[b.RoleRef.Name]
		case "Role":
			rules = rs[b.Namespace+"/"+b.RoleRef.Name]
		}
		if len(rules) == 0 {
			continue
		}
		idx := p.namespaces[b.Namespace]
		if idx == nil {
			i := newGrantIndex()
			idx = &i
			p.namespaces[b.Namespace] = idx
		}
		idx.add(fmt.Sprintf("RoleBinding %q", b.Name+"/"+b.Namespace), fmt.Sprintf("%s %q", b.RoleRef.Kind, b.RoleRef.Name), b.Namespace, b.Subjects, rules)
	}
	return p
}

func newGrantIndex() grantIndex {
	return grantIndex{byUser: map[string][]*grant{}, byGroup: map[string][]*grant{}}
}

// add indexes the subjects of one binding. namespace is a RoleBinding's, the default of
// its ServiceAccount subjects.
func (x *grantIndex) add(binding, role, namespace string, subjects []rbacv1.Subject, rules []rbacv1.PolicyRule) {
	for _, s := range subjects {
		g := &grant{binding: binding, role: role, rules: rules}
		switch s.Kind {
		case rbacv1.UserKind:
			g.subject = fmt.Sprintf("User %q", s.Name)
			x.byUser[s.Name] = append(x.byUser[s.Name], g)
		case rbacv1.GroupKind:
			g.subject = fmt.Sprintf("Group %q", s.Name)
			x.byGroup[s.Name] = append(x.byGroup[s.Name], g)
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = namespace
			}
			if ns == "" {
				continue // a ClusterRoleBinding's ServiceAccount needs a namespace
			}
			g.subject = fmt.Sprintf("ServiceAccount %q", s.Name+"/"+ns)
			user := serviceaccount.MakeUsername(ns, s.Name)
			x.byUser[user] = append(x.byUser[user], g)
		}
	}
}

// visit calls f with every grant that applies to u, cluster-wide first, then in
// namespace; it stops when f returns false.
func (p *Policy) visit(u *User, namespace string, f func(*grant) bool) {
	scopes := []*grantIndex{&p.cluster}
	if namespace != "" {
		if idx := p.namespaces[namespace]; idx != nil {
			scopes = append(scopes, idx)
		}
	}
	for _, x := range scopes {
		for _, g := range x.byUser[u.Name] {
			if !f(g) {
				return
			}
		}
		for _, group := range u.Groups {
			for _, g := range x.byGroup[group] {
				if !f(g) {
					return
				}
			}
		}
	}
}

// Authorize implements Authorizer: Allow when a rule of a binding that applies to u
// allows a, and NoOpinion otherwise (RBAC never denies outright).
func (p *Policy) Authorize(u *User, a Attributes) (Decision, string) {
	var by *grant
	p.visit(u, a.Namespace, func(g *grant) bool {
		if RulesAllow(a, g.rules) {
			by = g
			return false
		}
		return true
	})
	if by != nil {
		return Allow, "RBAC: allowed by " + by.describe()
	}
	return NoOpinion, ""
}

// RulesFor implements RuleResolver: the rules of every binding that applies to u in
// namespace, cluster-wide ones included.
func (p *Policy) RulesFor(u *User, namespace string) ([]rbacv1.PolicyRule, bool) {
	var rules []rbacv1.PolicyRule
	p.visit(u, namespace, func(g *grant) bool {
		rules = append(rules, g.rules...)
		return true
	})
	return rules, false
}

// RulesAllow reports whether any of rules allows a.
func RulesAllow(a Attributes, rules []rbacv1.PolicyRule) bool {
	for i := range rules {
		if RuleAllows(a, &rules[i]) {
			return true
		}
	}
	return false
}

// RuleAllows is RBAC's rule match. A resource rule matches when it names the verb, the API
// group and the resource — "pods/status" for a subresource, "*/status" for that
// subresource of anything, "*" for everything — and, if it lists resourceNames, the
// object's name (so such a rule never allows list or create). A non-resource rule matches
// a path it names, or one under a prefix it ends with "*".
func RuleAllows(a Attributes, r *rbacv1.PolicyRule) bool {
	if !hasOrStar(r.Verbs, a.Verb) {
		return false
	}
	if !a.IsResourceRequest() {
		for _, u := range r.NonResourceURLs {
			if u == rbacv1.NonResourceAll || u == a.NonResourcePath ||
				(strings.HasSuffix(u, "*") && strings.HasPrefix(a.NonResourcePath, strings.TrimSuffix(u, "*"))) {
				return true
			}
		}
		return false
	}
	if !hasOrStar(r.APIGroups, a.Group) || !resourceMatches(r.Resources, a.Resource, a.Subresource) {
		return false
	}
	return len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.Name)
}

func hasOrStar(set []string, s string) bool {
	for _, v := range set {
		if v == s || v == "*" {
			return true
		}
	}
	return false
}

func resourceMatches(rules []string, resource, subresource string) bool {
	combined := resource
	if subresource != "" {
		combined += "/" + subresource
	}
	for _, r := range rules {
		switch {
		case r == rbacv1.ResourceAll, r == combined:
			return true
		case subresource != "" && r == "*/"+subresource:
			return true
		}
	}
	return false
}
