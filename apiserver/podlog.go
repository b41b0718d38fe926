package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// podLog serves GET pods/<name>/log. Stub kubelets run no processes, so there is nothing to
// read; the answer says so in one line, after the checks a kubelet makes (a container must
// be named when there are several, the pod must be on a node, the container started), so
// `kubectl logs` behaves as against a cluster, errors included. With follow=true the
// stream stays open until the client leaves, as a quiet container's would.
func (c *call) podLog() {
	obj, err := c.s.store.Get(c.r.Context(), c.key(c.info.namespace, c.info.name))
	if err != nil {
		c.fail(err)
		return
	}
	pod := obj.(*corev1.Pod)
	q := c.r.URL.Query()
	container := q.Get("container")
	if container == "" {
		if len(pod.Spec.Containers) != 1 {
			names := make([]string, len(pod.Spec.Containers))
			for i, ct := range pod.Spec.Containers {
				names[i] = ct.Name
			}
			c.fail(badRequest("a container name must be specified for pod %s, choose one of: [%s]", pod.Name, strings.Join(names, " ")))
			return
		}
		container = pod.Spec.Containers[0].Name
	}
	if !podHasContainer(pod, container) {
		c.fail(badRequest("container %s is not valid for pod %s", container, pod.Name))
		return
	}
	if pod.Spec.NodeName == "" {
		c.fail(badRequest("pod %s does not have a host assigned", pod.Name))
		return
	}
	started := false
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses) {
		if cs.Name != container {
			continue
		}
		if cs.State.Waiting != nil {
			c.fail(badRequest("container %q in pod %q is waiting to start: %s", container, pod.Name, cs.State.Waiting.Reason))
			return
		}
		started = cs.State.Running != nil || cs.State.Terminated != nil
	}
	if !started {
		c.fail(badRequest("container %q in pod %q is waiting to start: ContainerCreating", container, pod.Name))
		return
	}
	c.w.Header().Set("Content-Type", "text/plain")
	c.w.WriteHeader(http.StatusOK)
	fmt.Fprintf(c.w, "miniplane: container %q of pod %s/%s runs on the stub node %s, which runs no processes, so it writes no logs\n",
		container, pod.Namespace, pod.Name, pod.Spec.NodeName)
	if q.Get("follow") == "true" {
		if f, ok := c.w.(http.Flusher); ok {
			f.Flush()
		}
		<-c.r.Context().Done()
	}
}
