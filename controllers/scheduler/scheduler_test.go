package scheduler

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
)

type testEnv struct {
	s        *Scheduler
	client   *fake.Clientset
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
	bindings chan *corev1.Binding
}

// newTestScheduler starts informers on a fake clientset holding objs. Bindings are applied
// to the fake pods unless applyBindings is false (an API whose watch lags behind).
func newTestScheduler(t *testing.T, applyBindings bool, objs ...runtime.Object) *testEnv {
	t.Helper()
	client := fake.NewClientset(objs...)
	env := &testEnv{
		client:   client,
		clock:    testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		recorder: record.NewFakeRecorder(100),
		bindings: make(chan *corev1.Binding, 100),
	}
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		env.bindings <- b
		if applyBindings {
			obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
			if err != nil {
				return true, nil, err
			}
			pod := obj.(*corev1.Pod).DeepCopy()
			pod.Spec.NodeName = b.Target.Name
			if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, b.Namespace); err != nil {
				return true, nil, err
			}
		}
		return true, b, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	cfg := configs.DefaultScheduler()
	cfg.Workers = 1
	s, err := New(cfg, Options{Client: client, Informers: factory, Recorder: env.recorder, Clock: env.clock})
	if err != nil {
		t.Fatal(err)
	}
	env.s = s
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		s.queue.ShutDown()
		factory.Shutdown()
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		t.Fatal("caches did not sync")
	}
	return env
}

// next processes the next queued key, failing if none arrives before the deadline.
func (e *testEnv) next(t *testing.T) {
	t.Helper()
	poll.Until(t, waitTimeout, "a queued pod", func() bool { return e.s.queue.Len() > 0 })
	e.s.processNext(context.Background())
}

// waitTimeout bounds every wait for the informers, the queue and the fake API.
const waitTimeout = 5 * time.Second

func (e *testEnv) expectBinding(t *testing.T, pod, node string) {
	t.Helper()
	select {
	case b := <-e.bindings:
		if b.Name != pod || b.Target.Name != node || b.Target.Kind != "Node" {
			t.Fatalf("binding %s → %s %s, want %s → %s", b.Name, b.Target.Kind, b.Target.Name, pod, node)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no binding of %s", pod)
	}
}

func (e *testEnv) expectEvent(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-e.recorder.Events:
		if got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no event, want %q", want)
	}
}

func TestBindsPinnedDaemonPod(t *testing.T) {
	env := newTestScheduler(t, true, testNode("n1"), testNode("n2"), testNode("n3"), testPod("ds-abc", pinnedTo("n2")))
	env.next(t)
	env.expectBinding(t, "ds-abc", "n2")
	env.expectEvent(t, "Normal Scheduled Successfully assigned default/ds-abc to n2")
}

func TestPicksLeastAllocatedNode(t *testing.T) {
	env := newTestScheduler(t, true, testNode("n1"), testNode("n2"),
		testPod("busy", boundTo("n1"), withCPU("500m")), testPod("p", withCPU("100m")))
	env.next(t)
	env.expectBinding(t, "p", "n2")
}

func TestUnschedulablePodGetsConditionAndEvent(t *testing.T) {
	gpu := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	env := newTestScheduler(t, true,
		testNode("n1"), testNode("n2"), testNode("n3"), testNode("n4", tainted(gpu)), testNode("n5", tainted(gpu)),
		testPod("big", withCPU("2")))
	env.next(t)
	want := "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}, 3 Insufficient cpu."
	env.expectEvent(t, "Warning FailedScheduling "+want)
	pod, err := env.client.CoreV1().Pods("default").Get(context.Background(), "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cond *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			cond = &pod.Status.Conditions[i]
		}
	}
	if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != "Unschedulable" || cond.Message != want {
		t.Fatalf("PodScheduled condition = %+v", cond)
	}
	if pod.Spec.NodeName != "" {
		t.Fatalf("pod bound to %s", pod.Spec.NodeName)
	}
}

func TestPinnedPodMessageCountsOtherNodes(t *testing.T) {
	env := newTestScheduler(t, true, testNode("n1"), testNode("n2"), testNode("n3"),
		testPod("busy", boundTo("n2"), withCPU("900m")), testPod("ds-x", pinnedTo("n2"), withCPU("200m")))
	env.next(t)
	env.expectEvent(t, "Warning FailedScheduling 0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity].")
}

// Two pods that each fit the node alone must not both be bound to it, even when the
// informer has not yet shown the first binding.
func TestAssumedPodsPreventDoubleBooking(t *testing.T) {
	env := newTestScheduler(t, false, testNode("n1"), testPod("a", withCPU("600m")), testPod("b", withCPU("600m")))
	env.next(t)
	env.next(t)
	first := <-env.bindings
	if first.Target.Name != "n1" {
		t.Fatalf("first pod bound to %q", first.Target.Name)
	}
	env.expectEvent(t, "Normal Scheduled Successfully assigned default/"+first.Name+" to n1")
	env.expectEvent(t, "Warning FailedScheduling 0/1 nodes are available: 1 Insufficient cpu.")
	select {
	case b := <-env.bindings:
		t.Fatalf("second binding %s → %s", b.Name, b.Target.Name)
	default:
	}
}

// An unschedulable pod is retried when a node appears, but not before its backoff (1s) has
// passed on the injected clock.
func TestRetriesAfterNodeChangeWithBackoff(t *testing.T) {
	env := newTestScheduler(t, true, testNode("n1"), testPod("p", withCPU("2")))
	env.next(t)
	env.expectEvent(t, "Warning FailedScheduling 0/1 nodes are available: 1 Insufficient cpu.")

	big := testNode("n2")
	big.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("4")
	if _, err := env.client.CoreV1().Nodes().Create(context.Background(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the pod to leave the unschedulable set", func() bool {
		env.s.backoffMu.Lock()
		defer env.s.backoffMu.Unlock()
		return len(env.s.unschedulable) == 0
	})
	if n := env.s.queue.Len(); n != 0 {
		t.Fatalf("pod requeued before its backoff: queue length %d", n)
	}
	env.clock.Step(time.Second)
	env.next(t)
	env.expectBinding(t, "p", "n2")
}

// An update of a parked unschedulable pod retries it (after its backoff) only when it
// changed what the filters read: our own PodScheduled write must not requeue it.
func TestPodUpdateRetriesOnlyForFilterChanges(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		retry  bool
	}{
		{name: "status only", mutate: func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
		}},
		{name: "labels", mutate: func(p *corev1.Pod) { p.Labels = map[string]string{"tier": "web"} }, retry: true},
		{name: "spec", mutate: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}, retry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestScheduler(t, true, testNode("n1"), testPod("p", withCPU("2")))
			env.next(t)
			env.expectEvent(t, "Warning FailedScheduling 0/1 nodes are available: 1 Insufficient cpu.")
			old, err := env.s.podLister.Pods("default").Get("p")
			if err != nil {
				t.Fatal(err)
			}
			updated := old.DeepCopy()
			tt.mutate(updated)
			env.s.updatePod(old, updated)

			env.s.backoffMu.Lock()
			_, parked := env.s.unschedulable["default/p"]
			env.s.backoffMu.Unlock()
			if parked == tt.retry {
				t.Fatalf("parked = %v after the update, want %v", parked, !tt.retry)
			}
			if n := env.s.queue.Len(); n != 0 {
				t.Fatalf("retried before its backoff: queue length %d", n)
			}
			if tt.retry {
				env.clock.Step(time.Second)
				poll.Until(t, waitTimeout, "the retry after the backoff", func() bool { return env.s.queue.Len() == 1 })
			}
		})
	}
}

func TestIgnoresPodsOfOtherSchedulers(t *testing.T) {
	other := testPod("p", func(p *corev1.Pod) { p.Spec.SchedulerName = "my-scheduler" })
	env := newTestScheduler(t, true, testNode("n1"), other)
	// The handlers have seen the initial list once the caches synced.
	if n := env.s.queue.Len(); n != 0 {
		t.Fatalf("queued a pod of another scheduler")
	}
}

// A cluster change that arrives while an attempt is failing must not be lost: the pod is not
// parked in the unschedulable set (where only a later change would wake it) but retried
// after its backoff. Without a change in between, it is parked.
func TestChangeDuringFailedAttemptRetriesThePod(t *testing.T) {
	for _, changed := range []bool{true, false} {
		env := newTestScheduler(t, true, testNode("n1"))
		cycle := env.s.currentMoveCycle()
		if changed {
			env.s.requeueUnschedulable() // e.g. the node lost the taint the attempt saw
		}
		env.s.addUnschedulable("default/p", cycle)
		env.s.backoffMu.Lock()
		_, parked := env.s.unschedulable["default/p"]
		env.s.backoffMu.Unlock()
		if parked == changed {
			t.Fatalf("change during the attempt=%v: parked=%v", changed, parked)
		}
		if changed {
			if n := env.s.queue.Len(); n != 0 {
				t.Fatalf("retried before its backoff: queue length %d", n)
			}
			env.clock.Step(time.Second)
			poll.Until(t, waitTimeout, "the retry after the backoff", func() bool { return env.s.queue.Len() == 1 })
		}
	}
}

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	recorder := record.NewFakeRecorder(1)
	valid := configs.DefaultScheduler()
	noBackoff := valid
	noBackoff.PodInitialBackoff = 0
	tests := []struct {
		name    string
		cfg     configs.Scheduler
		opts    Options
		wantErr string
	}{
		{name: "defaults", cfg: valid, opts: Options{Client: client, Informers: factory, Recorder: recorder}},
		{name: "zero config", opts: Options{Client: client, Informers: factory, Recorder: recorder}, wantErr: "scheduler-name"},
		{name: "no backoff", cfg: noBackoff, opts: Options{Client: client, Informers: factory, Recorder: recorder}, wantErr: "pod-initial-backoff"},
		{name: "no client", cfg: valid, opts: Options{Informers: factory}, wantErr: "Client"},
		{name: "no informers", cfg: valid, opts: Options{Client: client}, wantErr: "Informers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, tt.opts)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New = %v, want an error about %s", err, tt.wantErr)
			}
		})
	}
}

func TestRunRejectsBadConfiguration(t *testing.T) {
	bad := configs.DefaultScheduler()
	bad.Workers = 0
	tests := []struct {
		name string
		cfg  configs.Scheduler
		opts RunOptions
	}{
		{name: "no workers", cfg: bad, opts: RunOptions{RestConfig: &rest.Config{Host: "http://127.0.0.1:1"}}},
		{name: "no rest config", cfg: configs.DefaultScheduler()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Logger = slog.New(slog.DiscardHandler)
			if err := Run(context.Background(), tt.cfg, tt.opts); err == nil {
				t.Fatal("Run accepted a bad configuration")
			}
		})
	}
}
