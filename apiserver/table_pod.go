package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// initContainersReason is the STATUS of a pod whose init containers have not all finished,
// as kubectl's printer derives it: the first init container that is not done speaks, as
// Init:<waiting or termination reason>, Init:ExitCode:<n>, or Init:<i>/<n> while it runs.
// A completed init container and a started sidecar (restartable init container) are done.
// It returns false once the pod's Initialized condition is True, when the main containers
// speak.
func initContainersReason(pod *corev1.Pod) (string, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodInitialized && c.Status == corev1.ConditionTrue {
			return "", false
		}
	}
	sidecars := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		sidecars[c.Name] = c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	}
	for i, cs := range pod.Status.InitContainerStatuses {
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			continue
		case sidecars[cs.Name] && cs.Started != nil && *cs.Started:
			continue
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
			return "Init:" + cs.State.Terminated.Reason, true
		case cs.State.Terminated != nil && cs.State.Terminated.Signal != 0:
			return fmt.Sprintf("Init:Signal:%d", cs.State.Terminated.Signal), true
		case cs.State.Terminated != nil:
			return fmt.Sprintf("Init:ExitCode:%d", cs.State.Terminated.ExitCode), true
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			return "Init:" + cs.State.Waiting.Reason, true
		default:
			return fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers)), true
		}
	}
	return "", false
}
