package component

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func trimTestPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "agent-x", Namespace: "default", UID: "u1", ResourceVersion: "7", Generation: 1,
			Labels:          map[string]string{"app": "agent", "controller-revision-hash": "abc"},
			Annotations:     map[string]string{"deprecated.daemonset.template.generation": "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds1"}},
			Finalizers:      []string{"example.com/keep"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kubeletstub", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:   "node-1",
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/unschedulable",
				Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// TestTrimForCache: only managedFields go; everything a controller reads (labels,
// annotations, owners, finalizers, spec, status) stays, and what is not an object passes.
func TestTrimForCache(t *testing.T) {
	want := trimTestPod()
	want.ManagedFields = nil
	tombstone := cache.DeletedFinalStateUnknown{Key: "default/agent-x", Obj: trimTestPod()}
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"pod", trimTestPod(), want},
		{"pod without managedFields", want.DeepCopy(), want},
		{"node", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: trimTestPod().ManagedFields},
			Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}},
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}}},
		{"tombstone", tombstone, tombstone},
		{"not an object", "key", "key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TrimForCache(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("TrimForCache = %#v, want %#v", got, tt.want)
			}
		})
	}
}
