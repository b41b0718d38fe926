package kubeletstub

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/internal/poll"
)

// TestSandboxWaitsForItsHandler: a pod of a handler the node lacks waits without a sandbox;
// once the handler is added its sandbox is created then, and its containers run the start
// delay after that, not after admission. A stub restarted over a pod whose sandbox exists
// leaves it running even when the handler is gone.
func TestSandboxWaitsForItsHandler(t *testing.T) {
	cfg := testConfig(1)
	cfg.Template.StartDelay = 2 * time.Second
	class := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata"}
	tf := newTestFleet(t, cfg, class)
	tf.waitReady(t)
	pod := newPod(podSpec{name: "p", node: "n-0"})
	pod.Spec.RuntimeClassName = ptr("kata")
	tf.createPod(t, pod)

	poll.Until(t, waitTimeout, "p waits for its sandbox", func() bool { return len(tf.pod(t, "p").Status.ContainerStatuses) == 1 })
	p := tf.pod(t, "p")
	if w := p.Status.ContainerStatuses[0].State.Waiting; p.Status.Phase != corev1.PodPending || w == nil ||
		w.Reason != "ContainerCreating" || p.Status.PodIP != "" {
		t.Fatalf("status without the handler = %+v, want Pending, ContainerCreating, no IP", p.Status)
	}
	if c := findPodCondition(p, corev1.PodReadyToStartContainers); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("PodReadyToStartContainers = %+v, want False", c)
	}
	// Time passes without the handler; what starts later is timed from when it came.
	tf.clock.Step(5 * time.Second)

	tf.annotate(t, "n-0", AnnotationRuntimeHandlers, ptr("kata"))
	poll.Until(t, waitTimeout, "p gets its sandbox and IP", func() bool { return tf.pod(t, "p").Status.PodIP != "" })
	if ph := tf.pod(t, "p").Status.Phase; ph != corev1.PodPending {
		t.Fatalf("phase %s right after the sandbox, want Pending for the 2s start delay", ph)
	}
	tf.clock.Step(2 * time.Second)
	p = tf.waitPhase(t, "p", corev1.PodRunning)
	if started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time; !started.Equal(t0.Add(7 * time.Second)) {
		t.Errorf("containers started at t0+%s, want t0+7s: the start delay counts from the sandbox", started.Sub(t0))
	}
	// The node reports the handler in its own status write, which need not have landed when
	// the pod runs: the pod's sync reads the annotation from the node informer.
	poll.Until(t, waitTimeout, "status.runtimeHandlers with runc, kata and the default", func() bool {
		return runtimeHandlersMatch(tf.node(t, "n-0").Status.RuntimeHandlers, []string{"runc", "kata"})
	})

	// A second stub over the same objects, without the handler: the pod keeps its sandbox.
	node := tf.node(t, "n-0")
	delete(node.Annotations, AnnotationRuntimeHandlers)
	tf2 := newTestFleetAt(t, cfg, tf.clock.Now(), class, node, p)
	tf2.waitReady(t)
	poll.Until(t, waitTimeout, "the restarted stub to sync p", func() bool { return tf2.pods.queue.Len() == 0 })
	if got := tf2.statusUpdates()["p"]; got != 0 {
		t.Errorf("the restarted stub rewrote the running pod %d times", got)
	}
}

// TestSandboxRetriesAClassNotYetSeen: a pod synced before its RuntimeClass reached the
// stub's cache waits, and is tried again after the kubelet's back-off, as a kubelet retries a
// failed pod sync.
func TestSandboxRetriesAClassNotYetSeen(t *testing.T) {
	tf := newTestFleet(t, testConfig(1))
	tf.waitReady(t)
	pod := newPod(podSpec{name: "p", node: "n-0"})
	pod.Spec.RuntimeClassName = ptr("late")
	tf.createPod(t, pod)
	poll.Until(t, waitTimeout, "p waits for its sandbox", func() bool { return len(tf.pod(t, "p").Status.ContainerStatuses) == 1 })
	// The sync that found no class asks to be woken after the back-off: nothing else is sure
	// to queue the pod again. (The update event of the stub's own status write may sync it
	// once more, and find the class if it came by then, so the phase alone cannot tell
	// whether the retry is there.)
	poll.Until(t, waitTimeout, "a retry of p after the back-off", func() bool {
		at, ok := tf.pods.timers.dueAt("default/p")
		return ok && at.Equal(t0.Add(sandboxRetryInterval))
	})

	tf.createClass(t, "late", "runc")
	tf.clock.Step(sandboxRetryInterval)
	tf.waitPhase(t, "p", corev1.PodRunning)
}

// createClass creates a RuntimeClass and waits until it is in the stub's cache.
func (tf *testFleet) createClass(t *testing.T, name, handler string) {
	t.Helper()
	class := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
	if _, err := tf.client.NodeV1().RuntimeClasses().Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the class in the stub's cache", func() bool {
		_, err := tf.pods.classLister.Get(name)
		return err == nil
	})
}

// dueAt is when key's timer fires, if it has one.
func (q *timerQueue[T]) dueAt(key T) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.index[key]; ok {
		return e.readyAt, true
	}
	return time.Time{}, false
}

// TestSandboxEventsNameEachCause: a kubelet records FailedCreatePodSandBox at each failed
// try, so a pod that first found no RuntimeClass and then a class whose handler the node
// lacks shows both causes, and a cause that lasts is counted at each retry, not at each of
// the stub's own status writes.
func TestSandboxEventsNameEachCause(t *testing.T) {
	cfg := testConfig(1)
	cfg.RecordEvents = true
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	pod := newPod(podSpec{name: "p", node: "n-0"})
	pod.Spec.RuntimeClassName = ptr("late")
	tf.createPod(t, pod)

	notFound := `Failed to create pod sandbox: runtimeclass.node.k8s.io "late" not found`
	noHandler := `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "kata" is configured`
	tf.waitSandboxEvents(t, "p", map[string]int32{notFound: 1})
	poll.Until(t, waitTimeout, "p synced after its status write", func() bool {
		return len(tf.pod(t, "p").Status.ContainerStatuses) == 1 && tf.pods.queue.Len() == 0
	})
	tf.waitSandboxEvents(t, "p", map[string]int32{notFound: 1})

	tf.createClass(t, "late", "kata")
	tf.clock.Step(sandboxRetryInterval)
	tf.waitSandboxEvents(t, "p", map[string]int32{notFound: 1, noHandler: 1})
	tf.clock.Step(sandboxRetryInterval)
	tf.waitSandboxEvents(t, "p", map[string]int32{notFound: 1, noHandler: 2})
}

// waitSandboxEvents waits until pod's FailedCreatePodSandBox events are want, by message
// and count.
func (tf *testFleet) waitSandboxEvents(t *testing.T, pod string, want map[string]int32) {
	t.Helper()
	poll.UntilErr(t, waitTimeout, "the FailedCreatePodSandBox events of "+pod, func() (bool, error) {
		got := map[string]int32{}
		for _, e := range tf.listEvents(t) {
			if e.InvolvedObject.Name == pod && e.Reason == "FailedCreatePodSandBox" {
				if e.Type != corev1.EventTypeWarning {
					return false, fmt.Errorf("event %q of type %s", e.Message, e.Type)
				}
				got[e.Message] += e.Count
			}
		}
		if maps.Equal(got, want) {
			return true, nil
		}
		return false, fmt.Errorf("have %v, want %v", got, want)
	})
}
