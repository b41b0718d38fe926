package kubeletstub

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Node events. A kubelet records Normal events on its Node as it starts, when a condition
// it reports changes status, and when it sees its node cordoned or uncordoned; `kubectl
// describe node` shows them beside the node lifecycle controller's. The stub records the
// same reasons and messages (README.md, "Stub kubelets and fault injection"), within the
// fleet's event budget, one node's start all together.

// Reasons of a kubelet's node events that are not about a condition.
const (
	reasonStarting            = "Starting"
	reasonAllocatableEnforced = "NodeAllocatableEnforced"
	reasonSchedulable         = "NodeSchedulable"
	reasonNotSchedulable      = "NodeNotSchedulable"
)

// conditionEventReasons are the kubelet's event reasons for a condition it reports turning
// False and True. It has none for NetworkUnavailable, which the network plugin owns, and
// none for Unknown, which only the node lifecycle controller writes.
var conditionEventReasons = map[corev1.NodeConditionType][2]string{
	corev1.NodeMemoryPressure: {"NodeHasSufficientMemory", "NodeHasInsufficientMemory"},
	corev1.NodeDiskPressure:   {"NodeHasNoDiskPressure", "NodeHasDiskPressure"},
	corev1.NodePIDPressure:    {"NodeHasSufficientPID", "NodeHasInsufficientPID"},
	corev1.NodeReady:          {"NodeNotReady", "NodeReady"},
}

// conditionEvent is the reason of the event a kubelet records as it sets condition c over
// a condition of the same type whose status was before (found says there was one): a
// pressure condition records its status when it is new or changes; Ready only when it
// changes.
func conditionEvent(c condition, before corev1.ConditionStatus, found bool) (string, bool) {
	reasons, ok := conditionEventReasons[c.typ]
	if !ok || (found && before == c.status) || (!found && c.typ == corev1.NodeReady) {
		return "", false
	}
	switch c.status {
	case corev1.ConditionFalse:
		return reasons[0], true
	case corev1.ConditionTrue:
		return reasons[1], true
	}
	return "", false
}

// startNodeEvents are the reasons a kubelet records as it starts, reporting want. It
// builds its Node afresh at every start, registered before or not, so each pressure
// condition is new to it and announced; Ready is not.
func startNodeEvents(want []condition) []string {
	reasons := []string{reasonStarting}
	for _, c := range want {
		if reason, ok := conditionEvent(c, "", false); ok {
			reasons = append(reasons, reason)
		}
	}
	return append(reasons, reasonAllocatableEnforced)
}

// conditionChangeEvents are the reasons a kubelet records as it reports want over the
// conditions before.
func conditionChangeEvents(want, before []condition) []string {
	var reasons []string
	for _, c := range want {
		var status corev1.ConditionStatus
		i := slices.IndexFunc(before, func(b condition) bool { return b.typ == c.typ })
		if i >= 0 {
			status = before[i].status
		}
		if reason, ok := conditionEvent(c, status, i >= 0); ok {
			reasons = append(reasons, reason)
		}
	}
	return reasons
}

// reportedConditions are the types and statuses of node's conditions.
func reportedConditions(node *corev1.Node) []condition {
	out := make([]condition, len(node.Status.Conditions))
	for i, c := range node.Status.Conditions {
		out[i] = condition{typ: c.Type, status: c.Status}
	}
	return out
}

// schedulableEvent is the reason a kubelet records when it sees spec.unschedulable change.
func schedulableEvent(unschedulable bool) string {
	if unschedulable {
		return reasonNotSchedulable
	}
	return reasonSchedulable
}

func nodeEventMessage(node, reason string) string {
	switch reason {
	case reasonStarting:
		return "Starting kubelet."
	case reasonAllocatableEnforced:
		return "Updated Node Allocatable limit across pods"
	}
	return fmt.Sprintf("Node %s status is now: %s", node, reason)
}

// recordNodeEvents records events of the given reasons on n's Node, if the budget has room
// for all of them. The kubelet's reference to its Node carries the node's name as its UID,
// not the Node's UID; `kubectl describe node` looks for both.
func (r *eventRecorder) recordNodeEvents(n *stubNode, reasons []string, now time.Time) {
	if !r.allow(now, eventsOfNodes, len(reasons)) {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: n.name, UID: types.UID(n.name)}
	for _, reason := range reasons {
		r.event(n, ref, corev1.EventTypeNormal, reason, nodeEventMessage(n.name, reason))
	}
}
