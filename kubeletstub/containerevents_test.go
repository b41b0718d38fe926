package kubeletstub

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/internal/poll"
)

// podEvents lists "fieldPath reason: message" for the events of pod recorded by node,
// sorted.
func (tf *testFleet) podEvents(t *testing.T, pod, node string) []string {
	t.Helper()
	var out []string
	for _, e := range tf.listEvents(t) {
		if e.InvolvedObject.Name == pod && e.Source.Host == node && e.Source.Component == "kubelet" {
			if e.Type != corev1.EventTypeNormal || e.InvolvedObject.Kind != "Pod" || string(e.InvolvedObject.UID) != "uid-"+pod {
				t.Errorf("event %s/%s: type %s, object %+v", e.Reason, e.Message, e.Type, e.InvolvedObject)
			}
			out = append(out, e.InvolvedObject.FieldPath+" "+e.Reason+": "+e.Message)
		}
	}
	slices.Sort(out)
	return out
}

// listEvents lists the events recorded in the namespace "default", where a kubelet records its
// pods' and its Node's.
func (tf *testFleet) listEvents(t *testing.T) []corev1.Event {
	t.Helper()
	evs, err := tf.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	return evs.Items
}

// waitPodEvents waits until pod has exactly want (in any order) from node n-0.
func (tf *testFleet) waitPodEvents(t *testing.T, pod string, want []string) {
	t.Helper()
	waitEvents(t, "the events of "+pod, func() []string { return tf.podEvents(t, pod, "n-0") }, want)
}

// waitEvents waits until list, which sorts, returns exactly want in any order.
func waitEvents(t *testing.T, what string, list func() []string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	poll.UntilErr(t, waitTimeout, what, func() (bool, error) {
		got := list()
		if slices.Equal(got, want) {
			return true, nil
		}
		return false, fmt.Errorf("have:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	})
}

// pulledAndStarted are the events of a container whose image the node pulls first.
func pulledAndStarted(container, image string) []string {
	return []string{
		container + ` Pulling: Pulling image "` + image + `"`,
		container + ` Pulled: Successfully pulled image "` + image + `" in 0s (0s including waiting). Image size: 0 bytes.`,
		container + ` Created: Container created`,
		container + ` Started: Container started`,
	}
}

// TestContainerEvents: the stub records a kubelet's Normal events as it starts containers
// (init containers too) and stops them: an IfNotPresent image is pulled once per node, an
// image without a tag (policy Always) each time, and a deleted pod's running containers are
// killed.
func TestContainerEvents(t *testing.T) {
	cfg := testConfig(1)
	cfg.RecordEvents = true
	cfg.EventQPS = 0
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)

	first := newPod(podSpec{name: "first", node: "n-0"})
	first.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox:1.36", ImagePullPolicy: corev1.PullIfNotPresent}}
	first.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	tf.createPod(t, first)
	tf.waitPhase(t, "first", corev1.PodRunning)
	tf.waitPodEvents(t, "first", append(pulledAndStarted("spec.initContainers{setup}", "busybox:1.36"),
		pulledAndStarted("spec.containers{app}", "registry.example/app:1")...))

	// The same image again, IfNotPresent: on the node already. No tag and no policy: the
	// API server's default, Always, pulls it every time.
	again := newPod(podSpec{name: "again", node: "n-0"})
	again.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	again.Spec.Containers = append(again.Spec.Containers, corev1.Container{Name: "latest", Image: "registry.example/side"})
	tf.createPod(t, again)
	tf.waitPhase(t, "again", corev1.PodRunning)
	againStarted := append([]string{
		`spec.containers{app} Pulled: Container image "registry.example/app:1" already present on machine and can be accessed by the pod`,
		`spec.containers{app} Created: Container created`,
		`spec.containers{app} Started: Container started`,
	}, pulledAndStarted("spec.containers{latest}", "registry.example/side:latest")...)
	tf.waitPodEvents(t, "again", againStarted)

	// Deleting it stops both containers; nothing is started again.
	p := tf.pod(t, "again")
	tf.deletePod(t, p)
	tf.waitPodEvents(t, "again", append(againStarted,
		`spec.containers{app} Killing: Stopping container app`,
		`spec.containers{latest} Killing: Stopping container latest`))
}

// TestContainerEventsAfterRestart: a stub restarted over a running pod records nothing for
// it, and knows its image is on the node.
func TestContainerEventsAfterRestart(t *testing.T) {
	cfg := testConfig(1)
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	tf.createPod(t, newPod(podSpec{name: "before", node: "n-0"}))
	before := tf.waitPhase(t, "before", corev1.PodRunning)

	cfg.RecordEvents = true
	tf2 := newTestFleetAt(t, cfg, tf.clock.Now(), tf.node(t, "n-0"), before)
	tf2.waitReady(t)
	poll.Until(t, waitTimeout, "the restarted stub to sync before", func() bool { return tf2.pods.queue.Len() == 0 })
	after := newPod(podSpec{name: "after", node: "n-0"})
	after.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	tf2.createPod(t, after)
	tf2.waitPhase(t, "after", corev1.PodRunning)
	tf2.waitPodEvents(t, "after", []string{
		`spec.containers{app} Pulled: Container image "registry.example/app:1" already present on machine and can be accessed by the pod`,
		`spec.containers{app} Created: Container created`,
		`spec.containers{app} Started: Container started`,
	})
	if got := tf2.podEvents(t, "before", "n-0"); len(got) != 0 {
		t.Errorf("the restarted stub recorded events for a pod it found running: %v", got)
	}
}

// TestContainerEventBudget: event-qps and event-burst bound the fleet's container events; a
// pod whose events do not all fit gets none, and the pods run all the same.
func TestContainerEventBudget(t *testing.T) {
	cfg := testConfig(1)
	cfg.RecordEvents = true
	cfg.EventQPS = 0.001   // the fake clock stands still: no token comes back during the test
	cfg.EventBurst = 5 + 6 // the node's start, then six container events
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)

	tf.createPod(t, newPod(podSpec{name: "fits", node: "n-0"}))
	tf.waitPhase(t, "fits", corev1.PodRunning)
	tf.waitPodEvents(t, "fits", pulledAndStarted("spec.containers{app}", "registry.example/app:1"))
	// Two tokens are left; this pod needs three.
	tf.createPod(t, newPod(podSpec{name: "over", node: "n-0"}))
	tf.waitPhase(t, "over", corev1.PodRunning)
	poll.Until(t, waitTimeout, "the dropped events are counted", func() bool {
		return counterValue(t, tf.metrics.eventsDropped.WithLabelValues(eventsOfContainers)) == 3
	})
	if got := tf.podEvents(t, "over", "n-0"); len(got) != 0 {
		t.Errorf("events beyond the budget were recorded: %v", got)
	}
}

func TestImagePullPolicyAndName(t *testing.T) {
	for _, tc := range []struct {
		spec   string
		policy corev1.PullPolicy
		named  string
	}{
		{"busybox", corev1.PullAlways, "busybox:latest"},
		{"busybox:latest", corev1.PullAlways, "busybox:latest"},
		{"busybox:1.36", corev1.PullIfNotPresent, "busybox:1.36"},
		{"registry.example:5000/team/agent", corev1.PullAlways, "registry.example:5000/team/agent:latest"},
		{"registry.example:5000/team/agent:2", corev1.PullIfNotPresent, "registry.example:5000/team/agent:2"},
		{"busybox@sha256:" + strings.Repeat("a", 64), corev1.PullIfNotPresent, "busybox@sha256:" + strings.Repeat("a", 64)},
	} {
		if got := defaultPullPolicy(tc.spec); got != tc.policy {
			t.Errorf("defaultPullPolicy(%q) = %s, want %s", tc.spec, got, tc.policy)
		}
		if got := imageWithTag(tc.spec); got != tc.named {
			t.Errorf("imageWithTag(%q) = %q, want %q", tc.spec, got, tc.named)
		}
	}
}
