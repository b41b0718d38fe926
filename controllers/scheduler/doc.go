// Package scheduler binds pending pods to nodes, the way kube-scheduler's default profile
// does for the cases miniplane serves: it filters nodes with the shared placement predicates
// (node unschedulable, node name, taints and tolerations, node selector and required node
// affinity, host ports, resource fit), picks the least-allocated feasible node, and binds
// through the pods/binding subresource. A pod that fits nowhere gets PodScheduled=False
// (reason Unschedulable) and a FailedScheduling event in kube-scheduler's wording, and is
// retried with backoff when nodes or pods change.
//
// Daemon pods pinned to one node by a required matchFields metadata.name term are checked
// against that node only, so thousands of them bind quickly; several workers bind at once and
// an "assumed" cache keeps concurrent decisions from double-booking a node.
package scheduler
