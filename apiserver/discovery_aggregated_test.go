package apiserver_test

import (
	"encoding/json"
	"fmt"
	"mime"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/miniplane/miniplane/test/testenv"
)

// aggregatedAccept is what a client sends for aggregated discovery (upstream's conformance
// specs send exactly this).
const aggregatedAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// getDiscovery GETs path with accept and returns the body and its media type parameters.
func getDiscovery(t *testing.T, d discovery.DiscoveryInterface, path, accept string) ([]byte, string, map[string]string) {
	t.Helper()
	var contentType string
	body, err := d.RESTClient().Get().AbsPath(path).SetHeader("Accept", accept).
		Do(testCtx(t)).ContentType(&contentType).Raw()
	check(t, err)
	base, params, err := mime.ParseMediaType(contentType)
	check(t, err)
	return body, base, params
}

// TestAggregatedDiscovery: /api and /apis answer apidiscovery.k8s.io/v2 when asked for it
// (and the per-group-version format otherwise); the aggregated document says exactly what
// the per-group-version documents say, and a custom resource appears in it once its
// definition is established.
func TestAggregatedDiscovery(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	d := env.Client.Discovery()

	tests := []struct {
		name, path, accept string
		wantAggregated     bool
	}{
		{"apis aggregated", "/apis", aggregatedAccept, true},
		{"api aggregated", "/api", aggregatedAccept, true},
		{"apis aggregated first of several", "/apis", aggregatedAccept + ",application/json", true},
		{"apis json first", "/apis", "application/json," + aggregatedAccept, false},
		{"apis json", "/apis", "application/json", false},
		{"api json", "/api", "application/json", false},
		{"apis v2beta1 (not served)", "/apis", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", false},
		{"apis protobuf aggregated (JSON only)", "/apis", "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, base, params := getDiscovery(t, d, tc.path, tc.accept)
			if base != "application/json" {
				t.Fatalf("media type %s, want application/json", base)
			}
			aggregated := params["g"] == "apidiscovery.k8s.io" && params["v"] == "v2" && params["as"] == "APIGroupDiscoveryList"
			if aggregated != tc.wantAggregated {
				t.Fatalf("Content-Type parameters %v, want aggregated=%v", params, tc.wantAggregated)
			}
			var list apidiscoveryv2.APIGroupDiscoveryList
			check(t, json.Unmarshal(body, &list))
			if !tc.wantAggregated {
				if list.Kind == "APIGroupDiscoveryList" {
					t.Fatalf("got an aggregated body: %s", body[:min(len(body), 200)])
				}
				return
			}
			if list.Kind != "APIGroupDiscoveryList" || list.APIVersion != "apidiscovery.k8s.io/v2" {
				t.Fatalf("kind %q apiVersion %q", list.Kind, list.APIVersion)
			}
			for _, g := range list.Items {
				if (tc.path == "/api") != (g.Name == "") {
					t.Errorf("%s lists group %q", tc.path, g.Name)
				}
				for _, v := range g.Versions {
					if v.Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
						t.Errorf("%s/%s freshness %q", g.Name, v.Version, v.Freshness)
					}
				}
			}
		})
	}

	// The client's aggregated view and its per-group-version view agree, resource by
	// resource (subresources included).
	legacy, err := discovery.NewDiscoveryClientForConfig(env.AdminConfig)
	check(t, err)
	legacy.UseLegacyDiscovery = true
	want := discoverySummary(t, legacy)
	got := discoverySummary(t, d)
	if !slices.Equal(got, want) {
		t.Errorf("aggregated discovery differs from per-group-version discovery:\naggregated: %v\nlegacy:     %v", got, want)
	}
	for _, w := range []string{"v1 namespaces Namespace cluster", "v1 pods/eviction policy/v1.Eviction namespaced",
		"apps/v1 daemonsets/status DaemonSet namespaced", "authorization.k8s.io/v1 selfsubjectaccessreviews SelfSubjectAccessReview cluster"} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, w) }) {
			t.Errorf("aggregated discovery lacks %q", w)
		}
	}

	// A custom resource is listed once its definition is established, preferred version
	// first.
	crd := installCRD(t, env, widgetCRD())
	gv := crd.Spec.Group + "/" + crd.Spec.Versions[0].Name
	eventually(t, "the custom resource in aggregated discovery", func() (bool, error) {
		body, _, _ := getDiscovery(t, d, "/apis", aggregatedAccept)
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(body, &list); err != nil {
			return false, err
		}
		for _, g := range list.Items {
			if g.Name != crd.Spec.Group || len(g.Versions) == 0 {
				continue
			}
			for _, r := range g.Versions[0].Resources {
				if r.Resource == crd.Spec.Names.Plural && r.ResponseKind != nil && r.ResponseKind.Kind == crd.Spec.Names.Kind &&
					r.Scope == apidiscoveryv2.ScopeNamespace {
					return true, nil
				}
			}
			return false, fmt.Errorf("group %s: %+v", g.Name, g.Versions)
		}
		return false, fmt.Errorf("no group %s", crd.Spec.Group)
	})
	_, err = d.ServerResourcesForGroupVersion(gv)
	check(t, err)
}

// discoverySummary is every resource a discovery client reports, one sorted line each:
// group version, name, kind (with its group version when not the list's), scope, verbs,
// short names and categories.
func discoverySummary(t *testing.T, d discovery.DiscoveryInterface) []string {
	t.Helper()
	_, lists, err := d.ServerGroupsAndResources()
	check(t, err)
	var out []string
	for _, rl := range lists {
		for _, r := range rl.APIResources {
			kind := r.Kind
			if gv := (metav1.GroupVersion{Group: r.Group, Version: r.Version}).String(); r.Version != "" && gv != rl.GroupVersion {
				kind = gv + "." + r.Kind
			}
			scope := "cluster"
			if r.Namespaced {
				scope = "namespaced"
			}
			out = append(out, fmt.Sprintf("%s %s %s %s %v %v %v", rl.GroupVersion, r.Name, kind, scope, r.Verbs, r.ShortNames, r.Categories))
		}
	}
	slices.Sort(out)
	return out
}

// TestDiscoveryTrailingSlash: every discovery path answers the same with a trailing slash,
// as kube-apiserver's do (upstream's conformance spec reads /apis/<group>/).
func TestDiscoveryTrailingSlash(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	raw := newRawClient(t, env)
	admin := env.Token(testenv.AdminUser)
	for _, path := range []string{"/api", "/apis", "/api/v1", "/apis/apps", "/apis/apps/v1", "/apis/authorization.k8s.io", "/apis/authorization.k8s.io/v1"} {
		t.Run(path, func(t *testing.T) {
			plain := raw.do(t, request{method: "GET", path: path, token: admin})
			slash := raw.do(t, request{method: "GET", path: path + "/", token: admin})
			if plain.code != 200 || slash.code != 200 {
				t.Fatalf("GET %s: %d, GET %s/: %d %s", path, plain.code, path, slash.code, slash.body)
			}
			if string(plain.body) != string(slash.body) {
				t.Fatalf("GET %s and %s/ differ:\n%s\n%s", path, path, plain.body, slash.body)
			}
		})
	}
}

// TestReviewNotAcceptableAsTable: a review has no Table or metadata form, so a request
// that accepts only those is answered 406, and one that also accepts JSON gets JSON.
func TestReviewNotAcceptableAsTable(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	raw := newRawClient(t, env)
	admin := env.Token(testenv.AdminUser)
	body := `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/","verb":"get"}}}`
	tests := []struct {
		accept   string
		wantCode int
	}{
		{"application/json;as=Table;v=v1;g=meta.k8s.io", 406},
		{"application/json;as=Table;v=v1beta1;g=meta.k8s.io", 406},
		{"application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", 406},
		{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json", 201},
		{"application/json", 201},
		{"", 201},
	}
	for _, tc := range tests {
		t.Run(tc.accept, func(t *testing.T) {
			resp := raw.do(t, request{method: "POST", path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", token: admin,
				contentType: "application/json", body: strings.NewReader(body), header: map[string]string{"Accept": tc.accept}})
			if resp.code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", resp.code, tc.wantCode, resp.body)
			}
			if tc.wantCode == 406 && (resp.status == nil || resp.status.Reason != metav1.StatusReasonNotAcceptable) {
				t.Fatalf("status %+v, want reason NotAcceptable", resp.status)
			}
			if tc.wantCode == 201 && !strings.Contains(string(resp.body), `"kind":"SelfSubjectAccessReview"`) {
				t.Fatalf("body %s", resp.body)
			}
		})
	}
}
