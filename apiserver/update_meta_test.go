package apiserver

import (
	"testing"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestMetaUpdateMayBeInvalid: the pre-check must say "may be invalid" for every change the
// library's ValidateObjectMetaAccessorUpdate rejects, and let an update that changes
// nothing it guards skip it.
func TestMetaUpdateMayBeInvalid(t *testing.T) {
	created := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	old := metav1.ObjectMeta{
		Name: "a", Namespace: "ns", UID: "u1", ResourceVersion: "7", Generation: 3,
		CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{"k": "v"},
		Finalizers: []string{"f"},
	}
	deleting := *old.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: created.Add(time.Hour)}
	deleting.DeletionGracePeriodSeconds = ptr(int64(30))

	tests := []struct {
		name     string
		old      metav1.ObjectMeta
		change   func(m *metav1.ObjectMeta)
		mayFail  bool // what the pre-check must answer
		libFails bool // what the library answers, checked too
	}{
		{"nothing", old, func(*metav1.ObjectMeta) {}, false, false},
		{"labels and annotations", old, func(m *metav1.ObjectMeta) {
			m.Labels = map[string]string{"k": "w"}
			m.Annotations = map[string]string{"a": "b"}
		}, false, false},
		{"creation time in another zone", old, func(m *metav1.ObjectMeta) {
			m.CreationTimestamp = metav1.NewTime(created.In(time.FixedZone("x", 3600)))
		}, false, false},
		{"deleting, nothing else", deleting, func(*metav1.ObjectMeta) {}, true, false},
		{"name", old, func(m *metav1.ObjectMeta) { m.Name = "b" }, true, true},
		{"namespace", old, func(m *metav1.ObjectMeta) { m.Namespace = "other" }, true, true},
		{"uid", old, func(m *metav1.ObjectMeta) { m.UID = "u2" }, true, true},
		{"creation time", old, func(m *metav1.ObjectMeta) {
			m.CreationTimestamp = metav1.NewTime(created.Add(time.Second))
		}, true, true},
		{"deletion time set", old, func(m *metav1.ObjectMeta) {
			m.DeletionTimestamp = &metav1.Time{Time: created}
		}, true, true},
		{"deletion time moved", deleting, func(m *metav1.ObjectMeta) {
			m.DeletionTimestamp = &metav1.Time{Time: created}
		}, true, true},
		{"grace period", deleting, func(m *metav1.ObjectMeta) {
			m.DeletionGracePeriodSeconds = ptr(int64(0))
		}, true, true},
		{"grace period dropped", deleting, func(m *metav1.ObjectMeta) { m.DeletionGracePeriodSeconds = nil }, true, true},
		{"finalizer added while deleting", deleting, func(m *metav1.ObjectMeta) {
			m.Finalizers = append(m.Finalizers, "g")
		}, true, true},
		{"no resourceVersion", old, func(m *metav1.ObjectMeta) { m.ResourceVersion = "" }, true, true},
		{"generation decremented", old, func(m *metav1.ObjectMeta) { m.Generation = 2 }, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			om := tc.old.DeepCopy()
			nm := tc.old.DeepCopy()
			tc.change(nm)
			errs := apivalidation.ValidateObjectMetaAccessorUpdate(nm, om, field.NewPath("metadata"))
			if got := len(errs) > 0; got != tc.libFails {
				t.Fatalf("library found %v, the test expects failing=%v: fix the table", errs, tc.libFails)
			}
			if got := metaUpdateMayBeInvalid(nm, om); got != tc.mayFail {
				t.Errorf("metaUpdateMayBeInvalid = %v, want %v (library: %v)", got, tc.mayFail, errs)
			}
		})
	}
}
