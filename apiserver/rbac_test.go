package apiserver_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/test/testenv"
)

// The RBAC tests run one at a time, not in parallel with the package's other tests: each
// starts a server, and TestOverload measures the heap of the whole process.

// TestServiceAccountTokenWithKubectl is the "done when": a ServiceAccount, a Role
// and a RoleBinding made with kubectl give a token (`kubectl create token`) that lists pods
// in its namespace and nothing else; `kubectl auth can-i --list --as=…` lists its rules;
// the viewer cannot impersonate.
func TestServiceAccountTokenWithKubectl(t *testing.T) {
	env := newEnv(t)
	k := newKubectl(t, env)
	k.run("create", "namespace", "ns")
	k.run("create", "namespace", "elsewhere")
	k.run("-n", "ns", "create", "sa", "reader")
	k.run("-n", "ns", "create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods")
	k.run("-n", "ns", "create", "rolebinding", "reader-pods", "--role=pod-reader", "--serviceaccount=ns:reader")
	out, _ := k.run("-n", "ns", "create", "token", "reader")
	token := strings.TrimSpace(out)
	if !auth.LooksLikeJWT(token) {
		t.Fatalf("kubectl create token printed %q", out)
	}

	// A kubeconfig carrying the token is limited by RBAC.
	kubeconfig := filepath.Join(t.TempDir(), "reader.kubeconfig")
	check(t, pki.WriteKubeconfig(kubeconfig, env.URL, env.CAPEM, "reader", token))
	as := func(args ...string) (string, string, error) {
		return k.try(append([]string{"--kubeconfig", kubeconfig}, args...)...)
	}
	var stderr string
	eventually(t, "the reader's binding to take effect", func() (bool, error) {
		_, e, err := as("-n", "ns", "get", "pods")
		stderr = e
		return err == nil, fmt.Errorf("%w: %s", err, e)
	})
	_, stderr, err := as("-n", "ns", "get", "secrets")
	if err == nil || !strings.Contains(stderr, `secrets is forbidden: User "system:serviceaccount:ns:reader" cannot list resource "secrets" in API group "" in the namespace "ns"`) {
		t.Fatalf("reader lists secrets: %v\n%s", err, stderr)
	}
	_, stderr, err = as("-n", "elsewhere", "get", "pods")
	if err == nil || !strings.Contains(stderr, `pods is forbidden: User "system:serviceaccount:ns:reader" cannot list resource "pods" in API group "" in the namespace "elsewhere"`) {
		t.Fatalf("reader lists pods elsewhere: %v\n%s", err, stderr)
	}
	out, _, err = as("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil || out != "system:serviceaccount:ns:reader" {
		t.Fatalf("whoami with the token: %q %v", out, err)
	}

	// What the reader may do, asked by the admin impersonating it.
	out, _ = k.run("auth", "can-i", "--list", "--as=system:serviceaccount:ns:reader", "-n", "ns")
	podsLine := false
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && fields[0] == "pods" && strings.Contains(line, "[get list watch]") {
			podsLine = true
		}
		if len(fields) > 0 && fields[0] == "secrets" {
			t.Errorf("can-i --list shows secrets:\n%s", out)
		}
	}
	if !podsLine || !strings.Contains(out, "selfsubjectaccessreviews.authorization.k8s.io") {
		t.Fatalf("kubectl auth can-i --list:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "pods", "-n", "ns"}, "yes"},
		{[]string{"list", "secrets", "-n", "ns"}, "no"},
		{[]string{"list", "pods", "-n", "elsewhere"}, "no"},
		{[]string{"create", "pods", "-n", "ns"}, "no"},
	} {
		out, _, _ := k.try(append([]string{"auth", "can-i", "--as=system:serviceaccount:ns:reader"}, tc.args...)...)
		if strings.TrimSpace(out) != tc.want {
			t.Errorf("kubectl auth can-i %v --as reader = %q, want %s", tc.args, out, tc.want)
		}
	}

	// The viewer may not impersonate.
	viewerConfig := filepath.Join(t.TempDir(), "viewer.kubeconfig")
	check(t, pki.WriteKubeconfig(viewerConfig, env.URL, env.CAPEM, testenv.ViewerUser, env.Token(testenv.ViewerUser)))
	_, stderr, err = k.try("--kubeconfig", viewerConfig, "-n", "ns", "get", "pods", "--as=system:serviceaccount:ns:reader")
	if err == nil || !strings.Contains(stderr, `serviceaccounts "reader" is forbidden: User "viewer" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ns"`) {
		t.Fatalf("viewer impersonates: %v\n%s", err, stderr)
	}
	_, stderr, err = k.try("--kubeconfig", viewerConfig, "get", "pods", "--as=admin", "--as-group=system:masters")
	if err == nil || !strings.Contains(stderr, `cannot impersonate resource "users"`) {
		t.Fatalf("viewer impersonates the admin: %v\n%s", err, stderr)
	}

	// Deleting the ServiceAccount ends the token.
	k.run("-n", "ns", "delete", "sa", "reader")
	eventually(t, "the token to stop working", func() (bool, error) {
		_, e, err := as("-n", "ns", "get", "pods")
		return err != nil && strings.Contains(e, "Unauthorized"), fmt.Errorf("%w: %s", err, e)
	})
}

// TestRBACChangesTakeEffectAtOnce: a binding, a role's rules and a deletion change what a
// user may do within a second, without a restart.
func TestRBACChangesTakeEffectAtOnce(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{})
	check(t, err)
	alice := impersonating(t, env, "alice")
	canList := func() bool {
		_, err := alice.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsForbidden(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	within := func(what string, want bool) time.Duration {
		t.Helper()
		start := time.Now()
		for canList() != want {
			// The goal is well under a second (see the log); the deadline only
			// tells "takes effect without a restart" from "never", on a loaded machine.
			if time.Since(start) > 15*time.Second {
				t.Fatalf("%s: still %v after 15 s", what, !want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	if canList() {
		t.Fatal("alice may list configmaps before any binding")
	}
	_, err = env.Client.RbacV1().Roles("team").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "r"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}, metav1.CreateOptions{})
	check(t, err)
	_, err = env.Client.RbacV1().RoleBindings("team").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "r"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}, metav1.CreateOptions{})
	check(t, err)
	time.Sleep(100 * time.Millisecond)
	if canList() {
		t.Fatal("the role grants get, not list")
	}
	role, err := env.Client.RbacV1().Roles("team").Get(ctx, "r", metav1.GetOptions{})
	check(t, err)
	role.Rules[0].Verbs = append(role.Rules[0].Verbs, "list")
	_, err = env.Client.RbacV1().Roles("team").Update(ctx, role, metav1.UpdateOptions{})
	check(t, err)
	t.Logf("a rule added took effect after %s", within("rule added", true))
	check(t, env.Client.RbacV1().RoleBindings("team").Delete(ctx, "b", metav1.DeleteOptions{}))
	t.Logf("a binding deleted took effect after %s", within("binding deleted", false))
}

// impersonating is a clientset acting as user (and groups) through the admin's right to
// impersonate.
func impersonating(t *testing.T, env *testenv.Env, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.AdminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := kubernetes.NewForConfig(cfg)
	check(t, err)
	return c
}

// TestEscalationCheck: a user may grant only what it holds, unless it may escalate or
// bind; an aggregationRule takes cluster-admin's powers.
func TestEscalationCheck(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	admin := env.Client
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{})
	check(t, err)
	// Alice administers team (the aggregated admin role); Bob also may bind cluster-admin
	// there and escalate roles, and create ClusterRoles.
	bind := func(name, ns, role, user string) {
		_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{})
		check(t, err)
	}
	bind("alice-admin", "team", "admin", "alice")
	bind("bob-admin", "team", "admin", "bob")
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "granter"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"bind"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{"cluster-admin"}},
			{Verbs: []string{"escalate"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}},
			{Verbs: []string{"create"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}},
		}}, metav1.CreateOptions{})
	check(t, err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob-granter"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "granter"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}, metav1.CreateOptions{})
	check(t, err)
	alice, bob := impersonating(t, env, "alice"), impersonating(t, env, "bob")
	eventually(t, "alice's binding to take effect", func() (bool, error) {
		_, err := alice.CoreV1().Pods("team").List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	eventually(t, "bob's bindings to take effect", func() (bool, error) {
		_, err := bob.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, err
	})
	role := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	}
	pods := rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	nodes := rbacv1.PolicyRule{Verbs: []string{"delete"}, APIGroups: []string{""}, Resources: []string{"nodes"}}
	binding := func(name, roleKind, roleName string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: roleName},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}}}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	refused := func(what string, err error, message string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), message) {
			t.Errorf("%s: %v, want 403 containing %q", what, err, message)
		}
	}
	_, err = alice.RbacV1().Roles("team").Create(ctx, role("pods", pods), metav1.CreateOptions{})
	allowed("alice makes a role of rules she holds", err)
	_, err = alice.RbacV1().Roles("team").Create(ctx, role("nodes", pods, nodes), metav1.CreateOptions{})
	refused("alice makes a role of rules she lacks", err, `user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`+"\n"+`{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}`)
	r, err := alice.RbacV1().Roles("team").Get(ctx, "pods", metav1.GetOptions{})
	check(t, err)
	r.Rules = append(r.Rules, nodes)
	_, err = alice.RbacV1().Roles("team").Update(ctx, r, metav1.UpdateOptions{})
	refused("alice adds a rule she lacks", err, "not currently held")
	_, err = alice.RbacV1().Roles("team").Patch(ctx, "pods", "application/merge-patch+json",
		[]byte(`{"rules":[{"verbs":["*"],"apiGroups":["*"],"resources":["*"]}]}`), metav1.PatchOptions{})
	refused("alice patches in everything", err, "not currently held")
	_, err = bob.RbacV1().Roles("team").Create(ctx, role("nodes", pods, nodes), metav1.CreateOptions{})
	allowed("bob may escalate roles", err)

	_, err = alice.RbacV1().RoleBindings("team").Create(ctx, binding("edit", "ClusterRole", "edit"), metav1.CreateOptions{})
	allowed("alice binds edit, which admin covers", err)
	_, err = alice.RbacV1().RoleBindings("team").Create(ctx, binding("root", "ClusterRole", "cluster-admin"), metav1.CreateOptions{})
	refused("alice binds cluster-admin", err, "not currently held")
	_, err = alice.RbacV1().RoleBindings("team").Create(ctx, binding("missing", "Role", "missing"), metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("alice binds a missing role: %v, want 404", err)
	}
	_, err = bob.RbacV1().RoleBindings("team").Create(ctx, binding("root", "ClusterRole", "cluster-admin"), metav1.CreateOptions{})
	allowed("bob may bind cluster-admin", err)

	_, err = bob.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gather"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}}}},
		metav1.CreateOptions{})
	refused("bob defines an aggregationRule", err, "must have cluster-admin privileges to use the aggregationRule")
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gather"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}}}},
		metav1.CreateOptions{})
	allowed("the admin defines an aggregationRule", err)
}

// TestAggregatedClusterRoles: a ClusterRole labeled to aggregate into view reaches view,
// edit and admin, and leaves them when it goes.
func TestAggregatedClusterRoles(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	widgets := rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}
	_, err := env.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "widget-viewer", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
		Rules:      []rbacv1.PolicyRule{widgets}}, metav1.CreateOptions{})
	check(t, err)
	has := func(role string) (bool, error) {
		cr, err := env.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, r := range cr.Rules {
			if slices.Equal(r.Resources, widgets.Resources) && slices.Equal(r.APIGroups, widgets.APIGroups) {
				return true, nil
			}
		}
		return false, fmt.Errorf("%s has %d rules, none for widgets", role, len(cr.Rules))
	}
	for _, role := range []string{"view", "edit", "admin"} {
		eventually(t, role+" to aggregate widget-viewer", func() (bool, error) { return has(role) })
	}
	// A user bound to view may now read widgets: the aggregated rules authorize.
	sar, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "u", Groups: []string{"g"}, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: "example.com", Resource: "widgets", Namespace: "default"}}},
		metav1.CreateOptions{})
	check(t, err)
	if sar.Status.Allowed {
		t.Fatal("u is bound to nothing yet")
	}
	check(t, env.Client.RbacV1().ClusterRoles().Delete(ctx, "widget-viewer", metav1.DeleteOptions{}))
	for _, role := range []string{"view", "edit", "admin"} {
		eventually(t, role+" to drop widget-viewer", func() (bool, error) {
			ok, err := has(role)
			return !ok && err != nil && !apierrors.IsNotFound(err), err
		})
	}
}

// TestBootstrapPolicyReconciled: a restart recreates a deleted bootstrap role, restores
// what was taken from an auto-updated one, keeps what was added to one, and leaves alone
// one annotated autoupdate "false".
func TestBootstrapPolicyReconciled(t *testing.T) {
	dir := t.TempDir()
	env := testenv.New(t, testenv.Config{DataDir: dir})
	ctx := testCtx(t)
	crs := env.Client.RbacV1().ClusterRoles()
	check(t, crs.Delete(ctx, "system:kube-scheduler", metav1.DeleteOptions{}))
	discovery, err := crs.Get(ctx, "system:discovery", metav1.GetOptions{})
	check(t, err)
	discovery.Rules[0].NonResourceURLs = []string{"/api"}
	_, err = crs.Update(ctx, discovery, metav1.UpdateOptions{})
	check(t, err)
	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}
	basic, err := crs.Get(ctx, "system:basic-user", metav1.GetOptions{})
	check(t, err)
	basic.Rules = append(basic.Rules, extra)
	_, err = crs.Update(ctx, basic, metav1.UpdateOptions{})
	check(t, err)
	public, err := crs.Get(ctx, "system:public-info-viewer", metav1.GetOptions{})
	check(t, err)
	public.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	public.Rules[0].NonResourceURLs = []string{"/healthz", "/readyz", "/livez"}
	_, err = crs.Update(ctx, public, metav1.UpdateOptions{})
	check(t, err)
	env.Stop()

	env, err = testenv.Start(ctx, testenv.Config{DataDir: dir, UnsafeNoFsync: true, Logger: quietLogger()})
	check(t, err)
	defer env.Stop()
	crs = env.Client.RbacV1().ClusterRoles()
	if _, err := crs.Get(ctx, "system:kube-scheduler", metav1.GetOptions{}); err != nil {
		t.Errorf("deleted role not recreated: %v", err)
	}
	discovery, err = crs.Get(ctx, "system:discovery", metav1.GetOptions{})
	check(t, err)
	if urls := discoveryURLs(discovery.Rules); !slices.Contains(urls, "/apis/*") || !slices.Contains(urls, "/version") {
		t.Errorf("system:discovery not restored: %v", urls)
	}
	basic, err = crs.Get(ctx, "system:basic-user", metav1.GetOptions{})
	check(t, err)
	if !slices.ContainsFunc(basic.Rules, func(r rbacv1.PolicyRule) bool { return slices.Equal(r.Resources, extra.Resources) }) {
		t.Errorf("the rule added to system:basic-user was removed: %+v", basic.Rules)
	}
	public, err = crs.Get(ctx, "system:public-info-viewer", metav1.GetOptions{})
	check(t, err)
	if urls := discoveryURLs(public.Rules); slices.Contains(urls, "/version") {
		t.Errorf("system:public-info-viewer (autoupdate false) was reconciled: %v", urls)
	}
	// And the protected edit holds: /version needs a token now.
	raw := newRawClient(t, env)
	if r := raw.do(t, request{method: "GET", path: "/version"}); r.code != http.StatusForbidden {
		t.Errorf("anonymous /version after the edit: HTTP %d, want 403", r.code)
	}
	if r := raw.do(t, request{method: "GET", path: "/healthz"}); r.code != http.StatusOK {
		t.Errorf("anonymous /healthz: HTTP %d, want 200", r.code)
	}
}

func discoveryURLs(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.NonResourceURLs...)
	}
	return out
}

// TestImpersonation: the Impersonate-* headers act as the user, groups, UID and extras
// they name, each part authorized by the impersonate verb.
func TestImpersonation(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	cfg := rest.CopyConfig(env.AdminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "bob", UID: "b-1", Groups: []string{"team-a"}, Extra: map[string][]string{"scopes": {"s1", "s2"}}}
	bob, err := kubernetes.NewForConfig(cfg)
	check(t, err)
	who, err := bob.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	check(t, err)
	u := who.Status.UserInfo
	if u.Username != "bob" || u.UID != "b-1" || !slices.Equal(u.Groups, []string{"team-a", "system:authenticated"}) ||
		!slices.Equal(u.Extra["scopes"], []string{"s1", "s2"}) {
		t.Fatalf("impersonated user = %+v", u)
	}
	sa := impersonating(t, env, "system:serviceaccount:team:bot")
	who, err = sa.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	check(t, err)
	if g := who.Status.UserInfo.Groups; !slices.Equal(g, []string{"system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"}) {
		t.Fatalf("impersonated ServiceAccount's groups = %v", g)
	}

	// Someone who may impersonate ServiceAccounts in team (edit grants it), nothing else.
	_, err = env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{})
	check(t, err)
	_, err = env.Client.RbacV1().RoleBindings("team").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dave-edits"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "dave"}}}, metav1.CreateOptions{})
	check(t, err)
	raw := newRawClient(t, env)
	// The admin impersonates dave, who impersonates further: only the first set of headers
	// counts, so dave is asked through a SubjectAccessReview instead.
	may := func(a authorizationv1.ResourceAttributes) bool {
		r, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "dave", Groups: []string{"system:authenticated"}, ResourceAttributes: &a}}, metav1.CreateOptions{})
		check(t, err)
		return r.Status.Allowed
	}
	eventually(t, "dave's binding", func() (bool, error) {
		return may(authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "team", Name: "bot"}), nil
	})
	if may(authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: "system:masters"}) {
		t.Error("edit lets dave impersonate groups")
	}
	// Bad and refused impersonations, through raw requests as the viewer.
	viewer := env.Token(testenv.ViewerUser)
	for _, tc := range []struct {
		name    string
		header  map[string]string
		code    int
		message string
	}{
		{"group without a user", map[string]string{"Impersonate-Group": "g"}, 400, "without impersonating a user"},
		{"a user", map[string]string{"Impersonate-User": "admin"}, 403,
			`users "admin" is forbidden: User "viewer" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"a UID", map[string]string{"Impersonate-User": "viewer", "Impersonate-Uid": "x"}, 403, `cannot impersonate resource "users"`},
	} {
		r := raw.do(t, request{method: "GET", path: "/api/v1/namespaces", token: viewer, header: tc.header})
		if r.code != tc.code || r.status == nil || !strings.Contains(r.status.Message, tc.message) {
			t.Errorf("%s: HTTP %d %s, want %d with %q", tc.name, r.code, r.body, tc.code, tc.message)
		}
	}
}

// testAccessReviews: SubjectAccessReview and LocalSubjectAccessReview answer for another
// user; TokenReview says whose a token is.
func testAccessReviews(t *testing.T, m *matrixEnv) {
	ctx := testCtx(t)
	c := m.env.Client.AuthorizationV1()
	lsar, err := c.LocalSubjectAccessReviews("team").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team"},
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "system:serviceaccount:team:reader",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}}}, metav1.CreateOptions{})
	check(t, err)
	if !lsar.Status.Allowed || !strings.Contains(lsar.Status.Reason, `RoleBinding "reader-reads-pods/team"`) {
		t.Errorf("reader may list pods in team: %+v", lsar.Status)
	}
	_, err = c.LocalSubjectAccessReviews("team").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team"},
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "u",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", Namespace: "other"}}}, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("LocalSubjectAccessReview about another namespace: %v, want 400", err)
	}
	sar, err := c.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:team:reader", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "team"}}},
		metav1.CreateOptions{})
	check(t, err)
	if sar.Status.Allowed {
		t.Errorf("reader may get secrets: %+v", sar.Status)
	}
	_, err = c.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods"}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at least one of user or group must be specified") {
		t.Errorf("SubjectAccessReview about no one: %v, want 422", err)
	}
	rules, err := impersonating(t, m.env, "system:serviceaccount:team:reader").AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "team"}}, metav1.CreateOptions{})
	check(t, err)
	if rules.Status.Incomplete || !slices.ContainsFunc(rules.Status.ResourceRules, func(r authorizationv1.ResourceRule) bool {
		return slices.Equal(r.Resources, []string{"pods"}) && slices.Equal(r.Verbs, []string{"get", "list", "watch"})
	}) {
		t.Errorf("reader's rules in team: %+v", rules.Status)
	}

	tr, err := m.env.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: m.tokens[idReader]}}, metav1.CreateOptions{})
	check(t, err)
	if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:team:reader" || len(tr.Status.Audiences) != 1 {
		t.Errorf("TokenReview of the reader's token: %+v", tr.Status)
	}
	for _, bad := range []string{m.tokens[idExpired], m.tokens[idDeleted], "garbage"} {
		tr, err = m.env.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: bad}}, metav1.CreateOptions{})
		check(t, err)
		if tr.Status.Authenticated || tr.Status.Error == "" {
			t.Errorf("TokenReview of a bad token: %+v", tr.Status)
		}
	}
	tr, err = m.env.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: m.tokens[idReader], Audiences: []string{"vault"}}}, metav1.CreateOptions{})
	check(t, err)
	if tr.Status.Authenticated {
		t.Errorf("a token for the API server authenticated for vault: %+v", tr.Status)
	}
}
