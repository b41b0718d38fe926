package podcondition

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Minute)
)

func disruption(status corev1.ConditionStatus, reason string, at time.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.DisruptionTarget, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)}
}

func TestSet(t *testing.T) {
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}
	tests := []struct {
		name        string
		before      []corev1.PodCondition
		set         corev1.PodCondition
		wantChanged bool
		want        []corev1.PodCondition
	}{
		{name: "new condition is appended, stamped now",
			before: []corev1.PodCondition{ready}, set: disruption(corev1.ConditionTrue, "R", time.Time{}),
			wantChanged: true, want: []corev1.PodCondition{ready, disruption(corev1.ConditionTrue, "R", t1)}},
		{name: "same status keeps its transition time and reports no change",
			before: []corev1.PodCondition{disruption(corev1.ConditionTrue, "R", t0)}, set: disruption(corev1.ConditionTrue, "R", time.Time{}),
			want: []corev1.PodCondition{disruption(corev1.ConditionTrue, "R", t0)}},
		{name: "same status, new reason: changed, transition time kept",
			before: []corev1.PodCondition{disruption(corev1.ConditionTrue, "R", t0)}, set: disruption(corev1.ConditionTrue, "S", time.Time{}),
			wantChanged: true, want: []corev1.PodCondition{disruption(corev1.ConditionTrue, "S", t0)}},
		{name: "status flips: transition time moves",
			before: []corev1.PodCondition{disruption(corev1.ConditionFalse, "R", t0)}, set: disruption(corev1.ConditionTrue, "R", time.Time{}),
			wantChanged: true, want: []corev1.PodCondition{disruption(corev1.ConditionTrue, "R", t1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := corev1.PodStatus{Conditions: append([]corev1.PodCondition(nil), tt.before...)}
			if got := Set(&status, tt.set, t1); got != tt.wantChanged {
				t.Errorf("changed = %v, want %v", got, tt.wantChanged)
			}
			if len(status.Conditions) != len(tt.want) {
				t.Fatalf("conditions %+v, want %+v", status.Conditions, tt.want)
			}
			for i := range tt.want {
				g, w := status.Conditions[i], tt.want[i]
				if g.Type != w.Type || g.Status != w.Status || g.Reason != w.Reason || !g.LastTransitionTime.Equal(&w.LastTransitionTime) {
					t.Errorf("condition %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestStatusPatchCarriesTheUID(t *testing.T) {
	old := corev1.PodStatus{Phase: corev1.PodRunning}
	patch, err := statusPatch("u-1", old, old)
	if err != nil {
		t.Fatal(err)
	}
	if string(patch) != `{"metadata":{"uid":"u-1"}}` {
		t.Errorf("patch of an unchanged status = %s", patch)
	}
}

func TestPatchStatus(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	client := fake.NewClientset(pod)
	status := *pod.Status.DeepCopy()
	status.Phase = corev1.PodFailed
	Set(&status, disruption(corev1.ConditionTrue, ReasonDeletionByPodGC, time.Time{}), t1)
	if err := PatchStatus(context.Background(), client, pod, status); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodFailed || len(got.Status.Conditions) != 2 ||
		got.Status.Conditions[1].Type != corev1.DisruptionTarget || got.Status.Conditions[1].Reason != ReasonDeletionByPodGC {
		t.Errorf("status after the patch: %+v", got.Status)
	}
}
