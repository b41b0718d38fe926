// Package nodelifecycle watches node heartbeats and turns them into conditions, taints and
// evictions, as kube-controller-manager's node lifecycle controller and taint eviction
// controller do:
//
//   - A node whose Lease (kube-node-lease) and Ready heartbeat have not been renewed for the
//     grace period gets Ready=Unknown, and its pressure conditions Unknown too
//     ("NodeStatusUnknown", "Kubelet stopped posting node status.").
//   - Conditions become taints: Ready=Unknown → node.kubernetes.io/unreachable, Ready=False →
//     node.kubernetes.io/not-ready (NoSchedule and NoExecute each); memory, disk and PID
//     pressure and NetworkUnavailable → their NoSchedule taints; spec.unschedulable →
//     node.kubernetes.io/unschedulable:NoSchedule. A taint goes when its condition clears.
//   - Pods that do not tolerate a NoExecute taint of their node are deleted at once; pods
//     that tolerate it for tolerationSeconds are deleted when that time has passed.
//
// Heartbeats are judged by when this controller observed them change, on its injected clock,
// never by the timestamps the kubelet wrote, so clock skew between hosts does not matter.
package nodelifecycle
