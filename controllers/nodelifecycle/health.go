package nodelifecycle

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Reasons and messages kube-controller-manager writes on conditions of a silent node.
const (
	reasonStatusUnknown      = "NodeStatusUnknown"
	messageStatusUnknown     = "Kubelet stopped posting node status."
	reasonStatusNeverUpdated = "NodeStatusNeverUpdated"
	messageNeverUpdated      = "Kubelet never posted node status."
)

// conditionsSetUnknown are the conditions marked Unknown with Ready. NetworkUnavailable is
// left alone: the network plugin owns it, not the kubelet.
var conditionsSetUnknown = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure,
}

// nodeHealth is what the controller last saw of a node's heartbeats.
type nodeHealth struct {
	// probeTime is when (on our clock) a heartbeat was last seen to change.
	probeTime time.Time
	// readyHeartbeat and leaseRenew are the last values seen.
	readyHeartbeat metav1.Time
	leaseRenew     time.Time
	hasReady       bool
	// registered is the UID of the node once RegisteredNode was recorded for it (or left
	// out by the budget): once per node and controller start, as upstream's knownNodeSet.
	registered types.UID
}

// observe records node's Ready heartbeat and lease renewal (lease may be nil) and reports
// the updated record. A heartbeat counts only when it changed since last seen.
func (c *Controller) observe(node *corev1.Node, lease *coordinationv1.Lease) nodeHealth {
	c.healthMu.Lock()
	defer c.healthMu.Unlock()
	now := c.clock.Now()
	h, seen := c.health[node.Name]
	if !seen {
		// First sight: give the node a full grace period from now.
		h = &nodeHealth{probeTime: now}
		c.health[node.Name] = h
	}
	if ready := findCondition(node.Status.Conditions, corev1.NodeReady); ready != nil {
		if !h.hasReady || !ready.LastHeartbeatTime.Equal(&h.readyHeartbeat) {
			h.probeTime = now
		}
		h.readyHeartbeat = ready.LastHeartbeatTime
		h.hasReady = true
	}
	if lease != nil && lease.Spec.RenewTime != nil {
		renew := lease.Spec.RenewTime.Time
		if !renew.Equal(h.leaseRenew) {
			if seen {
				h.probeTime = now
			}
			h.leaseRenew = renew
		}
	}
	return *h
}

// register marks the node known to the controller and reports whether it was new.
func (c *Controller) register(node *corev1.Node) bool {
	c.healthMu.Lock()
	defer c.healthMu.Unlock()
	h, ok := c.health[node.Name]
	if !ok || h.registered != "" {
		return false
	}
	h.registered = node.UID
	return true
}

// forgetNode drops what the controller knew of a node and returns the UID it was
// registered with, "" if it was not.
func (c *Controller) forgetNode(name string) types.UID {
	c.healthMu.Lock()
	defer c.healthMu.Unlock()
	h, ok := c.health[name]
	delete(c.health, name)
	if !ok {
		return ""
	}
	return h.registered
}

// removed records RemovingNode for a node the controller knew, once.
func (c *Controller) removed(name string) {
	if uid := c.forgetNode(name); uid != "" {
		c.recordNodeEvent(name, uid, "RemovingNode", "Removing Node "+name+" from Controller")
	}
}

// markUnknown sets Ready and the pressure conditions of node to Unknown, as
// kube-controller-manager does for a node past its grace period, and reports whether
// anything changed. Heartbeat times are kept: they say when the kubelet last spoke.
func markUnknown(node *corev1.Node, now metav1.Time) bool {
	changed := false
	for _, t := range conditionsSetUnknown {
		cond := findCondition(node.Status.Conditions, t)
		if cond == nil {
			node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
				Type:               t,
				Status:             corev1.ConditionUnknown,
				Reason:             reasonStatusNeverUpdated,
				Message:            messageNeverUpdated,
				LastHeartbeatTime:  node.CreationTimestamp,
				LastTransitionTime: now,
			})
			changed = true
			continue
		}
		if cond.Status != corev1.ConditionUnknown {
			cond.Status = corev1.ConditionUnknown
			cond.Reason = reasonStatusUnknown
			cond.Message = messageStatusUnknown
			cond.LastTransitionTime = now
			changed = true
		}
	}
	return changed
}

func findCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
