package apiserver

import (
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestNewestDefault: of several classes marked default, the newest wins, and of equally new
// ones the first by name; unmarked classes never do.
func TestNewestDefault(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	class := func(name string, created time.Time, isDefault string) runtime.Object {
		ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
		if isDefault != "" {
			ic.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: isDefault}
		}
		return ic
	}
	for _, tc := range []struct {
		name    string
		classes []runtime.Object
		want    string
	}{
		{"none", nil, ""},
		{"none marked", []runtime.Object{class("a", t0, ""), class("b", t0, "false")}, ""},
		{"one marked", []runtime.Object{class("a", t0, ""), class("b", t0, "true")}, "b"},
		{"the newest", []runtime.Object{class("new", t0.Add(time.Second), "true"), class("old", t0, "true"),
			class("newest-unmarked", t0.Add(time.Hour), "")}, "new"},
		{"a tie goes by name", []runtime.Object{class("b", t0, "true"), class("a", t0, "true")}, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newestDefault(tc.classes, networkingv1.AnnotationIsDefaultIngressClass); got != tc.want {
				t.Errorf("newestDefault = %q, want %q", got, tc.want)
			}
		})
	}
}
