package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"

	"github.com/miniplane/miniplane/internal/poll"
)

// statusUpdates counts pod status updates per pod.
func (tf *testFleet) statusUpdates() map[string]int {
	out := map[string]int{}
	for _, a := range tf.client.Actions() {
		if u, ok := a.(clienttesting.UpdateAction); ok && a.GetResource().Resource == "pods" && a.GetSubresource() == "status" {
			out[u.GetObject().(metav1.Object).GetName()]++
		}
	}
	return out
}

func TestPodLifecycle(t *testing.T) {
	cfg := testConfig(1)
	cfg.Template.ReadyDelay = 5 * time.Second
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	tf.createPod(t, newPod(podSpec{name: "a", node: "n-0"}))
	tf.createPod(t, newPod(podSpec{name: "b", node: "n-0"}))
	tf.createPod(t, newPod(podSpec{name: "elsewhere", node: "not-ours"}))

	a := tf.waitPhase(t, "a", corev1.PodRunning)
	b := tf.waitPhase(t, "b", corev1.PodRunning)
	_, block, _ := net.ParseCIDR("10.128.0.0/24")
	for _, p := range []*corev1.Pod{a, b} {
		checkStartedNotReady(t, p, block)
	}
	if a.Status.PodIP == b.Status.PodIP {
		t.Errorf("pods a and b share IP %s", a.Status.PodIP)
	}
	if p := tf.pod(t, "elsewhere"); p.Status.Phase != corev1.PodPending {
		t.Errorf("a pod bound to another node was touched: %+v", p.Status)
	}

	tf.clock.Step(5 * time.Second)
	poll.Until(t, waitTimeout, "a and b turn Ready", func() bool { return podReady(tf.pod(t, "a")) && podReady(tf.pod(t, "b")) })
	a = tf.pod(t, "a")
	if c := findPodCondition(a, corev1.PodReady); !c.LastTransitionTime.Time.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("Ready transition at t0+%s, want t0+5s", c.LastTransitionTime.Time.Sub(t0))
	}
	if !a.Status.ContainerStatuses[0].Ready {
		t.Errorf("container not ready: %+v", a.Status.ContainerStatuses[0])
	}

	// A steady pod is not written again, even when its node's pods are all re-synced. Wait
	// until the fleet's own cache shows them Ready too: a re-sync from an older cached
	// status would compute a newer transition and rightly write it.
	poll.Until(t, waitTimeout, "the fleet's cache has a and b Ready", func() bool {
		for _, name := range []string{"a", "b"} {
			if p, err := tf.pods.podLister.Pods("default").Get(name); err != nil || !podReady(p) {
				return false
			}
		}
		return true
	})
	writes := tf.statusUpdates()
	syncs := counterValue(t, tf.metrics.podSyncs)
	tf.clock.Step(time.Minute)
	tf.annotate(t, "n-0", AnnotationReadyDelay, ptr("1s"))
	poll.Until(t, waitTimeout, "a and b re-synced", func() bool { return counterValue(t, tf.metrics.podSyncs) >= syncs+2 })
	if got := tf.statusUpdates(); got["a"] != writes["a"] || got["b"] != writes["b"] {
		t.Errorf("steady pods rewritten: before %v, after %v", writes, got)
	}

	// Deletion: containers are stopped (terminated), then the pod is deleted with grace 0.
	tf.deletePod(t, a)
	checkStoppedThenDeleted(t, tf, "a")
}

// checkStartedNotReady checks the status of a pod the stub started at t0 on node n-0, whose
// ready delay has not passed.
func checkStartedNotReady(t *testing.T, p *corev1.Pod, block *net.IPNet) {
	t.Helper()
	if p.Status.StartTime == nil || !p.Status.StartTime.Time.Equal(t0) {
		t.Errorf("%s startTime = %v, want t0", p.Name, p.Status.StartTime)
	}
	if ip := net.ParseIP(p.Status.PodIP); ip == nil || !block.Contains(ip) || len(p.Status.PodIPs) != 1 {
		t.Errorf("%s podIP = %q (%v), want one IP in %s", p.Name, p.Status.PodIP, p.Status.PodIPs, block)
	}
	if p.Status.HostIP != "172.16.0.1" {
		t.Errorf("%s hostIP = %q, want the node's InternalIP", p.Name, p.Status.HostIP)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("%s container statuses = %+v", p.Name, p.Status.ContainerStatuses)
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.Name != "app" || cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(t0) || cs.Ready || cs.Image != "registry.example/app:1" {
		t.Errorf("%s container status = %+v, want app running since t0, not ready", p.Name, cs)
	}
	if podReady(p) {
		t.Errorf("%s is Ready before the ready delay", p.Name)
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.PodReadyToStartContainers} {
		if c := findPodCondition(p, typ); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("%s condition %s = %+v, want True", p.Name, typ, c)
		}
	}
}

// checkStoppedThenDeleted checks, in the recorded actions, that the stub stopped the deleted
// pod's containers (a Succeeded status with terminated containers) before deleting it with
// grace period 0 and its UID as precondition.
func checkStoppedThenDeleted(t *testing.T, tf *testFleet, name string) {
	t.Helper()
	var stopped *corev1.Pod
	var deleteOpts *metav1.DeleteOptions
	for _, act := range tf.client.Actions() {
		switch act := act.(type) {
		case clienttesting.UpdateAction:
			if p, ok := act.GetObject().(*corev1.Pod); ok && p.Name == name && act.GetSubresource() == "status" {
				stopped = p
			}
		case clienttesting.DeleteAction:
			if act.GetName() == name {
				if stopped == nil {
					t.Errorf("pod deleted before its containers were stopped")
				}
				opts := act.GetDeleteOptions()
				deleteOpts = &opts
			}
		}
	}
	if stopped == nil || stopped.Status.Phase != corev1.PodSucceeded || stopped.Status.ContainerStatuses[0].State.Terminated == nil ||
		stopped.Status.ContainerStatuses[0].State.Terminated.ExitCode != 0 || podReady(stopped) {
		t.Errorf("last status before delete = %+v, want Succeeded with terminated containers", stopped)
	}
	if deleteOpts == nil || deleteOpts.GracePeriodSeconds == nil || *deleteOpts.GracePeriodSeconds != 0 ||
		deleteOpts.Preconditions == nil || string(*deleteOpts.Preconditions.UID) != "uid-"+name {
		t.Errorf("delete options = %+v, want grace 0 and the pod's UID as precondition", deleteOpts)
	}
}

func TestStartDelay(t *testing.T) {
	cfg := testConfig(1)
	cfg.Template.StartDelay = 3 * time.Second
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	tf.createPod(t, newPod(podSpec{name: "p", node: "n-0"}))
	poll.Until(t, waitTimeout, "p is creating", func() bool { return len(tf.pod(t, "p").Status.ContainerStatuses) == 1 })
	p := tf.pod(t, "p")
	if w := p.Status.ContainerStatuses[0].State.Waiting; p.Status.Phase != corev1.PodPending || w == nil || w.Reason != "ContainerCreating" || p.Status.PodIP == "" {
		t.Errorf("status during the start delay = %+v, want Pending, ContainerCreating, with an IP", p.Status)
	}
	tf.clock.Step(3 * time.Second)
	p = tf.waitPhase(t, "p", corev1.PodRunning)
	if !podReady(p) || !p.Status.ContainerStatuses[0].State.Running.StartedAt.Time.Equal(t0.Add(3*time.Second)) {
		t.Errorf("after the start delay = %+v, want running since t0+3s and Ready", p.Status)
	}
}

// TestRestartKeepsAdmittedPods starts a stub over pods an earlier run admitted: they are not
// admitted again or rewritten, and they still count against the node's capacity.
func TestRestartKeepsAdmittedPods(t *testing.T) {
	cfg := testConfig(1)
	cfg.Template.Capacity.Pods = 1
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	tf.createPod(t, newPod(podSpec{name: "old", node: "n-0"}))
	tf.waitPhase(t, "old", corev1.PodRunning)
	poll.Until(t, waitTimeout, "old is Ready", func() bool { return podReady(tf.pod(t, "old")) })
	old := tf.pod(t, "old")
	node := tf.node(t, "n-0")

	// A second stub over the same objects (the first keeps running but only the second's
	// writes are counted).
	tf2 := newTestFleet(t, cfg, node, old)
	tf2.waitReady(t)
	tf2.createPod(t, newPod(podSpec{name: "new", node: "n-0"}))
	if p := tf2.waitPhase(t, "new", corev1.PodFailed); p.Status.Reason != "OutOfpods" {
		t.Errorf("new pod reason %q, want OutOfpods: the old pod still holds the only slot", p.Status.Reason)
	}
	if got := tf2.statusUpdates()["old"]; got != 0 {
		t.Errorf("the restarted stub rewrote the old pod %d times", got)
	}
}

// A pod whose sync keeps failing shows at the default (Info) level; only the first few
// conflicts from a stale cache stay at Debug.
func TestSyncFailureLevel(t *testing.T) {
	conflict := apierrors.NewConflict(corev1.Resource("pods"), "p", errors.New("the object has been modified"))
	tests := []struct {
		name    string
		err     error
		retries int
		want    slog.Level
	}{
		{name: "first conflict", err: conflict, retries: 1, want: slog.LevelDebug},
		{name: "wrapped conflict", err: fmt.Errorf("update pod status: %w", conflict), retries: quietConflicts, want: slog.LevelDebug},
		{name: "conflicts keep coming", err: conflict, retries: quietConflicts + 1, want: slog.LevelWarn},
		{name: "server error", err: apierrors.NewInternalError(errors.New("etcd down")), retries: 1, want: slog.LevelWarn},
		{name: "network error", err: errors.New("connection refused"), retries: 1, want: slog.LevelWarn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := syncFailureLevel(tt.err, tt.retries); got != tt.want {
				t.Errorf("syncFailureLevel = %v, want %v", got, tt.want)
			}
		})
	}
}

// Without a pod-cidr of its own a node registers with no spec.podCIDR, and its pods wait
// until the control plane assigns one; their IPs then come from that block.
func TestPodsWaitForAssignedPodCIDR(t *testing.T) {
	cfg := testConfig(2)
	cfg.PodCIDR = ""
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	if n := tf.node(t, "n-0"); n.Spec.PodCIDR != "" || len(n.Spec.PodCIDRs) != 0 {
		t.Fatalf("node registered with pod CIDR %q %v, want none", n.Spec.PodCIDR, n.Spec.PodCIDRs)
	}
	tf.createPod(t, newPod(podSpec{name: "waits", node: "n-0"}))
	// A host-network pod on the other node needs no pod CIDR: once it runs, the pods are
	// being worked on, and the first pod has had its chance.
	host := newPod(podSpec{name: "host", node: "n-1"})
	host.Spec.HostNetwork = true
	tf.createPod(t, host)
	tf.waitPhase(t, "host", corev1.PodRunning)
	if p := tf.pod(t, "waits"); p.Status.Phase != corev1.PodPending || p.Status.PodIP != "" {
		t.Fatalf("pod on a node without pod CIDR: phase %s IP %q, want Pending without IP", p.Status.Phase, p.Status.PodIP)
	}

	node := tf.node(t, "n-0")
	node.Spec.PodCIDR, node.Spec.PodCIDRs = "10.200.7.0/24", []string{"10.200.7.0/24"}
	if _, err := tf.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := tf.waitPhase(t, "waits", corev1.PodRunning)
	_, block, _ := net.ParseCIDR("10.200.7.0/24")
	if ip := net.ParseIP(p.Status.PodIP); ip == nil || !block.Contains(ip) {
		t.Errorf("pod IP %q, want one of the assigned block %s", p.Status.PodIP, block)
	}
}
