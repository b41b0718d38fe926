package auth

import (
	"fmt"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRuleAllows(t *testing.T) {
	podsRead := rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	tests := []struct {
		name string
		rule rbacv1.PolicyRule
		a    Attributes
		want bool
	}{
		{"verb and resource", podsRead, Attributes{Verb: "list", Resource: "pods"}, true},
		{"other verb", podsRead, Attributes{Verb: "delete", Resource: "pods", Name: "p"}, false},
		{"other group", podsRead, Attributes{Verb: "list", Group: "apps", Resource: "pods"}, false},
		{"a resource rule does not cover its subresources", podsRead, Attributes{Verb: "get", Resource: "pods", Subresource: "log", Name: "p"}, false},
		{"subresource named", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"pods/status"}},
			Attributes{Verb: "update", Resource: "pods", Subresource: "status", Name: "p"}, true},
		{"subresource rule does not cover the resource", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"pods/status"}},
			Attributes{Verb: "update", Resource: "pods", Name: "p"}, false},
		{"*/subresource", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"*/scale"}},
			Attributes{Verb: "get", Group: "apps", Resource: "deployments", Subresource: "scale", Name: "d"}, true},
		{"star covers subresources", rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
			Attributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "n", Name: "sa"}, true},
		{"resourceNames match", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
			Attributes{Verb: "get", Resource: "configmaps", Name: "a"}, true},
		{"resourceNames other object", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
			Attributes{Verb: "get", Resource: "configmaps", Name: "b"}, false},
		{"resourceNames never allow list", rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
			Attributes{Verb: "list", Resource: "configmaps"}, false},
		{"non-resource path", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}, Attributes{Verb: "get", NonResourcePath: "/metrics"}, true},
		{"non-resource prefix", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/apis/*"}}, Attributes{Verb: "get", NonResourcePath: "/apis/apps/v1"}, true},
		{"non-resource prefix is not the bare path", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/apis/*"}}, Attributes{Verb: "get", NonResourcePath: "/apis"}, false},
		{"non-resource verb", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"*"}}, Attributes{Verb: "post", NonResourcePath: "/x"}, false},
		{"a resource rule never matches a path", podsRead, Attributes{Verb: "get", NonResourcePath: "/api/v1/pods"}, false},
		{"a path rule never matches a resource", rbacv1.PolicyRule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}, Attributes{Verb: "get", Resource: "pods", Name: "p"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RuleAllows(tt.a, &tt.rule); got != tt.want {
				t.Fatalf("RuleAllows(%+v, %+v) = %v, want %v", tt.a, tt.rule, got, tt.want)
			}
		})
	}
}

func TestPolicyBindings(t *testing.T) {
	reader := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}
	secrets := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "secrets"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}}}}
	p := NewPolicy([]*rbacv1.ClusterRole{secrets}, []*rbacv1.Role{reader},
		[]*rbacv1.ClusterRoleBinding{
			{ObjectMeta: metav1.ObjectMeta{Name: "ops-secrets"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "secrets"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "ops"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "dangling"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "missing"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "carol"}}},
		},
		[]*rbacv1.RoleBinding{
			// A ServiceAccount subject without a namespace is in the binding's.
			{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "sa-reads"}, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "reader"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "bot"}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "alice-secrets"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "secrets"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}}},
		})
	bot := &User{Name: "system:serviceaccount:team:bot", Groups: []string{"system:serviceaccounts"}}
	alice := &User{Name: "alice"}
	ops := &User{Name: "olga", Groups: []string{"ops"}}
	carol := &User{Name: "carol"}
	tests := []struct {
		name       string
		u          *User
		a          Attributes
		want       Decision
		wantReason string
	}{
		{"bound ServiceAccount lists pods", bot, Attributes{Verb: "list", Resource: "pods", Namespace: "team"}, Allow,
			`RBAC: allowed by RoleBinding "sa-reads/team" of Role "reader" to ServiceAccount "bot/team"`},
		{"not in another namespace", bot, Attributes{Verb: "list", Resource: "pods", Namespace: "other"}, NoOpinion, ""},
		{"not across namespaces", bot, Attributes{Verb: "list", Resource: "pods"}, NoOpinion, ""},
		{"not secrets", bot, Attributes{Verb: "get", Resource: "secrets", Namespace: "team", Name: "s"}, NoOpinion, ""},
		{"a ClusterRole through a RoleBinding holds in its namespace", alice, Attributes{Verb: "get", Resource: "secrets", Namespace: "team", Name: "s"}, Allow, ""},
		{"and only there", alice, Attributes{Verb: "get", Resource: "secrets", Namespace: "kube-system", Name: "s"}, NoOpinion, ""},
		{"group binding holds everywhere", ops, Attributes{Verb: "get", Resource: "secrets", Namespace: "kube-system", Name: "s"}, Allow,
			`RBAC: allowed by ClusterRoleBinding "ops-secrets" of ClusterRole "secrets" to Group "ops"`},
		{"a binding to a missing role grants nothing", carol, Attributes{Verb: "get", Resource: "secrets", Namespace: "team", Name: "s"}, NoOpinion, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, reason := p.Authorize(tt.u, tt.a)
			if d != tt.want || (tt.wantReason != "" && reason != tt.wantReason) {
				t.Fatalf("Authorize = %v %q, want %v %q", d, reason, tt.want, tt.wantReason)
			}
		})
	}
	rules, _ := p.RulesFor(alice, "team")
	if len(rules) != 1 || rules[0].Resources[0] != "secrets" {
		t.Fatalf("RulesFor(alice, team) = %+v", rules)
	}
	if rules, _ := p.RulesFor(alice, "other"); len(rules) != 0 {
		t.Fatalf("RulesFor(alice, other) = %+v, want none", rules)
	}
}

func TestAggregatedRules(t *testing.T) {
	roles := BootstrapClusterRoles()
	all := make([]*rbacv1.ClusterRole, len(roles))
	for i := range roles {
		all[i] = &roles[i]
	}
	byName := map[string]*rbacv1.ClusterRole{}
	for _, r := range all {
		byName[r.Name] = r
	}
	// Aggregation is transitive through what is already aggregated: view first, then
	// edit, which selects view, then admin, which selects edit.
	for _, name := range []string{"view", "edit", "admin"} {
		rules, ok := AggregatedRules(byName[name], all)
		if !ok {
			t.Fatalf("%s is not aggregated", name)
		}
		byName[name].Rules = rules
	}
	can := func(role string, a Attributes) bool { return RulesAllow(a, byName[role].Rules) }
	pods := Attributes{Verb: "list", Resource: "pods", Namespace: "n"}
	secrets := Attributes{Verb: "get", Resource: "secrets", Namespace: "n", Name: "s"}
	roleWrite := Attributes{Verb: "create", Group: rbacv1.GroupName, Resource: "rolebindings", Namespace: "n"}
	for _, tc := range []struct {
		role string
		a    Attributes
		want bool
	}{
		{"view", pods, true}, {"view", secrets, false}, {"view", roleWrite, false},
		{"edit", pods, true}, {"edit", secrets, true}, {"edit", roleWrite, false},
		{"admin", pods, true}, {"admin", secrets, true}, {"admin", roleWrite, true},
	} {
		if got := can(tc.role, tc.a); got != tc.want {
			t.Errorf("%s allows %+v = %v, want %v", tc.role, tc.a, got, tc.want)
		}
	}
	if _, ok := AggregatedRules(byName["cluster-admin"], all); ok {
		t.Error("cluster-admin is not aggregated")
	}
	// Each rule once, even when two selected roles share it.
	dup := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "dup", Labels: aggregateTo("view")}, Rules: viewRules()[:1]}
	rules, _ := AggregatedRules(byName["view"], append(all, dup))
	if len(rules) != len(viewRules()) {
		t.Errorf("view aggregated %d rules, want %d (no duplicates)", len(rules), len(viewRules()))
	}
}

// bootstrapChain is the authorizer chain of a server with the bootstrap policy and extra
// objects, aggregation done.
func bootstrapChain(extraRoles []*rbacv1.Role, extraBindings []*rbacv1.RoleBinding) Chain {
	roles := BootstrapClusterRoles()
	all := make([]*rbacv1.ClusterRole, len(roles))
	for i := range roles {
		all[i] = &roles[i]
	}
	for range 3 {
		for _, r := range all {
			if rules, ok := AggregatedRules(r, all); ok {
				r.Rules = rules
			}
		}
	}
	crbs := BootstrapClusterRoleBindings([]string{AdminGroup}, []string{"miniplane:viewers"})
	bindings := make([]*rbacv1.ClusterRoleBinding, len(crbs))
	for i := range crbs {
		bindings[i] = &crbs[i]
	}
	return Chain{PrivilegedGroups{AdminGroup}, NodeAuthorizer{}, NewPolicy(all, extraRoles, bindings, extraBindings)}
}

// TestBootstrapPolicy: what each identity of a fresh cluster may do, as the chain decides
// it (the integration test in the apiserver package checks the same through HTTP).
func TestBootstrapPolicy(t *testing.T) {
	authenticated := func(u *User) *User { u.Groups = append(u.Groups, "system:authenticated"); return u }
	admin := authenticated(&User{Name: "admin", Groups: []string{AdminGroup}})
	viewer := authenticated(&User{Name: "viewer", Groups: []string{"miniplane:viewers"}})
	node := authenticated(&User{Name: NodeUserPrefix + "n1", Groups: []string{NodesGroup}})
	fleet := authenticated(&User{Name: FleetUserPrefix + "f", Groups: []string{NodesGroup}})
	cm := authenticated(&User{Name: ControllerManagerUser})
	sched := authenticated(&User{Name: SchedulerUser})
	dsController := authenticated(&User{Name: "system:serviceaccount:kube-system:daemon-set-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}})
	nobody := authenticated(&User{Name: "nobody"})
	anonymous := &User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}
	res := func(verb, group, resource, sub, ns, name string) Attributes {
		return Attributes{Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
	}
	path := func(p string) Attributes { return Attributes{Verb: "get", NonResourcePath: p} }
	pods := func(verb, name, sub string) Attributes { return res(verb, "", "pods", sub, "default", name) }
	tests := []struct {
		name string
		user *User
		a    Attributes
		want Decision
	}{
		{"admin deletes a DaemonSet", admin, res("delete", "apps", "daemonsets", "", "d", "x"), Allow},
		{"admin reads profiles", admin, path("/debug/pprof/heap"), Allow},
		{"viewer lists pods", viewer, pods("list", "", ""), Allow},
		{"viewer watches nodes", viewer, res("watch", "", "nodes", "", "", ""), Allow},
		{"viewer reads secrets", viewer, res("get", "", "secrets", "", "d", "s"), Allow},
		{"viewer may not create", viewer, pods("create", "", ""), Deny},
		{"viewer may not impersonate", viewer, res("impersonate", "", "users", "", "", "admin"), Deny},
		{"viewer reads metrics", viewer, path("/metrics"), Allow},
		{"viewer may not read profiles", viewer, path("/debug/pprof/"), Deny},
		{"anyone authenticated reads discovery", nobody, path("/apis"), Allow},
		{"anyone authenticated reads OpenAPI", nobody, path("/openapi/v3/apis/apps/v1"), Allow},
		{"anyone authenticated asks what it may do", nobody, res("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""), Allow},
		{"nobody may not read metrics", nobody, path("/metrics"), Deny},
		{"nobody may not reach /debug", nobody, path("/debug"), Deny},
		{"nobody may not list pods", nobody, pods("list", "", ""), Deny},
		{"anonymous reads health", anonymous, path("/healthz"), Allow},
		{"anonymous reads the version", anonymous, path("/version"), Allow},
		{"anonymous may not read discovery", anonymous, path("/api"), Deny},
		{"node updates its node", node, res("patch", "", "nodes", "status", "", "n1"), Allow},
		{"node may not update another node", node, res("update", "", "nodes", "", "", "n2"), Deny},
		{"node creates a node (checked on the body)", node, res("create", "", "nodes", "", "", ""), NodeObjectCheck},
		{"node may not delete nodes", node, res("delete", "", "nodes", "", "", "n1"), Deny},
		{"node reads pods", node, pods("watch", "", ""), Allow},
		{"node updates pod status (checked on the pod)", node, pods("update", "p", "status"), NodeObjectCheck},
		{"node deletes a pod (checked on the pod)", node, pods("delete", "p", ""), NodeObjectCheck},
		{"node may not change a pod's spec", node, pods("patch", "p", ""), Deny},
		{"node may not bind", node, pods("create", "p", "binding"), Deny},
		{"node may not create pods", node, pods("create", "", ""), Deny},
		{"node renews its lease", node, res("update", "coordination.k8s.io", "leases", "", "kube-node-lease", "n1"), Allow},
		{"node may not renew another lease", node, res("update", "coordination.k8s.io", "leases", "", "kube-node-lease", "n2"), Deny},
		{"node may not use leases elsewhere", node, res("update", "coordination.k8s.io", "leases", "", "kube-system", "n1"), Deny},
		{"node writes events", node, res("create", "", "events", "", "default", ""), Allow},
		{"node may not read secrets", node, res("get", "", "secrets", "", "default", "s"), Deny},
		{"node may not delete DaemonSets", node, res("delete", "apps", "daemonsets", "", "d", "x"), Deny},
		{"fleet updates its member", fleet, res("update", "", "nodes", "", "", "f-12"), Allow},
		{"fleet may not update outsiders", fleet, res("update", "", "nodes", "", "", "g-1"), Deny},
		{"controller-manager watches everything", cm, res("watch", "apps", "daemonsets", "", "", ""), Allow},
		{"controller-manager takes its lease", cm, res("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-controller-manager"), Allow},
		{"controller-manager may not take the scheduler's lease", cm, res("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler"), Deny},
		{"controller-manager gets tokens for its controllers", cm, res("create", "", "serviceaccounts", "token", "kube-system", "daemon-set-controller"), Allow},
		{"controller-manager may not create pods itself", cm, pods("create", "", ""), Deny},
		{"controller-manager reads a ConfigMap", cm, res("get", "", "configmaps", "", "d", "c"), Allow},
		{"controller-manager may not change ConfigMaps", cm, res("update", "", "configmaps", "", "d", "c"), Deny},
		{"DaemonSet controller creates pods", dsController, pods("create", "", ""), Allow},
		{"DaemonSet controller writes DaemonSet status", dsController, res("update", "apps", "daemonsets", "status", "d", "x"), Allow},
		{"DaemonSet controller may not delete DaemonSets", dsController, res("delete", "apps", "daemonsets", "", "d", "x"), Deny},
		{"DaemonSet controller may not read secrets", dsController, res("get", "", "secrets", "", "d", "s"), Deny},
		{"scheduler binds", sched, pods("create", "p", "binding"), Allow},
		{"scheduler writes pod status", sched, pods("update", "p", "status"), Allow},
		{"scheduler may not create pods", sched, pods("create", "", ""), Deny},
		{"scheduler may not change nodes", sched, res("update", "", "nodes", "", "", "n1"), Deny},
		{"scheduler takes its lease", sched, res("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler"), Allow},
	}
	z := bootstrapChain(nil, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, reason := z.Authorize(tt.user, tt.a); got != tt.want {
				t.Fatalf("Authorize = %v (%s), want %v", got, reason, tt.want)
			}
		})
	}
}

func TestChainRulesFor(t *testing.T) {
	z := bootstrapChain(nil, nil)
	admin := &User{Name: "admin", Groups: []string{AdminGroup}}
	rules, incomplete := z.RulesFor(admin, "default")
	if incomplete || !RulesAllow(Attributes{Verb: "delete", Resource: "nodes", Name: "n"}, rules) {
		t.Fatalf("admin rules %+v incomplete=%v: want everything", rules, incomplete)
	}
	node := &User{Name: NodeUserPrefix + "n1", Groups: []string{NodesGroup}}
	if rules, incomplete := z.RulesFor(node, ""); !incomplete || !RulesAllow(Attributes{Verb: "create", Resource: "events", Namespace: "d"}, rules) {
		t.Fatalf("node rules %+v incomplete=%v: want the node rules, incomplete", rules, incomplete)
	}
}

// BenchmarkAuthorize measures one RBAC decision with many bindings in the cluster: users
// bound in every namespace, and the user asking among them.
func BenchmarkAuthorize(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("bindings=%d", n), func(b *testing.B) {
			var roles []*rbacv1.Role
			var bindings []*rbacv1.RoleBinding
			for i := range n {
				ns := fmt.Sprintf("ns-%d", i%100)
				roles = append(roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r-%d", i)},
					Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods", "configmaps"}}}})
				bindings = append(bindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("b-%d", i)},
					RoleRef:  rbacv1.RoleRef{Kind: "Role", Name: fmt.Sprintf("r-%d", i)},
					Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: fmt.Sprintf("user-%d", i)}}})
			}
			z := bootstrapChain(roles, bindings)
			u := &User{Name: fmt.Sprintf("user-%d", n/2), Groups: []string{"system:authenticated"}}
			allowed := Attributes{Verb: "list", Resource: "pods", Namespace: fmt.Sprintf("ns-%d", (n/2)%100)}
			denied := Attributes{Verb: "delete", Resource: "pods", Namespace: allowed.Namespace, Name: "p"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d, _ := z.Authorize(u, allowed); d != Allow {
					b.Fatal("denied")
				}
				if d, _ := z.Authorize(u, denied); d != Deny {
					b.Fatal("allowed")
				}
			}
		})
	}
}

// BenchmarkNewPolicy measures rebuilding the index after a change, with many bindings.
func BenchmarkNewPolicy(b *testing.B) {
	const n = 10000
	var roles []*rbacv1.Role
	var bindings []*rbacv1.RoleBinding
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%100)
		roles = append(roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r-%d", i)}})
		bindings = append(bindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("b-%d", i)},
			RoleRef:  rbacv1.RoleRef{Kind: "Role", Name: fmt.Sprintf("r-%d", i)},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: strings.Repeat("u", 3) + fmt.Sprint(i)}}})
		roles[i].Rules = []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		NewPolicy(nil, roles, nil, bindings)
	}
}
