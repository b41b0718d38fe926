package kubeletstub

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
)

// TestEphemeralStatuses: an ephemeral container runs from the moment the node first sees it,
// a later sync keeps that time, a restarted stub takes it from the status, an image that
// cannot be pulled waits, and the pod's end stops the container.
func TestEphemeralStatuses(t *testing.T) {
	cluster, err := parseImagePatterns(configs.DefaultStubImagePullFailures())
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		EphemeralContainers: []corev1.EphemeralContainer{
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "busybox:1.36"}, TargetContainerName: "app"},
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "broken", Image: "foo:non-existent"}},
		},
	}}
	rec := &podRecord{admitted: true, start: t0, ip: "10.128.0.2"}
	status := func(rec *podRecord, d time.Duration) corev1.PodStatus {
		s, _ := startedStatus(pod, statusInput{hostIP: "172.16.0.1", rec: rec,
			tl: timeline(rec, pod.Spec.RestartPolicy, 0, faults{}), pulls: pullPolicy{cluster: cluster}, now: t0.Add(d)})
		return s
	}

	seen := 30 * time.Second
	s := status(rec, seen)
	if len(s.EphemeralContainerStatuses) != 2 {
		t.Fatalf("ephemeral statuses %+v", s.EphemeralContainerStatuses)
	}
	dbg, broken := s.EphemeralContainerStatuses[0], s.EphemeralContainerStatuses[1]
	if dbg.Name != "dbg" || dbg.State.Running == nil || !dbg.State.Running.StartedAt.Time.Equal(t0.Add(seen)) {
		t.Errorf("dbg: %+v, want running since t0+%s", dbg, seen)
	}
	if dbg.Ready || dbg.Started != nil || dbg.RestartCount != 0 || dbg.ContainerID != "stub://uid-p/dbg" ||
		dbg.Image != "docker.io/library/busybox:1.36" || dbg.ImageID == "" {
		t.Errorf("dbg: %+v", dbg)
	}
	if broken.State.Waiting == nil || broken.State.Waiting.Reason != reasonErrImagePull || broken.ContainerID != "" {
		t.Errorf("broken: %+v, want waiting in %s", broken, reasonErrImagePull)
	}
	if s.Phase != corev1.PodRunning || podCond(s, corev1.PodReady).Status != corev1.ConditionTrue {
		t.Errorf("an ephemeral container changed the pod: phase %s, Ready %+v", s.Phase, podCond(s, corev1.PodReady))
	}

	// A later sync computes the same start, so nothing is written again.
	if again := status(rec, time.Minute); !again.EphemeralContainerStatuses[0].State.Running.StartedAt.Equal(&dbg.State.Running.StartedAt) {
		t.Errorf("a later sync moved the start to %v", again.EphemeralContainerStatuses[0].State.Running.StartedAt)
	}
	// A restarted stub has a new record and the status the earlier one wrote.
	pod.Status = s
	restarted := &podRecord{admitted: true, start: t0, ip: "10.128.0.2"}
	if got := status(restarted, 2*time.Minute).EphemeralContainerStatuses[0].State.Running; got == nil || !got.StartedAt.Equal(&dbg.State.Running.StartedAt) {
		t.Errorf("after a restart dbg runs since %v, want %v", got, dbg.State.Running.StartedAt)
	}

	// The pod is deleted: the running ephemeral container stops with the others.
	stopped := stoppedStatus(pod, t0.Add(3*time.Minute))
	term := stopped.EphemeralContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || !term.StartedAt.Equal(&dbg.State.Running.StartedAt) || !term.FinishedAt.Time.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("stopped dbg: %+v", stopped.EphemeralContainerStatuses[0].State)
	}
	if w := stopped.EphemeralContainerStatuses[1].State.Waiting; w == nil {
		t.Errorf("stopped broken: %+v, want it still waiting (it never ran)", stopped.EphemeralContainerStatuses[1].State)
	}
}

// TestEphemeralContainerEvents: a kubelet's events for an ephemeral container added to a
// running pod (kubectl debug), with its fieldPath, and its Killing when the pod is deleted.
func TestEphemeralContainerEvents(t *testing.T) {
	cfg := testConfig(1)
	cfg.RecordEvents = true
	cfg.EventQPS = 0
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)

	pod := newPod(podSpec{name: "web", node: "n-0"})
	pod.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	tf.createPod(t, pod)
	tf.waitPhase(t, "web", corev1.PodRunning)
	started := pulledAndStarted("spec.containers{app}", "registry.example/app:1")
	tf.waitPodEvents(t, "web", started)

	p := tf.pod(t, "web")
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "dbg", Image: "busybox:1.36", ImagePullPolicy: corev1.PullIfNotPresent}, TargetContainerName: "app"}}
	if _, err := tf.client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "dbg runs", func() bool {
		st := tf.pod(t, "web").Status.EphemeralContainerStatuses
		return len(st) == 1 && st[0].State.Running != nil
	})
	started = append(started, pulledAndStarted("spec.ephemeralContainers{dbg}", "busybox:1.36")...)
	tf.waitPodEvents(t, "web", started)

	p = tf.pod(t, "web")
	tf.deletePod(t, p)
	tf.waitPodEvents(t, "web", append(started,
		`spec.containers{app} Killing: Stopping container app`,
		`spec.ephemeralContainers{dbg} Killing: Stopping container dbg`))
}
