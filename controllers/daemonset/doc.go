// Package daemonset is miniplane's DaemonSet controller: it keeps exactly one daemon pod on
// every node a DaemonSet selects, replaces failed pods under a backoff, rolls out template
// changes (RollingUpdate with maxUnavailable or maxSurge, or OnDelete), keeps the
// ControllerRevision history that `kubectl rollout history|undo` read, and reports status.
//
// It follows Kubernetes' controller decision by decision, as docs/daemonset-controller.md
// describes, in two placement modes chosen by the ScheduleDaemonSetPods feature gate
// (docs/daemonset-controller.md#placement-modes): CURRENT pins pods to their node with required
// node affinity and leaves binding to the scheduler; LEGACY-BIND runs the full predicate set
// itself (resources, host ports, node pressure, taints) and creates pods with spec.nodeName
// set.
//
// It is an ordinary API client: shared informers and listers for DaemonSets,
// ControllerRevisions, Pods and Nodes, a rate-limited work queue of namespace/name keys,
// expectations for its own in-flight writes, flowcontrol.Backoff for failed pods, and
// events through client-go's recorder.
package daemonset
