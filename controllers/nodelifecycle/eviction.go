package nodelifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/miniplane/miniplane/controllers/internal/podcondition"
	"github.com/miniplane/miniplane/controllers/placement"
)

func noExecuteTaints(taints []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Effect == corev1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	return out
}

func (c *Controller) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	c.podQueue.Add(podKey(pod))
}

func (c *Controller) onPodDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		c.forgetEviction(podKey(pod))
	}
}

func (c *Controller) enqueuePodsOn(nodeName string) {
	objs, err := c.podIndexer.ByIndex(podNodeNameIndex, nodeName)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok {
			c.podQueue.Add(podKey(pod))
		}
	}
}

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// tolerationTime returns how long pod may stay on a node with the given NoExecute taints:
// ok is false when some taint is not tolerated (evict now); forever is true when every
// taint is tolerated without tolerationSeconds. As in Kubernetes, each taint is matched by
// the first toleration that tolerates it, and the shortest tolerationSeconds among those
// wins; zero or negative means now.
func tolerationTime(pod *corev1.Pod, taints []corev1.Taint) (d time.Duration, forever, ok bool) {
	minSeconds := int64(-1)
	for i := range taints {
		var used *corev1.Toleration
		for j := range pod.Spec.Tolerations {
			if placement.Tolerates(pod.Spec.Tolerations[j:j+1], &taints[i]) {
				used = &pod.Spec.Tolerations[j]
				break
			}
		}
		if used == nil {
			return 0, false, false
		}
		if used.TolerationSeconds == nil {
			continue
		}
		s := max(*used.TolerationSeconds, 0)
		if minSeconds < 0 || s < minSeconds {
			minSeconds = s
		}
	}
	if minSeconds < 0 {
		return 0, true, true
	}
	return time.Duration(minSeconds) * time.Second, false, true
}

// syncPod deletes a pod whose node has a NoExecute taint it does not tolerate, or that it
// tolerates only for a time that has run out; otherwise it schedules the next look.
func (c *Controller) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.podLister.Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || placement.IsTerminal(pod) {
		c.forgetEviction(key)
		return nil
	}
	node, err := c.nodeLister.Get(pod.Spec.NodeName)
	if err != nil {
		c.forgetEviction(key)
		return nil
	}
	taints := noExecuteTaints(node.Spec.Taints)
	if len(taints) == 0 {
		c.forgetEviction(key)
		return nil
	}
	d, forever, tolerated := tolerationTime(pod, taints)
	if forever {
		c.forgetEviction(key)
		return nil
	}
	if tolerated {
		now := c.clock.Now()
		c.evictMu.Lock()
		ec, ok := c.evictionStart[key]
		if !ok || ec.uid != pod.UID {
			ec = evictionClock{uid: pod.UID, start: now}
			c.evictionStart[key] = ec
		}
		c.evictMu.Unlock()
		if due := ec.start.Add(d); now.Before(due) {
			c.podQueue.AddAfter(key, due.Sub(now))
			return nil
		}
	}
	return c.evict(ctx, pod)
}

func (c *Controller) forgetEviction(key string) {
	c.evictMu.Lock()
	defer c.evictMu.Unlock()
	delete(c.evictionStart, key)
}

// evict deletes pod, as the taint eviction controller does: an event first, then the
// condition DisruptionTarget (DeletionByTaintManager), so that the pod's owner and its
// disruption budget see why it goes, then a DELETE guarded by the pod's UID.
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod) error {
	c.logger.Info("evicting pod for an untolerated NoExecute taint", "pod", podKey(pod), "node", pod.Spec.NodeName)
	c.evictionRecorder.Eventf(pod, corev1.EventTypeNormal, "TaintManagerEviction", "Marking for deletion Pod %s", podKey(pod))
	status := *pod.Status.DeepCopy()
	var err error
	if podcondition.Set(&status, corev1.PodCondition{
		Type:    corev1.DisruptionTarget,
		Status:  corev1.ConditionTrue,
		Reason:  podcondition.ReasonDeletionByTaintManager,
		Message: podcondition.MessageDeletionByTaintManager,
	}, c.clock.Now()) {
		err = podcondition.PatchStatus(ctx, c.client, pod, status)
	}
	if err == nil {
		uid := pod.UID
		err = c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid},
		})
	}
	switch {
	case err == nil:
		c.evictions.Inc()
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		return fmt.Errorf("evicting pod %s: %w", podKey(pod), err)
	}
	c.forgetEviction(podKey(pod))
	return nil
}
