package apiserver_test

import (
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodLogs: `kubectl logs` gets the kubelet's answers: errors for a pod without a node or
// a container not started, and for a running container one line saying stubs log nothing.
func TestPodLogs(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	pods := env.Client.CoreV1().Pods("default")
	_, err := pods.Create(ctx, podOn("default", "unbound", ""), metav1.CreateOptions{})
	check(t, err)
	p, err := pods.Create(ctx, podOn("default", "bound", "n1"), metav1.CreateOptions{})
	check(t, err)

	_, err = pods.GetLogs("unbound", &corev1.PodLogOptions{}).DoRaw(ctx)
	expectStatus(t, err, http.StatusBadRequest, metav1.StatusReasonBadRequest)
	_, err = pods.GetLogs("bound", &corev1.PodLogOptions{}).DoRaw(ctx)
	expectStatus(t, err, http.StatusBadRequest, metav1.StatusReasonBadRequest) // not started yet
	_, err = pods.GetLogs("bound", &corev1.PodLogOptions{Container: "nope"}).DoRaw(ctx)
	expectStatus(t, err, http.StatusBadRequest, metav1.StatusReasonBadRequest)
	_, err = pods.GetLogs("missing", &corev1.PodLogOptions{}).DoRaw(ctx)
	expectStatus(t, err, http.StatusNotFound, metav1.StatusReasonNotFound)

	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	check(t, err)
	out, err := pods.GetLogs("bound", &corev1.PodLogOptions{}).DoRaw(ctx)
	check(t, err)
	if !strings.Contains(string(out), "writes no logs") || !strings.Contains(string(out), "default/bound") {
		t.Fatalf("log output %q", out)
	}
}
