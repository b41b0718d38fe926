package apiserver_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

// These tests run one at a time, as the RBAC tests (see rbac_test.go).

// TestTokenRequest: TokenRequest's rules — lifetime bounds, audiences, binding to a pod
// (which must run as the ServiceAccount, and whose deletion ends the token), a recreated
// ServiceAccount's old tokens.
func TestTokenRequest(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client
	raw := newRawClient(t, env)
	sas := c.CoreV1().ServiceAccounts("default")
	_, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bot"}}, metav1.CreateOptions{})
	check(t, err)
	requestToken := func(name string, spec authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequest, error) {
		return sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	}
	works := func(token string) int {
		return raw.do(t, request{method: "POST", path: "/apis/authentication.k8s.io/v1/selfsubjectreviews", token: token,
			contentType: "application/json", body: strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)}).code
	}
	seconds := func(n int64) *int64 { return &n }

	tr, err := requestToken("bot", authenticationv1.TokenRequestSpec{})
	check(t, err)
	if *tr.Spec.ExpirationSeconds != 3600 || len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != configs.DefaultAPIServer().ServiceAccountIssuer ||
		tr.Status.ExpirationTimestamp.Sub(tr.CreationTimestamp.Time).Hours() != 1 {
		t.Errorf("defaults: spec %+v, expires %v", tr.Spec, tr.Status.ExpirationTimestamp)
	}
	if code := works(tr.Status.Token); code != http.StatusCreated {
		t.Errorf("the token: HTTP %d", code)
	}
	_, err = requestToken("bot", authenticationv1.TokenRequestSpec{ExpirationSeconds: seconds(60)})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "less than 10 minutes") {
		t.Errorf("a one-minute token: %v", err)
	}
	_, err = requestToken("nobody", authenticationv1.TokenRequestSpec{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a token of a missing ServiceAccount: %v", err)
	}
	tr, err = requestToken("bot", authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}})
	check(t, err)
	if code := works(tr.Status.Token); code != http.StatusUnauthorized {
		t.Errorf("a token for another audience: HTTP %d, want 401", code)
	}

	// Bound to a pod.
	pod := podOn("default", "runner", "")
	pod.Spec.ServiceAccountName = "bot"
	pod, err = c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	check(t, err)
	other, err := c.CoreV1().Pods("default").Create(ctx, podOn("default", "other", ""), metav1.CreateOptions{})
	check(t, err)
	ref := func(p *corev1.Pod, uid types.UID) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: uid}
	}
	_, err = requestToken("bot", authenticationv1.TokenRequestSpec{BoundObjectRef: ref(other, "")})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "different serviceaccount name") {
		t.Errorf("bound to a pod of another ServiceAccount: %v", err)
	}
	_, err = requestToken("bot", authenticationv1.TokenRequestSpec{BoundObjectRef: ref(pod, "not-its-uid")})
	if !apierrors.IsConflict(err) {
		t.Errorf("bound with the wrong UID: %v", err)
	}
	tr, err = requestToken("bot", authenticationv1.TokenRequestSpec{BoundObjectRef: ref(pod, pod.UID)})
	check(t, err)
	who, err := impersonationFree(t, env, tr.Status.Token)
	check(t, err)
	if who.Status.UserInfo.Extra["authentication.kubernetes.io/pod-name"][0] != "runner" {
		t.Errorf("a pod-bound token's user: %+v", who.Status.UserInfo)
	}
	check(t, c.CoreV1().Pods("default").Delete(ctx, "runner", metav1.DeleteOptions{}))
	eventually(t, "the pod-bound token to die with its pod", func() (bool, error) {
		code := works(tr.Status.Token)
		return code == http.StatusUnauthorized, fmt.Errorf("HTTP %d", code)
	})

	// A ServiceAccount deleted and made again under the same name is another one.
	tr, err = requestToken("bot", authenticationv1.TokenRequestSpec{})
	check(t, err)
	check(t, sas.Delete(ctx, "bot", metav1.DeleteOptions{}))
	_, err = sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bot"}}, metav1.CreateOptions{})
	check(t, err)
	eventually(t, "the old token to stop working", func() (bool, error) {
		code := works(tr.Status.Token)
		return code == http.StatusUnauthorized, fmt.Errorf("HTTP %d", code)
	})
}

// impersonationFree asks who a token is, with a client carrying nothing but it.
func impersonationFree(t *testing.T, env *testenv.Env, token string) (*authenticationv1.SelfSubjectReview, error) {
	t.Helper()
	raw := newRawClient(t, env)
	r := raw.do(t, request{method: "POST", path: "/apis/authentication.k8s.io/v1/selfsubjectreviews", token: token,
		contentType: "application/json", body: strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)})
	if r.code != http.StatusCreated {
		return nil, fmt.Errorf("HTTP %d: %s", r.code, r.body)
	}
	var out authenticationv1.SelfSubjectReview
	return &out, json.Unmarshal(r.body, &out)
}

// TestServiceAccountIssuerDiscovery: the OpenID configuration names the issuer and the
// JWKS, whose key verifies the tokens the server issues.
func TestServiceAccountIssuerDiscovery(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	raw := newRawClient(t, env)
	admin := env.Token(testenv.AdminUser)
	r := raw.do(t, request{method: "GET", path: "/.well-known/openid-configuration", token: admin})
	if r.code != http.StatusOK {
		t.Fatalf("openid-configuration: HTTP %d %s", r.code, r.body)
	}
	var doc struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	decodeInto(t, r, &doc)
	issuer := configs.DefaultAPIServer().ServiceAccountIssuer
	if doc.Issuer != issuer || doc.JWKSURI != issuer+"/openid/v1/jwks" || len(doc.Algs) != 1 || doc.Algs[0] != "RS256" {
		t.Fatalf("openid-configuration: %s", r.body)
	}
	r = raw.do(t, request{method: "GET", path: "/openid/v1/jwks", token: admin})
	var keys jose.JSONWebKeySet
	decodeInto(t, r, &keys)
	if r.code != http.StatusOK || len(keys.Keys) != 1 || !keys.Keys[0].Valid() || keys.Keys[0].Use != "sig" {
		t.Fatalf("jwks: HTTP %d %s", r.code, r.body)
	}
	_, err := env.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bot"}}, metav1.CreateOptions{})
	check(t, err)
	tr, err := env.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "bot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	check(t, err)
	tok, err := jwt.ParseSigned(tr.Status.Token, []jose.SignatureAlgorithm{jose.RS256})
	check(t, err)
	var claims jwt.Claims
	if err := tok.Claims(keys.Keys[0].Key, &claims); err != nil {
		t.Fatalf("the JWKS key does not verify a token: %v", err)
	}
	if claims.Subject != "system:serviceaccount:default:bot" || claims.Issuer != issuer || tok.Headers[0].KeyID != keys.Keys[0].KeyID {
		t.Fatalf("claims %+v, kid %s", claims, tok.Headers[0].KeyID)
	}
	// The same key after a restart: it lives in the data directory.
	data, err := os.ReadFile(filepath.Join(env.DataDir, "pki", "sa.key"))
	if err != nil || !strings.Contains(string(data), "PRIVATE KEY") {
		t.Fatalf("sa.key: %v", err)
	}
}

// TestInsecureListener: the opt-in plain-HTTP listener serves resources as an
// administrator (it answered 401 to every resource request once).
func TestInsecureListener(t *testing.T) {
	api := configs.DefaultAPIServer()
	api.InsecureListen = "127.0.0.1:0"
	addr := testenv.New(t, testenv.Config{APIServer: &api}).APIServer.InsecureAddr().String()
	for _, path := range []string{"/api/v1/namespaces", "/apis/apps/v1/daemonsets", "/apis", "/metrics"} {
		resp, err := http.Get("http://" + addr + path)
		check(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s on the plain-HTTP listener: HTTP %d %.200s", path, resp.StatusCode, body)
		}
	}
	resp, err := http.Post("http://"+addr+"/api/v1/namespaces", "application/json", strings.NewReader(`{"metadata":{"name":"made-insecurely"}}`))
	check(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST a namespace on the plain-HTTP listener: HTTP %d", resp.StatusCode)
	}
}

// TestAuditLog: every write, allowed or refused, is one JSON line naming who did what,
// impersonation included; reads are not logged.
func TestAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	api := configs.DefaultAPIServer()
	api.AuditLogPath, api.AuditLevel = path, configs.AuditLevelRequest
	env := testenv.New(t, testenv.Config{APIServer: &api})
	ctx := testCtx(t)
	raw := newRawClient(t, env)
	before := countLines(t, path)
	_, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	check(t, err)
	_, err = env.Client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	check(t, err)
	r := raw.do(t, request{method: "DELETE", path: "/api/v1/namespaces/default/configmaps/cm", token: env.Token(testenv.ViewerUser)})
	if r.code != http.StatusForbidden {
		t.Fatalf("viewer deletes: HTTP %d", r.code)
	}
	if err := impersonating(t, env, "bob").CoreV1().ConfigMaps("default").Delete(ctx, "cm", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob deletes: %v, want 403", err)
	}
	events := readAudit(t, path)[before:]
	if len(events) != 3 {
		t.Fatalf("%d audit events, want 3 (create, refused delete, impersonated delete): %+v", len(events), events)
	}
	created, refused, impersonated := events[0], events[1], events[2]
	if created.Verb != "create" || created.User.Username != testenv.AdminUser || created.ObjectRef == nil ||
		created.ObjectRef.Resource != "configmaps" || created.ObjectRef.Namespace != "default" || created.ObjectRef.Name != "cm" || created.ResponseStatus.Code != 201 ||
		created.Annotations["authorization.k8s.io/decision"] != "allow" || created.RequestObject == nil ||
		!strings.Contains(string(created.RequestObject.Raw), `"k":"v"`) || created.Level != auditv1.LevelRequest {
		t.Errorf("create event: %+v", created)
	}
	if refused.Verb != "delete" || refused.User.Username != testenv.ViewerUser || refused.ResponseStatus.Code != 403 ||
		refused.ObjectRef.Name != "cm" || refused.Annotations["authorization.k8s.io/decision"] != "forbid" ||
		refused.ResponseStatus.Reason != metav1.StatusReasonForbidden {
		t.Errorf("refused delete event: %+v", refused)
	}
	if impersonated.User.Username != testenv.AdminUser || impersonated.ImpersonatedUser == nil || impersonated.ImpersonatedUser.Username != "bob" ||
		impersonated.ResponseStatus.Code != 403 {
		t.Errorf("impersonated delete event: %+v", impersonated)
	}
}

func countLines(t *testing.T, path string) int { return len(readAudit(t, path)) }

func readAudit(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	check(t, err)
	defer f.Close()
	var out []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if ev.Kind != "Event" || ev.APIVersion != "audit.k8s.io/v1" || ev.Stage != auditv1.StageResponseComplete || ev.AuditID == "" {
			t.Fatalf("audit line %q", sc.Text())
		}
		out = append(out, ev)
	}
	return out
}
