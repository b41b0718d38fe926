package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/credentials"
	"github.com/miniplane/miniplane/test/testenv"
)

// Identities of the authorization matrix.
const (
	idAdmin     = "admin"
	idViewer    = "viewer"
	idNode      = "node"      // system:node:n1
	idFleet     = "fleet"     // system:node-fleet:f, nodes f-<n>
	idCM        = "cm"        // system:kube-controller-manager
	idScheduler = "scheduler" // system:kube-scheduler
	idDSCtl     = "dsctl"     // ServiceAccount kube-system/daemon-set-controller
	idReader    = "reader"    // ServiceAccount team/reader, bound to a Role that reads pods
	idViewSA    = "view-sa"   // ServiceAccount team/watcher, bound to view in team
	idAnonymous = "anonymous" // no token
	idExpired   = "expired"   // a token of team/reader past its expiry
	idDeleted   = "deleted"   // a token of a ServiceAccount since deleted
)

var matrixIdentities = []string{idAdmin, idViewer, idNode, idFleet, idCM, idScheduler, idDSCtl, idReader, idViewSA, idAnonymous, idExpired, idDeleted}

// unauthenticated are the identities whose every request but the public ones gets 401.
var unauthenticated = []string{idAnonymous, idExpired, idDeleted}

// matrixEnv is a server with the matrix's objects and a token for every identity.
type matrixEnv struct {
	env    *testenv.Env
	raw    *rawClient
	tokens map[string]string
}

func newMatrixEnv(t *testing.T) *matrixEnv {
	t.Helper()
	dir := t.TempDir()
	// Static identities the server must know from its start: a node and a fleet.
	_, err := testenv.EnsureTokens(filepath.Join(dir, "tokens.csv"), []auth.User{credentials.NodeIdentity("n1"), credentials.FleetIdentity("f")})
	check(t, err)
	env := testenv.New(t, testenv.Config{DataDir: dir})
	ctx := testCtx(t)
	c := env.Client
	for _, ns := range []string{"team", "other"} {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		check(t, err)
	}
	for _, n := range []string{"n1", "f-1"} {
		_, err := c.CoreV1().Nodes().Create(ctx, node(n), metav1.CreateOptions{})
		check(t, err)
	}
	for _, p := range []*corev1.Pod{podOn("team", "p1", "n1"), podOn("team", "p2", ""), podOn("other", "p3", "n1")} {
		_, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
	}
	_, err = c.CoreV1().Secrets("team").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	check(t, err)
	for _, sa := range []struct{ ns, name string }{{"team", "reader"}, {"team", "watcher"}, {"team", "gone"}, {"kube-system", "daemon-set-controller"}} {
		_, err := c.CoreV1().ServiceAccounts(sa.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.name}}, metav1.CreateOptions{})
		check(t, err)
	}
	_, err = c.RbacV1().Roles("team").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}, metav1.CreateOptions{})
	check(t, err)
	for _, b := range []*rbacv1.RoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: "reader-reads-pods"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader", Namespace: "team"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "watcher-views"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "watcher", Namespace: "team"}}},
	} {
		_, err := c.RbacV1().RoleBindings("team").Create(ctx, b, metav1.CreateOptions{})
		check(t, err)
	}
	token := func(ns, name string) string {
		tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		check(t, err)
		return tr.Status.Token
	}
	m := &matrixEnv{env: env, raw: newRawClient(t, env), tokens: map[string]string{
		idAdmin: env.Token(testenv.AdminUser), idViewer: env.Token(testenv.ViewerUser),
		idNode: env.Token("system:node:n1"), idFleet: env.Token("system:node-fleet:f"),
		idCM: env.Token(testenv.ControllerManagerUser), idScheduler: env.Token(testenv.SchedulerUser),
		idDSCtl: token("kube-system", "daemon-set-controller"), idReader: token("team", "reader"), idViewSA: token("team", "watcher"),
		idDeleted: token("team", "gone"),
	}}
	check(t, c.CoreV1().ServiceAccounts("team").Delete(ctx, "gone", metav1.DeleteOptions{}))
	m.tokens[idExpired] = expiredToken(t, env, "team", "reader")
	// The bindings are in effect once the server's caches hold them.
	eventually(t, "the reader's binding to take effect", func() (bool, error) {
		r := m.raw.do(t, request{method: "GET", path: "/api/v1/namespaces/team/pods", token: m.tokens[idReader]})
		return r.code == http.StatusOK, fmt.Errorf("HTTP %d", r.code)
	})
	return m
}

// expiredToken signs, with the server's own key, a token of a real ServiceAccount that
// expired an hour ago: the server's clock is the real one, which a test cannot step.
func expiredToken(t *testing.T, env *testenv.Env, ns, name string) string {
	t.Helper()
	sa, err := env.Client.CoreV1().ServiceAccounts(ns).Get(testCtx(t), name, metav1.GetOptions{})
	check(t, err)
	data, err := os.ReadFile(filepath.Join(env.DataDir, "pki", "sa.key"))
	check(t, err)
	key, err := pki.ParsePrivateKeyPEM(data)
	check(t, err)
	issuer, err := auth.NewTokenIssuer(configs.DefaultAPIServer().ServiceAccountIssuer, key)
	check(t, err)
	issued := time.Now().Add(-2 * time.Hour)
	tok, err := issuer.Issue(auth.IssueRequest{Namespace: ns, ServiceAccount: auth.ObjectRef{Name: name, UID: string(sa.UID)},
		Audiences: []string{configs.DefaultAPIServer().ServiceAccountIssuer}, IssuedAt: issued, Expiry: issued.Add(time.Hour)})
	check(t, err)
	return tok
}

// matrixCase is one request and the status each identity gets: ok for those listed in
// allow, 403 for the other authenticated ones, 401 for the unauthenticated ones (unless
// public).
type matrixCase struct {
	name, method, path, body string
	header                   map[string]string
	allow                    []string
	ok                       int
	// public requests are also served to the unauthenticated identities that present no
	// token (anonymous); an invalid token is 401 everywhere.
	public bool
}

// TestAuthorizationMatrix: identities × verbs × resources — subresources, cluster-scoped
// objects, another namespace, paths outside the resource tree — each get the status the
// bootstrap policy (upstream's, for the roles miniplane shares) gives them. Writes are dry
// runs, so that every identity asks about the same objects.
//
// The test runs on its own, not in parallel: its servers are many, and TestOverload
// measures the process's heap. Its subtests use the same server for the refusal messages
// and the access reviews.
func TestAuthorizationMatrix(t *testing.T) {
	m := newMatrixEnv(t)
	t.Run("refusals", func(t *testing.T) { testForbiddenMessage(t, m) })
	t.Run("access reviews", func(t *testing.T) { testAccessReviews(t, m) })
	all := []string{idAdmin, idViewer, idNode, idFleet, idCM, idScheduler, idDSCtl, idReader, idViewSA}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"new"},"spec":{"containers":[{"name":"c","image":"registry.example/app:1"}]}}`
	impersonateReader := map[string]string{"Impersonate-User": "system:serviceaccount:team:reader"}
	cases := []matrixCase{
		{name: "list pods in team", method: "GET", path: "/api/v1/namespaces/team/pods", ok: 200,
			allow: []string{idAdmin, idViewer, idNode, idFleet, idCM, idScheduler, idDSCtl, idReader, idViewSA}},
		{name: "list pods in another namespace", method: "GET", path: "/api/v1/namespaces/other/pods", ok: 200,
			allow: []string{idAdmin, idViewer, idNode, idFleet, idCM, idScheduler, idDSCtl}},
		{name: "list pods in every namespace", method: "GET", path: "/api/v1/pods", ok: 200,
			allow: []string{idAdmin, idViewer, idNode, idFleet, idCM, idScheduler, idDSCtl}},
		{name: "get a pod", method: "GET", path: "/api/v1/namespaces/team/pods/p1", ok: 200,
			allow: []string{idAdmin, idViewer, idNode, idFleet, idScheduler, idReader, idViewSA}},
		{name: "get a pod that does not exist (403 before 404)", method: "GET", path: "/api/v1/namespaces/team/pods/nope", ok: 404,
			allow: []string{idAdmin, idViewer, idNode, idFleet, idScheduler, idReader, idViewSA}},
		{name: "get pods/status", method: "GET", path: "/api/v1/namespaces/team/pods/p1/status", ok: 200,
			allow: []string{idAdmin, idViewer, idViewSA}},
		{name: "list secrets", method: "GET", path: "/api/v1/namespaces/team/secrets", ok: 200,
			allow: []string{idAdmin, idViewer, idCM}},
		{name: "get a secret", method: "GET", path: "/api/v1/namespaces/team/secrets/s1", ok: 200,
			allow: []string{idAdmin, idViewer, idCM}},
		{name: "create a pod", method: "POST", path: "/api/v1/namespaces/team/pods?dryRun=All", body: pod, ok: 201,
			allow: []string{idAdmin, idDSCtl}},
		{name: "patch pods/status of a pod on n1", method: "PATCH", path: "/api/v1/namespaces/team/pods/p1/status?dryRun=All",
			body: `{"status":{"message":"m"}}`, ok: 200, allow: []string{idAdmin, idNode, idScheduler}},
		{name: "bind a pod", method: "POST", path: "/api/v1/namespaces/team/pods/p2/binding?dryRun=All",
			body: `{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p2"},"target":{"name":"n1"}}`, ok: 201,
			allow: []string{idAdmin, idScheduler, idDSCtl}},
		{name: "delete a pod on n1", method: "DELETE", path: "/api/v1/namespaces/team/pods/p1?dryRun=All", ok: 200,
			allow: []string{idAdmin, idNode, idScheduler, idDSCtl}},
		{name: "get a node (cluster-scoped)", method: "GET", path: "/api/v1/nodes/n1", ok: 200,
			allow: []string{idAdmin, idViewer, idNode, idFleet, idScheduler}},
		{name: "patch n1's status", method: "PATCH", path: "/api/v1/nodes/n1/status?dryRun=All", body: `{"status":{"phase":"Running"}}`, ok: 200,
			allow: []string{idAdmin, idNode}},
		{name: "patch f-1", method: "PATCH", path: "/api/v1/nodes/f-1?dryRun=All", body: `{"metadata":{"labels":{"x":"y"}}}`, ok: 200,
			allow: []string{idAdmin, idFleet}},
		{name: "delete a node", method: "DELETE", path: "/api/v1/nodes/n1?dryRun=All", ok: 200, allow: []string{idAdmin}},
		{name: "get the controller-manager's lease", method: "GET", path: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager", ok: 404,
			allow: []string{idAdmin, idViewer, idCM}},
		{name: "get the scheduler's lease", method: "GET", path: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler", ok: 404,
			allow: []string{idAdmin, idViewer, idScheduler}},
		{name: "request a token for team/reader", method: "POST", path: "/api/v1/namespaces/team/serviceaccounts/reader/token",
			body: `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`, ok: 201, allow: []string{idAdmin, idCM}},
		{name: "create a ClusterRoleBinding", method: "POST", path: "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings?dryRun=All",
			body: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"x"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"u"}]}`,
			ok:   201, allow: []string{idAdmin}},
		{name: "impersonate a ServiceAccount", method: "GET", path: "/api/v1/namespaces/team/pods", header: impersonateReader, ok: 200,
			allow: []string{idAdmin}},
		{name: "ask what it may do", method: "POST", path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
			body: `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"resourceAttributes":{"verb":"get","resource":"pods"}}}`,
			ok:   201, allow: all},
		{name: "ask what another may do", method: "POST", path: "/apis/authorization.k8s.io/v1/subjectaccessreviews",
			body: `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"u","resourceAttributes":{"verb":"get","resource":"pods"}}}`,
			ok:   201, allow: []string{idAdmin, idNode, idFleet, idCM, idScheduler}},
		{name: "discovery", method: "GET", path: "/apis", ok: 200, allow: all},
		{name: "OpenAPI", method: "GET", path: "/openapi/v3", ok: 200, allow: all},
		{name: "metrics", method: "GET", path: "/metrics", ok: 200, allow: []string{idAdmin, idViewer}},
		{name: "profiles", method: "GET", path: "/debug/pprof/", ok: 200, allow: []string{idAdmin}},
		{name: "JWKS", method: "GET", path: "/openid/v1/jwks", ok: 200, allow: []string{idAdmin, idDSCtl, idReader, idViewSA}},
		{name: "health", method: "GET", path: "/healthz", ok: 200, allow: all, public: true},
		{name: "version", method: "GET", path: "/version", ok: 200, allow: all, public: true},
	}
	var failures []string
	for _, tc := range cases {
		for _, id := range matrixIdentities {
			want := http.StatusForbidden
			switch {
			case contains(tc.allow, id), tc.public && id == idAnonymous:
				want = tc.ok
			case contains(unauthenticated, id):
				want = http.StatusUnauthorized
			}
			req := request{method: tc.method, path: tc.path, token: m.tokens[id], header: tc.header}
			if tc.body != "" {
				req.body, req.contentType = strings.NewReader(tc.body), "application/json"
				if tc.method == "PATCH" {
					req.contentType = "application/merge-patch+json"
				}
			}
			r := m.raw.do(t, req)
			if r.code != want {
				failures = append(failures, fmt.Sprintf("%s as %s: HTTP %d, want %d (%.200s)", tc.name, id, r.code, want, r.body))
				continue
			}
			// Refusals say who was refused what, and never more.
			if want == http.StatusForbidden && (r.status == nil || r.status.Reason != metav1.StatusReasonForbidden || !strings.Contains(r.status.Message, "cannot")) {
				failures = append(failures, fmt.Sprintf("%s as %s: 403 without a Forbidden status: %.200s", tc.name, id, r.body))
			}
			if want == http.StatusUnauthorized && (r.status == nil || r.status.Message != "Unauthorized") {
				failures = append(failures, fmt.Sprintf("%s as %s: 401 body %.200s", tc.name, id, r.body))
			}
		}
	}
	sort.Strings(failures)
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests got another status:\n%s", len(failures), len(cases)*len(matrixIdentities), strings.Join(failures, "\n"))
	}
}

// testForbiddenMessage: a refusal reads as kube-apiserver's, the same whether the object
// exists or not.
func testForbiddenMessage(t *testing.T, m *matrixEnv) {
	tests := []struct {
		path, want string
	}{
		{"/api/v1/namespaces/team/secrets", `secrets is forbidden: User "system:serviceaccount:team:reader" cannot list resource "secrets" in API group "" in the namespace "team"`},
		{"/api/v1/namespaces/team/secrets/s1", `secrets "s1" is forbidden: User "system:serviceaccount:team:reader" cannot get resource "secrets" in API group "" in the namespace "team"`},
		{"/api/v1/namespaces/team/secrets/missing", `secrets "missing" is forbidden: User "system:serviceaccount:team:reader" cannot get resource "secrets" in API group "" in the namespace "team"`},
		{"/api/v1/namespaces/other/pods", `pods is forbidden: User "system:serviceaccount:team:reader" cannot list resource "pods" in API group "" in the namespace "other"`},
		{"/api/v1/nodes", `nodes is forbidden: User "system:serviceaccount:team:reader" cannot list resource "nodes" in API group "" at the cluster scope`},
		{"/api/v1/namespaces/team/pods/p1/log", `pods "p1" is forbidden: User "system:serviceaccount:team:reader" cannot get resource "pods/log" in API group "" in the namespace "team"`},
		{"/metrics", `forbidden: User "system:serviceaccount:team:reader" cannot get path "/metrics"`},
	}
	for _, tt := range tests {
		r := m.raw.do(t, request{method: "GET", path: tt.path, token: m.tokens[idReader]})
		if r.code != http.StatusForbidden || r.status == nil || r.status.Message != tt.want {
			t.Errorf("GET %s: HTTP %d %s\nwant message %s", tt.path, r.code, r.body, tt.want)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// decodeInto decodes a raw answer's body.
func decodeInto(t *testing.T, r rawResponse, into any) {
	t.Helper()
	if err := json.Unmarshal(r.body, into); err != nil {
		t.Fatalf("decode %.200s: %v", r.body, err)
	}
}
