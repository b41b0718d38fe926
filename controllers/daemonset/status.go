package daemonset

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusCounts are the seven numbers of DaemonSetStatus the controller computes.
type statusCounts struct {
	desired, current, misscheduled, ready, updated, available, unavailable int32
}

// computeStatus counts over the nodes in the node list (docs/daemonset-controller.md#status).
// On a node with several pods the oldest one (bound first) speaks for the node; pods on nodes
// missing from the list are ignored.
func (c *Controller) computeStatus(s *syncState, nodeToPods map[string][]*corev1.Pod, now time.Time) statusCounts {
	var st statusCounts
	for _, node := range s.nodes {
		pods := nodeToPods[node.Name]
		if !c.decideOnce(s, node).wantToRun {
			if len(pods) > 0 {
				st.misscheduled++
			}
			continue
		}
		st.desired++
		if len(pods) == 0 {
			continue
		}
		st.current++
		sortPodsOldestFirst(pods)
		pod := pods[0]
		if isPodReady(pod) {
			st.ready++
			if isPodAvailable(pod, s.ds.Spec.MinReadySeconds, now) {
				st.available++
			}
		}
		if isPodUpdated(pod, s.hash) {
			st.updated++
		}
	}
	st.unavailable = st.desired - st.available
	return st
}

// updateStatus computes and stores the status. updateObservedGen is true only on a full
// sync, so observedGeneration says "the controller has acted on this spec".
func (c *Controller) updateStatus(ctx context.Context, s *syncState, updateObservedGen bool) error {
	nodeToPods, err := c.nodesToDaemonPods(ctx, s, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %w", s.ds.Name, err)
	}
	now := c.clock.Now()
	st := c.computeStatus(s, nodeToPods, now)
	s.status = st
	c.requeueForAvailability(s, nodeToPods, now)
	if err := c.storeStatus(ctx, s.ds, st, updateObservedGen); err != nil {
		return fmt.Errorf("error storing status for daemon set %s: %w", s.key, err)
	}
	return nil
}

// requeueForAvailability arms the next sync for the moment the first Ready pod of the
// DaemonSet turns available, which happens with the passing of time alone and no watch event
// announces (docs/daemonset-controller.md#min-ready-seconds). Every pod counts, not only
// the oldest pod of a node that the status reports: during a surge the new pod's
// availability is what lets the old one go. Re-arming on every sync, for the exact instant,
// keeps one pending wake-up at or before each future availability even though the delaying
// queue merges a later AddAfter of a waiting key into the earlier one.
func (c *Controller) requeueForAvailability(s *syncState, nodeToPods map[string][]*corev1.Pod, now time.Time) {
	var soonest time.Duration
	found := false
	for _, pods := range nodeToPods {
		if d, ok := nextAvailable(pods, s.ds.Spec.MinReadySeconds, now); ok && (!found || d < soonest) {
			soonest, found = d, true
		}
	}
	if found {
		s.timed = true
		c.enqueueAfter(s.ds, soonest)
	}
}

// storeStatus writes st unless it equals the stored numbers and observedGeneration is
// current. A failed PUT is retried once on a freshly read object; collisionCount and
// conditions are carried over from the object written.
func (c *Controller) storeStatus(ctx context.Context, ds *appsv1.DaemonSet, st statusCounts, updateObservedGen bool) error {
	if statusEqual(ds.Status, st) && ds.Status.ObservedGeneration >= ds.Generation {
		return nil
	}
	client := c.client.AppsV1().DaemonSets(ds.Namespace)
	toUpdate := ds.DeepCopy()
	var updateErr error
	for i := 0; ; i++ {
		if updateObservedGen {
			toUpdate.Status.ObservedGeneration = ds.Generation
		}
		toUpdate.Status.DesiredNumberScheduled = st.desired
		toUpdate.Status.CurrentNumberScheduled = st.current
		toUpdate.Status.NumberMisscheduled = st.misscheduled
		toUpdate.Status.NumberReady = st.ready
		toUpdate.Status.UpdatedNumberScheduled = st.updated
		toUpdate.Status.NumberAvailable = st.available
		toUpdate.Status.NumberUnavailable = st.unavailable
		if _, updateErr = client.UpdateStatus(ctx, toUpdate, metav1.UpdateOptions{}); updateErr == nil {
			return nil
		}
		if i >= statusUpdateRetries {
			return updateErr
		}
		var getErr error
		if toUpdate, getErr = client.Get(ctx, ds.Name, metav1.GetOptions{}); getErr != nil {
			// Without a fresh copy the update error is stale; the read error says more.
			return getErr
		}
	}
}

func statusEqual(have appsv1.DaemonSetStatus, st statusCounts) bool {
	return have.DesiredNumberScheduled == st.desired &&
		have.CurrentNumberScheduled == st.current &&
		have.NumberMisscheduled == st.misscheduled &&
		have.NumberReady == st.ready &&
		have.UpdatedNumberScheduled == st.updated &&
		have.NumberAvailable == st.available &&
		have.NumberUnavailable == st.unavailable
}
