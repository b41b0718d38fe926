package apiserver_test

import (
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi/cached"
	"k8s.io/client-go/openapi3"
	"k8s.io/kube-openapi/pkg/util/proto"

	"github.com/miniplane/miniplane/test/testenv"
)

// TestOpenAPIClients reads the documents the way client-go (and so kubectl) does: the v2
// document in its protobuf form through discovery, the v3 documents through the openapi3
// root over a caching client, and checks that they parse and describe served kinds with
// their documentation and GVK extensions.
func TestOpenAPIClients(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	disco := env.Client.Discovery()

	t.Run("v2 protobuf", func(t *testing.T) {
		doc, err := disco.OpenAPISchema()
		check(t, err)
		models, err := proto.NewOpenAPIData(doc)
		check(t, err)
		ds, ok := models.LookupModel("io.k8s.api.apps.v1.DaemonSet").(*proto.Kind)
		if !ok {
			t.Fatalf("no DaemonSet model among %d", len(models.ListModels()))
		}
		if !strings.Contains(ds.GetDescription(), "daemon set") || ds.Fields["spec"] == nil {
			t.Fatalf("DaemonSet model: %q, fields %v", ds.GetDescription(), ds.Keys())
		}
		if !hasGVK(ds.GetExtensions(), appsv1.SchemeGroupVersion.WithKind("DaemonSet")) {
			t.Fatalf("DaemonSet model extensions: %v", ds.GetExtensions())
		}
		// Client-side validation walks references: every one must resolve.
		for _, name := range models.ListModels() {
			if models.LookupModel(name) == nil {
				t.Fatalf("model %s does not resolve", name)
			}
		}
	})

	t.Run("v3 through openapi3 and the cached client", func(t *testing.T) {
		root := openapi3.NewRoot(cached.NewClient(disco.OpenAPIV3()))
		gvs, err := root.GroupVersions()
		check(t, err)
		for _, want := range []schema.GroupVersion{corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion} {
			found := false
			for _, gv := range gvs {
				found = found || gv == want
			}
			if !found {
				t.Fatalf("v3 root lists %v, not %v", gvs, want)
			}
		}
		doc, err := root.GVSpec(appsv1.SchemeGroupVersion)
		check(t, err)
		ds := doc.Components.Schemas["io.k8s.api.apps.v1.DaemonSetUpdateStrategy"]
		if ds == nil || !strings.Contains(ds.Properties["type"].Description, "RollingUpdate") {
			t.Fatalf("DaemonSetUpdateStrategy schema: %+v", ds)
		}
		patch := doc.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"].Patch
		found := false
		for _, p := range patch.Parameters {
			found = found || (p.Name == "fieldValidation" && p.In == "query")
		}
		if !found {
			t.Fatal("the DaemonSet PATCH operation does not list fieldValidation")
		}
		pods, err := root.GVSpec(corev1.SchemeGroupVersion)
		check(t, err)
		if pods.Components.Schemas["io.k8s.api.core.v1.Pod"] == nil {
			t.Fatal("api/v1 has no Pod schema")
		}
	})

	t.Run("caching and errors over HTTP", func(t *testing.T) {
		raw := newRawClient(t, env)
		token := env.Token(testenv.AdminUser)
		first := raw.do(t, request{method: "GET", path: "/openapi/v2", token: token,
			header: map[string]string{"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}})
		etag := first.header.Get("Etag")
		if first.code != http.StatusOK || etag == "" || first.header.Get("Content-Type") != "application/com.github.proto-openapi.spec.v2.v1.0+protobuf" {
			t.Fatalf("GET /openapi/v2 as protobuf: %d %v", first.code, first.header)
		}
		again := raw.do(t, request{method: "GET", path: "/openapi/v2", token: token,
			header: map[string]string{"Accept": "application/json", "If-None-Match": etag}})
		if again.code != http.StatusNotModified {
			t.Fatalf("GET /openapi/v2 with the ETag: %d", again.code)
		}
		// net/http undoes gzip it asked for itself, not gzip asked for by the caller.
		gz := raw.do(t, request{method: "GET", path: "/openapi/v2", token: token, header: map[string]string{"Accept-Encoding": "gzip"}})
		if gz.header.Get("Content-Encoding") != "gzip" || len(gz.body) >= len(first.body) {
			t.Fatalf("gzip: %v, %d bytes against %d", gz.header, len(gz.body), len(first.body))
		}
		noRedirect := &rawClient{env: env, http: &http.Client{Transport: raw.http.Transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
		stale := noRedirect.do(t, request{method: "GET", path: "/openapi/v3/apis/apps/v1?hash=0", token: token})
		if stale.code != http.StatusMovedPermanently || !strings.Contains(stale.header.Get("Location"), "/openapi/v3/apis/apps/v1?hash=") {
			t.Fatalf("a stale hash: %d %v", stale.code, stale.header)
		}
		current := raw.do(t, request{method: "GET", path: stale.header.Get("Location"), token: token})
		if current.code != http.StatusOK || current.header.Get("Cache-Control") != "public, immutable" {
			t.Fatalf("the current hash: %d %v", current.code, current.header)
		}
		if r := raw.do(t, request{method: "GET", path: "/openapi/v3/apis/nothing/v1", token: token}); r.code != http.StatusNotFound || r.status == nil {
			t.Fatalf("an unknown group version: %d %s", r.code, r.body)
		}
		if r := raw.do(t, request{method: "GET", path: "/openapi/v2"}); r.code != http.StatusUnauthorized {
			t.Fatalf("GET /openapi/v2 without a token: %d", r.code)
		}
	})
}

// hasGVK reports whether a v2 model's extensions carry gvk, as kubectl reads them.
func hasGVK(ext map[string]any, gvk schema.GroupVersionKind) bool {
	list, _ := ext["x-kubernetes-group-version-kind"].([]any)
	for _, item := range list {
		m, _ := item.(map[any]any)
		if m["group"] == gvk.Group && m["version"] == gvk.Version && m["kind"] == gvk.Kind {
			return true
		}
	}
	return false
}
