package daemonset

import (
	"reflect"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// mergingDelays stands in for the delaying layer of client-go's work queue, with its rule
// for a key that is already waiting: an AddAfter whose deadline is later than the pending
// one is merged into it (only an earlier deadline replaces the pending one), and a key
// waits at most once. Driving it from the fake clock makes the merge deterministic, which
// the real queue's goroutine does not.
type mergingDelays struct {
	f       *fixture
	pending map[string]time.Time
}

func newMergingDelays(f *fixture) *mergingDelays {
	m := &mergingDelays{f: f, pending: map[string]time.Time{}}
	f.c.addAfter = m.addAfter
	return m
}

func (m *mergingDelays) addAfter(key string, d time.Duration) {
	at := m.f.clock.Now().Add(d)
	if cur, ok := m.pending[key]; ok && !at.Before(cur) {
		return
	}
	m.pending[key] = at
}

// due removes and returns the keys whose deadline has passed.
func (m *mergingDelays) due() []string {
	var out []string
	now := m.f.clock.Now()
	for k, at := range m.pending {
		if !at.After(now) {
			out = append(out, k)
			delete(m.pending, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestSurgeResyncsWhenEachNewPodBecomesAvailable reproduces the lost re-sync of a surge
// rollout with minReadySeconds on nodes whose pods turn Ready at once: the second new pod's
// "available in minReadySeconds + 1s" wake-up is merged into the first one's, which fires
// before the second pod is available; the old pods still speak for their nodes in the
// status, so no status rule re-arms either, and the old pod next to the second new pod
// would stay forever. The controller must re-sync when that pod becomes available.
func TestSurgeResyncsWhenEachNewPodBecomesAvailable(t *testing.T) {
	ds := newDS("web", withMaxSurge(intstr.FromString("100%")), withMinReady(10))
	key := ds.Namespace + "/" + ds.Name
	hash := hashOf(ds)
	ns := nodes(2)
	long := ready(t0.Add(-time.Hour))
	old := []*corev1.Pod{newDaemonPodFor(ds, "node-0", "old", long), newDaemonPodFor(ds, "node-1", "old", long)}
	surged := []*corev1.Pod{newDaemonPodFor(ds, "node-0", hash), newDaemonPodFor(ds, "node-1", hash)}
	f := newFixture(t, nil)
	f.add(objects(ds, ns, old, surged)...)
	delays := newMergingDelays(f)

	syncQueued := func(step string) {
		t.Helper()
		if got := drainQueue(f); !reflect.DeepEqual(got, []string{key}) {
			t.Fatalf("%s: queue = %v, want %s", step, got, key)
		}
		f.client.ClearActions()
		f.mustSync(ds)
	}
	becomeReady := func(i int) {
		t.Helper()
		cur := surged[i].DeepCopy()
		cur.ResourceVersion = "2"
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(f.clock.Now())}}
		f.addToCache(cur)
		f.c.updatePod(surged[i], cur)
		surged[i] = cur
		syncQueued("new pod " + cur.Spec.NodeName + " Ready")
		if d := f.deletedPods(); len(d) != 0 {
			t.Fatalf("old pods deleted before the new ones are available: %v", d)
		}
	}
	// wakeAndDelete steps the clock to at, expects the DaemonSet's delayed sync to be due,
	// runs it and expects the old pod of node i to be deleted, then lets the informer
	// observe the deletion.
	wakeAndDelete := func(at time.Time, i int) {
		t.Helper()
		f.clock.SetTime(at)
		if got := delays.due(); !reflect.DeepEqual(got, []string{key}) {
			t.Fatalf("at t0+%s: delayed syncs due = %v, want %s (pending %v): the DaemonSet is not re-synced when %s becomes available",
				at.Sub(t0), got, key, delays.pending, surged[i].Name)
		}
		f.client.ClearActions()
		f.mustSync(ds)
		if got := f.deletedPods(); !reflect.DeepEqual(got, []string{old[i].Name}) {
			t.Fatalf("at t0+%s: deleted %v, want the old pod %s of node-%d", at.Sub(t0), got, old[i].Name, i)
		}
		if err := f.factory.Core().V1().Pods().Informer().GetIndexer().Delete(old[i]); err != nil {
			t.Fatal(err)
		}
		f.c.deletePod(old[i])
		syncQueued("old pod deleted")
	}

	becomeReady(0) // t0: available after t0+10s
	f.clock.Step(5 * time.Second)
	becomeReady(1) // t0+5s: available after t0+15s; its wake-up is merged into node-0's
	wakeAndDelete(t0.Add(11*time.Second), 0)
	if got := f.deletedPods(); len(got) != 0 {
		t.Fatalf("at t0+11s the second new pod is not available yet, but %v were deleted", got)
	}
	wakeAndDelete(t0.Add(16*time.Second), 1)
	if len(delays.pending) != 0 {
		t.Errorf("wake-ups left after the rollout: %v", delays.pending)
	}
}

func TestNextAvailable(t *testing.T) {
	now := t0
	readyAt := func(at time.Time) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}}}
	}
	deleting := readyAt(now)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		minReady int32
		want     time.Duration
		wantOK   bool
	}{
		{"no pods", nil, 10, 0, false},
		{"minReadySeconds 0: available when Ready", []*corev1.Pod{readyAt(now)}, 0, 0, false},
		{"not ready", []*corev1.Pod{{}}, 10, 0, false},
		{"no transition time never becomes available", []*corev1.Pod{{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}}, 10, 0, false},
		{"available already", []*corev1.Pod{readyAt(now.Add(-11 * time.Second))}, 10, 0, false},
		{"exactly minReadySeconds ago: due now", []*corev1.Pod{readyAt(now.Add(-10 * time.Second))}, 10, availabilityMargin, true},
		{"the soonest of several", []*corev1.Pod{readyAt(now), readyAt(now.Add(-7 * time.Second)), readyAt(now.Add(-3 * time.Second))}, 10, 3*time.Second + availabilityMargin, true},
		{"a pod being deleted does not count", []*corev1.Pod{deleting}, 10, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := nextAvailable(tt.pods, tt.minReady, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("nextAvailable = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
			if ok {
				// The instant returned is one at which the pod is available.
				for _, p := range tt.pods {
					if c := readyCondition(p); c != nil && c.LastTransitionTime.Add(time.Duration(tt.minReady)*time.Second).Sub(now)+availabilityMargin == got && !isPodAvailable(p, tt.minReady, now.Add(got)) {
						t.Errorf("pod is not available at now+%v", got)
					}
				}
			}
		})
	}
}
