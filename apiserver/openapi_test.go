package apiserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// gvkExtensionOf reads a definition's x-kubernetes-group-version-kind list.
func gvkExtensionOf(t *testing.T, s *spec.Schema) []schema.GroupVersionKind {
	t.Helper()
	raw, ok := s.Extensions["x-kubernetes-group-version-kind"]
	if !ok {
		return nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var gvks []metav1.GroupVersionKind
	if err := json.Unmarshal(data, &gvks); err != nil {
		t.Fatalf("x-kubernetes-group-version-kind %s: %v", data, err)
	}
	out := make([]schema.GroupVersionKind, len(gvks))
	for i, g := range gvks {
		out[i] = schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
	}
	return out
}

// operationGVK reads an operation's x-kubernetes-group-version-kind and action.
func operationGVK(t *testing.T, ext spec.Extensions) (schema.GroupVersionKind, string) {
	t.Helper()
	var gvk metav1.GroupVersionKind
	if err := ext.GetObject("x-kubernetes-group-version-kind", &gvk); err != nil {
		t.Fatal(err)
	}
	action, _ := ext.GetString("x-kubernetes-action")
	return schema.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}, action
}

func buildDocs(t *testing.T, reg *registry) (*spec.Swagger, map[string]*spec3.OpenAPI) {
	t.Helper()
	v2, v3, err := buildOpenAPI(reg.resources())
	if err != nil {
		t.Fatal(err)
	}
	return v2, v3
}

// TestOpenAPICoversRegistry checks, for every registered resource, that both documents
// describe its kind and list kind (with the GVK extension kubectl looks schemas up by,
// and the type's documentation), every path and verb it serves, subresources included,
// and that every PATCH operation lists fieldValidation. A kind registered without
// generated definitions fails the build (TestOpenAPIRejectsKindWithoutSchema).
func TestOpenAPICoversRegistry(t *testing.T) {
	reg := builtinRegistry(t)
	v2, v3 := buildDocs(t, reg)
	for _, res := range reg.resources() {
		t.Run(res.name, func(t *testing.T) {
			v3doc := v3[openAPIV3Path(res.gvk().GroupVersion())]
			if v3doc == nil {
				t.Fatalf("no v3 document for %s", res.gvk().GroupVersion())
			}
			for _, m := range []struct {
				obj runtime.Object
				gvk schema.GroupVersionKind
			}{{res.newFunc(), res.gvk()}, {res.newListFunc(), res.gvk().GroupVersion().WithKind(res.listKind())}} {
				name := util.GetCanonicalTypeName(m.obj)
				d2, ok := v2.Definitions[name]
				if !ok {
					t.Fatalf("v2 has no definition %s", name)
				}
				d3 := v3doc.Components.Schemas[name]
				if d3 == nil {
					t.Fatalf("v3 has no schema %s", name)
				}
				for doc, s := range map[string]*spec.Schema{"v2": &d2, "v3": d3} {
					if !slices.Contains(gvkExtensionOf(t, s), m.gvk) {
						t.Errorf("%s definition %s: x-kubernetes-group-version-kind %v lacks %s", doc, name, gvkExtensionOf(t, s), m.gvk)
					}
					if s.Description == "" || len(s.Properties) == 0 {
						t.Errorf("%s definition %s has no description or no properties", doc, name)
					}
				}
			}
			paths := servedPaths(res)
			for path, verbs := range paths {
				p2, ok := v2.Paths.Paths[path]
				if !ok {
					t.Fatalf("v2 lacks path %s", path)
				}
				p3 := v3doc.Paths.Paths[path]
				if p3 == nil {
					t.Fatalf("v3 lacks path %s", path)
				}
				ops2 := map[string]*spec.Operation{"GET": p2.Get, "POST": p2.Post, "PUT": p2.Put, "PATCH": p2.Patch, "DELETE": p2.Delete}
				ops3 := map[string]*spec3.Operation{"GET": p3.Get, "POST": p3.Post, "PUT": p3.Put, "PATCH": p3.Patch, "DELETE": p3.Delete}
				for method, op := range ops2 {
					if (op != nil) != slices.Contains(verbs, method) || (ops3[method] != nil) != slices.Contains(verbs, method) {
						t.Errorf("%s %s: in v2 %v, in v3 %v, served %v", method, path, op != nil, ops3[method] != nil, slices.Contains(verbs, method))
						continue
					}
					if op == nil {
						continue
					}
					gvk, action := operationGVK(t, op.Extensions)
					gvk3, action3 := operationGVK(t, ops3[method].Extensions)
					if gvk.Kind == "" || gvk != gvk3 || action == "" || action != action3 {
						t.Errorf("%s %s: GVK %v/%v, action %q/%q", method, path, gvk, gvk3, action, action3)
					}
					if method == "PATCH" && (!hasQueryParam(v2, op.Parameters, "fieldValidation") || !hasQueryParam3(ops3[method].Parameters, "fieldValidation")) {
						t.Errorf("PATCH %s does not list fieldValidation", path)
					}
				}
			}
		})
	}
}

// servedPaths are the paths a resource serves and their methods, as request.go routes
// them.
func servedPaths(res *resource) map[string][]string {
	base := groupVersionPath(res.group, res.version)
	scope := ""
	if res.namespaced {
		scope = "/namespaces/{namespace}"
	}
	coll := base + scope + "/" + res.name
	collVerbs := []string{"GET", "POST"}
	if !res.noDeleteCollection {
		collVerbs = append(collVerbs, "DELETE")
	}
	out := map[string][]string{
		coll:                                     collVerbs,
		coll + "/{name}":                         {"GET", "PUT", "PATCH", "DELETE"},
		base + "/watch" + scope + "/" + res.name: {"GET"},
		base + "/watch" + scope + "/" + res.name + "/{name}": {"GET"},
	}
	if res.namespaced {
		out[base+"/"+res.name] = []string{"GET"}
		out[base+"/watch/"+res.name] = []string{"GET"}
	}
	methods := map[string]string{"get": "GET", "create": "POST", "update": "PUT", "patch": "PATCH"}
	for _, sub := range res.subresources {
		var verbs []string
		for _, v := range sub.verbs {
			verbs = append(verbs, methods[v])
		}
		out[coll+"/{name}/"+sub.name] = verbs
	}
	return out
}

func hasQueryParam(doc *spec.Swagger, params []spec.Parameter, name string) bool {
	for _, p := range params {
		if ref := p.Ref.String(); strings.HasPrefix(ref, "#/parameters/") {
			p = doc.Parameters[strings.TrimPrefix(ref, "#/parameters/")]
		}
		if p.Name == name && p.In == "query" {
			return true
		}
	}
	return false
}

func hasQueryParam3(params []*spec3.Parameter, name string) bool {
	return slices.ContainsFunc(params, func(p *spec3.Parameter) bool { return p.Name == name && p.In == "query" })
}

// TestOpenAPIRejectsKindWithoutSchema: a kind whose Go type openapi-gen was not run over
// cannot be served without a schema; building the documents names it.
func TestOpenAPIRejectsKindWithoutSchema(t *testing.T) {
	reg := builtinRegistry(t)
	if err := reg.register(&resource{
		group: "certificates.k8s.io", version: "v1", name: "certificatesigningrequests", kind: "CertificateSigningRequest", singular: "certificatesigningrequest",
		newFunc: func() runtime.Object { return &certificatesv1.CertificateSigningRequest{} }, newListFunc: func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} },
		strategy: leaseStrategy{},
	}); err != nil {
		t.Fatal(err)
	}
	_, _, err := buildOpenAPI(reg.resources())
	if err == nil || !strings.Contains(err.Error(), "io.k8s.api.certificates.v1.CertificateSigningRequest") {
		t.Fatalf("building OpenAPI with a kind lacking definitions: %v", err)
	}
}

// TestOpenAPIOperations checks operation IDs, tags and the details of a few operations
// against kube-apiserver's.
func TestOpenAPIOperations(t *testing.T) {
	v2, _ := buildDocs(t, builtinRegistry(t))
	tests := []struct {
		path, method, id, tag, action string
		gvk                           schema.GroupVersionKind
	}{
		{"/apis/apps/v1/namespaces/{namespace}/daemonsets", "GET", "listAppsV1NamespacedDaemonSet", "apps_v1", "list", appsGVK("DaemonSet")},
		{"/apis/apps/v1/namespaces/{namespace}/daemonsets", "DELETE", "deleteAppsV1CollectionNamespacedDaemonSet", "apps_v1", "deletecollection", appsGVK("DaemonSet")},
		{"/apis/apps/v1/daemonsets", "GET", "listAppsV1DaemonSetForAllNamespaces", "apps_v1", "list", appsGVK("DaemonSet")},
		{"/apis/apps/v1/watch/namespaces/{namespace}/daemonsets", "GET", "watchAppsV1NamespacedDaemonSetList", "apps_v1", "watchlist", appsGVK("DaemonSet")},
		{"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}/status", "PATCH", "patchAppsV1NamespacedDaemonSetStatus", "apps_v1", "patch", appsGVK("DaemonSet")},
		{"/api/v1/nodes/{name}", "PUT", "replaceCoreV1Node", "core_v1", "put", coreGVK("Node")},
		{"/api/v1/namespaces/{namespace}/pods/{name}/binding", "POST", "createCoreV1NamespacedPodBinding", "core_v1", "post", coreGVK("Binding")},
		{"/api/v1/namespaces/{namespace}/pods/{name}/log", "GET", "readCoreV1NamespacedPodLog", "core_v1", "get", coreGVK("Pod")},
		{"/apis/coordination.k8s.io/v1/watch/leases", "GET", "watchCoordinationV1LeaseListForAllNamespaces", "coordination_v1", "watchlist",
			schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}},
		{"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "POST", "createAuthorizationV1SelfSubjectAccessReview", "authorization_v1", "post",
			schema.GroupVersionKind{Group: "authorization.k8s.io", Version: "v1", Kind: "SelfSubjectAccessReview"}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			p, ok := v2.Paths.Paths[tt.path]
			if !ok {
				t.Fatalf("no path %s", tt.path)
			}
			op := map[string]*spec.Operation{"GET": p.Get, "POST": p.Post, "PUT": p.Put, "PATCH": p.Patch, "DELETE": p.Delete}[tt.method]
			if op == nil {
				t.Fatalf("no %s %s", tt.method, tt.path)
			}
			gvk, action := operationGVK(t, op.Extensions)
			if op.ID != tt.id || !slices.Equal(op.Tags, []string{tt.tag}) || action != tt.action || gvk != tt.gvk {
				t.Fatalf("got id %s tags %v action %s gvk %v, want %s %s %s %v", op.ID, op.Tags, action, gvk, tt.id, tt.tag, tt.action, tt.gvk)
			}
		})
	}
	t.Run("namespaces serve no deletecollection", func(t *testing.T) {
		if op := v2.Paths.Paths["/api/v1/namespaces"].Delete; op != nil {
			t.Fatalf("DELETE /api/v1/namespaces is described: %s", op.ID)
		}
	})
	t.Run("pod log answers text", func(t *testing.T) {
		p := v2.Paths.Paths["/api/v1/namespaces/{namespace}/pods/{name}/log"]
		op := p.Get
		if !slices.Equal(op.Produces, []string{"text/plain"}) || !op.Responses.StatusCodeResponses[200].Schema.Type.Contains("string") {
			t.Fatalf("log: produces %v, 200 %+v", op.Produces, op.Responses.StatusCodeResponses[200].Schema)
		}
		// The path's only operation: its parameters are the path's.
		if !hasQueryParam(v2, p.Parameters, "container") || !hasQueryParam(v2, p.Parameters, "follow") {
			t.Fatalf("log parameters: %+v", p.Parameters)
		}
	})
	t.Run("query parameters carry the option types' documentation", func(t *testing.T) {
		op := v2.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/daemonsets"].Post
		for _, p := range op.Parameters {
			if ref := p.Ref.String(); ref != "" {
				p = v2.Parameters[strings.TrimPrefix(ref, "#/parameters/")]
			}
			if p.Name == "fieldValidation" && !strings.Contains(p.Description, "Strict") {
				t.Fatalf("fieldValidation described as %q", p.Description)
			}
		}
	})
	t.Run("shared types list every served group version", func(t *testing.T) {
		gvks := gvkExtensionOf(t, ptr(v2.Definitions["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"]))
		for _, g := range []string{"", "apps", "coordination.k8s.io"} {
			if !slices.Contains(gvks, schema.GroupVersionKind{Group: g, Version: "v1", Kind: "DeleteOptions"}) {
				t.Fatalf("DeleteOptions GVKs %v lack group %q", gvks, g)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }

func appsGVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: kind}
}

func coreGVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Version: "v1", Kind: kind}
}

// TestSubresourceObject: a subresource's kind is found in the resource's group version,
// else in a served one, else in a v1 group, as kube-apiserver types them.
func TestSubresourceObject(t *testing.T) {
	reg := builtinRegistry(t)
	pods := reg.lookup("", "v1", "pods")
	daemonSets := reg.lookup("apps", "v1", "daemonsets")
	b := newRouteBuilder(reg.resources(), nil)
	tests := []struct {
		res     *resource
		kind    string
		want    schema.GroupVersionKind
		wantErr bool
	}{
		{pods, "", coreGVK("Pod"), false},
		{pods, "Binding", coreGVK("Binding"), false},
		{pods, "Eviction", schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, false},
		{daemonSets, "Scale", schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, false},
		{pods, "NoSuchKind", schema.GroupVersionKind{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			obj, gvk, err := b.subresourceObject(tt.res, &subresource{name: "x", kind: tt.kind})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %v, want an error", gvk)
				}
				return
			}
			if err != nil || gvk != tt.want || obj == nil {
				t.Fatalf("got %v %T %v, want %v", gvk, obj, err, tt.want)
			}
		})
	}
}

// TestOpenAPIDocsRebuild: the documents are planned once per registry revision, built on
// first use, and a kind registered while the server runs appears in them.
func TestOpenAPIDocsRebuild(t *testing.T) {
	reg := builtinRegistry(t)
	d := newOpenAPIDocs(reg)
	v2 := func() *spec.Swagger {
		t.Helper()
		lazy, _, _, err := d.current()
		if err != nil {
			t.Fatal(err)
		}
		doc, _, err := lazy.Get()
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	first := v2()
	if again := v2(); again != first {
		t.Fatal("the documents were rebuilt without a registry change")
	}
	const path = "/api/v1/namespaces/{namespace}/componentstatuses/{name}"
	if _, ok := first.Paths.Paths[path]; ok {
		t.Fatal("componentstatuses described before they are registered")
	}
	if err := reg.register(componentStatusResource()); err != nil {
		t.Fatal(err)
	}
	if _, ok := v2().Paths.Paths[path]; !ok {
		t.Fatal("v2 lacks componentstatuses after they were registered")
	}
	_, v3, schemas, err := d.current()
	if err != nil {
		t.Fatal(err)
	}
	core, err := v3.v3("api/v1")
	if err != nil {
		t.Fatal(err)
	}
	if p := core.Paths.Paths[path]; p == nil || p.Patch == nil {
		t.Fatal("v3 lacks componentstatuses after they were registered")
	}
	const name = "io.k8s.api.core.v1.ComponentStatus"
	if core.Components.Schemas[name] == nil {
		t.Fatal("v3 lacks the ComponentStatus schema")
	}
	if s, _, err := schemas.Get(); err != nil || s[name] == nil {
		t.Fatalf("the field managers' schemas lack %s (%v)", name, err)
	}
}

// TestOpenAPISchemasMatchDocuments: the schemas the field managers read, built without the
// documents, are the components of all the v3 documents, custom resources' included.
func TestOpenAPISchemasMatchDocuments(t *testing.T) {
	reg := builtinRegistry(t)
	if err := reg.register(componentStatusResource()); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gadget", ListKind: "GadgetList", Plural: "gadgets", Singular: "gadget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
	crd.Status.AcceptedNames = crd.Spec.Names
	cv, err := newCustomResourceVersion(crd, crd.Spec.Versions[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.register(customResource(cv)); err != nil {
		t.Fatal(err)
	}
	p, err := planOpenAPI(reg.resources())
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.schemas()
	if err != nil {
		t.Fatal(err)
	}
	_, v3 := buildDocs(t, reg)
	// A custom resource's document repeats ObjectMeta and the like; the built-in
	// documents' schemas of those are the ones kept.
	want := map[string]*spec.Schema{}
	for _, custom := range []bool{true, false} {
		for path, doc := range v3 {
			if (path == "apis/example.com/v1") == custom && doc.Components != nil {
				maps.Copy(want, doc.Components.Schemas)
			}
		}
	}
	if len(want) < 100 || want["com.example.v1.Gadget"] == nil {
		t.Fatalf("the documents hold %d schemas, Gadget %v: not the registry's", len(want), want["com.example.v1.Gadget"] != nil)
	}
	for name, s := range want {
		if !reflect.DeepEqual(got[name], s) {
			t.Errorf("schema %s differs from the documents'", name)
		}
	}
	for name := range got {
		if want[name] == nil {
			t.Errorf("schema %s is in no document", name)
		}
	}
}

// TestOpenAPIBuildsAtOnce: the v3 root builds every group version's document in goroutines
// of its own while the v2 document and the field managers' schemas may be built too; they
// share the plan's definitions (run with -race).
func TestOpenAPIBuildsAtOnce(t *testing.T) {
	d := newOpenAPIDocs(builtinRegistry(t))
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	v2, _, schemas, err := d.current()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() {
		rec := httptest.NewRecorder()
		d.v3Root.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi/v3", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "apis/apps/v1") {
			errs <- fmt.Errorf("v3 root: %d %.200s", rec.Code, rec.Body.String())
		}
	})
	wg.Go(func() {
		if doc, _, err := v2.Get(); err != nil || len(doc.Paths.Paths) == 0 {
			errs <- fmt.Errorf("v2: %w", err)
		}
	})
	wg.Go(func() {
		if s, _, err := schemas.Get(); err != nil || s["io.k8s.api.apps.v1.DaemonSet"] == nil {
			errs <- fmt.Errorf("schemas: %w", err)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestOpenAPIV3RootHashes: the v3 root, whose hashes come from documents built and dropped,
// names each group version's document by the hash handler3 gives it when it is served: a
// client following the root gets the document, cacheable, with no redirect, as JSON and as
// protobuf; and a registration changes the hash of the group version it adds to.
func TestOpenAPIV3RootHashes(t *testing.T) {
	reg := builtinRegistry(t)
	d := newOpenAPIDocs(reg)
	root := func() map[string]string {
		t.Helper()
		rec := httptest.NewRecorder()
		d.v3Root.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi/v3", nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Etag") == "" {
			t.Fatalf("v3 root: %d %v", rec.Code, rec.Header())
		}
		var index handler3.OpenAPIV3Discovery
		if err := json.Unmarshal(rec.Body.Bytes(), &index); err != nil {
			t.Fatal(err)
		}
		urls := map[string]string{}
		for path, gv := range index.Paths {
			urls[path] = gv.ServerRelativeURL
		}
		return urls
	}
	before := root()
	if len(before) < 10 || before["apis/apps/v1"] == "" {
		t.Fatalf("v3 root lists %v", before)
	}
	for path, u := range before {
		for _, accept := range []string{"application/json", "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"} {
			req := httptest.NewRequest(http.MethodGet, u, nil)
			req.Header.Set("Accept", accept)
			rec := httptest.NewRecorder()
			d.v3Serve.ServeHTTP(rec, req)
			hash := strings.TrimPrefix(u[strings.Index(u, "?"):], "?hash=")
			if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "public, immutable" ||
				rec.Header().Get("Etag") != strconv.Quote(hash) || rec.Body.Len() == 0 {
				t.Fatalf("GET %s as %s: %d %v", path, accept, rec.Code, rec.Header())
			}
		}
	}
	if err := reg.register(componentStatusResource()); err != nil {
		t.Fatal(err)
	}
	after := root()
	if after["api/v1"] == before["api/v1"] || after["apis/apps/v1"] != before["apis/apps/v1"] {
		t.Fatalf("after a registration in api/v1: %s -> %s, apps/v1 %s -> %s",
			before["api/v1"], after["api/v1"], before["apis/apps/v1"], after["apis/apps/v1"])
	}
}
