package widgetoperator_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"

	"example.com/widgetoperator"
)

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", Plural: "widgets", Singular: "widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec":   {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"observedSize": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
}

// until polls cond every 50ms for at most 30s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// installWidgets returns an administrator's client and its scheme (client-go's kinds and
// CustomResourceDefinitions), with the Widget definition installed and established.
func installWidgets(ctx context.Context, t *testing.T, env *testenv.Env) (client.Client, *runtime.Scheme) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(env.AdminConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	waitEstablished(ctx, t, c, "widgets.example.com")
	return c, scheme
}

// waitEstablished waits until the named definition's resources are served.
func waitEstablished(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	until(t, "definition "+name+" to be established", func() bool {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
			return false
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	})
}

// startManager runs mgr until the test ends, then stops it and reports what it returned.
func startManager(ctx context.Context, t *testing.T, cancel context.CancelFunc, mgr ctrl.Manager) {
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func TestWidgetOperator(t *testing.T) {
	ctrl.SetLogger(testr.New(t))
	// An API server and the controller-manager, whose garbage collector removes what a
	// deleted Widget owned.
	cm := configs.DefaultControllerManager()
	env := testenv.New(t, testenv.Config{ControllerManager: &cm})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, scheme := installWidgets(ctx, t, env)

	mgr, err := ctrl.NewManager(env.AdminConfig, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &widgetoperator.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(widgetoperator.FieldOwner)}
	if err := rec.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	startManager(ctx, t, cancel, mgr)

	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": "default"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	configMapSays := func(size string) func() bool {
		return func() bool {
			got := &corev1.ConfigMap{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "widget-w1"}, got); err != nil {
				return false
			}
			applied := false
			for _, e := range got.ManagedFields {
				applied = applied || (e.Manager == widgetoperator.FieldOwner && e.Operation == metav1.ManagedFieldsOperationApply)
			}
			return got.Data["size"] == size && applied
		}
	}
	until(t, "the operator's ConfigMap with size 3", configMapSays("3"))
	until(t, "the Widget's status", func() bool {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(widgetoperator.WidgetKind)
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "w1"}, got); err != nil {
			return false
		}
		size, _, _ := unstructured.NestedInt64(got.Object, "status", "observedSize")
		return size == 3
	})

	// The recorder writes events.k8s.io/v1 Events; kubectl describe reads core/v1 ones
	// about the object, which must be the same Events.
	until(t, "the operator's event, as kubectl describe finds it", func() bool {
		list := &corev1.EventList{}
		if err := c.List(ctx, list, client.InNamespace("default"), client.MatchingFields{"involvedObject.name": "w1"}); err != nil {
			t.Logf("listing events: %v", err)
			return false
		}
		for _, ev := range list.Items {
			if ev.Reason == "Applied" && ev.Message == "ConfigMap widget-w1 holds size 3" &&
				ev.ReportingController == widgetoperator.FieldOwner && ev.InvolvedObject.Kind == "Widget" {
				return true
			}
		}
		return false
	})

	if err := c.Patch(ctx, w, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":5}}`))); err != nil {
		t.Fatal(err)
	}
	until(t, "the ConfigMap to follow the Widget to size 5", configMapSays("5"))

	if err := c.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	until(t, "the garbage collector to delete the Widget's ConfigMap", func() bool {
		err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "widget-w1"}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err)
	})
}
