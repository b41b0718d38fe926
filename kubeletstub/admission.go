package kubeletstub

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/miniplane/miniplane/controllers/placement"
)

// Admission rejection reasons, as the kubelet writes them into pod.status.reason. Resource
// shortages are "OutOf" + the resource name (OutOfcpu, OutOfmemory, OutOfpods,
// OutOfephemeral-storage, …).
const (
	ReasonNodeAffinity = "NodeAffinity"
	ReasonNodePorts    = "NodePorts"
	// ReasonTaint is the name for a NoExecute taint the pod does not tolerate (the
	// kubelet itself says "TaintToleration").
	ReasonTaint = "Taint"
)

// rejectedPrefix starts the message of every rejected pod, as in the kubelet.
const rejectedPrefix = "Pod was rejected: "

// admission is the outcome of admitting one pod: admitted, or rejected with a reason and a
// kubelet-like message.
type admission struct {
	admitted bool
	reason   string
	message  string
}

func reject(reason, message string) admission {
	return admission{reason: reason, message: rejectedPrefix + message}
}

// admit decides whether node can run pod next to running, the pods it has already admitted
// (terminal ones and pod itself are ignored), with the checks of the kubelet's predicate
// admit handler and in its order: resources (pods first, then cpu, memory, …), node
// selector and required affinity, host ports, then NoExecute taints. Only the first failure
// is reported, as the kubelet does.
func admit(pod *corev1.Pod, node *corev1.Node, running []*corev1.Pod) admission {
	if short := placement.InsufficientResources(pod, node, running); len(short) > 0 {
		s := short[0]
		return reject("OutOf"+string(s.Resource), fmt.Sprintf(
			"Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
			s.Resource, s.Requested, s.Used, s.Capacity))
	}
	if !placement.MatchesNodeSelectorAndAffinity(pod, node) {
		return reject(ReasonNodeAffinity, "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
	}
	if placement.HostPortConflict(pod, running) {
		return reject(ReasonNodePorts, "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
	}
	if taint, ok := placement.UntoleratedTaint(pod, node, corev1.TaintEffectNoExecute); ok {
		return reject(ReasonTaint, fmt.Sprintf("Predicate TaintToleration failed: node(s) had untolerated taint {%s: %s}", taint.Key, taint.Value))
	}
	return admission{admitted: true}
}
