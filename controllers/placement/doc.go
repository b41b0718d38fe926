// Package placement answers the questions the DaemonSet controller, the scheduler and the
// stub kubelet's admission all ask about a pod and a node: does the node match the pod's
// selector and required affinity, which taint does the pod not tolerate, do its resource
// requests fit, do its host ports collide. It is pure (no clients, no clock) and built on
// k8s.io/component-helpers so the answers are Kubernetes' own.
package placement
