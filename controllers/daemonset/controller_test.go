package daemonset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/worker"
	"github.com/miniplane/miniplane/internal/poll"
)

func TestNewValidation(t *testing.T) {
	client := fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	valid := configs.DefaultDaemonSetController()
	bad := configs.DefaultDaemonSetController()
	bad.FailedPodBackoffMax = time.Millisecond
	tests := []struct {
		name    string
		cfg     configs.DaemonSetController
		opts    Options
		wantErr string
	}{
		{"no client", valid, Options{Informers: factory}, "Client is required"},
		{"no informers", valid, Options{Client: client}, "Informers is required"},
		{"invalid config", bad, Options{Client: client, Informers: factory}, "failed-pod-backoff"},
		{"zero config", configs.DaemonSetController{}, Options{Client: client, Informers: factory}, "workers"},
		{"defaults", valid, Options{Client: client, Informers: factory}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.cfg, tt.cfg) {
				t.Errorf("cfg = %+v, want %+v", c.cfg, tt.cfg)
			}
			if !c.legacy {
				t.Error("ScheduleDaemonSetPods false must select LEGACY-BIND")
			}
		})
	}
}

func TestPodHandlers(t *testing.T) {
	ds := newDS("web")
	other := newDS("other")
	unrelated := newDS("unrelated")
	unrelated.Spec.Selector.MatchLabels = map[string]string{"app": "nope"}
	owned := newDaemonPodFor(ds, "n", "h")
	orphanPod := newDaemonPodFor(ds, "n", "h", orphan)
	readyOwned := owned.DeepCopy()
	readyOwned.ResourceVersion = "2"
	readyOwned.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	dying := owned.DeepCopy()
	dying.ResourceVersion = "2"
	terminating(dying)
	moved := owned.DeepCopy()
	moved.ResourceVersion = "2"
	moved.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(other, controllerKind)}
	relabelled := orphanPod.DeepCopy()
	relabelled.ResourceVersion = "2"
	relabelled.Labels = map[string]string{"app": "web", "extra": "x"}
	statusOnly := orphanPod.DeepCopy()
	statusOnly.ResourceVersion = "2"
	statusOnly.Status.Phase = corev1.PodSucceeded
	notAwaited := newDaemonPodFor(ds, "n", "h")
	foreign := owned.DeepCopy()
	foreign.OwnerReferences[0].UID = "stale-uid"

	tests := []struct {
		name       string
		do         func(c *Controller)
		minReady   int32
		wantQueue  []string
		wantAdd    int64
		wantDel    int64
		wantAfters []after
	}{
		{"add owned: creation observed", func(c *Controller) { c.addPod(owned) }, 0, []string{"default/web"}, 1, 2, nil},
		{"add orphan: matching DaemonSets only, no expectation change", func(c *Controller) { c.addPod(orphanPod) }, 0, []string{"default/web"}, 2, 2, nil},
		{"add terminating: a deletion", func(c *Controller) { c.addPod(dying) }, 0, []string{"default/web"}, 2, 1, nil},
		{"add with stale owner UID: nothing", func(c *Controller) { c.addPod(foreign) }, 0, nil, 2, 2, nil},
		{"update same resourceVersion ignored", func(c *Controller) { c.updatePod(owned, owned.DeepCopy()) }, 0, nil, 2, 2, nil},
		{"update to terminating: a deletion", func(c *Controller) { c.updatePod(owned, dying) }, 0, []string{"default/web"}, 2, 1, nil},
		{"update to ready without minReadySeconds", func(c *Controller) { c.updatePod(owned, readyOwned) }, 0, []string{"default/web"}, 2, 2, nil},
		{"update to ready with minReadySeconds: look again later", func(c *Controller) { c.updatePod(owned, readyOwned) }, 7, []string{"default/web"}, 2, 2,
			[]after{{"default/web", 8 * time.Second}}},
		{"controller ref moved: both owners", func(c *Controller) { c.updatePod(owned, moved) }, 0, []string{"default/other", "default/web"}, 2, 2, nil},
		{"orphan relabelled: matching DaemonSets", func(c *Controller) { c.updatePod(orphanPod, relabelled) }, 0, []string{"default/web"}, 2, 2, nil},
		{"orphan status change: nothing", func(c *Controller) { c.updatePod(orphanPod, statusOnly) }, 0, nil, 2, 2, nil},
		{"delete owned: deletion observed", func(c *Controller) { c.deletePod(owned) }, 0, []string{"default/web"}, 2, 1, nil},
		{"delete tombstone", func(c *Controller) {
			c.deletePod(cache.DeletedFinalStateUnknown{Key: "default/x", Obj: owned})
		}, 0, []string{"default/web"}, 2, 1, nil},
		{"delete orphan: nothing", func(c *Controller) { c.deletePod(orphanPod) }, 0, nil, 2, 2, nil},
		{"delete of a pod not waited for: owner woken, expectations unchanged", func(c *Controller) { c.deletePod(notAwaited) }, 0, []string{"default/web"}, 2, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := ds.DeepCopy()
			ds.Spec.MinReadySeconds = tt.minReady
			f := newFixture(t, objects(ds, other, unrelated))
			f.c.expectations.Set("default/web", 2, []string{owned.Name, "web-other"})
			tt.do(f.c)
			if got := drainQueue(f); !reflect.DeepEqual(got, sortedCopy(tt.wantQueue)) {
				t.Errorf("queue = %v, want %v", got, tt.wantQueue)
			}
			add, del, _ := f.c.expectations.get("default/web")
			if add != tt.wantAdd || del != tt.wantDel {
				t.Errorf("expectations = %d/%d, want %d/%d", add, del, tt.wantAdd, tt.wantDel)
			}
			if got := f.takeAfters(); !reflect.DeepEqual(got, tt.wantAfters) {
				t.Errorf("delayed = %v, want %v", got, tt.wantAfters)
			}
		})
	}
}

func TestDaemonSetHandlers(t *testing.T) {
	ds := newDS("web")
	f := newFixture(t, objects(ds))
	f.c.addDaemonSet(ds)
	if got := drainQueue(f); !reflect.DeepEqual(got, []string{"default/web"}) {
		t.Errorf("add: queue %v", got)
	}
	// Every update enqueues, even an unchanged resync.
	f.c.onUpdateDaemonSet(ds, ds)
	if got := drainQueue(f); !reflect.DeepEqual(got, []string{"default/web"}) {
		t.Errorf("update: queue %v", got)
	}
	// Recreated under the same name: the old one's expectations go.
	f.c.expectations.Set("default/web", 3, nil)
	recreated := ds.DeepCopy()
	recreated.UID = "new"
	f.c.onUpdateDaemonSet(ds, recreated)
	if _, _, ok := f.c.expectations.get("default/web"); ok {
		t.Error("UID change must clear expectations")
	}
	drainQueue(f)
	f.c.expectations.Set("default/web", 3, nil)
	f.c.suspended.set("n", "default/web", true)
	f.c.deleteDaemonSet(cache.DeletedFinalStateUnknown{Key: "default/web", Obj: ds})
	if _, _, ok := f.c.expectations.get("default/web"); ok {
		t.Error("delete must clear expectations")
	}
	if len(f.c.suspended.list("n")) != 0 {
		t.Error("delete must drop suspended entries")
	}
	if got := drainQueue(f); !reflect.DeepEqual(got, []string{"default/web"}) {
		t.Errorf("delete: queue %v", got)
	}
}

func TestHistoryHandlers(t *testing.T) {
	ds := newDS("web")
	other := newDS("other")
	owned := revisionFor(t, ds, 1)
	orphanCR := owned.DeepCopy()
	orphanCR.OwnerReferences = nil
	relabelled := orphanCR.DeepCopy()
	relabelled.ResourceVersion = "2"
	relabelled.Labels = map[string]string{"app": "web", "x": "y"}
	moved := owned.DeepCopy()
	moved.ResourceVersion = "2"
	moved.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(other, controllerKind)}
	dying := owned.DeepCopy()
	dying.DeletionTimestamp = ptr.To(metav1.NewTime(t0))

	tests := []struct {
		name string
		do   func(c *Controller)
		want []string
	}{
		{"add owned: not enqueued", func(c *Controller) { c.addHistory(owned) }, nil},
		{"add orphan: matching DaemonSets", func(c *Controller) { c.addHistory(orphanCR) }, []string{"default/web"}},
		{"add terminating: as a delete", func(c *Controller) { c.addHistory(dying) }, []string{"default/web"}},
		{"update unchanged RV ignored", func(c *Controller) { c.updateHistory(owned, owned.DeepCopy()) }, nil},
		{"update moved owner: both", func(c *Controller) { c.updateHistory(owned, moved) }, []string{"default/other", "default/web"}},
		{"update orphan relabelled", func(c *Controller) { c.updateHistory(orphanCR, relabelled) }, []string{"default/web"}},
		{"delete owned: owner", func(c *Controller) { c.deleteHistory(owned) }, []string{"default/web"}},
		{"delete orphan: nothing", func(c *Controller) { c.deleteHistory(orphanCR) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, objects(ds, other))
			tt.do(f.c)
			if got := drainQueue(f); !reflect.DeepEqual(got, sortedCopy(tt.want)) {
				t.Errorf("queue = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNodeHandlers(t *testing.T) {
	web := newDS("web", withNodeSelector(map[string]string{"role": "web"}))
	db := newDS("db", withNodeSelector(map[string]string{"role": "db"}))
	all := newDS("all", withRequests("1500m"))
	base := newNode("n")
	heartbeat := base.DeepCopy()
	heartbeat.ResourceVersion = "2"
	heartbeat.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0)
	webLabel := base.DeepCopy()
	webLabel.ResourceVersion = "2"
	webLabel.Labels["role"] = "web"
	annotated := base.DeepCopy()
	annotated.ResourceVersion = "2"
	annotated.Annotations = map[string]string{"note": "x"}
	tainted := base.DeepCopy()
	tainted.ResourceVersion = "2"
	tainted.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	pressure := base.DeepCopy()
	pressure.ResourceVersion = "2"
	pressure.Status.Conditions = append(pressure.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue})
	shrunk := base.DeepCopy()
	shrunk.ResourceVersion = "2"
	shrunk.Status.Allocatable[corev1.ResourceCPU] = *resourceQuantity("1")

	tests := []struct {
		name   string
		legacy bool
		do     func(c *Controller)
		want   []string
	}{
		{"add: DaemonSets that should run there", false, func(c *Controller) { c.addNode(webLabel) }, []string{"default/all", "default/web"}},
		{"heartbeat ignored", false, func(c *Controller) { c.updateNode(base, heartbeat) }, nil},
		{"annotation ignored", false, func(c *Controller) { c.updateNode(base, annotated) }, nil},
		{"pressure condition ignored in CURRENT", false, func(c *Controller) { c.updateNode(base, pressure) }, nil},
		{"label change: only the DaemonSet whose answer changed", false, func(c *Controller) { c.updateNode(base, webLabel) }, []string{"default/web"}},
		{"taint change: DaemonSets that ran there", false, func(c *Controller) { c.updateNode(base, tainted) }, []string{"default/all"}},
		{"LEGACY: heartbeat ignored", true, func(c *Controller) { c.updateNode(base, heartbeat) }, nil},
		{"LEGACY: disk pressure changes shouldSchedule", true, func(c *Controller) { c.updateNode(base, pressure) }, []string{"default/all"}},
		{"LEGACY: allocatable shrink", true, func(c *Controller) { c.updateNode(base, shrunk) }, []string{"default/all"}},
		{"LEGACY: add skips DaemonSets that cannot be scheduled", true, func(c *Controller) { c.addNode(shrunk) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []fixtureOpt
			if tt.legacy {
				opts = append(opts, legacyMode)
			}
			f := newFixture(t, objects(web, db, all), opts...)
			tt.do(f.c)
			if got := drainQueue(f); !reflect.DeepEqual(got, sortedCopy(tt.want)) {
				t.Errorf("queue = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWorkerRequeues: a key whose sync fails comes back after the rate limiter's delay on the
// controller's clock, and is forgotten once it syncs.
func TestWorkerRequeues(t *testing.T) {
	f := newFixture(t, nil)
	fail := true
	f.c.syncHandler = func(context.Context, string) error {
		if fail {
			return errors.New("boom")
		}
		return nil
	}
	f.c.queue.Add("default/web")
	ignore := func(string, int, error) {}
	worker.ProcessNext(context.Background(), f.c.queue, f.c.syncHandler, ignore)
	if n := f.c.queue.NumRequeues("default/web"); n != 1 {
		t.Errorf("requeues after error = %d, want 1", n)
	}
	fail = false
	f.clock.Step(time.Second)
	poll.Until(t, pollTimeout, "the failed key back on the queue after its rate-limit delay", func() bool { return f.c.queue.Len() == 1 })
	worker.ProcessNext(context.Background(), f.c.queue, f.c.syncHandler, ignore)
	if n := f.c.queue.NumRequeues("default/web"); n != 0 {
		t.Errorf("requeues after success = %d, want 0 (forgotten)", n)
	}
}

// Run against a fake API: informers, workers and the event sink work together.
func TestRun(t *testing.T) {
	ds := newDS("web")
	client := fake.NewSimpleClientset(ds, newNode("a"), newNode("b"))
	var n atomic.Int64
	client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		pod := a.(core.CreateAction).GetObject().(*corev1.Pod)
		pod.Name = fmt.Sprintf("%s%d", pod.GenerateName, n.Add(1))
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(configs.DefaultDaemonSetController(), Options{Client: client, Informers: factory, ScheduleDaemonSetPods: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		c.Run(ctx)
		close(done)
	}()
	poll.Until(t, pollTimeout, "a pod created on each of the 2 nodes", func() bool {
		pods, _ := client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "default")
		l, ok := pods.(*corev1.PodList)
		return ok && len(l.Items) == 2
	})
	poll.Until(t, pollTimeout, "the status of 2 scheduled pods at generation 1", func() bool {
		obj, err := client.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("daemonsets"), "default", "web")
		if err != nil {
			return false
		}
		st := obj.(*appsv1.DaemonSet).Status
		return st.DesiredNumberScheduled == 2 && st.CurrentNumberScheduled == 2 && st.ObservedGeneration == 1
	})
	poll.Until(t, pollTimeout, "a SuccessfulCreate event recorded through the API", func() bool {
		evs, _ := client.Tracker().List(corev1.SchemeGroupVersion.WithResource("events"), corev1.SchemeGroupVersion.WithKind("Event"), "default")
		l, ok := evs.(*corev1.EventList)
		if !ok {
			return false
		}
		for _, e := range l.Items {
			if e.Reason == ReasonSuccessfulCreate && e.Source.Component == EventSource && e.InvolvedObject.Kind == "DaemonSet" {
				return true
			}
		}
		return false
	})
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestBackoffGCRunsOnTheClock(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	before := f.clock.Waiters() // the work queue has its own timers on this clock
	go func() {
		f.c.runBackoffGC(ctx)
		close(done)
	}()
	f.c.backoff.Next("stale", f.clock.Now())
	poll.Until(t, pollTimeout, "the backoff GC ticker armed on the fake clock", func() bool { return f.clock.Waiters() > before })
	f.clock.Step(29 * time.Minute) // ticks, but the entry is not stale yet
	f.clock.Step(2 * time.Minute)  // > 2*max since the entry's last update
	poll.Until(t, pollTimeout, "the stale backoff entry collected", func() bool { return f.c.backoff.Get("stale") == 0 })
	cancel()
	<-done
}
