package apiserver

import (
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// countingConverter counts the conversions that reach the library's type converter.
type countingConverter struct {
	managedfields.TypeConverter
	calls atomic.Int64
}

func (c *countingConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	c.calls.Add(1)
	return c.TypeConverter.ObjectToTyped(obj, opts...)
}

// TestTrackWriteTrustsBuiltinObjects: the managed fields an update records are the same
// whether its objects are converted by the library's validating converter or, as trackWrite
// does for a built-in kind, without validation (and the stored one without a copy), also for
// objects with duplicate or missing list keys; and with trackWrite nothing is validated.
func TestTrackWriteTrustsBuiltinObjects(t *testing.T) {
	reg := builtinRegistry(t)
	fields := newFieldManagers(reg, newOpenAPIDocs(reg))
	s := &Server{fields: fields}
	pods := reg.lookup("", "v1", "pods")
	if _, _, err := fields.getWithConverter(pods, "status"); err != nil {
		t.Fatal(err)
	}
	library := fields.converter.TypeConverter
	counting := &countingConverter{TypeConverter: library}
	fields.converter = &trustingConverter{TypeConverter: counting}
	fields.managers = map[fieldManagerKey]*managedfields.FieldManager{}

	created := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
	}
	tests := []struct {
		name, subresource, manager string
		change                     func(p *corev1.Pod)
	}{
		{"status by the kubelet", "status", "kubelet", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}},
		{"labels by another manager", "", "kubectl", func(p *corev1.Pod) { p.Labels["tier"] = "web" }},
		{"image by the first manager", "", "creator", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "i:2" }},
		// Allowed (with a warning) by validation; the field manager tolerates duplicates.
		{"duplicate env names", "", "kubectl", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "2"}}
		}},
		// A keyed list item without its key: the bookkeeping fails and the library's
		// UpdateNoErrors resets the managed fields; so must trackWrite.
		{"env item without its key", "", "kubectl", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Value: "nameless"}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The stored object, with managed fields from its creation.
			stored := s.trackWrite(pods, "", &corev1.Pod{}, created.DeepCopy(), "creator").(*corev1.Pod)
			next := stored.DeepCopy()
			tc.change(next)

			fm, err := managedfields.NewDefaultFieldManager(library, Scheme, Scheme, Scheme,
				pods.gvk(), pods.gvk().GroupVersion(), tc.subresource, resetFields(pods, tc.subresource))
			if err != nil {
				t.Fatal(err)
			}
			live := stored.DeepCopy()
			live.SetGroupVersionKind(pods.gvk())
			want := next.DeepCopy()
			want.SetGroupVersionKind(pods.gvk())
			wantObj := fm.UpdateNoErrors(live, want, tc.manager).(*corev1.Pod)

			before := counting.calls.Load()
			got := s.trackWrite(pods, tc.subresource, stored.DeepCopy(), next.DeepCopy(), tc.manager).(*corev1.Pod)
			if calls := counting.calls.Load() - before; calls != 0 {
				t.Errorf("%d validating conversions for one update of a built-in kind; want 0", calls)
			}
			// The entries' times are the clock's at each update.
			for _, mf := range [][]metav1.ManagedFieldsEntry{got.ManagedFields, wantObj.ManagedFields} {
				for i := range mf {
					mf[i].Time = nil
				}
			}
			if !apiequality.Semantic.DeepEqual(got.ManagedFields, wantObj.ManagedFields) {
				t.Errorf("managedFields differ from the library's:\n got %+v\nwant %+v", got.ManagedFields, wantObj.ManagedFields)
			}
		})
	}
}

// BenchmarkTrackWritePodStatus is the managed-fields bookkeeping of a kubelet's pod status
// update, the API server's most frequent write in a rollout.
func BenchmarkTrackWritePodStatus(b *testing.B) {
	reg, err := newBuiltinRegistry(builtinDeps{})
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{fields: newFieldManagers(reg, newOpenAPIDocs(reg))}
	pods := reg.lookup("", "v1", "pods")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
	}
	stored := s.trackWrite(pods, "", &corev1.Pod{}, pod, "creator").(*corev1.Pod)
	next := stored.DeepCopy()
	next.Status.Phase = corev1.PodRunning
	next.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	b.ReportAllocs()
	for b.Loop() {
		s.trackWrite(pods, "status", stored.DeepCopy(), next.DeepCopy(), "kubelet")
	}
}
