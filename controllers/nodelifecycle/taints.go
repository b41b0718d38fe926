package nodelifecycle

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// managedTaint is a (key, effect) the controller adds and removes; taints with other keys
// or effects belong to users and are never touched.
type managedTaint struct {
	key    string
	effect corev1.TaintEffect
}

// managedTaints lists every taint the controller owns, in the order it adds them.
var managedTaints = []managedTaint{
	{corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule},
	{corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute},
	{corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule},
	{corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute},
	{corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule},
	{corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule},
	{corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule},
	{corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule},
	{corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule},
}

func isManaged(t corev1.Taint) bool {
	for _, m := range managedTaints {
		if m.key == t.Key && m.effect == t.Effect {
			return true
		}
	}
	return false
}

// desiredTaints returns the managed taints node's conditions and spec call for.
func desiredTaints(node *corev1.Node) map[managedTaint]bool {
	want := map[managedTaint]bool{}
	conditionIs := func(t corev1.NodeConditionType, s corev1.ConditionStatus) bool {
		c := findCondition(node.Status.Conditions, t)
		return c != nil && c.Status == s
	}
	switch {
	case conditionIs(corev1.NodeReady, corev1.ConditionFalse):
		want[managedTaint{corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule}] = true
		want[managedTaint{corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute}] = true
	case conditionIs(corev1.NodeReady, corev1.ConditionUnknown):
		want[managedTaint{corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule}] = true
		want[managedTaint{corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute}] = true
	}
	for cond, key := range map[corev1.NodeConditionType]string{
		corev1.NodeMemoryPressure:     corev1.TaintNodeMemoryPressure,
		corev1.NodeDiskPressure:       corev1.TaintNodeDiskPressure,
		corev1.NodePIDPressure:        corev1.TaintNodePIDPressure,
		corev1.NodeNetworkUnavailable: corev1.TaintNodeNetworkUnavailable,
	} {
		if conditionIs(cond, corev1.ConditionTrue) {
			want[managedTaint{key, corev1.TaintEffectNoSchedule}] = true
		}
	}
	if node.Spec.Unschedulable {
		want[managedTaint{corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule}] = true
	}
	return want
}

// reconcileTaints returns node's taints with the managed ones brought in line with want, and
// whether they changed. Kept taints keep their timeAdded; new NoExecute taints get now, from
// which tolerationSeconds are not counted (eviction counts from when it saw the taint) but
// which users read to tell when a node went bad.
func reconcileTaints(taints []corev1.Taint, want map[managedTaint]bool, now metav1.Time) ([]corev1.Taint, bool) {
	out := make([]corev1.Taint, 0, len(taints)+len(want))
	have := map[managedTaint]bool{}
	changed := false
	for _, t := range taints {
		if isManaged(t) {
			m := managedTaint{t.Key, t.Effect}
			if !want[m] || have[m] {
				changed = true
				continue
			}
			have[m] = true
		}
		out = append(out, t)
	}
	for _, m := range managedTaints {
		if want[m] && !have[m] {
			t := corev1.Taint{Key: m.key, Effect: m.effect}
			if m.effect == corev1.TaintEffectNoExecute {
				added := now
				t.TimeAdded = &added
			}
			out = append(out, t)
			changed = true
		}
	}
	return out, changed
}
