package daemonset

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// steadyFixture is a DaemonSet settled on three nodes (one ready, available pod each, status
// already stored), with cache changes delivered the way an informer does: store first, then
// the handler.
type steadyFixture struct {
	*fixture
	ds    *appsv1.DaemonSet
	nodes []*corev1.Node
	pods  []*corev1.Pod
}

func newSteadyFixture(t *testing.T, opts ...dsOpt) *steadyFixture {
	t.Helper()
	return newSteadyFixtureMode(t, nil, opts...)
}

func newSteadyFixtureMode(t *testing.T, mode []fixtureOpt, opts ...dsOpt) *steadyFixture {
	t.Helper()
	ds := newDS("web", opts...)
	hash := hashOf(ds)
	ns := nodes(3)
	var pods []*corev1.Pod
	for _, n := range ns {
		pods = append(pods, newDaemonPodFor(ds, n.Name, hash, ready(t0.Add(-time.Hour))))
	}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 3,
		NumberAvailable: 3, UpdatedNumberScheduled: 3, ObservedGeneration: 1}
	f := newFixture(t, objects(ds, revisionFor(t, ds, 1), ns, pods), mode...)
	return &steadyFixture{fixture: f, ds: ds, nodes: ns, pods: pods}
}

// syncKeepingState syncs without the fixture's invalidation, as the worker does.
func (f *steadyFixture) syncKeepingState() {
	f.t.Helper()
	f.client.ClearActions()
	if err := f.c.syncDaemonSet(context.Background(), f.ds.Namespace+"/"+f.ds.Name); err != nil {
		f.t.Fatalf("sync: %v", err)
	}
}

func (f *steadyFixture) indexer(o runtime.Object) interface {
	Update(any) error
	Delete(any) error
	Add(any) error
} {
	switch o.(type) {
	case *appsv1.DaemonSet:
		return f.factory.Apps().V1().DaemonSets().Informer().GetIndexer()
	case *appsv1.ControllerRevision:
		return f.factory.Apps().V1().ControllerRevisions().Informer().GetIndexer()
	case *corev1.Pod:
		return f.factory.Core().V1().Pods().Informer().GetIndexer()
	default:
		return f.factory.Core().V1().Nodes().Informer().GetIndexer()
	}
}

func (f *steadyFixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *steadyFixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
	}
	return out
}

func TestSteadyStateShortcut(t *testing.T) {
	bumpRV := func(o metav1.Object) { o.SetResourceVersion(o.GetResourceVersion() + "1") }
	cases := []struct {
		name string
		// change alters the caches after the first, settled sync.
		change func(f *steadyFixture)
		// want is the first write the next sync must make; "" means none (the shortcut).
		want string
	}{
		{"nothing changed", func(*steadyFixture) {}, ""},
		{"cache changed behind the handlers' back is not seen", func(f *steadyFixture) {
			f.must(f.indexer(f.pods[0]).Delete(f.pods[0]))
		}, ""},
		{"pod deleted", func(f *steadyFixture) {
			f.must(f.indexer(f.pods[0]).Delete(f.pods[0]))
			f.c.deletePod(f.pods[0])
		}, "create pods/"},
		{"pod failed", func(f *steadyFixture) {
			cur := f.pods[1].DeepCopy()
			cur.Status.Phase = corev1.PodFailed
			bumpRV(cur)
			f.must(f.indexer(cur).Update(cur))
			f.c.updatePod(f.pods[1], cur)
		}, "delete pods/"},
		{"node added", func(f *steadyFixture) {
			n := newNode("node-new")
			f.must(f.indexer(n).Add(n))
			f.c.addNode(n)
		}, "create pods/"},
		{"node deleted", func(f *steadyFixture) {
			f.must(f.indexer(f.nodes[2]).Delete(f.nodes[2]))
			f.c.deleteNode(f.nodes[2])
		}, "update daemonsets/status"},
		{"node tainted NoExecute", func(f *steadyFixture) {
			cur := f.nodes[0].DeepCopy()
			cur.Spec.Taints = []corev1.Taint{{Key: "gone", Effect: corev1.TaintEffectNoExecute}}
			bumpRV(cur)
			f.must(f.indexer(cur).Update(cur))
			f.c.updateNode(f.nodes[0], cur)
		}, "delete pods/"},
		{"revision deleted", func(f *steadyFixture) {
			h, err := f.c.historyLister.ControllerRevisions(f.ds.Namespace).Get(revisionName(f.ds.Name, hashOf(f.ds)))
			f.must(err)
			f.must(f.indexer(h).Delete(h))
			f.c.deleteHistory(h)
		}, "create controllerrevisions/"},
		{"status overwritten by another writer", func(f *steadyFixture) {
			cur := f.ds.DeepCopy()
			cur.Status.NumberReady = 0
			bumpRV(cur)
			f.must(f.indexer(cur).Update(cur))
			f.c.onUpdateDaemonSet(f.ds, cur)
		}, "update daemonsets/status"},
		{"spec changed", func(f *steadyFixture) {
			cur := f.ds.DeepCopy()
			cur.Spec.Template.Spec.Containers[0].Image = "busybox:2"
			cur.Generation = 2
			bumpRV(cur)
			f.must(f.indexer(cur).Update(cur))
			f.c.onUpdateDaemonSet(f.ds, cur)
		}, "create controllerrevisions/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newSteadyFixture(t)
			f.syncKeepingState()
			if w := f.writes(); len(w) != 0 {
				t.Fatalf("settled DaemonSet wrote on its first sync: %v", w)
			}
			tc.change(f)
			f.syncKeepingState()
			w := f.writes()
			switch {
			case tc.want == "" && len(w) != 0:
				t.Fatalf("sync after %q wrote %v, want nothing", tc.name, w)
			case tc.want != "" && (len(w) == 0 || w[0] != tc.want):
				t.Fatalf("sync after %q wrote %v, want first %q", tc.name, w, tc.want)
			}
		})
	}
}

// A sync whose outcome waits on the clock (a pod not yet available) is not remembered: the
// next one runs in full even though no handler reported a change.
func TestSteadyStateNotRememberedWhileWaitingOnTime(t *testing.T) {
	f := newSteadyFixture(t, withMinReady(60))
	young := f.pods[0].DeepCopy()
	young.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-time.Second))
	f.must(f.indexer(young).Update(young))
	f.c.steady.invalidate()
	f.syncKeepingState() // stores availability 2 and arms the wake-up
	if len(f.takeAfters()) == 0 {
		t.Fatal("no delayed requeue armed for the pod turning available")
	}
	sw := f.statusWrites()
	if len(sw) != 1 || sw[0].Status.NumberAvailable != 2 {
		t.Fatalf("status writes %v, want one with 2 available", sw)
	}
	// The informer delivers the written status; no input changed otherwise.
	f.must(f.indexer(sw[0]).Update(sw[0]))
	f.c.onUpdateDaemonSet(f.ds, sw[0])
	f.clock.Step(2 * time.Minute)
	f.syncKeepingState()
	if w := f.writes(); len(w) != 1 || w[0] != "update daemonsets/status" {
		t.Fatalf("sync once the pod is available wrote %v, want a status update", w)
	}
}

// LEGACY-BIND never takes the shortcut (its placement reads other pods on each node).
func TestSteadyStateOffInLegacyMode(t *testing.T) {
	f := newSteadyFixtureMode(t, []fixtureOpt{legacyMode})
	f.syncKeepingState()
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("settled DaemonSet wrote on its first sync: %v", w)
	}
	f.must(f.indexer(f.pods[0]).Delete(f.pods[0]))
	f.syncKeepingState()
	if w := f.writes(); len(w) == 0 || w[0] != "create pods/" {
		t.Fatalf("legacy sync after a cache change wrote %v, want a pod created", w)
	}
}
