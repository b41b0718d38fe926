package kubeletstub

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/internal/poll"
)

// waitingReason returns the waiting reason of the pod's first container ("" if it is not
// waiting).
func (tf *testFleet) waitingReason(t *testing.T, name string) string {
	t.Helper()
	p := tf.pod(t, name)
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
		return ""
	}
	return p.Status.ContainerStatuses[0].State.Waiting.Reason
}

// TestImagePullFailures runs pods with images that cannot be pulled through a fleet: the
// configured default list and a node annotation; the containers go ErrImagePull →
// ImagePullBackOff → ErrImagePull on the fake clock, the pods stay Pending and unready, and
// the kubelet's events are recorded.
func TestImagePullFailures(t *testing.T) {
	cfg := testConfig(2)
	cfg.RecordEvents = true
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	missing := newPod(podSpec{name: "missing", node: "n-0"})
	missing.Spec.Containers[0].Image = "foo:non-existent"
	tf.createPod(t, missing)
	tf.createPod(t, newPod(podSpec{name: "fine", node: "n-0"}))

	poll.Until(t, waitTimeout, "missing waits in ErrImagePull", func() bool { return tf.waitingReason(t, "missing") == reasonErrImagePull })
	tf.waitPhase(t, "fine", corev1.PodRunning)
	p := tf.pod(t, "missing")
	if p.Status.Phase != corev1.PodPending || podReady(p) || p.Status.PodIP == "" || p.Status.StartTime == nil {
		t.Errorf("missing: phase %s, ready %v, podIP %q; want Pending, unready, with an IP", p.Status.Phase, podReady(p), p.Status.PodIP)
	}
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, `":non-existent"`) {
		t.Errorf("ErrImagePull message %q does not say which entry matched", msg)
	}
	tf.clock.Step(imagePullErrorShown)
	poll.Until(t, waitTimeout, "missing backs off", func() bool { return tf.waitingReason(t, "missing") == reasonImagePullBackOff })
	tf.clock.Step(imagePullBackoffInitial - imagePullErrorShown)
	poll.Until(t, waitTimeout, "missing tries again", func() bool { return tf.waitingReason(t, "missing") == reasonErrImagePull })
	poll.Until(t, waitTimeout, "pull events", func() bool {
		evs, err := tf.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "missing" && e.Source.Host == "n-0" {
				reasons[e.Reason] = true
			}
		}
		return reasons["Failed"] && reasons["BackOff"]
	})

	// The annotation makes n-1 fail an image every other node pulls; n-0 is unaffected.
	tf.annotate(t, "n-1", AnnotationImagePullFailures, ptr("registry.example/"))
	poll.Until(t, waitTimeout, "the fleet saw the annotation", func() bool {
		n, err := tf.nodeFactory.Core().V1().Nodes().Lister().Get("n-1")
		return err == nil && n.Annotations[AnnotationImagePullFailures] != ""
	})
	tf.createPod(t, newPod(podSpec{name: "on-n1", node: "n-1"}))
	tf.createPod(t, newPod(podSpec{name: "on-n0", node: "n-0"}))
	poll.Until(t, waitTimeout, "on-n1 waits in ErrImagePull", func() bool { return tf.waitingReason(t, "on-n1") == reasonErrImagePull })
	if msg := tf.pod(t, "on-n1").Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, AnnotationImagePullFailures) {
		t.Errorf("message %q does not name the annotation", msg)
	}
	tf.waitPhase(t, "on-n0", corev1.PodRunning)

	// Removing it lets the next attempt pull.
	tf.annotate(t, "n-1", AnnotationImagePullFailures, nil)
	poll.Until(t, waitTimeout, "the fleet saw the annotation go", func() bool {
		n, err := tf.nodeFactory.Core().V1().Nodes().Lister().Get("n-1")
		return err == nil && n.Annotations[AnnotationImagePullFailures] == ""
	})
	if p := tf.waitPhase(t, "on-n1", corev1.PodRunning); !p.Status.ContainerStatuses[0].State.Running.StartedAt.Time.Equal(t0.Add(imagePullBackoffInitial)) {
		t.Errorf("on-n1 runs since t0+%s, want since its pull began", p.Status.ContainerStatuses[0].State.Running.StartedAt.Sub(t0))
	}
}

// TestReadinessProbesAndFaults: a readiness probe delays Ready by its initial delay; the
// fail-probes annotation turns the pod unready failureThreshold periods after it appears,
// and removing it makes the pod ready again successThreshold periods later.
func TestReadinessProbesAndFaults(t *testing.T) {
	tf := newTestFleet(t, testConfig(1))
	tf.waitReady(t)
	p := newPod(podSpec{name: "probed", node: "n-0"})
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{InitialDelaySeconds: 7, PeriodSeconds: 3, SuccessThreshold: 2, FailureThreshold: 2}
	tf.createPod(t, p)
	tf.waitPhase(t, "probed", corev1.PodRunning)
	if podReady(tf.pod(t, "probed")) {
		t.Fatal("ready before the readiness probe's initial delay")
	}
	tf.clock.Step(9 * time.Second) // initial delay 7s, then a second success 3s later: t0+10s
	if podReady(tf.pod(t, "probed")) {
		t.Fatal("ready before successThreshold probes succeeded")
	}
	tf.clock.Step(time.Second)
	poll.Until(t, waitTimeout, "probed turns Ready", func() bool { return podReady(tf.pod(t, "probed")) })
	if c := findPodCondition(tf.pod(t, "probed"), corev1.PodReady); !c.LastTransitionTime.Time.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("Ready since t0+%s, want t0+10s", c.LastTransitionTime.Sub(t0))
	}

	tf.annotate(t, "n-0", AnnotationFailProbes, ptr("readiness"))
	poll.Until(t, waitTimeout, "the fault is seen", func() bool { return tf.readinessEpisode("n-0").active() })
	if !podReady(tf.pod(t, "probed")) {
		t.Fatal("unready at once; failureThreshold failures are needed")
	}
	tf.clock.Step(6 * time.Second) // failureThreshold 2 × period 3s
	poll.Until(t, waitTimeout, "probed turns unready", func() bool { return !podReady(tf.pod(t, "probed")) })
	if c := findPodCondition(tf.pod(t, "probed"), corev1.PodReady); c.Message != "containers with unready status: [app]" {
		t.Errorf("Ready condition %+v", c)
	}

	tf.annotate(t, "n-0", AnnotationFailProbes, nil)
	poll.Until(t, waitTimeout, "the fault is seen gone", func() bool { return !tf.readinessEpisode("n-0").cleared.IsZero() })
	tf.clock.Step(6 * time.Second) // successThreshold 2 × period 3s
	poll.Until(t, waitTimeout, "probed is Ready again", func() bool { return podReady(tf.pod(t, "probed")) })
}

// readinessEpisode is what the node has seen of readiness faults.
func (tf *testFleet) readinessEpisode(node string) probeEpisode {
	n := tf.byName[node]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeFaults == nil {
		return probeEpisode{}
	}
	return n.probeFaults[probeReadiness]
}
