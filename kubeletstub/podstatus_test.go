package kubeletstub

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/configs"
)

// statusAt computes the status of pod, admitted and started at t0, at t0+d on a node with
// the default image-pull failures and the given probe-fault episodes.
func statusAt(t *testing.T, pod *corev1.Pod, d time.Duration, probes [numProbeKinds]probeEpisode) (corev1.PodStatus, time.Duration) {
	t.Helper()
	cluster, err := parseImagePatterns(configs.DefaultStubImagePullFailures())
	if err != nil {
		t.Fatal(err)
	}
	rec := &podRecord{admitted: true, start: t0, ip: "10.128.0.2"}
	return startedStatus(pod, statusInput{
		hostIP: "172.16.0.1",
		rec:    rec,
		tl:     timeline(rec, pod.Spec.RestartPolicy, 0, faults{}),
		pulls:  pullPolicy{cluster: cluster},
		probes: probes,
		now:    t0.Add(d),
	})
}

func podCond(s corev1.PodStatus, typ corev1.PodConditionType) corev1.PodCondition {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.PodCondition{}
}

// kubectlStatus is the STATUS column of `kubectl get pods`, derived the way kubectl's printer
// does for the states the stub produces: the first init container that is not done speaks
// (Init:REASON when it waits for a reason, else Init:N/M), else the last waiting main
// container's reason, else the phase.
func kubectlStatus(s corev1.PodStatus) string {
	for i, cs := range s.InitContainerStatuses {
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			continue
		case cs.State.Running != nil && cs.Started != nil && *cs.Started: // a started sidecar
			continue
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			return "Init:" + cs.State.Waiting.Reason
		default:
			return fmt.Sprintf("Init:%d/%d", i, len(s.InitContainerStatuses))
		}
	}
	reason := string(s.Phase)
	for _, cs := range s.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			reason = cs.State.Waiting.Reason
		}
	}
	return reason
}

func TestStartedStatus(t *testing.T) {
	readinessProbe := &corev1.Probe{InitialDelaySeconds: 7, PeriodSeconds: 3, SuccessThreshold: 1, FailureThreshold: 1}
	startupProbe := &corev1.Probe{InitialDelaySeconds: 5, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 30}
	pod := func(init []corev1.Container, main ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p"}, Spec: corev1.PodSpec{InitContainers: init, Containers: main}}
	}
	app := corev1.Container{Name: "app", Image: "registry.example/app:1"}
	probed := app
	probed.ReadinessProbe = readinessProbe
	slow := app
	slow.StartupProbe = startupProbe
	bad := corev1.Container{Name: "bad", Image: "foo:non-existent"}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := corev1.Container{Name: "proxy", Image: "registry.example/proxy:1", RestartPolicy: &always, StartupProbe: startupProbe}
	setup := corev1.Container{Name: "setup", Image: "registry.example/setup:1"}

	type want struct {
		phase       corev1.PodPhase
		kubectl     string
		ready       bool
		readySince  time.Duration
		initialized bool
		message     string // of Ready when not ready, or of Initialized when not initialized
		started     []bool // of the main containers
		wake        time.Duration
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		at   time.Duration
		want want
	}{
		{"no probes: ready at once", pod(nil, app), 0,
			want{phase: corev1.PodRunning, kubectl: "Running", ready: true, initialized: true, started: []bool{true}}},
		{"readiness probe: not ready before its initial delay", pod(nil, probed), 6 * time.Second,
			want{phase: corev1.PodRunning, kubectl: "Running", initialized: true, message: "containers with unready status: [app]", started: []bool{true}, wake: time.Second}},
		{"readiness probe: ready after it", pod(nil, probed), 7 * time.Second,
			want{phase: corev1.PodRunning, kubectl: "Running", ready: true, readySince: 7 * time.Second, initialized: true, started: []bool{true}}},
		{"startup probe: not started", pod(nil, slow), 3 * time.Second,
			want{phase: corev1.PodRunning, kubectl: "Running", initialized: true, message: "containers with unready status: [app]", started: []bool{false}, wake: 2 * time.Second}},
		{"startup probe: started and ready", pod(nil, slow), 5 * time.Second,
			want{phase: corev1.PodRunning, kubectl: "Running", ready: true, readySince: 5 * time.Second, initialized: true, started: []bool{true}}},
		{"image cannot be pulled: ErrImagePull, Pending", pod(nil, app, bad), 0,
			want{phase: corev1.PodPending, kubectl: "ErrImagePull", initialized: true, message: "containers with unready status: [bad]", started: []bool{true, false}, wake: 5 * time.Second}},
		{"then ImagePullBackOff", pod(nil, app, bad), 5 * time.Second,
			want{phase: corev1.PodPending, kubectl: "ImagePullBackOff", initialized: true, message: "containers with unready status: [bad]", started: []bool{true, false}, wake: 5 * time.Second}},
		{"init image cannot be pulled", pod([]corev1.Container{{Name: "init", Image: "registry.invalid/init:1"}}, app), time.Minute,
			want{phase: corev1.PodPending, kubectl: "Init:ImagePullBackOff", message: "containers with incomplete status: [init]", started: []bool{false}, wake: 10 * time.Second}},
		{"a sidecar starting holds the next init container back", pod([]corev1.Container{sidecar, setup}, app), 2 * time.Second,
			want{phase: corev1.PodPending, kubectl: "Init:0/2", message: "containers with incomplete status: [proxy setup]", started: []bool{false}, wake: 3 * time.Second}},
		{"then everything runs", pod([]corev1.Container{sidecar, setup}, app), 5 * time.Second,
			want{phase: corev1.PodRunning, kubectl: "Running", ready: true, readySince: 5 * time.Second, initialized: true, started: []bool{true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, wake := statusAt(t, tt.pod, tt.at, [numProbeKinds]probeEpisode{})
			w := tt.want
			if s.Phase != w.phase || kubectlStatus(s) != w.kubectl || wake != w.wake {
				t.Errorf("phase %s, kubectl STATUS %s, wake in %s; want %s, %s, %s", s.Phase, kubectlStatus(s), wake, w.phase, w.kubectl, w.wake)
			}
			ready, initialized := podCond(s, corev1.PodReady), podCond(s, corev1.PodInitialized)
			if (ready.Status == corev1.ConditionTrue) != w.ready || podCond(s, corev1.ContainersReady).Status != ready.Status {
				t.Errorf("Ready %+v, ContainersReady %+v; want ready %v", ready, podCond(s, corev1.ContainersReady), w.ready)
			}
			if w.ready && !ready.LastTransitionTime.Time.Equal(t0.Add(w.readySince)) {
				t.Errorf("Ready since t0+%s, want t0+%s", ready.LastTransitionTime.Sub(t0), w.readySince)
			}
			if (initialized.Status == corev1.ConditionTrue) != w.initialized {
				t.Errorf("Initialized %+v, want %v", initialized, w.initialized)
			}
			msg := ready.Message
			if !w.initialized {
				msg = initialized.Message
			}
			if msg != w.message {
				t.Errorf("message %q, want %q", msg, w.message)
			}
			if len(s.ContainerStatuses) != len(w.started) {
				t.Fatalf("container statuses %+v", s.ContainerStatuses)
			}
			for i, cs := range s.ContainerStatuses {
				if cs.Started == nil || *cs.Started != w.started[i] {
					t.Errorf("container %s started = %v, want %v", cs.Name, cs.Started, w.started[i])
				}
				running := cs.State.Running != nil
				if running != (cs.ContainerID != "") || running != (cs.ImageID != "") {
					t.Errorf("container %s: running %v with containerID %q, imageID %q", cs.Name, running, cs.ContainerID, cs.ImageID)
				}
				if running && (!strings.HasPrefix(cs.ImageID, "registry.example/app@sha256:") || cs.Image != "registry.example/app:1") {
					t.Errorf("container %s: image %q, imageID %q", cs.Name, cs.Image, cs.ImageID)
				}
				if !running && cs.Image != tt.pod.Spec.Containers[i].Image {
					t.Errorf("waiting container %s reports image %q", cs.Name, cs.Image)
				}
			}
			if s.PodIP != "10.128.0.2" || podCond(s, corev1.PodScheduled).Status != corev1.ConditionTrue ||
				podCond(s, corev1.PodReadyToStartContainers).Status != corev1.ConditionTrue {
				t.Errorf("podIP %s, conditions %+v", s.PodIP, s.Conditions)
			}
		})
	}
}

// TestStartedStatusKeepsRestartCounts: the stub restarts nothing, but a count the status has
// (from an earlier kubelet, say) is kept.
func TestStartedStatusKeepsRestartCounts(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 4}}}}
	s, _ := statusAt(t, pod, 0, [numProbeKinds]probeEpisode{})
	if s.ContainerStatuses[0].RestartCount != 4 {
		t.Errorf("restartCount = %d, want 4", s.ContainerStatuses[0].RestartCount)
	}
}

// TestStartedStatusCompletes: with complete-after set, a pod that is not restarted ends
// Succeeded at that time, its sidecar too; a pod that is restarted never does; and of
// complete-after and fail-after the sooner one decides.
func TestStartedStatusCompletes(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := func(policy corev1.RestartPolicy) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p"}, Spec: corev1.PodSpec{
			RestartPolicy:  policy,
			InitContainers: []corev1.Container{{Name: "proxy", Image: "registry.example/proxy:1", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	}
	status := func(p *corev1.Pod, f faults, failAfter, d time.Duration) (corev1.PodStatus, time.Duration) {
		rec := &podRecord{admitted: true, start: t0, ip: "10.128.0.2", failAfter: failAfter}
		return startedStatus(p, statusInput{hostIP: "172.16.0.1", rec: rec,
			tl: timeline(rec, p.Spec.RestartPolicy, 0, f), now: t0.Add(d)})
	}
	tests := []struct {
		name      string
		policy    corev1.RestartPolicy
		complete  time.Duration
		failAfter time.Duration
		at        time.Duration
		phase     corev1.PodPhase
		exitCode  int32
		wake      time.Duration
	}{
		{"Never, before it completes", corev1.RestartPolicyNever, 10 * time.Second, 0, 4 * time.Second, corev1.PodRunning, -1, 6 * time.Second},
		{"Never, when it completes", corev1.RestartPolicyNever, 10 * time.Second, 0, 10 * time.Second, corev1.PodSucceeded, 0, 0},
		{"OnFailure, after it completed", corev1.RestartPolicyOnFailure, 10 * time.Second, 0, time.Hour, corev1.PodSucceeded, 0, 0},
		{"Always never completes", corev1.RestartPolicyAlways, 10 * time.Second, 0, time.Hour, corev1.PodRunning, -1, 0},
		{"complete-after unset", corev1.RestartPolicyNever, 0, 0, time.Hour, corev1.PodRunning, -1, 0},
		{"completes before it would fail", corev1.RestartPolicyNever, 10 * time.Second, 20 * time.Second, time.Hour, corev1.PodSucceeded, 0, 0},
		{"fails before it would complete", corev1.RestartPolicyNever, 20 * time.Second, 10 * time.Second, time.Hour, corev1.PodFailed, 1, 0},
		{"fails, then would have completed: wakes at the failure", corev1.RestartPolicyNever, 20 * time.Second, 10 * time.Second, 5 * time.Second, corev1.PodRunning, -1, 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, wake := status(pod(tc.policy), faults{completeAfter: tc.complete}, tc.failAfter, tc.at)
			if s.Phase != tc.phase || wake != tc.wake {
				t.Fatalf("phase %s, wake in %v; want %s, %v", s.Phase, wake, tc.phase, tc.wake)
			}
			if tc.exitCode < 0 {
				return
			}
			for _, cs := range append(s.InitContainerStatuses, s.ContainerStatuses...) {
				if term := cs.State.Terminated; term == nil || term.ExitCode != tc.exitCode {
					t.Errorf("container %s: %+v, want terminated with exit code %d", cs.Name, cs.State, tc.exitCode)
				}
			}
			if podCond(s, corev1.PodReady).Status != corev1.ConditionFalse || s.ContainerStatuses[0].Ready {
				t.Errorf("a pod that ended is ready: %+v", s)
			}
		})
	}
}
