package apiserver

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Stub kubelets run no containers, so the streaming subresources of pods (exec, attach,
// port-forward, and kubectl cp, which is exec running tar) have nothing to connect to. They
// answer with a Status that says so, after the checks kube-apiserver makes before it
// contacts the kubelet, so that a wrong container name or an unscheduled pod gets the usual
// answer.
//
// The code is 400 BadRequest: kube-apiserver answers that when the target cannot take the
// stream (a pod with no host, a completed pod, a container the kubelet does not run), and
// kubectl prints it as "Error from server (BadRequest): <message>", which points at the
// pod rather than at the user's permissions (403), at a missing object (404) or at a server
// that might work on a retry (503). The WebSocket upgrade that kubectl tries first fails with
// it too; kubectl then retries over SPDY and gets the same Status.

// podExec serves pods/<name>/exec (GET for WebSocket, POST for SPDY).
func (c *call) podExec() { c.noContainers("exec into", true) }

// podAttach serves pods/<name>/attach.
func (c *call) podAttach() { c.noContainers("attach to", true) }

// podPortForward serves pods/<name>/portforward.
func (c *call) podPortForward() { c.noContainers("forward a port to", false) }

// noContainers checks the pod and the container the request names, as kube-apiserver does,
// and answers that there is no process to what (exec into, attach to, ...).
func (c *call) noContainers(what string, needsContainer bool) {
	obj, err := c.s.store.Get(c.r.Context(), c.key(c.info.namespace, c.info.name))
	if err != nil {
		c.fail(err)
		return
	}
	pod := obj.(*corev1.Pod)
	target := "pod " + pod.Name
	if needsContainer {
		container := c.r.URL.Query().Get("container")
		switch {
		case container == "" && len(pod.Spec.Containers) == 1:
			container = pod.Spec.Containers[0].Name
		case container == "":
			names := make([]string, len(pod.Spec.Containers))
			for i, ct := range pod.Spec.Containers {
				names[i] = ct.Name
			}
			c.fail(badRequest("a container name must be specified for pod %s, choose one of: [%s]", pod.Name, strings.Join(names, " ")))
			return
		}
		if !podHasContainer(pod, container) {
			c.fail(badRequest("container %s is not valid for pod %s", container, pod.Name))
			return
		}
		target = fmt.Sprintf("container %q of pod %s", container, pod.Name)
	}
	if pod.Spec.NodeName == "" {
		c.fail(badRequest("pod %s does not have a host assigned", pod.Name))
		return
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		c.fail(badRequest("cannot %s a container in a completed pod; current phase is %s", what, pod.Status.Phase))
		return
	}
	c.fail(badRequest("miniplane: cannot %s %s: it runs on the stub node %s, which runs no containers",
		what, target, pod.Spec.NodeName))
}

// podHasContainer reports whether the pod has a container of that name: an init container,
// a container or an ephemeral one, which are all streamed from (kubectl debug attaches to
// the ephemeral container it adds).
func podHasContainer(pod *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}
