package scheduler

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/miniplane/miniplane/controllers/placement"
)

// Reasons a node is filtered out, worded as kube-scheduler's filter plugins word them, since
// users and tools read them in FailedScheduling events.
const (
	reasonUnschedulable    = "node(s) were unschedulable"
	reasonNodeName         = "node(s) didn't match the requested node name"
	reasonNodeAffinity     = "node(s) didn't match Pod's node affinity/selector"
	reasonHostPorts        = "node(s) didn't have free ports for the requested pod ports"
	reasonPinnedElsewhere  = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
	reasonUntoleratedTaint = "node(s) had untolerated taint {%s: %s}"
	// noNodesAvailable is kube-scheduler's ErrNoNodesAvailable text.
	noNodesAvailable = "no nodes available to schedule pods"
)

// taintUnschedulable is the taint that spec.unschedulable stands for; a pod tolerating it
// passes the unschedulable filter (as daemon pods do through their automatic toleration).
var taintUnschedulable = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// filterNode runs the filters in kube-scheduler's plugin order (NodeUnschedulable, NodeName,
// TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit) and returns the reasons of the
// first one that rejects node; nil means the pod fits. podsOnNode are the pods bound or
// assumed on node. Like kube-scheduler, only the resource filter reports several reasons.
func filterNode(pod *corev1.Pod, node *corev1.Node, podsOnNode []*corev1.Pod) []string {
	if node.Spec.Unschedulable && !placement.Tolerates(pod.Spec.Tolerations, &taintUnschedulable) {
		return []string{reasonUnschedulable}
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return []string{reasonNodeName}
	}
	if taint, ok := placement.UntoleratedTaint(pod, node, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute); ok {
		return []string{fmt.Sprintf(reasonUntoleratedTaint, taint.Key, taint.Value)}
	}
	if !placement.MatchesNodeSelectorAndAffinity(pod, node) {
		return []string{reasonNodeAffinity}
	}
	if placement.HostPortConflict(pod, podsOnNode) {
		return []string{reasonHostPorts}
	}
	if insufficient := placement.InsufficientResources(pod, node, podsOnNode); len(insufficient) > 0 {
		reasons := make([]string, 0, len(insufficient))
		for _, i := range insufficient {
			reasons = append(reasons, i.Reason())
		}
		return reasons
	}
	return nil
}

// pinnedNodeNames returns the only node names a pod's required node affinity allows, when
// every required term names nodes with matchFields metadata.name In [...] — how DaemonSet
// pods are pinned. ok is false when any node may match (kube-scheduler's NodeAffinity
// PreFilter makes the same cut).
func pinnedNodeNames(pod *corev1.Pod) (names sets.Set[string], ok bool) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil, false
	}
	names = sets.New[string]()
	for _, term := range terms {
		var termNames sets.Set[string]
		for _, f := range term.MatchFields {
			if f.Key != "metadata.name" || f.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			s := sets.New(f.Values...)
			if termNames == nil {
				termNames = s
			} else {
				termNames = termNames.Intersection(s) // requirements of one term are ANDed
			}
		}
		if termNames == nil {
			return nil, false // this term can match any node name
		}
		names = names.Union(termNames) // terms are ORed
	}
	return names, true
}

// fitError is why a pod fits no node: how many nodes were considered and, per reason, on how
// many nodes it applied.
type fitError struct {
	numAllNodes int
	reasons     map[string]int
}

// Error formats the message as kube-scheduler's FitError does (without the preemption part,
// which miniplane does not implement): "0/5 nodes are available: 3 Insufficient cpu,
// 2 node(s) had untolerated taint {key: value}." with the "count reason" items sorted as
// strings.
func (e *fitError) Error() string {
	if e.numAllNodes == 0 {
		return noNodesAvailable
	}
	items := make([]string, 0, len(e.reasons))
	for reason, n := range e.reasons {
		items = append(items, fmt.Sprintf("%d %s", n, reason))
	}
	sort.Strings(items)
	msg := fmt.Sprintf("0/%d nodes are available:", e.numAllNodes)
	if len(items) > 0 {
		msg += " " + strings.Join(items, ", ") + "."
	}
	return msg
}
