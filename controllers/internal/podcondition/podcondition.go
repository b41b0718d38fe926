// Package podcondition writes a pod condition the way kube-controller-manager's controllers
// do before they delete a pod (DisruptionTarget): a strategic merge patch of the pod's
// status that carries the pod's UID, so the patch cannot land on a new pod of the same name.
package podcondition

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
)

// Disruption conditions' reasons and messages, as upstream's controllers write them.
const (
	ReasonDeletionByPodGC         = "DeletionByPodGC"
	MessageNodeGone               = "PodGC: node no longer exists"
	ReasonDeletionByTaintManager  = "DeletionByTaintManager"
	MessageDeletionByTaintManager = "Taint manager: deleting due to NoExecute taint"
)

// Set puts cond into status, stamped now, and reports whether status changed. As the
// API's own helper does, a condition whose status stays the same keeps its transition time.
func Set(status *corev1.PodStatus, cond corev1.PodCondition, now time.Time) bool {
	cond.LastTransitionTime = metav1.NewTime(now)
	for i := range status.Conditions {
		old := &status.Conditions[i]
		if old.Type != cond.Type {
			continue
		}
		if old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		}
		changed := old.Status != cond.Status || old.Reason != cond.Reason || old.Message != cond.Message ||
			!old.LastProbeTime.Equal(&cond.LastProbeTime) || !old.LastTransitionTime.Equal(&cond.LastTransitionTime)
		*old = cond
		return changed
	}
	status.Conditions = append(status.Conditions, cond)
	return true
}

// PatchStatus changes pod's status to status with one strategic merge patch of
// pods/status: the difference between the two, plus metadata.uid as a precondition.
func PatchStatus(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, status corev1.PodStatus) error {
	patch, err := statusPatch(pod.UID, pod.Status, status)
	if err != nil {
		return fmt.Errorf("pod %s/%s: status patch: %w", pod.Namespace, pod.Name, err)
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// statusPatch is the two-way merge patch from old to new. Only the new side names the UID,
// so the patch always carries it.
func statusPatch(uid types.UID, old, new corev1.PodStatus) ([]byte, error) {
	from, err := json.Marshal(corev1.Pod{Status: old})
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: new})
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(from, to, corev1.Pod{})
}
