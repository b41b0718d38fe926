// Package widgetoperator is a small operator written the way controller-runtime users
// write them, tested against miniplane's harness from a module of its own: it keeps one
// ConfigMap per Widget (a custom resource) with server-side apply, reports what it did in
// the Widget's status, and records an event (events.k8s.io/v1, through the manager's
// GetEventRecorder) each time it applies. Its admission webhooks, served by the manager's
// webhook server, default a Widget's size and refuse sizes that are too large.
package widgetoperator

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// WidgetKind is the custom resource the operator reconciles.
var WidgetKind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

// FieldOwner is the operator's field manager.
const FieldOwner = "widget-operator"

// Reconciler keeps the ConfigMap and the status of each Widget.
type Reconciler struct {
	Client client.Client
	// Recorder, when set, is told of every ConfigMap applied.
	Recorder recorder.EventRecorder
}

// Reconcile applies the Widget's ConfigMap and its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(WidgetKind)
	if err := r.Client.Get(ctx, req.NamespacedName, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
	controller := true
	cm := corev1ac.ConfigMap("widget-"+w.GetName(), w.GetNamespace()).
		WithData(map[string]string{"size": fmt.Sprint(size)}).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(WidgetKind.GroupVersion().String()).
			WithKind(WidgetKind.Kind).WithName(w.GetName()).WithUID(w.GetUID()).WithController(controller))
	if err := r.Client.Apply(ctx, cm, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, err
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(w, nil, corev1.EventTypeNormal, "Applied", "ApplyConfigMap", "ConfigMap %s holds size %d", *cm.Name, size)
	}
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": WidgetKind.GroupVersion().String(), "kind": WidgetKind.Kind,
		"metadata": map[string]any{"name": w.GetName(), "namespace": w.GetNamespace()},
		"status":   map[string]any{"observedSize": size},
	}}
	if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(status), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler for Widgets and the ConfigMaps they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(WidgetKind)
	return ctrl.NewControllerManagedBy(mgr).For(w).Owns(&corev1.ConfigMap{}).Named("widget").Complete(r)
}

// MaxSize is the largest size the operator's validating webhook admits.
const MaxSize = 10

// Default is the operator's mutating webhook: a Widget that gives no size gets size 1.
func Default(_ context.Context, req admission.Request) admission.Response {
	w := &unstructured.Unstructured{}
	if err := w.UnmarshalJSON(req.Object.Raw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if _, found, _ := unstructured.NestedInt64(w.Object, "spec", "size"); found {
		return admission.Allowed("")
	}
	if err := unstructured.SetNestedField(w.Object, int64(1), "spec", "size"); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	defaulted, err := w.MarshalJSON()
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, defaulted)
}

// Validate is the operator's validating webhook: sizes above MaxSize are refused.
func Validate(_ context.Context, req admission.Request) admission.Response {
	w := &unstructured.Unstructured{}
	if err := w.UnmarshalJSON(req.Object.Raw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size > MaxSize {
		return admission.Denied(fmt.Sprintf("spec.size %d is above %d", size, MaxSize))
	}
	return admission.Allowed("")
}

// SetupWebhooks serves Default at /default-widget and Validate at /validate-widget on the
// manager's webhook server.
func SetupWebhooks(mgr ctrl.Manager) {
	mgr.GetWebhookServer().Register("/default-widget", &admission.Webhook{Handler: admission.HandlerFunc(Default)})
	mgr.GetWebhookServer().Register("/validate-widget", &admission.Webhook{Handler: admission.HandlerFunc(Validate)})
}
