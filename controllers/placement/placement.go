package placement

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// MatchesNodeSelectorAndAffinity reports whether node satisfies pod's spec.nodeSelector and
// its required node affinity (matchExpressions on labels, matchFields on metadata.name).
// A malformed affinity matches nothing, as in the scheduler.
func MatchesNodeSelectorAndAffinity(pod *corev1.Pod, node *corev1.Node) bool {
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	return err == nil && ok
}

// UntoleratedTaint returns the first taint of node whose effect is one of effects (all
// effects when none are given) that pod does not tolerate.
func UntoleratedTaint(pod *corev1.Pod, node *corev1.Node, effects ...corev1.TaintEffect) (corev1.Taint, bool) {
	filter := func(t *corev1.Taint) bool {
		if len(effects) == 0 {
			return true
		}
		for _, e := range effects {
			if t.Effect == e {
				return true
			}
		}
		return false
	}
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, filter, false)
}

// Tolerates reports whether tolerations tolerate taint.
func Tolerates(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	return corev1helpers.TolerationsTolerateTaint(klog.Background(), tolerations, taint, false)
}

// PodRequests returns a pod's effective requests as the scheduler and kubelet count them:
// the larger of the sum over containers and the largest init container, plus overhead.
func PodRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

// Insufficient describes one resource a pod does not fit on a node.
type Insufficient struct {
	Resource corev1.ResourceName
	// Requested is what the pod asks for, Used what the other pods already hold, Capacity
	// the node's allocatable.
	Requested, Used, Capacity int64
}

// Reason is the scheduler's wording, e.g. "Insufficient cpu" or "Too many pods".
func (i Insufficient) Reason() string {
	if i.Resource == corev1.ResourcePods {
		return "Too many pods"
	}
	return fmt.Sprintf("Insufficient %s", i.Resource)
}

// IsTerminal reports whether a pod has finished (Succeeded or Failed): it no longer holds
// resources or ports on its node.
func IsTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// InsufficientResources lists the resources (pods, cpu, memory, ephemeral-storage and
// extended resources) for which pod does not fit on node beside podsOnNode. Terminal pods
// and pod itself (same UID) in podsOnNode are not counted. Empty means it fits.
func InsufficientResources(pod *corev1.Pod, node *corev1.Node, podsOnNode []*corev1.Pod) []Insufficient {
	allocatable := node.Status.Allocatable
	used := map[corev1.ResourceName]int64{}
	count := int64(0)
	for _, p := range podsOnNode {
		if p.UID == pod.UID || IsTerminal(p) {
			continue
		}
		count++
		for name, q := range PodRequests(p) {
			used[name] += quantityValue(name, q)
		}
	}
	var out []Insufficient
	if maxPods, ok := allocatable[corev1.ResourcePods]; ok && count+1 > maxPods.Value() {
		out = append(out, Insufficient{Resource: corev1.ResourcePods, Requested: 1, Used: count, Capacity: maxPods.Value()})
	}
	requests := PodRequests(pod)
	for _, name := range sortedNames(requests) {
		q := requests[name]
		want := quantityValue(name, q)
		if want == 0 {
			continue
		}
		capQ, ok := allocatable[name]
		capacity := int64(0)
		if ok {
			capacity = quantityValue(name, capQ)
		}
		if want+used[name] > capacity {
			out = append(out, Insufficient{Resource: name, Requested: want, Used: used[name], Capacity: capacity})
		}
	}
	return out
}

// quantityValue counts cpu in millicores and everything else in units.
func quantityValue(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// sortedNames puts cpu and memory first so messages read like the scheduler's.
func sortedNames(rl corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(rl))
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if _, ok := rl[n]; ok {
			out = append(out, n)
		}
	}
	var rest []corev1.ResourceName
	for n := range rl {
		if n != corev1.ResourceCPU && n != corev1.ResourceMemory && n != corev1.ResourceEphemeralStorage {
			rest = append(rest, n)
		}
	}
	sortResourceNames(rest)
	return append(out, rest...)
}

func sortResourceNames(names []corev1.ResourceName) {
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && names[j] < names[j-1]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
}

// HostPortConflict reports whether pod asks for a host port (protocol, hostIP, port) that a
// non-terminal pod in podsOnNode already uses. 0.0.0.0 (or empty) conflicts with every IP.
func HostPortConflict(pod *corev1.Pod, podsOnNode []*corev1.Pod) bool {
	wanted := hostPorts(pod)
	if len(wanted) == 0 {
		return false
	}
	for _, p := range podsOnNode {
		if p.UID == pod.UID || IsTerminal(p) {
			continue
		}
		for _, have := range hostPorts(p) {
			for _, want := range wanted {
				if want.conflicts(have) {
					return true
				}
			}
		}
	}
	return false
}

type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

func (a hostPort) conflicts(b hostPort) bool {
	if a.port != b.port || a.protocol != b.protocol {
		return false
	}
	return a.ip == b.ip || a.ip == "0.0.0.0" || b.ip == "0.0.0.0"
}

func hostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []corev1.Container) {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: p.HostPort}
				if hp.ip == "" {
					hp.ip = "0.0.0.0"
				}
				if hp.protocol == "" {
					hp.protocol = corev1.ProtocolTCP
				}
				out = append(out, hp)
			}
		}
	}
	add(pod.Spec.Containers)
	for _, c := range pod.Spec.InitContainers {
		// Only restartable (sidecar) init containers keep their ports while the pod runs.
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add([]corev1.Container{c})
		}
	}
	return out
}

// TargetNodeName returns the node a pod is pinned to: spec.nodeName, or else the single
// value of a required matchFields metadata.name In [...] term, as daemon pods are pinned.
func TargetNodeName(pod *corev1.Pod) (string, bool) {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName, true
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "", false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) < 1 {
		return "", false
	}
	for _, term := range terms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0], true
			}
		}
	}
	return "", false
}
