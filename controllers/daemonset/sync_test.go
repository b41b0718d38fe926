package daemonset

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/internal/poll"
)

func TestManageCreatesOnEligibleNodes(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			ds := newDS("web", withNodeSelector(map[string]string{"role": "web"}))
			web := map[string]string{"role": "web"}
			ns := []*corev1.Node{
				newNode("a", withLabels(web)),
				newNode("b", withLabels(web)),
				newNode("cordoned", withLabels(web), withTaint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)),
				newNode("other-role"),
				newNode("noschedule", withLabels(web), withTaint("k", corev1.TaintEffectNoSchedule)),
				newNode("noexecute", withLabels(web), withTaint("k", corev1.TaintEffectNoExecute)),
			}
			var opts []fixtureOpt
			if legacy {
				opts = append(opts, legacyMode)
			}
			f := newFixture(t, objects([]runtime.Object{ds}, ns), opts...)
			f.mustSync(ds)

			if got, want := f.createdOn(), []string{"a", "b", "cordoned"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("created on %v, want %v", got, want)
			}
			hash := hashOf(ds)
			for _, p := range f.createdPods() {
				if p.GenerateName != "web-" || p.Namespace != "default" {
					t.Errorf("generateName/namespace = %q/%q", p.GenerateName, p.Namespace)
				}
				wantLabels := map[string]string{"app": "web", RevisionHashLabel: hash, TemplateGenerationLabel: "1"}
				if !reflect.DeepEqual(p.Labels, wantLabels) {
					t.Errorf("labels = %v, want %v", p.Labels, wantLabels)
				}
				ref := p.OwnerReferences
				if len(ref) != 1 || ref[0].Kind != "DaemonSet" || ref[0].APIVersion != "apps/v1" || ref[0].UID != ds.UID ||
					!ptr.Deref(ref[0].Controller, false) || !ptr.Deref(ref[0].BlockOwnerDeletion, false) {
					t.Errorf("ownerReferences = %+v", ref)
				}
				if len(p.Spec.Tolerations) != 6 {
					t.Errorf("tolerations = %+v, want the 6 automatic ones", p.Spec.Tolerations)
				}
				if legacy {
					if p.Spec.NodeName == "" || p.Spec.Affinity != nil {
						t.Errorf("LEGACY-BIND pod must be bound, without affinity: nodeName=%q affinity=%+v", p.Spec.NodeName, p.Spec.Affinity)
					}
				} else if p.Spec.NodeName != "" || p.Spec.Affinity == nil {
					t.Errorf("CURRENT pod must be unbound and pinned by affinity: nodeName=%q", p.Spec.NodeName)
				}
			}
			if n := countPrefix(f.events(), "Normal SuccessfulCreate Created pod: web-"); n != 3 {
				t.Errorf("SuccessfulCreate events = %d, want 3", n)
			}
			if add, del, _ := f.c.expectations.get("default/web"); add != 3 || del != 0 {
				t.Errorf("expectations = %d/%d, want 3/0", add, del)
			}
		})
	}
}

func TestManageDeletesMisplacedAndDuplicatePods(t *testing.T) {
	ds := newDS("web", withNodeSelector(map[string]string{"role": "web"}))
	hash := hashOf(ds)
	web := map[string]string{"role": "web"}
	ns := []*corev1.Node{
		newNode("ok", withLabels(web)),
		newNode("dup", withLabels(web)),
		newNode("noschedule", withLabels(web), withTaint("k", corev1.TaintEffectNoSchedule)),
		newNode("noexecute", withLabels(web), withTaint("k", corev1.TaintEffectNoExecute)),
		newNode("unlabeled"),
	}
	pods := []*corev1.Pod{
		newDaemonPodFor(ds, "ok", hash),
		newDaemonPodFor(ds, "dup", hash, created(t0.Add(-3*time.Hour))),
		newDaemonPodFor(ds, "dup", hash, created(t0.Add(-2*time.Hour))),
		newDaemonPodFor(ds, "dup", hash, created(t0.Add(-1*time.Hour))),
		newDaemonPodFor(ds, "noschedule", hash),
		newDaemonPodFor(ds, "noexecute", hash),
		newDaemonPodFor(ds, "noexecute", hash, terminating),
		newDaemonPodFor(ds, "unlabeled", hash),
	}
	f := newFixture(t, objects([]runtime.Object{ds}, ns, pods))
	f.mustSync(ds)
	want := sortedCopy([]string{pods[2].Name, pods[3].Name, pods[5].Name, pods[7].Name})
	if got := f.deletedPods(); !reflect.DeepEqual(got, want) {
		t.Errorf("deleted %v, want %v (oldest duplicate kept, terminating pods not deleted again)", got, want)
	}
	if len(f.createdPods()) != 0 {
		t.Errorf("unexpected creates on %v", f.createdOn())
	}
	if n := countPrefix(f.events(), "Normal SuccessfulDelete Deleted pod: "); n != 4 {
		t.Errorf("SuccessfulDelete events = %d, want 4", n)
	}
}

func TestManageTerminalPods(t *testing.T) {
	ds := newDS("web")
	hash := hashOf(ds)
	tests := []struct {
		name        string
		pod         *corev1.Pod
		wantDeleted bool
		wantCreated bool
		wantEvent   string
	}{
		{"failed pod deleted", newDaemonPodFor(ds, "n", hash, phase(corev1.PodFailed)), true, false,
			"Warning FailedDaemonPod Found failed daemon pod default/%s on node n, will try to kill it"},
		{"succeeded pod deleted", newDaemonPodFor(ds, "n", hash, phase(corev1.PodSucceeded)), true, false,
			"Normal SucceededDaemonPod Found succeeded daemon pod default/%s on node n, will try to delete it"},
		{"failed pod being deleted is ignored and the node refilled", newDaemonPodFor(ds, "n", hash, phase(corev1.PodFailed), terminating), false, true, ""},
		{"running pod being deleted still occupies the node", newDaemonPodFor(ds, "n", hash, terminating), false, false, ""},
		{"pending pod kept", newDaemonPodFor(ds, "n", hash, phase(corev1.PodPending)), false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []runtime.Object{ds, newNode("n"), tt.pod})
			f.mustSync(ds)
			if got := len(f.deletedPods()) == 1; got != tt.wantDeleted {
				t.Errorf("deleted = %v, want %v", f.deletedPods(), tt.wantDeleted)
			}
			if got := len(f.createdPods()) == 1; got != tt.wantCreated {
				t.Errorf("created = %v, want %v", f.createdOn(), tt.wantCreated)
			}
			if tt.wantEvent != "" {
				want := fmt.Sprintf(tt.wantEvent, tt.pod.Name)
				if ev := f.events(); countPrefix(ev, want) != 1 {
					t.Errorf("events %q lack %q", ev, want)
				}
			}
		})
	}
}

// A kubelet that keeps rejecting the daemon pod must see deletions spaced 1s, 2s, 4s, …
// (capped at the maximum), with the DaemonSet requeued after the backoff instead of spinning.
func TestFailedPodBackoff(t *testing.T) {
	ds := newDS("web")
	hash := hashOf(ds)
	node := newNode("n")
	f := newFixture(t, []runtime.Object{ds, node})
	key := failedPodsBackoffKey(ds, "n")

	var lastFailed *corev1.Pod
	fail := func() {
		if lastFailed != nil {
			_ = f.factory.Core().V1().Pods().Informer().GetIndexer().Delete(lastFailed)
		}
		lastFailed = newDaemonPodFor(ds, "n", hash, phase(corev1.PodFailed))
		f.addToCache(lastFailed)
	}
	deletesNow := func() int {
		f.c.expectations.Delete("default/web")
		if err := f.syncFresh(ds); err != nil {
			t.Fatal(err)
		}
		return len(f.deletedPods())
	}

	var gaps []time.Duration
	last := f.clock.Now()
	fail()
	for i := 0; len(gaps) < 5 && i < 1000; i++ {
		if deletesNow() == 1 {
			if !f.clock.Now().Equal(t0) {
				gaps = append(gaps, f.clock.Since(last))
			}
			last = f.clock.Now()
			fail() // recreated and rejected again at once
			if deletesNow() != 0 {
				t.Fatal("failed pod deleted again inside its backoff window")
			}
		}
		f.clock.Step(250 * time.Millisecond)
	}
	// Deletion happens at the first sync strictly after the window closes... or exactly at it:
	// IsInBackOffSinceUpdate is "elapsed < backoff", so a sync at exactly 1s deletes.
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
	if !reflect.DeepEqual(gaps, want) {
		t.Errorf("gaps between deletions = %v, want %v", gaps, want)
	}
	if got := f.c.backoff.Get(key); got != 32*time.Second {
		t.Errorf("backoff now %v, want 32s", got)
	}

	// A failed pod in backoff requeues the DaemonSet after the full current backoff (not
	// the remainder), once per sync.
	f.takeAfters()
	f.clock.Step(10 * time.Second)
	if deletesNow() != 0 {
		t.Fatal("deleted inside the 32s window")
	}
	if got, want := f.takeAfters(), []after{{"default/web", 32 * time.Second}}; !reflect.DeepEqual(got, want) {
		t.Errorf("delayed enqueues = %v, want %v", got, want)
	}

	// A new generation starts afresh.
	ds2 := ds.DeepCopy()
	ds2.Status.ObservedGeneration = 2
	if failedPodsBackoffKey(ds2, "n") == key {
		t.Error("backoff key must include observedGeneration")
	}
}

func TestBackoffCapAndExpiry(t *testing.T) {
	f := newFixture(t, nil)
	b := f.c.backoff
	for range 20 {
		b.Next("k", f.clock.Now())
	}
	if got := b.Get("k"); got != 15*time.Minute {
		t.Errorf("backoff capped at %v, want 15m", got)
	}
	f.clock.Step(30*time.Minute + time.Second)
	if b.IsInBackOffSinceUpdate("k", f.clock.Now()) {
		t.Error("entry must expire after 2*max")
	}
	b.GC()
	if b.Get("k") != 0 {
		t.Error("GC must drop the expired entry")
	}
}

// createFailer makes pod creates fail from the n-th call on (n<=0: never).
func createFailer(f *fixture, from int64, err error) *atomic.Int64 {
	var calls atomic.Int64
	f.client.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
		if c := calls.Add(1); from > 0 && c >= from {
			return true, nil, err
		}
		return false, nil, nil
	})
	return &calls
}

func TestSlowStart(t *testing.T) {
	boom := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("quota exceeded"))
	tests := []struct {
		name      string
		nodes     int
		failFrom  int64
		wantCalls int64
		wantAdd   int64 // outstanding creations after the sync
	}{
		{"no failures", 10, 0, 10, 10},
		{"first create fails: stop after batch of 1", 10, 1, 1, 0},
		{"fail from 2nd: batches 1,2 then stop", 10, 2, 3, 1},
		{"fail from 4th: batches 1,2,4 then stop", 20, 4, 7, 3},
		{"failure in the last batch skips nothing", 7, 5, 7, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDS("web")
			f := newFixture(t, objects([]runtime.Object{ds}, nodes(tt.nodes)))
			calls := createFailer(f, tt.failFrom, boom)
			err := f.sync(ds)
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("create calls = %d, want %d", got, tt.wantCalls)
			}
			if (err != nil) != (tt.failFrom > 0) {
				t.Errorf("err = %v", err)
			}
			if add, _, _ := f.c.expectations.get("default/web"); add != tt.wantAdd {
				t.Errorf("outstanding creations = %d, want %d", add, tt.wantAdd)
			}
			failures := tt.wantCalls - max(tt.failFrom-1, 0)
			if tt.failFrom == 0 {
				failures = 0
			}
			if n := countPrefix(f.events(), "Warning FailedCreate Error creating: "); int64(n) != failures {
				t.Errorf("FailedCreate events = %d, want %d", n, failures)
			}
		})
	}
}

func TestBurstCap(t *testing.T) {
	ds := newDS("web")
	f := newFixture(t, objects([]runtime.Object{ds}, nodes(300)))
	f.mustSync(ds)
	if n := len(f.createdPods()); n != 250 {
		t.Errorf("creates = %d, want 250", n)
	}
	if add, _, _ := f.c.expectations.get("default/web"); add != 250 {
		t.Errorf("expected creations = %d, want 250", add)
	}

	// Deletes are capped separately.
	ds2 := newDS("gone", withNodeSelector(map[string]string{"nowhere": "x"}))
	var pods []*corev1.Pod
	for i := range 260 {
		pods = append(pods, newDaemonPodFor(ds2, fmt.Sprintf("node-%d", i), "h"))
	}
	f2 := newFixture(t, objects([]runtime.Object{ds2}, nodes(260), pods))
	f2.mustSync(ds2)
	if n := len(f2.deletedPods()); n != 250 {
		t.Errorf("deletes = %d, want 250", n)
	}
}

func TestBurstReplicasConfigurable(t *testing.T) {
	ds := newDS("web")
	f := newFixture(t, objects([]runtime.Object{ds}, nodes(10)), func(s *fixtureSetup) { s.cfg.BurstReplicas = 4 })
	f.mustSync(ds)
	if n := len(f.createdPods()); n != 4 {
		t.Errorf("creates = %d, want 4", n)
	}
}

func TestCreateErrors(t *testing.T) {
	terminatingNS := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
		Message: "namespace default is being terminated",
	}}
	tests := []struct {
		name      string
		err       error
		wantErr   bool
		wantEvent bool
		wantAdd   int64
	}{
		{"namespace terminating is ignored", terminatingNS, false, false, 1},
		{"other errors are reported and observed", apierrors.NewInternalError(errors.New("etcd down")), true, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDS("web")
			f := newFixture(t, []runtime.Object{ds, newNode("n")})
			createFailer(f, 1, tt.err)
			err := f.sync(ds)
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v", err)
			}
			if got := countPrefix(f.events(), "Warning FailedCreate") == 1; got != tt.wantEvent {
				t.Errorf("FailedCreate event = %v, want %v", got, tt.wantEvent)
			}
			if add, _, _ := f.c.expectations.get("default/web"); add != tt.wantAdd {
				t.Errorf("outstanding creations = %d, want %d", add, tt.wantAdd)
			}
		})
	}
}

func TestDeleteErrors(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantErr   bool
		wantEvent string
	}{
		{"not found is not an error", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x"), false, ""},
		{"other errors are reported", apierrors.NewInternalError(errors.New("etcd down")), true, "Warning FailedDelete Error deleting: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDS("web", withNodeSelector(map[string]string{"x": "y"}))
			pod := newDaemonPodFor(ds, "n", "h")
			f := newFixture(t, []runtime.Object{ds, newNode("n"), pod})
			f.client.PrependReactor("delete", "pods", func(core.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
			err := f.sync(ds)
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v", err)
			}
			ev := f.events()
			if tt.wantEvent != "" && countPrefix(ev, tt.wantEvent) != 1 {
				t.Errorf("events %q lack %q", ev, tt.wantEvent)
			}
			if countPrefix(ev, "Normal SuccessfulDelete") != 0 || (tt.wantEvent == "" && countPrefix(ev, "Warning FailedDelete") != 0) {
				t.Errorf("unexpected events %q", ev)
			}
			if _, del, _ := f.c.expectations.get("default/web"); del != 0 {
				t.Errorf("outstanding deletions = %d, want 0", del)
			}
		})
	}
}

// Until the creates of one sync are observed, later syncs only report status, and do not
// raise observedGeneration; after the 5-minute TTL the DaemonSet acts again.
func TestExpectationsGateAndTTL(t *testing.T) {
	ds := newDS("web")
	f := newFixture(t, objects([]runtime.Object{ds}, nodes(3)))
	f.mustSync(ds)
	if n := len(f.createdPods()); n != 3 {
		t.Fatalf("creates = %d", n)
	}
	writes := f.statusWrites()
	if len(writes) != 1 || writes[0].Status.ObservedGeneration != 1 || writes[0].Status.DesiredNumberScheduled != 3 {
		t.Fatalf("first status write = %+v", writes)
	}

	if err := f.syncFresh(ds); err != nil {
		t.Fatal(err)
	}
	if n := len(f.createdPods()); n != 0 {
		t.Errorf("creates while expectations pending = %d", n)
	}
	writes = f.statusWrites()
	if len(writes) != 1 || writes[0].Status.ObservedGeneration != 0 {
		t.Errorf("status while expectations pending must not raise observedGeneration: %+v", writes)
	}

	f.c.expectations.CreationObserved("default/web")
	f.c.expectations.CreationObserved("default/web")
	f.clock.Step(5 * time.Minute)
	if f.c.expectations.Satisfied("default/web") {
		t.Fatal("one creation still pending at exactly the TTL")
	}
	f.clock.Step(time.Second)
	if !f.c.expectations.Satisfied("default/web") {
		t.Fatal("expectations must expire after the TTL")
	}
	if err := f.syncFresh(ds); err != nil {
		t.Fatal(err)
	}
	if n := len(f.createdPods()); n != 3 {
		t.Errorf("creates after expiry = %d, want 3 (the cache still shows no pods)", n)
	}
}

func TestSyncEarlyExits(t *testing.T) {
	t.Run("selecting all", func(t *testing.T) {
		ds := newDS("web")
		ds.Spec.Selector = &metav1.LabelSelector{}
		f := newFixture(t, []runtime.Object{ds, newNode("n")})
		f.mustSync(ds)
		if a := f.client.Actions(); len(a) != 0 {
			t.Errorf("actions = %v", a)
		}
		want := "Warning SelectingAll This daemon set is selecting all pods. A non-empty selector is required."
		if ev := f.events(); !reflect.DeepEqual(ev, []string{want}) {
			t.Errorf("events = %q", ev)
		}
	})
	t.Run("nil selector", func(t *testing.T) {
		ds := newDS("web")
		ds.Spec.Selector = nil
		f := newFixture(t, []runtime.Object{ds, newNode("n")})
		f.mustSync(ds)
		if a := f.client.Actions(); len(a) != 0 {
			t.Errorf("actions = %v", a)
		}
	})
	t.Run("being deleted", func(t *testing.T) {
		ds := newDS("web")
		ds.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		ds.Finalizers = []string{"foregroundDeletion"}
		f := newFixture(t, []runtime.Object{ds, newNode("n"), newDaemonPodFor(ds, "gone", "h", unbound("gone"))})
		f.mustSync(ds)
		if a := f.client.Actions(); len(a) != 0 {
			t.Errorf("actions = %v (no pods touched, no status)", a)
		}
	})
	t.Run("not found forgets expectations", func(t *testing.T) {
		f := newFixture(t, nil)
		f.c.expectations.Set("default/web", 3, nil)
		f.mustSync(newDS("web"))
		if _, _, ok := f.c.expectations.get("default/web"); ok {
			t.Error("expectations kept")
		}
	})
}

func TestPodsOnMissingNodes(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			ds := newDS("web")
			hash := hashOf(ds)
			unboundPod := newDaemonPodFor(ds, "", hash, unbound("gone"))
			boundPod := newDaemonPodFor(ds, "gone2", hash)
			var opts []fixtureOpt
			if legacy {
				opts = append(opts, legacyMode)
			}
			f := newFixture(t, []runtime.Object{ds, unboundPod, boundPod}, opts...)
			f.mustSync(ds)
			var want []string
			if !legacy {
				want = []string{unboundPod.Name}
			}
			if got := f.deletedPods(); !reflect.DeepEqual(got, want) {
				t.Errorf("deleted %v, want %v", got, want)
			}
		})
	}
}

func TestClaimPods(t *testing.T) {
	ds := newDS("web")
	hash := hashOf(ds)
	orphanPod := newDaemonPodFor(ds, "n", hash, orphan)
	orphanGoing := newDaemonPodFor(ds, "n", hash, orphan, terminating)
	released := newDaemonPodFor(ds, "n", hash)
	released.Labels = map[string]string{"app": "other"}
	other := newDS("other")
	othersPod := newDaemonPodFor(other, "n", hash)
	othersPod.Labels = ds.Spec.Template.Labels

	f := newFixture(t, []runtime.Object{ds, other, newNode("n"), orphanPod, orphanGoing, released, othersPod})
	f.mustSync(ds)

	patches := map[string]string{}
	for _, a := range f.actions("patch", "pods", "") {
		p := a.(core.PatchAction)
		if p.GetPatchType() != types.StrategicMergePatchType {
			t.Errorf("patch type %s", p.GetPatchType())
		}
		patches[p.GetName()] = string(p.GetPatch())
	}
	wantAdopt := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"web","uid":"%s","controller":true,"blockOwnerDeletion":true}],"uid":"%s"}}`, ds.UID, orphanPod.UID)
	wantRelease := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"$patch":"delete","uid":"%s"}],"uid":"%s"}}`, ds.UID, released.UID)
	want := map[string]string{orphanPod.Name: wantAdopt, released.Name: wantRelease}
	if !reflect.DeepEqual(patches, want) {
		t.Errorf("patches:\n got %v\nwant %v", patches, want)
	}
	// The adopted pod occupies the node; the released and other-owned ones do not count.
	if n := len(f.createdPods()); n != 0 {
		t.Errorf("creates = %d, want 0", n)
	}
	if gets := f.actions("get", "daemonsets", ""); len(gets) != 1 {
		t.Errorf("uncached DaemonSet GETs before adoption = %d, want 1", len(gets))
	}
}

func TestClaimAbortsWhenDaemonSetReplaced(t *testing.T) {
	ds := newDS("web")
	fresh := ds.DeepCopy()
	fresh.UID = "someone-else"
	f := newFixture(t, []runtime.Object{fresh})
	f.addToCache(ds)
	f.addToCache(newNode("n"))
	f.addToCache(newDaemonPodFor(ds, "n", hashOf(ds), orphan))
	err := f.sync(ds)
	if err == nil || !strings.Contains(err.Error(), "can't adopt Pod") || !strings.Contains(err.Error(), "is gone: got uid someone-else") {
		t.Fatalf("err = %v", err)
	}
	if len(f.createdPods()) != 0 || len(f.actions("patch", "pods", "")) != 0 {
		t.Error("no writes expected after a failed claim")
	}
}

func TestLegacySuspendedDaemonSets(t *testing.T) {
	ds := newDS("web", withRequests("500m"))
	node := newNode("n", withAllocatable("1", "110"))
	hog := otherPod("hog", "n", "800m", 0)
	f := newFixture(t, []runtime.Object{ds, node, hog}, legacyMode)
	f.mustSync(ds)

	if n := len(f.createdPods()); n != 0 {
		t.Fatalf("created %d pods on a full node", n)
	}
	want := `Warning FailedPlacement failed to place pod on "n": Insufficient cpu`
	if ev := f.events(); countPrefix(ev, want) != 1 {
		t.Errorf("events %q lack %q", ev, want)
	}
	if got := f.c.suspended.list("n"); !reflect.DeepEqual(got, []string{"default/web"}) {
		t.Errorf("suspended on n = %v", got)
	}
	if w := f.statusWrites(); len(w) != 1 || w[0].Status.DesiredNumberScheduled != 1 || w[0].Status.NumberUnavailable != 1 {
		t.Errorf("status = %+v; the node is wanted, so it is desired", w)
	}

	// A daemon pod of another DaemonSet going away does not wake it; a plain pod does.
	otherDS := newDS("other")
	f.addToCache(otherDS)
	f.c.deletePod(newDaemonPodFor(otherDS, "n", "h"))
	f.c.deletePod(otherPod("unbound", "", "", 0))
	if got := drainQueue(f); !reflect.DeepEqual(got, []string{"default/other"}) {
		t.Fatalf("queue = %v after non-freeing deletions, want only the other DaemonSet", got)
	}
	_ = f.factory.Core().V1().Pods().Informer().GetIndexer().Delete(hog)
	f.c.deletePod(hog)
	f.clock.Step(time.Second) // the requeue is rate limited (delayed on the queue's clock)
	poll.Until(t, pollTimeout, "the suspended DaemonSet requeued after its rate-limit delay", func() bool { return f.c.queue.Len() == 1 })
	if got := drainQueue(f); !reflect.DeepEqual(got, []string{"default/web"}) {
		t.Fatalf("queue = %v, want the suspended DaemonSet", got)
	}

	f.mustSync(ds)
	if got := f.createdOn(); !reflect.DeepEqual(got, []string{"n"}) {
		t.Errorf("created on %v after resources freed", got)
	}
	if got := f.c.suspended.list("n"); len(got) != 0 {
		t.Errorf("still suspended: %v", got)
	}
}

func TestManageSurge(t *testing.T) {
	ds := newDS("web", withMaxSurge(intstr.FromInt32(1)), withMinReady(10))
	hash := hashOf(ds)
	long := ready(t0.Add(-time.Minute))
	recent := ready(t0.Add(-5 * time.Second))
	tests := []struct {
		name   string
		pods   func() []*corev1.Pod
		delete []int // indexes into pods
		create bool
	}{
		{"new available: old removed", func() []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", "old", long), newDaemonPodFor(ds, "n", hash, long)}
		}, []int{0}, false},
		{"new not yet available, old ready: both kept", func() []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", "old", long), newDaemonPodFor(ds, "n", hash, recent)}
		}, nil, false},
		{"old not ready: old removed", func() []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", "old"), newDaemonPodFor(ds, "n", hash)}
		}, []int{0}, false},
		{"extra old pods beyond the oldest removed", func() []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", "old", long), newDaemonPodFor(ds, "n", "older", long), newDaemonPodFor(ds, "n", hash, recent)}
		}, []int{1}, false},
		{"only terminating pods: create", func() []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", "old", terminating)}
		}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := tt.pods()
			f := newFixture(t, objects([]runtime.Object{ds, newNode("n")}, pods))
			// manage only: rolling update would add its own decisions.
			s := &syncState{ds: ds, key: "default/web", log: f.c.log, nodes: []*corev1.Node{newNode("n")}, hash: hash}
			if err := f.c.manage(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, i := range tt.delete {
				want = append(want, pods[i].Name)
			}
			if got := f.deletedPods(); !reflect.DeepEqual(got, sortedCopy(want)) {
				t.Errorf("deleted %v, want %v", got, want)
			}
			if got := len(f.createdPods()) == 1; got != tt.create {
				t.Errorf("created %v, want create=%v", f.createdOn(), tt.create)
			}
		})
	}
}

// A surging DaemonSet keeps one live pod on each node, but a failed pod that is waiting out
// its backoff must not be replaced behind the backoff's back: with a kubelet that rejects
// every pod, that created a new pod on every sync (a hot loop; the e2e test saw 234 pods in
// 7 s on one node). Replacements follow the deletions, which follow the backoff.
func TestManageSurgeRespectsFailedPodBackoff(t *testing.T) {
	ds := newDS("web", withMaxSurge(intstr.FromInt32(1)))
	hash := hashOf(ds)
	failed := newDaemonPodFor(ds, "n", hash, phase(corev1.PodFailed))
	f := newFixture(t, objects([]runtime.Object{ds, newNode("n")}, []*corev1.Pod{failed}))
	indexer := f.factory.Core().V1().Pods().Informer().GetIndexer()
	sync := func() (deleted []string, created int) {
		t.Helper()
		// Each sync acts as if the previous one's writes were observed.
		f.c.expectations.Delete("default/web")
		if err := f.syncFresh(ds); err != nil {
			t.Fatal(err)
		}
		return f.deletedPods(), len(f.createdPods())
	}
	// replace swaps the failed pod for its (equally failed) replacement in the cache.
	replace := func(old *corev1.Pod) *corev1.Pod {
		t.Helper()
		if err := indexer.Delete(old); err != nil {
			t.Fatal(err)
		}
		next := newDaemonPodFor(ds, "n", hash, phase(corev1.PodFailed))
		f.addToCache(next)
		return next
	}

	if deleted, created := sync(); !reflect.DeepEqual(deleted, []string{failed.Name}) || created != 1 {
		t.Fatalf("first failure: deleted %v, created %d; want it deleted and replaced once", deleted, created)
	}
	failed = replace(failed)
	for i := range 3 {
		f.clock.Step(200 * time.Millisecond)
		if deleted, created := sync(); len(deleted) != 0 || created != 0 {
			t.Fatalf("sync %d inside the 1s backoff: deleted %v, created %d; want neither", i, deleted, created)
		}
	}
	f.clock.Step(400 * time.Millisecond)
	if deleted, created := sync(); !reflect.DeepEqual(deleted, []string{failed.Name}) || created != 1 {
		t.Fatalf("after the backoff: deleted %v, created %d; want it deleted and replaced once", deleted, created)
	}
}

// TestNodesToDaemonPodsGroupsByNode checks the grouping every step of a sync reads, and that
// the nodes' slices, which share one array while a node has one pod, stay apart when a
// caller sorts them or appends to them.
func TestNodesToDaemonPodsGroupsByNode(t *testing.T) {
	ds := newDS("web")
	hash := hashOf(ds)
	a1 := newDaemonPodFor(ds, "a", hash)
	a2 := newDaemonPodFor(ds, "a", hash)
	gone := newDaemonPodFor(ds, "d", hash, phase(corev1.PodSucceeded), terminating)
	pending := newDaemonPodFor(ds, "", hash, unbound("e"))
	nowhere := newDaemonPodFor(ds, "", hash)
	objs := []runtime.Object{ds, a1, a2, gone, pending, nowhere}
	base := map[string][]string{"a": {a1.Name, a2.Name}, "e": {pending.Name}}
	// Enough nodes of one pod each that, in any order the index returns them, most windows
	// into the shared array have a neighbour right after them.
	for i := range 12 {
		node := fmt.Sprintf("n%02d", i)
		p := newDaemonPodFor(ds, node, hash)
		objs = append(objs, p)
		base[node] = []string{p.Name}
	}
	withGone := maps.Clone(base)
	withGone["d"] = []string{gone.Name}

	tests := []struct {
		name           string
		includeDeleted bool
		want           map[string][]string
	}{
		{"without deleted terminal pods", false, base},
		{"with deleted terminal pods", true, withGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, objs)
			s := &syncState{ds: ds, key: "default/web", log: f.c.log}
			got, err := f.c.nodesToDaemonPods(t.Context(), s, tt.includeDeleted)
			if err != nil {
				t.Fatal(err)
			}
			names := func() map[string][]string {
				out := map[string][]string{}
				for node, pods := range got {
					for _, p := range pods {
						out[node] = append(out[node], p.Name)
					}
					slices.Sort(out[node])
				}
				return out
			}
			if have := names(); !reflect.DeepEqual(have, tt.want) {
				t.Fatalf("grouping = %v, want %v", have, tt.want)
			}
			// A second pod for every node must not land in a neighbour's window.
			extra := newDaemonPodFor(ds, "elsewhere", hash)
			want := map[string][]string{}
			for node, pods := range got {
				sortPodsOldestFirst(pods)
				got[node] = append(pods, extra)
				want[node] = slices.Sorted(slices.Values(append(slices.Clone(tt.want[node]), extra.Name)))
			}
			if have := names(); !reflect.DeepEqual(have, want) {
				t.Fatalf("after appending to every node = %v, want %v", have, want)
			}
		})
	}
}
