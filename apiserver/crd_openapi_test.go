package apiserver_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/dynamic"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// gadgetSchema has what the v2 document must keep (required, enum, pattern, nested
// arrays) and what it must drop (a default).
func gadgetSchema() *apiextensionsv1.JSONSchemaProps {
	return &apiextensionsv1.JSONSchemaProps{
		Type: "object", Description: "Gadget for testing",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object", Description: "Specification of Gadget",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"parts": {Type: "array", Description: "Parts.", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", Required: []string{"name"},
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"name":  {Type: "string", Description: "Name of the part."},
							"state": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"Great"`)}, {Raw: []byte(`"Down"`)}}},
							"kind":  {Type: "string", Pattern: "in-tree|out-of-tree"},
							"tags":  {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}},
						},
					}}},
					"size": {Type: "integer", Default: &apiextensionsv1.JSON{Raw: []byte("3")}},
				}},
		},
	}
}

// TestCustomResourceOpenAPIV2: the v2 document publishes a custom resource's schema as
// kube-apiserver does: the definition's own schema, value validations included, without
// defaults; compared the way upstream's conformance specs compare it.
func TestCustomResourceOpenAPIV2(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gadget", Plural: "gadgets", Singular: "gadget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: gadgetSchema()}}},
		},
	}
	installCRD(t, env, crd)

	want := gadgetSchema()
	delete(want.Properties["spec"].Properties, "size")
	size := want.Properties["spec"].Properties
	size["size"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
	var internal apiextensions.JSONSchemaProps
	check(t, apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(want, &internal, nil))
	var converted spec.Schema
	check(t, validation.ConvertJSONSchemaPropsWithPostProcess(&internal, &converted,
		validation.StripUnsupportedFormatsPostProcessorForVersion(environment.DefaultCompatibilityVersion())))
	data, err := json.Marshal(converted)
	check(t, err)
	var expect spec.Schema
	check(t, json.Unmarshal(data, &expect))

	const name = "com.example.v1.Gadget"
	eventually(t, "the definition in /openapi/v2", func() (bool, error) {
		body, err := env.Client.Discovery().RESTClient().Get().AbsPath("/openapi/v2").
			SetHeader("Accept", "application/json").DoRaw(testCtx(t))
		if err != nil {
			return false, err
		}
		var doc spec.Swagger
		if err := json.Unmarshal(body, &doc); err != nil {
			return false, err
		}
		got, ok := doc.Definitions[name]
		if !ok {
			return false, nil
		}
		// What the server adds around the schema (upstream's spec drops the same).
		for _, p := range []string{"metadata", "apiVersion", "kind"} {
			delete(got.Properties, p)
		}
		delete(got.Extensions, "x-kubernetes-group-version-kind")
		delete(got.Extensions, "x-kubernetes-selectable-fields")
		if !apiequality.Semantic.DeepEqual(expect, got) {
			g, _ := json.Marshal(got)
			t.Fatalf("definition %s:\n got  %s\n want %s", name, g, data)
		}
		return true, nil
	})
}

// TestCustomResourceDefaultsOnRead: a default added to a definition after an object was
// stored shows in every read of that object (from etcd and from the watch cache, one by
// one and in lists), as kube-apiserver defaults what it decodes; the stored bytes are not
// rewritten for it.
func TestCustomResourceDefaultsOnRead(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	crd := widgetCRD()
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Properties["shape"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	installCRD(t, env, crd)
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	wc := dyn.Resource(widgets).Namespace("default")
	created, err := wc.Create(ctx, widget("w", "red", 0), metav1.CreateOptions{})
	check(t, err)
	if _, found, _ := unstructured.NestedString(created.Object, "spec", "shape"); found {
		t.Fatalf("shape set before it has a default: %v", created.Object["spec"])
	}

	ext, err := apiextensionsclient.NewForConfig(env.AdminConfig)
	check(t, err)
	_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, crd.Name, types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/shape/default","value":"round"}]`), metav1.PatchOptions{})
	check(t, err)

	reads := map[string]func() (*unstructured.Unstructured, error){
		"get from etcd": func() (*unstructured.Unstructured, error) { return wc.Get(ctx, "w", metav1.GetOptions{}) },
		"get from the cache": func() (*unstructured.Unstructured, error) {
			return wc.Get(ctx, "w", metav1.GetOptions{ResourceVersion: "0"})
		},
		"list from the cache": func() (*unstructured.Unstructured, error) {
			l, err := wc.List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) != 1 {
				return nil, fmt.Errorf("list: %w (%d items)", err, len(l.Items))
			}
			return &l.Items[0], nil
		},
		"list from etcd": func() (*unstructured.Unstructured, error) {
			l, err := wc.List(ctx, metav1.ListOptions{Limit: 10})
			if err != nil || len(l.Items) != 1 {
				return nil, fmt.Errorf("list: %w", err)
			}
			return &l.Items[0], nil
		},
	}
	expectShape := func(want string) {
		t.Helper()
		for name, read := range reads {
			eventually(t, name+" to show the default "+want, func() (bool, error) {
				u, err := read()
				if apierrors.IsNotFound(err) {
					// The definition's new schema replaces the old without a gap.
					t.Fatalf("%s while the definition changes: %v", name, err)
				}
				if err != nil {
					return false, err
				}
				shape, _, _ := unstructured.NestedString(u.Object, "spec", "shape")
				if u.GetResourceVersion() != created.GetResourceVersion() {
					t.Fatalf("%s: resourceVersion %s, want the stored %s (defaulting on read writes nothing)", name, u.GetResourceVersion(), created.GetResourceVersion())
				}
				return shape == want, fmt.Errorf("spec %v", u.Object["spec"])
			})
		}
	}
	expectShape("round")
	_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, crd.Name, types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/shape/default","value":"square"}]`), metav1.PatchOptions{})
	check(t, err)
	expectShape("square")
}
