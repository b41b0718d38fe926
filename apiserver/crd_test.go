package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// widgetCRD defines Widgets: a schema with a default, an enum, a minimum and a CEL rule,
// the status and scale subresources, printer columns and a selectable field.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	minimum := float64(1)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", Plural: "widgets", Singular: "widget", ShortNames: []string{"wd"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Color", Type: "string", JSONPath: ".spec.color"}},
				SelectableFields:         []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"size":     {Type: "integer", Minimum: &minimum, Default: &apiextensionsv1.JSON{Raw: []byte("3")}},
								"color":    {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"blue"`)}}},
								"replicas": {Type: "integer"},
							},
							XValidations: apiextensionsv1.ValidationRules{{Rule: "self.size < 100", Message: "size must be below 100"}},
						},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
}

func widget(name, color string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"color": color},
	}}
	if size != 0 {
		_ = unstructured.SetNestedField(u.Object, size, "spec", "size")
	}
	return u
}

// installCRD creates crd and waits until its custom resources are served.
func installCRD(t *testing.T, env *testenv.Env, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx := testCtx(t)
	c, err := apiextensionsclient.NewForConfig(env.AdminConfig)
	check(t, err)
	_, err = c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	check(t, err)
	var got *apiextensionsv1.CustomResourceDefinition
	start := time.Now()
	eventually(t, "the definition to be established", func() (bool, error) {
		got, err = c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %+v", got.Status.Conditions)
	})
	t.Logf("%s established after %v", crd.Name, time.Since(start))
	return got
}

func TestCustomResources(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	crd := installCRD(t, env, widgetCRD())
	if crd.Status.AcceptedNames.Plural != "widgets" || strings.Join(crd.Status.StoredVersions, ",") != "v1" {
		t.Errorf("status %+v", crd.Status)
	}
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	w := dyn.Resource(widgets).Namespace("default")

	// Defaults applied, unknown fields pruned.
	in := widget("w1", "red", 0)
	_ = unstructured.SetNestedField(in.Object, "x", "spec", "bogus")
	created, err := w.Create(ctx, in, metav1.CreateOptions{FieldValidation: "Ignore"})
	check(t, err)
	if size, _, _ := unstructured.NestedInt64(created.Object, "spec", "size"); size != 3 {
		t.Errorf("default size %d, want 3", size)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "spec", "bogus"); found {
		t.Errorf("an undeclared field was kept: %v", created.Object["spec"])
	}
	_, err = w.Create(ctx, func() *unstructured.Unstructured {
		u := widget("w9", "red", 0)
		u.Object["spec"].(map[string]any)["bogus"] = 1
		return u
	}(),
		metav1.CreateOptions{FieldValidation: "Strict"})
	if se := expectStatus(t, err, 400, metav1.StatusReasonBadRequest); !strings.Contains(se.ErrStatus.Message, `unknown field "spec.bogus"`) {
		t.Errorf("strict unknown field: %q", se.ErrStatus.Message)
	}

	// Schema and CEL validation, every problem at once.
	_, err = w.Create(ctx, widget("bad", "green", 200), metav1.CreateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "spec,spec.color" {
		t.Errorf("causes %v", got)
	}

	// Status is written only through /status; spec changes count for the generation.
	created.Object["status"] = map[string]any{"replicas": int64(7)}
	updated, err := w.Update(ctx, created, metav1.UpdateOptions{})
	check(t, err)
	if _, found, _ := unstructured.NestedFieldNoCopy(updated.Object, "status"); found || updated.GetGeneration() != 1 {
		t.Errorf("a main-resource write set status (%v) or moved the generation (%d)", updated.Object["status"], updated.GetGeneration())
	}
	updated.Object["status"] = map[string]any{"replicas": int64(7)}
	st, err := w.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	check(t, err)
	if r, _, _ := unstructured.NestedInt64(st.Object, "status", "replicas"); r != 7 || st.GetGeneration() != 1 {
		t.Errorf("after the status write: replicas %d generation %d", r, st.GetGeneration())
	}
	patched, err := w.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"size":5}}`), metav1.PatchOptions{})
	check(t, err)
	if patched.GetGeneration() != 2 {
		t.Errorf("generation %d after a spec change, want 2", patched.GetGeneration())
	}
	_, err = w.Patch(ctx, "w1", types.StrategicMergePatchType, []byte(`{"spec":{"size":6}}`), metav1.PatchOptions{})
	expectStatus(t, err, 415, metav1.StatusReasonUnsupportedMediaType)

	// Scale.
	scale, err := w.Get(ctx, "w1", metav1.GetOptions{}, "scale")
	check(t, err)
	if r, _, _ := unstructured.NestedInt64(scale.Object, "status", "replicas"); r != 7 || scale.GetKind() != "Scale" {
		t.Errorf("scale %v", scale.Object)
	}

	// Field and label selectors, and a watch from a resourceVersion.
	_, err = w.Create(ctx, widget("w2", "blue", 4), metav1.CreateOptions{})
	check(t, err)
	blue, err := w.List(ctx, metav1.ListOptions{FieldSelector: "spec.color=blue"})
	check(t, err)
	if len(blue.Items) != 1 || blue.Items[0].GetName() != "w2" {
		t.Errorf("spec.color=blue: %v", names(blue))
	}
	watcher, err := w.Watch(ctx, metav1.ListOptions{ResourceVersion: blue.GetResourceVersion()})
	check(t, err)
	defer watcher.Stop()
	check(t, w.Delete(ctx, "w2", metav1.DeleteOptions{}))
	select {
	case ev := <-watcher.ResultChan():
		if ev.Type != watch.Deleted {
			t.Errorf("watch event %s, want DELETED", ev.Type)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no watch event")
	}

	// Server-side apply on a custom resource, with a conflict.
	apply := func(manager, color string, force bool) error {
		data := fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w3"},"spec":{"color":%q}}`, color)
		_, err := w.Patch(ctx, "w3", types.ApplyPatchType, []byte(data), metav1.PatchOptions{FieldManager: manager, Force: &force})
		return err
	}
	check(t, apply("team-a", "red", false))
	if se := expectStatus(t, apply("team-b", "blue", false), 409, metav1.StatusReasonConflict); !strings.Contains(se.ErrStatus.Message, `conflict with "team-a"`) {
		t.Errorf("conflict %q", se.ErrStatus.Message)
	}
	check(t, apply("team-b", "blue", true))

	// Deleting the definition deletes its custom resources and stops serving them.
	c, err := apiextensionsclient.NewForConfig(env.AdminConfig)
	check(t, err)
	check(t, c.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{}))
	eventually(t, "the definition to go", func() (bool, error) {
		_, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if _, err := w.List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("widgets still served after their definition went: %v", err)
	}
	installCRD(t, env, widgetCRD())
	left, err := w.List(ctx, metav1.ListOptions{})
	check(t, err)
	if len(left.Items) != 0 {
		t.Errorf("widgets of the deleted definition came back: %v", names(left))
	}
}

func names(l *unstructured.UnstructuredList) []string {
	var out []string
	for _, it := range l.Items {
		out = append(out, it.GetName())
	}
	return out
}

func TestCRDValidation(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c, err := apiextensionsclient.NewForConfig(env.AdminConfig)
	check(t, err)
	for _, tc := range []struct {
		name   string
		change func(*apiextensionsv1.CustomResourceDefinition)
		want   string
	}{
		{"name not plural.group", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Name = "widget.example.com" }, "metadata.name"},
		{"two storage versions", func(crd *apiextensionsv1.CustomResourceDefinition) {
			v2 := crd.Spec.Versions[0]
			v2.Name = "v2"
			crd.Spec.Versions = append(crd.Spec.Versions, v2)
		}, "spec.versions"},
		{"no schema", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Versions[0].Schema = nil }, "spec.versions[0].schema.openAPIV3Schema"},
		{"not structural", func(crd *apiextensionsv1.CustomResourceDefinition) {
			s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			s.Type = ""
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = s
		}, "spec.validation.openAPIV3Schema.properties[spec].type"},
		{"conversion webhook without a client config", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"}}}
		}, "spec.conversion.webhook"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := widgetCRD()
			tc.change(crd)
			_, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
			got := causeFields(t, err)
			if !strings.Contains(strings.Join(got, " "), tc.want) {
				t.Errorf("causes %v, want one on %s", got, tc.want)
			}
		})
	}
}

// TestCustomResourcesSurviveRestart restarts the API server on the same data: the
// definition is served again from the start, with its objects.
func TestCustomResourcesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() *testenv.Env {
		env, err := testenv.Start(context.Background(), testenv.Config{DataDir: dir, UnsafeNoFsync: true, Logger: quietLogger()})
		check(t, err)
		return env
	}
	env := start()
	installCRD(t, env, widgetCRD())
	ctx := testCtx(t)
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	_, err = dyn.Resource(widgets).Namespace("default").Create(ctx, widget("keep", "red", 2), metav1.CreateOptions{})
	check(t, err)
	env.Stop()

	env = start()
	defer env.Stop()
	dyn, err = dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	got, err := dyn.Resource(widgets).Namespace("default").Get(ctx, "keep", metav1.GetOptions{})
	check(t, err)
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 2 {
		t.Errorf("size %d after the restart", size)
	}
}

// TestCustomResourcesOnTwoServers runs a second API server on the first's etcd: a
// definition created through one is served by the other.
func TestCustomResourcesOnTwoServers(t *testing.T) {
	first := newEnv(t)
	cfg := configs.DefaultAPIServer()
	cfg.EtcdServers = first.EtcdEndpoints()
	second := testenv.New(t, testenv.Config{APIServer: &cfg})
	installCRD(t, first, widgetCRD())
	ctx := testCtx(t)
	dyn, err := dynamic.NewForConfig(second.AdminConfig)
	check(t, err)
	eventually(t, "widgets on the second server", func() (bool, error) {
		_, err := dyn.Resource(widgets).Namespace("default").Create(ctx, widget("both", "blue", 1), metav1.CreateOptions{})
		return err == nil, err
	})
	dyn1, err := dynamic.NewForConfig(first.AdminConfig)
	check(t, err)
	_, err = dyn1.Resource(widgets).Namespace("default").Get(ctx, "both", metav1.GetOptions{})
	check(t, err)
}

// TestCustomResourceKeys: a definition's objects are kept under their group, apart from a
// built-in kind of the same plural (Knative's services.serving.knative.dev beside core
// Services), and those an earlier miniplane kept without the group are moved there when the
// definition is served; another group's objects under the old prefix stay.
func TestCustomResourceKeys(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: env.EtcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	check(t, err)
	defer cli.Close()
	// What an earlier miniplane stored: a gadget without the group in its key, and another
	// group's object of the same plural.
	_, err = cli.Put(ctx, "/registry/gadgets/default/old",
		`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"old","namespace":"default","uid":"4a9c2f1e-0000-4000-8000-000000000001","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"color":"red"}}`)
	check(t, err)
	_, err = cli.Put(ctx, "/registry/gadgets/default/other",
		`{"apiVersion":"other.example.org/v1","kind":"Gadget","metadata":{"name":"other","namespace":"default","uid":"4a9c2f1e-0000-4000-8000-000000000002"}}`)
	check(t, err)
	installCRD(t, env, gadgetCRD(nil))
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	gadgets := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}).Namespace("default")
	got, err := gadgets.Get(ctx, "old", metav1.GetOptions{})
	check(t, err)
	if color, _, _ := unstructured.NestedString(got.Object, "spec", "color"); color != "red" || got.GetUID() != "4a9c2f1e-0000-4000-8000-000000000001" {
		t.Errorf("the moved gadget: %v", got.Object)
	}
	for key, want := range map[string]int64{
		"/registry/gadgets/default/old":             0,
		"/registry/example.com/gadgets/default/old": 1,
		"/registry/gadgets/default/other":           1,
	} {
		resp, err := cli.Get(ctx, key)
		check(t, err)
		if resp.Count != want {
			t.Errorf("etcd holds %d objects at %s, want %d", resp.Count, key, want)
		}
	}

	// A definition with a built-in plural.
	crd := gadgetCRD(nil)
	crd.Name, crd.Spec.Group = "services.serving.example.dev", "serving.example.dev"
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Kind: "Service", Plural: "services", Singular: "service"}
	installCRD(t, env, crd)
	_, err = env.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	check(t, err)
	custom := gadget("v1", "hello", map[string]any{"image": "example/hello"})
	custom.SetAPIVersion("serving.example.dev/v1")
	custom.SetKind("Service")
	services := dyn.Resource(schema.GroupVersionResource{Group: "serving.example.dev", Version: "v1", Resource: "services"}).Namespace("default")
	eventually(t, "a custom Service named as a core one", func() (bool, error) {
		_, err := services.Create(ctx, custom, metav1.CreateOptions{})
		return err == nil, err
	})
	core, err := env.Client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	check(t, err)
	var coreNames []string
	for _, svc := range core.Items {
		coreNames = append(coreNames, svc.Name)
	}
	if strings.Join(coreNames, " ") != "hello kubernetes" {
		t.Errorf("core Services in default: %v, want hello and kubernetes", coreNames)
	}
	if svc, err := env.Client.CoreV1().Services("default").Get(ctx, "hello", metav1.GetOptions{}); err != nil || svc.Spec.Ports[0].Port != 80 {
		t.Errorf("core Service hello: %v %v", svc, err)
	}
	list, err := services.List(ctx, metav1.ListOptions{})
	check(t, err)
	if len(list.Items) != 1 || list.Items[0].GetKind() != "Service" || list.Items[0].GetAPIVersion() != "serving.example.dev/v1" {
		t.Errorf("custom Services in default: %v", list.Items)
	}
}
