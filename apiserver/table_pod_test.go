package apiserver

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestPodTableStatus: the STATUS column of `kubectl get pods` for the states stub kubelets
// report, as kubectl's printer shows them on a real node.
func TestPodTableStatus(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	waiting := func(name, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
	}
	running := func(name string, started, ready bool) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Started: &started, Ready: ready, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	completed := corev1.ContainerStatus{Name: "setup", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}
	initialized := func(ok corev1.ConditionStatus) []corev1.PodCondition {
		return []corev1.PodCondition{{Type: corev1.PodInitialized, Status: ok}}
	}
	tests := []struct {
		name      string
		init      []corev1.Container
		status    corev1.PodStatus
		want      string
		wantReady string
	}{
		{"running", nil, corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running("app", true, true)}}, "Running", "1/1"},
		{"image pull failure", nil, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("app", "ErrImagePull")}}, "ErrImagePull", "0/1"},
		{"image pull back-off", nil, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("app", "ImagePullBackOff")}}, "ImagePullBackOff", "0/1"},
		{"init container cannot pull", []corev1.Container{{Name: "setup"}},
			corev1.PodStatus{Phase: corev1.PodPending, Conditions: initialized(corev1.ConditionFalse),
				InitContainerStatuses: []corev1.ContainerStatus{waiting("setup", "ImagePullBackOff")},
				ContainerStatuses:     []corev1.ContainerStatus{waiting("app", "PodInitializing")}}, "Init:ImagePullBackOff", "0/1"},
		{"sidecar starting", []corev1.Container{{Name: "proxy", RestartPolicy: &always}, {Name: "setup"}},
			corev1.PodStatus{Phase: corev1.PodPending, Conditions: initialized(corev1.ConditionFalse),
				InitContainerStatuses: []corev1.ContainerStatus{running("proxy", false, false), waiting("setup", "PodInitializing")},
				ContainerStatuses:     []corev1.ContainerStatus{waiting("app", "PodInitializing")}}, "Init:0/2", "0/1"},
		{"initialized: the main containers speak", []corev1.Container{{Name: "setup"}},
			corev1.PodStatus{Phase: corev1.PodRunning, Conditions: initialized(corev1.ConditionTrue),
				InitContainerStatuses: []corev1.ContainerStatus{completed},
				ContainerStatuses:     []corev1.ContainerStatus{running("app", true, true)}}, "Running", "1/1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tt.init, Containers: []corev1.Container{{Name: "app"}}}, Status: tt.status}
			pod.Name = "p"
			row := podStrategy{}.tableRow(pod, time.Now())
			if row[2] != tt.want || row[1] != tt.wantReady {
				t.Errorf("READY %v STATUS %v, want %s %s", row[1], row[2], tt.wantReady, tt.want)
			}
		})
	}
}
