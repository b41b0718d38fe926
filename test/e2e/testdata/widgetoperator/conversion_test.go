package widgetoperator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr/testr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/miniplane/miniplane/test/testenv"

	"example.com/widgetoperator"
)

// TestGizmoConversionWebhook: a kind served in two versions whose conversion webhook is
// controller-runtime's (hub and spoke, served on loopback and registered by url, as envtest
// registers it) is stored in its storage version and read in either: a Gizmo written in v1
// reads in v2 with the field moved, and one written in v2 reads in v1.
func TestGizmoConversionWebhook(t *testing.T) {
	ctrl.SetLogger(testr.New(t))
	env := testenv.New(t, testenv.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, widgetoperator.AddGizmos} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(env.AdminConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	certDir := t.TempDir()
	caBundle := servingCert(t, certDir)
	port := freePort(t)
	mgr, err := ctrl.NewManager(env.AdminConfig, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})})
	if err != nil {
		t.Fatal(err)
	}
	if err := widgetoperator.SetupConversion(mgr); err != nil {
		t.Fatal(err)
	}
	startManager(ctx, t, cancel, mgr)
	until(t, "the webhook server to serve", func() bool { return mgr.GetWebhookServer().StartedChecker()(nil) == nil })

	open := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)}}}}
	if err := c.Create(ctx, &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gizmo", ListKind: "GizmoList", Plural: "gizmos", Singular: "gizmo"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: open},
				{Name: "v2", Served: true, Schema: open},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d/convert", port)), CABundle: caBundle}}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(ctx, t, c, "gizmos.example.com")

	old := &widgetoperator.GizmoV1{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default"}, Spec: widgetoperator.GizmoV1Spec{Color: "red"}}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	asV2 := &widgetoperator.GizmoV2{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "old"}, asV2); err != nil {
		t.Fatal(err)
	}
	if asV2.Spec.Paint.Colour != "red" || asV2.UID != old.UID {
		t.Errorf("the v1 Gizmo read in v2: %+v", asV2)
	}

	fresh := &widgetoperator.GizmoV2{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "default"}, Spec: widgetoperator.GizmoV2Spec{Paint: widgetoperator.Paint{Colour: "blue"}}}
	if err := c.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	asV1 := &widgetoperator.GizmoV1{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "new"}, asV1); err != nil {
		t.Fatal(err)
	}
	if asV1.Spec.Color != "blue" {
		t.Errorf("the v2 Gizmo read in v1: %+v", asV1)
	}
}
