package kubeletstub

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/internal/poll"
)

// nodeEvents lists "reason: message" for the events node's kubelet recorded on its Node, an
// event recorded twice twice, sorted.
func (tf *testFleet) nodeEvents(t *testing.T, node string) []string {
	t.Helper()
	var out []string
	for _, e := range tf.listEvents(t) {
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != node {
			continue
		}
		if e.Source.Component != "kubelet" || e.Source.Host != node || e.Type != corev1.EventTypeNormal || string(e.InvolvedObject.UID) != node {
			t.Errorf("event %s: source %+v, type %s, object %+v", e.Reason, e.Source, e.Type, e.InvolvedObject)
		}
		for range max(e.Count, 1) {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	slices.Sort(out)
	return out
}

// waitNodeEvents waits until node has exactly want, in any order.
func (tf *testFleet) waitNodeEvents(t *testing.T, node string, want []string) {
	t.Helper()
	waitEvents(t, "the events of node "+node, func() []string { return tf.nodeEvents(t, node) }, want)
}

// statusNow is the message of the kubelet's event on a condition or schedulability change.
func statusNow(node, reason string) string {
	return reason + ": Node " + node + " status is now: " + reason
}

// startedHealthy are the events of a healthy node's kubelet starting.
func startedHealthy(node string) []string {
	return []string{
		"Starting: Starting kubelet.",
		statusNow(node, "NodeHasSufficientMemory"),
		statusNow(node, "NodeHasNoDiskPressure"),
		statusNow(node, "NodeHasSufficientPID"),
		"NodeAllocatableEnforced: Updated Node Allocatable limit across pods",
	}
}

func (tf *testFleet) setUnschedulable(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	n := tf.node(t, node)
	n.Spec.Unschedulable = unschedulable
	if _, err := tf.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("cordon %s: %v", node, err)
	}
}

// TestNodeEvents: the stub records a kubelet's events on its Node as it starts, as the
// conditions it reports change, as the node is cordoned and uncordoned, and as it reports
// again over the Unknown the node lifecycle controller wrote.
func TestNodeEvents(t *testing.T) {
	cfg := testConfig(1)
	cfg.RecordEvents = true
	cfg.EventQPS = 0
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	want := startedHealthy("n-0")
	tf.waitNodeEvents(t, "n-0", want)

	for _, step := range []struct {
		conditions *string
		ready      corev1.ConditionStatus
		events     []string
	}{
		{ptr("MemoryPressure=True"), corev1.ConditionTrue, []string{"NodeHasInsufficientMemory"}},
		{ptr("Ready=False"), corev1.ConditionFalse, []string{"NodeHasSufficientMemory", "NodeNotReady"}},
		// Unknown is never the kubelet's word: it records nothing for it.
		{ptr("Ready=Unknown,NetworkUnavailable=True"), corev1.ConditionUnknown, nil},
		{nil, corev1.ConditionTrue, []string{"NodeReady"}},
	} {
		tf.annotate(t, "n-0", AnnotationConditions, step.conditions)
		for _, reason := range step.events {
			want = append(want, statusNow("n-0", reason))
		}
		poll.Until(t, waitTimeout, "Ready is reported "+string(step.ready), func() bool {
			return findNodeCondition(tf.node(t, "n-0"), corev1.NodeReady).Status == step.ready
		})
		tf.waitNodeEvents(t, "n-0", want)
	}

	tf.setUnschedulable(t, "n-0", true)
	want = append(want, statusNow("n-0", "NodeNotSchedulable"))
	tf.waitNodeEvents(t, "n-0", want)
	tf.setUnschedulable(t, "n-0", false)
	want = append(want, statusNow("n-0", "NodeSchedulable"))
	tf.waitNodeEvents(t, "n-0", want)

	// The node lifecycle controller marks the silent node Unknown, heartbeats kept; at its
	// next check the kubelet reports every condition again, and says so.
	n := tf.node(t, "n-0")
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type != corev1.NodeNetworkUnavailable {
			n.Status.Conditions[i].Status = corev1.ConditionUnknown
		}
	}
	if _, err := tf.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the stub's cache has the Unknown", func() bool {
		cached, err := tf.heartbeat.nodeLister.Get("n-0")
		return err == nil && findNodeCondition(cached, corev1.NodeReady).Status == corev1.ConditionUnknown
	})
	tf.clock.Step(cfg.HeartbeatInterval)
	want = append(want, statusNow("n-0", "NodeHasSufficientMemory"), statusNow("n-0", "NodeHasNoDiskPressure"),
		statusNow("n-0", "NodeHasSufficientPID"), statusNow("n-0", "NodeReady"))
	tf.waitNodeEvents(t, "n-0", want)
}

// TestNodeEventsAfterRestart: a restarted kubelet announces its start again, the pressure
// it sees and a cordon it finds.
func TestNodeEventsAfterRestart(t *testing.T) {
	cfg := testConfig(1)
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	tf.annotate(t, "n-0", AnnotationConditions, ptr("DiskPressure=True"))
	poll.Until(t, waitTimeout, "DiskPressure is reported", func() bool {
		return findNodeCondition(tf.node(t, "n-0"), corev1.NodeDiskPressure).Status == corev1.ConditionTrue
	})
	tf.setUnschedulable(t, "n-0", true)

	cfg.RecordEvents = true
	cfg.EventQPS = 0
	tf2 := newTestFleetAt(t, cfg, tf.clock.Now().Add(time.Minute), tf.node(t, "n-0"))
	tf2.waitReady(t)
	tf2.waitNodeEvents(t, "n-0", []string{
		"Starting: Starting kubelet.",
		statusNow("n-0", "NodeHasSufficientMemory"),
		statusNow("n-0", "NodeHasDiskPressure"),
		statusNow("n-0", "NodeHasSufficientPID"),
		"NodeAllocatableEnforced: Updated Node Allocatable limit across pods",
		statusNow("n-0", "NodeNotSchedulable"),
	})
}

// TestNodeEventBudget: node events count against the fleet's budget, one node's start all
// together.
func TestNodeEventBudget(t *testing.T) {
	cfg := testConfig(2)
	cfg.RecordEvents = true
	cfg.EventQPS = 0.001 // the fake clock stands still: no token comes back during the test
	cfg.EventBurst = 7
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	poll.Until(t, waitTimeout, "the dropped events are counted", func() bool {
		return counterValue(t, tf.metrics.eventsDropped.WithLabelValues(eventsOfNodes)) == 5
	})
	poll.UntilErr(t, waitTimeout, "one node's start events", func() (bool, error) {
		first, second := tf.nodeEvents(t, "n-0"), tf.nodeEvents(t, "n-1")
		if len(first) > len(second) {
			first, second = second, first
		}
		if len(first) != 0 || len(second) != 5 {
			return false, fmt.Errorf("one node should have its 5 start events and the other none; have %q and %q", first, second)
		}
		return true, nil
	})
}

func TestConditionEvents(t *testing.T) {
	memory := func(s corev1.ConditionStatus) condition {
		return condition{typ: corev1.NodeMemoryPressure, status: s}
	}
	ready := func(s corev1.ConditionStatus) condition { return condition{typ: corev1.NodeReady, status: s} }
	for _, tc := range []struct {
		name   string
		c      condition
		before corev1.ConditionStatus
		found  bool
		want   string
	}{
		{"new pressure condition", memory(corev1.ConditionFalse), "", false, "NodeHasSufficientMemory"},
		{"pressure from Unknown", memory(corev1.ConditionFalse), corev1.ConditionUnknown, true, "NodeHasSufficientMemory"},
		{"pressure begins", memory(corev1.ConditionTrue), corev1.ConditionFalse, true, "NodeHasInsufficientMemory"},
		{"pressure unchanged", memory(corev1.ConditionTrue), corev1.ConditionTrue, true, ""},
		{"pressure forced Unknown", memory(corev1.ConditionUnknown), corev1.ConditionFalse, true, ""},
		{"new Ready", ready(corev1.ConditionTrue), "", false, ""},
		{"Ready from Unknown", ready(corev1.ConditionTrue), corev1.ConditionUnknown, true, "NodeReady"},
		{"not ready", ready(corev1.ConditionFalse), corev1.ConditionTrue, true, "NodeNotReady"},
		{"network", condition{typ: corev1.NodeNetworkUnavailable, status: corev1.ConditionTrue}, corev1.ConditionFalse, true, ""},
	} {
		got, ok := conditionEvent(tc.c, tc.before, tc.found)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: conditionEvent = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}
