package kubeletstub

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/miniplane/miniplane/internal/poll"
)

func TestNextDueSpreadsNodesOverThePeriod(t *testing.T) {
	h := &heartbeater{nodes: make([]*stubNode, 4), origin: t0}
	p := 10 * time.Second
	tests := []struct {
		index int
		now   time.Time
		want  time.Time
	}{
		{0, t0, t0.Add(p)},                       // just beat at the origin
		{1, t0, t0.Add(2500 * time.Millisecond)}, // first slot of node 1
		{3, t0, t0.Add(7500 * time.Millisecond)}, // first slot of node 3
		{1, t0.Add(2500 * time.Millisecond), t0.Add(12500 * time.Millisecond)},
		{2, t0.Add(4 * time.Second), t0.Add(5 * time.Second)},
		{2, t0.Add(33 * time.Second), t0.Add(35 * time.Second)}, // late: no burst, next slot
		{0, t0.Add(-time.Second), t0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("node%d@%s", tt.index, tt.now.Sub(t0)), func(t *testing.T) {
			if got := h.nextDue(tt.index, p, tt.now); !got.Equal(tt.want) {
				t.Errorf("nextDue = t0+%s, want t0+%s", got.Sub(t0), tt.want.Sub(t0))
			}
		})
	}
}

func (tf *testFleet) renewTime(t *testing.T, node string) time.Time {
	t.Helper()
	l, err := tf.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease %s: %v", node, err)
	}
	return l.Spec.RenewTime.Time
}

// statusPatches counts node status patches per node.
func (tf *testFleet) statusPatches() map[string]int {
	out := map[string]int{}
	for _, a := range tf.client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && a.GetResource().Resource == "nodes" && a.GetSubresource() == "status" {
			out[p.GetName()]++
		}
	}
	return out
}

// TestLateNodeAddPokesOnlyJobsNotYetRun checks the node informer's add handler, which can
// run after the node's first beats (client-go notifies handlers after the cache has the
// object): a job that has beaten keeps its slot, one that has not runs now.
func TestLateNodeAddPokesOnlyJobsNotYetRun(t *testing.T) {
	tests := []struct {
		name     string
		progress uint32
		want     []beatKind
	}{
		{"registered, no beat yet", progressRegistered, []beatKind{beatStatus, beatLease}},
		{"status sent", progressRegistered | progressStatus, []beatKind{beatLease}},
		{"lease sent", progressRegistered | progressLease, []beatKind{beatStatus}},
		{"both sent", progressAll, nil},
		{"not registered", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Built but not run: nothing takes keys off the queue while the test reads it.
			f, err := New(testConfig(2), Options{Client: fake.NewClientset(), Clock: testingclock.NewFakeClock(t0), Logger: quietLogger()})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(f.heartbeat.queue.ShutDown)
			n := f.byName["n-1"]
			n.progress.Store(tt.progress)
			f.nodeAdded(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-1"}})
			var got []beatKind
			for f.heartbeat.queue.Len() > 0 {
				key, _ := f.heartbeat.queue.Get()
				if key.node != int32(n.index) {
					t.Errorf("queued node %d, want %d", key.node, n.index)
				}
				got = append(got, key.kind)
				f.heartbeat.queue.Done(key)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("queued %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLeaseRenewalsAreSpreadEvenly steps a fake clock through one renew period of a fleet of
// four nodes: each node renews once, in its own quarter of the period.
func TestLeaseRenewalsAreSpreadEvenly(t *testing.T) {
	tf := newTestFleet(t, testConfig(4))
	tf.waitReady(t)
	for i := range 4 {
		name := fmt.Sprintf("n-%d", i)
		l, err := tf.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("lease %s: %v", name, err)
		}
		if *l.Spec.HolderIdentity != name || *l.Spec.LeaseDurationSeconds != 40 || !l.Spec.RenewTime.Time.Equal(t0) {
			t.Errorf("lease %s = %+v, want holder %s, 40s, renewed at t0", name, l.Spec, name)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" || l.OwnerReferences[0].Name != name {
			t.Errorf("lease %s owners = %+v, want its Node", name, l.OwnerReferences)
		}
	}
	want := []time.Time{t0, t0, t0, t0}
	for step := 1; step <= 4; step++ {
		tf.clock.Step(2500 * time.Millisecond)
		renewed := step % 4 // node 1 at 2.5s, 2 at 5s, 3 at 7.5s, 0 at 10s
		want[renewed] = tf.clock.Now()
		poll.Until(t, waitTimeout, fmt.Sprintf("n-%d renews at t0+%s", renewed, tf.clock.Now().Sub(t0)), func() bool {
			return tf.renewTime(t, fmt.Sprintf("n-%d", renewed)).Equal(want[renewed])
		})
		for i := range 4 {
			if got := tf.renewTime(t, fmt.Sprintf("n-%d", i)); !got.Equal(want[i]) {
				t.Errorf("after t0+%s: n-%d renewed at t0+%s, want t0+%s", tf.clock.Now().Sub(t0), i, got.Sub(t0), want[i].Sub(t0))
			}
		}
	}
}

// TestStatusIsWrittenOnlyWhenChangedOrDue checks the report interval: heartbeats every 10s
// look at the status but write it only once a minute (the test's report interval) unless a
// condition changes.
func TestStatusIsWrittenOnlyWhenChangedOrDue(t *testing.T) {
	tf := newTestFleet(t, testConfig(2))
	tf.waitReady(t)
	if got := tf.statusPatches(); got["n-0"] != 0 || got["n-1"] != 0 {
		t.Fatalf("status patches after registration = %v, want none: the create carried the status", got)
	}
	n0 := tf.node(t, "n-0")
	for _, typ := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		c := findNodeCondition(n0, typ)
		want := corev1.ConditionFalse
		if typ == corev1.NodeReady {
			want = corev1.ConditionTrue
		}
		if c == nil || c.Status != want || !c.LastHeartbeatTime.Time.Equal(t0) {
			t.Errorf("condition %s = %+v, want %s with heartbeat at t0", typ, c, want)
		}
	}

	// Five heartbeat periods with nothing changed: checks, no writes.
	for range 5 {
		tf.clock.Step(10 * time.Second)
		step := tf.clock.Now()
		poll.Until(t, waitTimeout, "both leases renewed at t0+"+step.Sub(t0).String(), func() bool {
			// n-1's slot (5s into each period) was stepped over: it renews when it sees the clock.
			return tf.renewTime(t, "n-0").Equal(step) && tf.renewTime(t, "n-1").Equal(step)
		})
	}
	if got := tf.statusPatches(); got["n-0"] != 0 || got["n-1"] != 0 {
		t.Fatalf("status patches within the report interval = %v, want none", got)
	}

	// A condition change is written at once, without waiting for the next beat.
	tf.annotate(t, "n-1", AnnotationConditions, ptr("MemoryPressure=True"))
	poll.Until(t, waitTimeout, "n-1 reports MemoryPressure", func() bool {
		c := findNodeCondition(tf.node(t, "n-1"), corev1.NodeMemoryPressure)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	c := findNodeCondition(tf.node(t, "n-1"), corev1.NodeMemoryPressure)
	if c.Reason != "KubeletHasInsufficientMemory" || !c.LastTransitionTime.Time.Equal(tf.clock.Now()) {
		t.Errorf("MemoryPressure = %+v, want reason KubeletHasInsufficientMemory, transition now", c)
	}
	if ready := findNodeCondition(tf.node(t, "n-1"), corev1.NodeReady); !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready transition moved to %s though Ready did not change", ready.LastTransitionTime)
	}

	// At the report interval, n-0 (last written at t0) writes again although nothing changed.
	tf.clock.Step(10 * time.Second) // t0+60s
	poll.Until(t, waitTimeout, "n-0 reports after the report interval", func() bool { return tf.statusPatches()["n-0"] == 1 })
	if hb := findNodeCondition(tf.node(t, "n-0"), corev1.NodeReady).LastHeartbeatTime.Time; !hb.Equal(t0.Add(time.Minute)) {
		t.Errorf("n-0 Ready heartbeat = t0+%s, want t0+1m", hb.Sub(t0))
	}
}

// TestStopHeartbeatsAnnotation stops and resumes a node's status and lease.
func TestStopHeartbeatsAnnotation(t *testing.T) {
	tf := newTestFleet(t, testConfig(1))
	tf.waitReady(t)
	tf.annotate(t, "n-0", AnnotationStopHeartbeats, ptr("true"))
	// Wait until the stub has seen the annotation: its poke of the lease job skips it.
	poll.Until(t, waitTimeout, "the lease job is skipped", func() bool {
		return counterValue(t, tf.metrics.heartbeats.WithLabelValues("lease", resultSkipped)) > 0
	})
	skipped := func() float64 { return counterValue(t, tf.metrics.heartbeats.WithLabelValues("status", resultSkipped)) }
	for range 10 {
		before := skipped()
		tf.clock.Step(10 * time.Second)
		poll.Until(t, waitTimeout, "a skipped status check", func() bool { return skipped() > before })
	}
	if got := tf.renewTime(t, "n-0"); !got.Equal(t0) {
		t.Errorf("lease renewed at t0+%s while heartbeats are stopped", got.Sub(t0))
	}
	if got := tf.statusPatches()["n-0"]; got != 0 {
		t.Errorf("%d status patches while heartbeats are stopped", got)
	}

	tf.annotate(t, "n-0", AnnotationStopHeartbeats, nil)
	poll.Until(t, waitTimeout, "the lease is renewed again", func() bool { return tf.renewTime(t, "n-0").Equal(tf.clock.Now()) })
	poll.Until(t, waitTimeout, "the status is reported again", func() bool { return tf.statusPatches()["n-0"] == 1 })
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatalf("read counter: %v", err)
	}
	return m.GetCounter().GetValue()
}
