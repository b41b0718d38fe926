package daemonset

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func (f *fixture) runStatus(ds *appsv1.DaemonSet, updateObservedGen bool) error {
	f.t.Helper()
	ns, err := f.c.nodeLister.List(labels.Everything())
	if err != nil {
		f.t.Fatal(err)
	}
	s := &syncState{ds: ds, key: ds.Namespace + "/" + ds.Name, log: f.c.log, nodes: ns, hash: hashOf(ds)}
	return f.c.updateStatus(context.Background(), s, updateObservedGen)
}

func TestStatusFields(t *testing.T) {
	ds := newDS("web", withMinReady(10))
	hash := hashOf(ds)
	long := ready(t0.Add(-time.Hour))
	ns := []*corev1.Node{
		newNode("n0"), newNode("n1"), newNode("n2"), newNode("n3"), newNode("n4"),
		newNode("n5", withTaint("k", corev1.TaintEffectNoSchedule)),
		newNode("n6", withTaint("k", corev1.TaintEffectNoSchedule)),
		newNode("n7"), newNode("n8"),
	}
	pods := []*corev1.Pod{
		newDaemonPodFor(ds, "n0", hash, long),                                 // ready, available, updated
		newDaemonPodFor(ds, "n1", "old", long),                                // ready, available
		newDaemonPodFor(ds, "n2", hash, ready(t0.Add(-5*time.Second))),        // ready, updated, not yet available
		newDaemonPodFor(ds, "n3", hash, phase(corev1.PodPending)),             // scheduled, updated
		newDaemonPodFor(ds, "n5", hash, long),                                 // misscheduled
		newDaemonPodFor(ds, "n7", hash, phase(corev1.PodFailed), terminating), // excluded
		newDaemonPodFor(ds, "n8", "old", long, created(t0.Add(-2*time.Hour))), // oldest speaks for n8
		newDaemonPodFor(ds, "n8", hash, created(t0.Add(-time.Minute))),        //
		newDaemonPodFor(ds, "ghost", hash, long),                              // node not in list: ignored
	}
	f := newFixture(t, objects(ds, ns, pods))
	if err := f.runStatus(ds, true); err != nil {
		t.Fatal(err)
	}
	w := f.statusWrites()
	if len(w) != 1 {
		t.Fatalf("status writes = %d", len(w))
	}
	got := w[0].Status
	want := appsv1.DaemonSetStatus{
		ObservedGeneration:     1,
		DesiredNumberScheduled: 7, // n0-n4, n7, n8
		CurrentNumberScheduled: 5, // n0-n3, n8
		NumberMisscheduled:     1, // n5
		NumberReady:            4, // n0, n1, n2, n8
		NumberAvailable:        3, // n0, n1, n8
		UpdatedNumberScheduled: 3, // n0, n2, n3
		NumberUnavailable:      4, // 7 - 3
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("status:\n got %+v\nwant %+v", got, want)
	}
	// n2 was Ready 5s ago and turns available 10s after that: look again then.
	if got := f.takeAfters(); !reflect.DeepEqual(got, []after{{"default/web", 5*time.Second + availabilityMargin}}) {
		t.Errorf("delayed enqueues = %v", got)
	}

	// Time alone makes n2 available.
	f.client.ClearActions()
	f.clock.Step(6 * time.Second)
	if err := f.runStatus(ds, true); err != nil {
		t.Fatal(err)
	}
	if w := f.statusWrites(); len(w) != 1 || w[0].Status.NumberAvailable != 4 || w[0].Status.NumberUnavailable != 3 {
		t.Errorf("after minReadySeconds: %+v", w)
	}
}

func TestStatusWriteConditions(t *testing.T) {
	ds := newDS("web")
	hash := hashOf(ds)
	pod := newDaemonPodFor(ds, "n", hash, ready(t0.Add(-time.Hour)))
	current := appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1, UpdatedNumberScheduled: 1}
	tests := []struct {
		name              string
		status            appsv1.DaemonSetStatus
		updateObservedGen bool
		wantWrite         bool
		wantObserved      int64
	}{
		{"unchanged and observed: no write", withObserved(current, 1), true, false, 0},
		{"unchanged, generation not observed: write raises it", current, true, true, 1},
		{"unchanged, not observed, expectations pending: write keeps it", current, false, true, 0},
		{"numbers changed", withObserved(appsv1.DaemonSetStatus{DesiredNumberScheduled: 1}, 1), true, true, 1},
		{"observed ahead of generation is fine", withObserved(current, 5), true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := ds.DeepCopy()
			ds.Status = tt.status
			f := newFixture(t, objects(ds, newNode("n"), pod))
			if err := f.runStatus(ds, tt.updateObservedGen); err != nil {
				t.Fatal(err)
			}
			w := f.statusWrites()
			if (len(w) == 1) != tt.wantWrite {
				t.Fatalf("writes = %d, want write=%v", len(w), tt.wantWrite)
			}
			if tt.wantWrite && w[0].Status.ObservedGeneration != tt.wantObserved {
				t.Errorf("observedGeneration = %d, want %d", w[0].Status.ObservedGeneration, tt.wantObserved)
			}
		})
	}
}

func withObserved(s appsv1.DaemonSetStatus, g int64) appsv1.DaemonSetStatus {
	s.ObservedGeneration = g
	return s
}

func TestStatusCarriesCollisionCountAndConditions(t *testing.T) {
	ds := newDS("web")
	ds.Status.CollisionCount = ptr.To[int32](2)
	ds.Status.Conditions = []appsv1.DaemonSetCondition{{Type: "Custom", Status: corev1.ConditionTrue}}
	f := newFixture(t, objects(ds, newNode("n")))
	if err := f.runStatus(ds, true); err != nil {
		t.Fatal(err)
	}
	w := f.statusWrites()
	if len(w) != 1 || ptr.Deref(w[0].Status.CollisionCount, 0) != 2 || len(w[0].Status.Conditions) != 1 {
		t.Errorf("status %+v", w)
	}
}

func TestStatusRetry(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "web", errors.New("stale"))
	tests := []struct {
		name     string
		failPuts int
		failGet  bool
		wantPuts int
		wantGets int
		wantErr  bool
	}{
		{"first PUT succeeds", 0, false, 1, 0, false},
		{"retry once on a fresh copy", 1, false, 2, 1, false},
		{"two failures give up", 5, false, 2, 1, true},
		{"GET failure is returned", 1, true, 1, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDS("web")
			f := newFixture(t, objects(ds, newNode("n")))
			puts := 0
			f.client.PrependReactor("update", "daemonsets", func(a core.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "status" {
					return false, nil, nil
				}
				puts++
				if puts <= tt.failPuts {
					return true, nil, conflict
				}
				return false, nil, nil
			})
			if tt.failGet {
				f.client.PrependReactor("get", "daemonsets", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewServiceUnavailable("down")
				})
			}
			err := f.runStatus(ds, true)
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v", err)
			}
			if tt.failGet && !apierrors.IsServiceUnavailable(errors.Unwrap(err)) {
				t.Errorf("want the GET error, got %v", err)
			}
			if puts != tt.wantPuts || len(f.actions("get", "daemonsets", "")) != tt.wantGets {
				t.Errorf("puts=%d gets=%d, want %d/%d", puts, len(f.actions("get", "daemonsets", "")), tt.wantPuts, tt.wantGets)
			}
		})
	}
}

// CURRENT writes status and raises observedGeneration even when manage failed, and returns
// the manage error.
func TestStatusAfterFailedManage(t *testing.T) {
	ds := newDS("web")
	f := newFixture(t, objects(ds, newNode("n")))
	createFailer(f, 1, apierrors.NewInternalError(errors.New("boom")))
	err := f.sync(ds)
	if err == nil || !apierrors.IsInternalError(err) {
		t.Fatalf("err = %v, want the create error", err)
	}
	w := f.statusWrites()
	if len(w) != 1 || w[0].Status.ObservedGeneration != 1 || w[0].Status.DesiredNumberScheduled != 1 {
		t.Errorf("status %+v", w)
	}
}

// TestComputeStatus gives each counting rule of computeStatus a case of its own: which nodes
// count as desired or misscheduled, which pod speaks for a node, and what makes it ready,
// available and updated.
func TestComputeStatus(t *testing.T) {
	const minReady = 10
	long := ready(t0.Add(-time.Hour))
	recent := ready(t0.Add(-5 * time.Second))
	// nodePods is the node-to-pods map computeStatus reads.
	type nodePods map[string][]*corev1.Pod
	tests := []struct {
		name   string
		legacy bool
		nodes  []*corev1.Node
		others []*corev1.Pod // non-daemon pods in the cache (LEGACY-BIND simulation input)
		noHash bool          // the sync runs with an empty hash instead of the template's
		pods   func(ds *appsv1.DaemonSet, hash string) nodePods
		want   statusCounts
	}{
		{name: "no nodes: all zero",
			pods: func(*appsv1.DaemonSet, string) nodePods { return nil }},
		{name: "eligible node without a pod: desired and unavailable",
			nodes: []*corev1.Node{newNode("a")},
			pods:  func(*appsv1.DaemonSet, string) nodePods { return nil },
			want:  statusCounts{desired: 1, unavailable: 1}},
		{name: "available updated pod counts everywhere",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", h, long)}}
			},
			want: statusCounts{desired: 1, current: 1, ready: 1, available: 1, updated: 1}},
		{name: "ready for less than minReadySeconds: ready, not available",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", h, recent)}}
			},
			want: statusCounts{desired: 1, current: 1, ready: 1, updated: 1, unavailable: 1}},
		{name: "pending pod: scheduled, not ready",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", h, phase(corev1.PodPending))}}
			},
			want: statusCounts{desired: 1, current: 1, updated: 1, unavailable: 1}},
		{name: "failed pod still counts as scheduled",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", h, phase(corev1.PodFailed))}}
			},
			want: statusCounts{desired: 1, current: 1, updated: 1, unavailable: 1}},
		{name: "pod with another hash is not updated",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, _ string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", "old", long)}}
			},
			want: statusCounts{desired: 1, current: 1, ready: 1, available: 1}},
		{name: "empty sync hash: no pod is updated, not even an unlabelled one", noHash: true,
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, _ string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", "", long)}}
			},
			want: statusCounts{desired: 1, current: 1, ready: 1, available: 1}},
		{name: "the oldest pod speaks for the node",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {
					newDaemonPodFor(ds, "a", h, created(t0.Add(-time.Minute))),
					newDaemonPodFor(ds, "a", "old", long, created(t0.Add(-2*time.Hour))),
					newDaemonPodFor(ds, "a", h, created(t0.Add(-time.Second))),
				}}
			},
			want: statusCounts{desired: 1, current: 1, ready: 1, available: 1}},
		{name: "a bound pod speaks before an older unbound one",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {
					newDaemonPodFor(ds, "a", "old", long, unbound("a"), created(t0.Add(-2*time.Hour))),
					newDaemonPodFor(ds, "a", h, created(t0.Add(-time.Minute))),
				}}
			},
			want: statusCounts{desired: 1, current: 1, updated: 1, unavailable: 1}},
		{name: "pod on a node with an untolerated NoSchedule taint: misscheduled",
			nodes: []*corev1.Node{newNode("a", withTaint("k", corev1.TaintEffectNoSchedule))},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", h, long)}}
			},
			want: statusCounts{misscheduled: 1}},
		{name: "ineligible node without pods: not counted",
			nodes: []*corev1.Node{newNode("a", withTaint("k", corev1.TaintEffectNoExecute))},
			pods:  func(*appsv1.DaemonSet, string) nodePods { return nil },
		},
		{name: "pods on a node missing from the list are ignored",
			nodes: []*corev1.Node{newNode("a")},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", h, long)}, "ghost": {newDaemonPodFor(ds, "ghost", h, long)}}
			},
			want: statusCounts{desired: 1, current: 1, ready: 1, available: 1, updated: 1}},
		{name: "LEGACY-BIND: a node short of resources is still wanted, so desired", legacy: true,
			nodes:  []*corev1.Node{newNode("a", withAllocatable("1", "110"))},
			others: []*corev1.Pod{otherPod("hog", "a", "900m", 0)},
			pods:   func(*appsv1.DaemonSet, string) nodePods { return nil },
			want:   statusCounts{desired: 1, unavailable: 1}},
		{name: "LEGACY-BIND: a host port taken elsewhere makes the node unwanted", legacy: true,
			nodes:  []*corev1.Node{newNode("a")},
			others: []*corev1.Pod{otherPod("web-server", "a", "", 80)},
			pods: func(ds *appsv1.DaemonSet, h string) nodePods {
				return nodePods{"a": {newDaemonPodFor(ds, "a", h, long)}}
			},
			want: statusCounts{misscheduled: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDS("web", withMinReady(minReady), withRequests("200m"), withHostPort(80))
			objs := objects(ds, tt.nodes, tt.others)
			var opts []fixtureOpt
			if tt.legacy {
				opts = append(opts, legacyMode)
			}
			f := newFixture(t, objs, opts...)
			hash := hashOf(ds)
			if tt.noHash {
				hash = ""
			}
			s := &syncState{ds: ds, key: "default/web", log: f.c.log, nodes: tt.nodes, hash: hash}
			got := f.c.computeStatus(s, tt.pods(ds, hashOf(ds)), t0)
			if got != tt.want {
				t.Errorf("status = %+v, want %+v", got, tt.want)
			}
		})
	}
}
