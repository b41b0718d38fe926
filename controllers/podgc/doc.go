// Package podgc deletes the pods no kubelet will ever finish, as kube-controller-manager's
// pod garbage collector does. Every 20 s it looks at every pod in its cache and force-deletes
// (grace period 0):
//
//   - pods bound to a Node that is gone. A node name missing from the cache is first held in
//     quarantine for 40 s, then looked up in the API, so that a Node the cache has not seen
//     yet is not mistaken for a deleted one. Such a pod is first marked Failed with the
//     condition DisruptionTarget (DeletionByPodGC, "PodGC: node no longer exists"): no
//     kubelet is left to finish it, and its owner's controller sees why it went;
//   - terminating pods on a Node that is not Ready and carries the out-of-service taint
//     (node.kubernetes.io/out-of-service), marked Failed first;
//   - terminating pods that were never bound to a Node;
//   - the oldest terminated (Succeeded or Failed) pods beyond a threshold (12500 by default,
//     --terminated-pod-gc-threshold; evicted pods go first).
//
// Without it, a pod of a deleted Node would stay Running forever: the DaemonSet controller
// leaves bound pods on a vanished node to this collector, as upstream's does.
package podgc
