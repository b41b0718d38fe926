package podgc

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/podcondition"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type podOpt func(*corev1.Pod)

func pod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(t0)}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func on(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }
func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}
func terminating(p *corev1.Pod) { p.DeletionTimestamp = ptrTime(t0) }
func evictedPod(p *corev1.Pod) {
	p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
}
func created(d time.Duration) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t0.Add(d)) }
}
func ptrTime(t time.Time) *metav1.Time { mt := metav1.NewTime(t); return &mt }

func node(name string, ready bool, taints ...string) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
	}
	return n
}

// fixture is a collector over a fake clientset whose caches have synced, on a fake clock.
type fixture struct {
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	gc     *Collector
}

func newFixture(t *testing.T, threshold int, objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	clk := clocktesting.NewFakeClock(t0)
	gc, err := New(configs.PodGCController{TerminatedPodGCThreshold: threshold}, Options{
		Client: client, Informers: factory, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), gc.synced...) {
		t.Fatal("caches did not sync")
	}
	client.ClearActions()
	return &fixture{client: client, clock: clk, gc: gc}
}

// writes lists the collector's writes as "verb name", with a patch's reason for failing the
// pod ("patch name Failed/<condition reason>") and a delete's grace period.
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchActionImpl:
			out = append(out, "patch "+a.GetName()+" "+string(a.GetPatch()))
		case k8stesting.DeleteActionImpl:
			grace := "default"
			if g := a.GetDeleteOptions().GracePeriodSeconds; g != nil && *g == 0 {
				grace = "0"
			}
			out = append(out, "delete "+a.GetName()+" grace="+grace)
		}
	}
	return out
}

func TestCollect(t *testing.T) {
	failedPatch := func(name, uid string) string {
		return "patch " + name + ` {"metadata":{"uid":"` + uid + `"},"status":{"phase":"Failed"}}`
	}
	tests := []struct {
		name      string
		threshold int
		objs      []runtime.Object
		want      []string
	}{
		{name: "a terminating pod never bound is marked Failed and force-deleted",
			objs: []runtime.Object{pod("a", terminating, phase(corev1.PodPending)), pod("b", phase(corev1.PodPending))},
			want: []string{failedPatch("a", "uid-a"), "delete a grace=0"}},
		{name: "a terminating pod on a NotReady out-of-service node goes; on a Ready one it stays",
			objs: []runtime.Object{node("down", false, corev1.TaintNodeOutOfService), node("up", true, corev1.TaintNodeOutOfService),
				node("plain", false), pod("a", on("down"), terminating), pod("b", on("up"), terminating), pod("c", on("plain"), terminating),
				pod("d", on("down"))},
			want: []string{failedPatch("a", "uid-a"), "delete a grace=0"}},
		{name: "terminated pods over the threshold: evicted first, then the oldest; already terminal, so no patch",
			threshold: 2,
			objs: []runtime.Object{node("n", true),
				pod("old", on("n"), phase(corev1.PodSucceeded), created(-time.Hour)),
				pod("mid", on("n"), phase(corev1.PodFailed), created(-time.Minute)),
				pod("new", on("n"), phase(corev1.PodSucceeded)),
				pod("evicted", on("n"), evictedPod, created(time.Minute)),
				pod("running", on("n"), created(-2*time.Hour))},
			want: []string{"delete evicted grace=0", "delete old grace=0"}},
		{name: "threshold 0 keeps every terminated pod",
			objs: []runtime.Object{node("n", true), pod("a", on("n"), phase(corev1.PodSucceeded)), pod("b", on("n"), phase(corev1.PodFailed))}},
		{name: "pods on nodes that exist are left alone",
			threshold: 1, objs: []runtime.Object{node("n", true), pod("a", on("n")), pod("b", on("n"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.threshold, tt.objs...)
			f.gc.Collect(context.Background())
			got := f.writes()
			if !slices.Equal(got, tt.want) {
				t.Errorf("writes:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestOrphanedAfterQuarantine: a pod bound to a Node that is gone is marked Failed with
// DisruptionTarget and force-deleted, but only once the name has been missing for the
// quarantine and the API confirms the Node is gone.
func TestOrphanedAfterQuarantine(t *testing.T) {
	f := newFixture(t, 0, node("here", true), pod("orphan", on("gone")), pod("kept", on("here")))
	ctx := context.Background()
	if n := f.gc.Collect(ctx); n != 0 {
		t.Fatalf("first pass deleted %d pods; want none before the quarantine", n)
	}
	f.clock.Step(Quarantine - time.Second)
	if n := f.gc.Collect(ctx); n != 0 || len(f.writes()) != 0 {
		t.Fatalf("deleted within the quarantine: %q", f.writes())
	}
	f.clock.Step(time.Second)
	if n := f.gc.Collect(ctx); n != 1 {
		t.Fatalf("deleted %d pods after the quarantine, want 1 (%q)", n, f.writes())
	}
	var getNode bool
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
			getNode = true
		}
	}
	if !getNode {
		t.Error("the node was not looked up in the API before its pods were deleted")
	}
	w := f.writes()
	if len(w) != 2 || w[1] != "delete orphan grace=0" {
		t.Fatalf("writes %q", w)
	}
	for _, want := range []string{`"uid":"uid-orphan"`, `"phase":"Failed"`, `"type":"DisruptionTarget"`,
		`"reason":"` + podcondition.ReasonDeletionByPodGC + `"`, `"message":"` + podcondition.MessageNodeGone + `"`} {
		if !strings.Contains(w[0], want) {
			t.Errorf("status patch %s lacks %s", w[0], want)
		}
	}
}

// TestNodeThatExistsIsNotOrphaned: a node name missing from the cache but found by the API
// (a cache that lags) keeps its pods.
func TestNodeThatExistsIsNotOrphaned(t *testing.T) {
	f := newFixture(t, 0, pod("p", on("late")))
	ctx := context.Background()
	f.gc.Collect(ctx)
	// The Node exists for the API; the reactor keeps the informer's view as it was.
	f.client.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, node("late", true), nil
	})
	f.clock.Step(Quarantine)
	if n := f.gc.Collect(ctx); n != 0 {
		t.Errorf("deleted %d pods of a node the API has: %q", n, f.writes())
	}
}

// TestRunCollectsEveryPeriod: Run collects at once, then on every tick of its clock.
func TestRunCollectsEveryPeriod(t *testing.T) {
	f := newFixture(t, 0, pod("orphan", on("gone")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.gc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if f.clock.HasWaiters() { // Run's ticker, once it waits
			f.clock.Step(CheckPeriod)
		}
		if slices.Contains(f.writes(), "delete orphan grace=0") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orphan was not deleted; clock at %v, writes %q", f.clock.Now().Sub(t0), f.writes())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
