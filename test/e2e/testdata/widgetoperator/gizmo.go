package widgetoperator

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
)

// Gizmo is a kind served in two versions, the way kubebuilder lays out an API that
// changed: v2 is the hub (spec.paint.colour), v1 a spoke that converts to and from it
// (spec.color). Its conversion webhook is controller-runtime's, served at /convert.
var (
	GizmoV1Kind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gizmo"}
	GizmoV2Kind = schema.GroupVersionKind{Group: "example.com", Version: "v2", Kind: "Gizmo"}
)

// GizmoV1 is a Gizmo in example.com/v1.
type GizmoV1 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GizmoV1Spec `json:"spec,omitempty"`
}

// GizmoV1Spec names the colour with spec.color.
type GizmoV1Spec struct {
	Color string `json:"color,omitempty"`
}

// GizmoV2 is a Gizmo in example.com/v2, the hub.
type GizmoV2 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GizmoV2Spec `json:"spec,omitempty"`
}

// GizmoV2Spec moved the colour to spec.paint.colour.
type GizmoV2Spec struct {
	Paint Paint `json:"paint,omitempty"`
}

// Paint is a Gizmo v2's finish.
type Paint struct {
	Colour string `json:"colour,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (g *GizmoV1) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (g *GizmoV2) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// Hub marks v2 as the version the others convert through.
func (*GizmoV2) Hub() {}

// ConvertTo converts this v1 Gizmo to the hub.
func (g *GizmoV1) ConvertTo(dst conversion.Hub) error {
	hub := dst.(*GizmoV2)
	hub.ObjectMeta = g.ObjectMeta
	hub.Spec.Paint.Colour = g.Spec.Color
	return nil
}

// ConvertFrom converts the hub to this v1 Gizmo.
func (g *GizmoV1) ConvertFrom(src conversion.Hub) error {
	hub := src.(*GizmoV2)
	g.ObjectMeta = hub.ObjectMeta
	g.Spec.Color = hub.Spec.Paint.Colour
	return nil
}

// AddGizmos registers both versions in scheme.
func AddGizmos(scheme *runtime.Scheme) error {
	scheme.AddKnownTypeWithName(GizmoV1Kind, &GizmoV1{})
	scheme.AddKnownTypeWithName(GizmoV2Kind, &GizmoV2{})
	metav1.AddToGroupVersion(scheme, GizmoV1Kind.GroupVersion())
	metav1.AddToGroupVersion(scheme, GizmoV2Kind.GroupVersion())
	return nil
}

// SetupConversion serves the Gizmo conversion webhook on the manager's webhook server, as
// a kubebuilder project's webhook setup does for a convertible type.
func SetupConversion(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &GizmoV2{}).Complete()
}
