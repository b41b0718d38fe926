package daemonset

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// podSpec describes the pods of one node in a rolling-update case: "o"/"n" old/new,
// upper case when available, "-" for an empty node; "x" makes the node ineligible.
type rollCase struct {
	name      string
	ds        *appsv1.DaemonSet
	nodes     []string // per node: pod codes, e.g. "O", "on", "-", "xO"
	legacy    bool
	step      time.Duration // clock step before the rolling update
	wantDel   []string      // "node/idx" of deleted pods
	wantNew   int           // creates
	wantNewOn []string      // when set, the nodes created on
}

// runRollCase builds nodes and pods from the codes and runs one rolling update.
func runRollCase(t *testing.T, tt rollCase) {
	t.Helper()
	ds := tt.ds
	hash := hashOf(ds)
	var objs []runtime.Object
	objs = append(objs, ds)
	var ns []*corev1.Node
	names := map[string]string{} // pod name -> node/idx
	for i, codes := range tt.nodes {
		nodeName := fmt.Sprintf("node-%d", i)
		node := newNode(nodeName)
		idx := 0
		for _, c := range codes {
			var p *corev1.Pod
			switch c {
			case 'x':
				node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "gone", Effect: corev1.TaintEffectNoExecute})
				continue
			case '-':
				continue
			case 'o':
				p = newDaemonPodFor(ds, nodeName, "old")
			case 'O':
				p = newDaemonPodFor(ds, nodeName, "old", ready(t0.Add(-time.Hour)))
			case 'n':
				p = newDaemonPodFor(ds, nodeName, hash)
			case 'N':
				p = newDaemonPodFor(ds, nodeName, hash, ready(t0.Add(-time.Hour)))
			case 'r': // new, ready 5s ago
				p = newDaemonPodFor(ds, nodeName, hash, ready(t0.Add(-5*time.Second)))
			}
			names[p.Name] = fmt.Sprintf("%s/%d", nodeName, idx)
			idx++
			objs = append(objs, p)
		}
		ns = append(ns, node)
		objs = append(objs, node)
	}
	var opts []fixtureOpt
	if tt.legacy {
		opts = append(opts, legacyMode)
	}
	f := newFixture(t, objs, opts...)
	f.clock.Step(tt.step)
	s := &syncState{ds: ds, key: ds.Namespace + "/" + ds.Name, log: f.c.log, nodes: ns, hash: hash}
	if err := f.c.rollingUpdate(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, name := range f.deletedPods() {
		deleted = append(deleted, names[name])
	}
	if !reflect.DeepEqual(sortedCopy(deleted), sortedCopy(tt.wantDel)) {
		t.Errorf("deleted %v, want %v", deleted, tt.wantDel)
	}
	if got := len(f.createdPods()); got != tt.wantNew {
		t.Errorf("created %d (%v), want %d", got, f.createdOn(), tt.wantNew)
	}
	if tt.wantNewOn != nil && !reflect.DeepEqual(f.createdOn(), sortedCopy(tt.wantNewOn)) {
		t.Errorf("created on %v, want %v", f.createdOn(), tt.wantNewOn)
	}
}

func TestRollingUpdateMaxUnavailable(t *testing.T) {
	mu := func(v intstr.IntOrString, extra ...dsOpt) *appsv1.DaemonSet {
		return newDS("web", append([]dsOpt{withMaxUnavailable(v)}, extra...)...)
	}
	tests := []rollCase{
		{name: "budget of 2 among available old pods", ds: mu(intstr.FromInt32(2)),
			nodes: []string{"O", "O", "O", "O", "O"}, wantDel: []string{"*", "*"}},
		{name: "unavailable new pod uses budget", ds: mu(intstr.FromInt32(2)),
			nodes: []string{"n", "O", "O", "O", "O"}, wantDel: []string{"*"}},
		{name: "budget exhausted by unavailable new pods", ds: mu(intstr.FromInt32(2)),
			nodes: []string{"n", "n", "O", "O", "O"}},
		{name: "unavailable old pods always replaced", ds: mu(intstr.FromInt32(1)),
			nodes: []string{"o", "o", "o", "O", "O"}, wantDel: []string{"node-0/0", "node-1/0", "node-2/0"}},
		{name: "empty node counts as unavailable", ds: mu(intstr.FromInt32(1)),
			nodes: []string{"-", "O", "O"}},
		{name: "node with old and new counts as unavailable", ds: mu(intstr.FromInt32(1)),
			nodes: []string{"ON", "O", "O"}},
		{name: "node with duplicates counts as unavailable", ds: mu(intstr.FromInt32(1)),
			nodes: []string{"OO", "O", "O"}},
		{name: "all updated: nothing to do", ds: mu(intstr.FromInt32(1)),
			nodes: []string{"N", "N"}},
		{name: "10% of 15 rounds up to 2", ds: mu(intstr.FromString("10%")),
			nodes: []string{"O", "O", "O", "O", "O", "O", "O", "O", "O", "O", "O", "O", "O", "O", "O"}, wantDel: []string{"*", "*"}},
		{name: "both zero defaults to maxUnavailable 1", ds: mu(intstr.FromInt32(0)),
			nodes: []string{"O", "O", "O"}, wantDel: []string{"*"}},
		{name: "ready within minReadySeconds is unavailable", ds: mu(intstr.FromInt32(1), withMinReady(10)),
			nodes: []string{"r", "O", "O"}},
		{name: "ready past minReadySeconds is available", ds: mu(intstr.FromInt32(1), withMinReady(10)),
			nodes: []string{"r", "O", "O"}, step: 6 * time.Second, wantDel: []string{"*"}},
		{name: "LEGACY-BIND ignores maxSurge and falls back to maxUnavailable 1", ds: newDS("web", withMaxSurge(intstr.FromInt32(2))), legacy: true,
			nodes: []string{"O", "O", "O"}, wantDel: []string{"*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// "*" means "any one available old pod": replace with whatever was deleted.
			wild := 0
			for _, d := range tt.wantDel {
				if d == "*" {
					wild++
				}
			}
			if wild > 0 {
				runWildcardRollCase(t, tt, wild)
				return
			}
			runRollCase(t, tt)
		})
	}
}

// runWildcardRollCase checks only the number of deletions and that each deleted pod was an
// available old pod (map order picks which).
func runWildcardRollCase(t *testing.T, tt rollCase, n int) {
	t.Helper()
	ds := tt.ds
	hash := hashOf(ds)
	objs := []runtime.Object{ds}
	var ns []*corev1.Node
	availableOld := map[string]bool{}
	for i, codes := range tt.nodes {
		nodeName := fmt.Sprintf("node-%d", i)
		ns = append(ns, newNode(nodeName))
		objs = append(objs, ns[i])
		for _, c := range codes {
			var p *corev1.Pod
			switch c {
			case 'O':
				p = newDaemonPodFor(ds, nodeName, "old", ready(t0.Add(-time.Hour)))
				availableOld[p.Name] = true
			case 'n':
				p = newDaemonPodFor(ds, nodeName, hash)
			case 'r':
				p = newDaemonPodFor(ds, nodeName, hash, ready(t0.Add(-5*time.Second)))
			default:
				t.Fatalf("code %q not supported in wildcard cases", c)
			}
			objs = append(objs, p)
		}
	}
	var opts []fixtureOpt
	if tt.legacy {
		opts = append(opts, legacyMode)
	}
	f := newFixture(t, objs, opts...)
	f.clock.Step(tt.step)
	s := &syncState{ds: ds, key: "default/web", log: f.c.log, nodes: ns, hash: hash}
	if err := f.c.rollingUpdate(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	deleted := f.deletedPods()
	if len(deleted) != n {
		t.Fatalf("deleted %d pods (%v), want %d", len(deleted), deleted, n)
	}
	for _, name := range deleted {
		if !availableOld[name] {
			t.Errorf("deleted %s, which is not an available old pod", name)
		}
	}
	if len(f.createdPods()) != 0 {
		t.Errorf("maxUnavailable mode must not create: %v", f.createdOn())
	}
}

func TestRollingUpdateMaxSurge(t *testing.T) {
	ms := func(v intstr.IntOrString) *appsv1.DaemonSet { return newDS("web", withMaxSurge(v)) }
	tests := []rollCase{
		{name: "surge one node", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"O", "O", "O", "O"}, wantNew: 1},
		{name: "surge 50% of 4", ds: ms(intstr.FromString("50%")),
			nodes: []string{"O", "O", "O", "O"}, wantNew: 2},
		{name: "budget used by an unavailable new pod", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"On", "O", "O"}},
		{name: "new available: old deleted, next node surged", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"ON", "O", "O"}, wantDel: []string{"node-0/0"}, wantNew: 1},
		{name: "unavailable old pod surged regardless of budget", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"On", "o", "O"}, wantNew: 1, wantNewOn: []string{"node-1"}},
		{name: "unavailable old pod on a node that no longer wants it is deleted", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"N", "xo"}, wantDel: []string{"node-1/0"}},
		{name: "available old pod on an unwanted node goes while availability exceeds desired", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"N", "N", "xO"}, wantDel: []string{"node-2/0"}},
		{name: "available old pod on an unwanted node stays while availability is short", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"N", "n", "xO"}},
		{name: "available old pod on an unwanted node goes while the surge budget is spent", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"On", "On", "On", "N", "xO"}, wantDel: []string{"node-4/0"}},
		{name: "a node with an unavailable old pod is unavailable beside an available new one", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"oN", "N", "xO"}, wantDel: []string{"node-0/0"}},
		{name: "empty nodes are left to manage", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"-", "N"}},
		{name: "duplicates use the surge budget", ds: ms(intstr.FromInt32(1)),
			nodes: []string{"OO", "O"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The pass visits nodes in map order; several runs let an order-dependent
			// decision show.
			for range 8 {
				runRollCase(t, tt)
			}
		})
	}
}

// OnDelete never replaces pods by itself: a full sync leaves old pods alone and only fills
// nodes whose pod the user deleted, with the new template.
func TestOnDelete(t *testing.T) {
	ds := newDS("web", withOnDelete)
	hash := hashOf(ds)
	ns := nodes(3)
	pods := []*corev1.Pod{
		newDaemonPodFor(ds, "node-0", "old", ready(t0.Add(-time.Hour))),
		newDaemonPodFor(ds, "node-1", "old", ready(t0.Add(-time.Hour))),
	}
	f := newFixture(t, objects(ds, ns, pods))
	f.mustSync(ds)
	if d := f.deletedPods(); len(d) != 0 {
		t.Errorf("OnDelete deleted %v", d)
	}
	created := f.createdPods()
	if len(created) != 1 || f.createdOn()[0] != "node-2" || created[0].Labels[RevisionHashLabel] != hash {
		t.Errorf("created %v", f.createdOn())
	}
	w := f.statusWrites()
	if len(w) != 1 || w[0].Status.UpdatedNumberScheduled != 0 || w[0].Status.DesiredNumberScheduled != 3 {
		t.Errorf("status = %+v", w)
	}
}

// A full sync runs the rolling update only when manage had nothing to do.
func TestRollingUpdateWaitsForManage(t *testing.T) {
	ds := newDS("web", withMaxUnavailable(intstr.FromInt32(3)))
	ns := nodes(3)
	pods := []*corev1.Pod{
		newDaemonPodFor(ds, "node-0", "old", ready(t0.Add(-time.Hour))),
		newDaemonPodFor(ds, "node-1", "old", ready(t0.Add(-time.Hour))),
	}
	f := newFixture(t, objects(ds, ns, pods))
	f.mustSync(ds)
	if len(f.createdPods()) != 1 || len(f.deletedPods()) != 0 {
		t.Fatalf("first sync: created %v deleted %v", f.createdOn(), f.deletedPods())
	}
	f.c.expectations.CreationObserved("default/web")
	if err := f.syncFresh(ds); err != nil {
		t.Fatal(err)
	}
	// The cache still lacks the created pod, so node-2 is empty again: manage recreates.
	if len(f.createdPods()) != 1 || len(f.deletedPods()) != 0 {
		t.Fatalf("second sync: created %v deleted %v", f.createdOn(), f.deletedPods())
	}
	f.addToCache(newDaemonPodFor(ds, "node-2", hashOf(ds), ready(t0.Add(-time.Hour))))
	f.c.expectations.CreationObserved("default/web")
	if err := f.syncFresh(ds); err != nil {
		t.Fatal(err)
	}
	if len(f.deletedPods()) != 2 {
		t.Errorf("rolling update deleted %v, want both old pods", f.deletedPods())
	}
}

// TestUpdatedDesiredNodeCounts: which nodes are desired (and empty), how the strategy's
// values scale against them, the maxUnavailable=1 fallback and invalid values.
func TestUpdatedDesiredNodeCounts(t *testing.T) {
	gone := withTaint("gone", corev1.TaintEffectNoExecute)
	tests := []struct {
		name     string
		ds       *appsv1.DaemonSet
		legacy   bool
		nodes    []*corev1.Node
		withPods []string // nodes with an entry in the node-to-pods map
		want     updateBudget
		wantErr  string
	}{
		{name: "int maxUnavailable, one node still empty",
			ds:    newDS("web", withMaxUnavailable(intstr.FromInt32(2))),
			nodes: nodes(3), withPods: []string{"node-0", "node-1"},
			want: updateBudget{maxUnavailable: 2, desired: 3, emptyDesired: 1}},
		{name: "percent maxUnavailable rounds up",
			ds:    newDS("web", withMaxUnavailable(intstr.FromString("30%"))),
			nodes: nodes(5), withPods: []string{"node-0", "node-1", "node-2", "node-3", "node-4"},
			want: updateBudget{maxUnavailable: 2, desired: 5}},
		{name: "percent maxSurge rounds up",
			ds:    newDS("web", withMaxSurge(intstr.FromString("10%"))),
			nodes: nodes(3), withPods: []string{"node-0", "node-1", "node-2"},
			want: updateBudget{maxSurge: 1, desired: 3}},
		{name: "ineligible nodes are neither desired nor empty",
			ds:    newDS("web", withMaxUnavailable(intstr.FromInt32(1))),
			nodes: []*corev1.Node{newNode("a"), newNode("b", gone), newNode("c", gone)}, withPods: []string{"c"},
			want: updateBudget{maxUnavailable: 1, desired: 1, emptyDesired: 1}},
		{name: "map entries for nodes not in the list change nothing",
			ds:    newDS("web", withMaxUnavailable(intstr.FromInt32(1))),
			nodes: nodes(1), withPods: []string{"ghost"},
			want: updateBudget{maxUnavailable: 1, desired: 1, emptyDesired: 1}},
		{name: "both zero with desired nodes: maxUnavailable becomes 1",
			ds:    newDS("web", withMaxUnavailable(intstr.FromString("0%"))),
			nodes: nodes(2),
			want:  updateBudget{maxUnavailable: 1, desired: 2, emptyDesired: 2}},
		{name: "both zero without desired nodes stays zero",
			ds:   newDS("web", withMaxUnavailable(intstr.FromInt32(0))),
			want: updateBudget{}},
		{name: "0% surge of few nodes is zero, not rounded up to 1",
			ds:    newDS("web", withMaxSurge(intstr.FromString("0%"))),
			nodes: nodes(3),
			want:  updateBudget{maxUnavailable: 1, desired: 3, emptyDesired: 3}},
		{name: "LEGACY-BIND ignores maxSurge and falls back to maxUnavailable 1",
			ds: newDS("web", withMaxSurge(intstr.FromInt32(2))), legacy: true,
			nodes: nodes(3),
			want:  updateBudget{maxUnavailable: 1, desired: 3, emptyDesired: 3}},
		{name: "OnDelete scales nothing, so the fallback applies",
			ds:    newDS("web", withOnDelete),
			nodes: nodes(2),
			want:  updateBudget{maxUnavailable: 1, desired: 2, emptyDesired: 2}},
		{name: "invalid maxUnavailable is an error",
			ds:    newDS("web", withMaxUnavailable(intstr.FromString("half"))),
			nodes: nodes(1), wantErr: "invalid value for MaxUnavailable"},
		{name: "invalid maxSurge is an error",
			ds:    newDS("web", withMaxSurge(intstr.FromString("x%"))),
			nodes: nodes(1), wantErr: "invalid value for MaxSurge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []fixtureOpt
			if tt.legacy {
				opts = append(opts, legacyMode)
			}
			f := newFixture(t, objects(tt.ds, tt.nodes), opts...)
			nodeToPods := map[string][]*corev1.Pod{}
			for _, n := range tt.withPods {
				nodeToPods[n] = []*corev1.Pod{newDaemonPodFor(tt.ds, n, "old")}
			}
			s := &syncState{ds: tt.ds, key: "default/web", log: f.c.log, nodes: tt.nodes, hash: hashOf(tt.ds)}
			got, err := f.c.updatedDesiredNodeCounts(s, nodeToPods)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("budget = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestStaleDeletionKeepsTheBudget: the removal of a pod the controller stopped waiting for
// long ago must not stand in for the deletion it is waiting for now. Node-0's old pod has
// finished and been replaced, but its final removal reaches the informer only after the
// rolling update deleted the next old pod. Were that removal counted against the pending
// deletion, the next sync would act on a cache that still shows the deleted pod available
// and delete a second one, two unavailable nodes against a budget of one.
func TestStaleDeletionKeepsTheBudget(t *testing.T) {
	ds := newDS("web", withMaxUnavailable(intstr.FromInt32(1)))
	hash := hashOf(ds)
	finished := newDaemonPodFor(ds, "node-0", "old", phase(corev1.PodSucceeded), terminating)
	pods := []*corev1.Pod{
		finished,
		newDaemonPodFor(ds, "node-0", hash, ready(t0.Add(-time.Hour))),
		newDaemonPodFor(ds, "node-1", "old", ready(t0.Add(-time.Hour))),
		newDaemonPodFor(ds, "node-2", "old", ready(t0.Add(-time.Hour))),
	}
	f := newFixture(t, objects(ds, nodes(3), pods))
	f.mustSync(ds)
	first := f.deletedPods()
	if len(first) != 1 {
		t.Fatalf("first sync deleted %v, want one old pod", first)
	}

	// The finished pod's removal arrives; the deletion just issued has not been seen yet.
	f.c.deletePod(finished)
	if f.c.expectations.Satisfied("default/web") {
		t.Error("another pod's removal satisfied the pending deletion")
	}
	if err := f.syncFresh(ds); err != nil {
		t.Fatal(err)
	}
	if got := f.deletedPods(); len(got) != 0 {
		t.Fatalf("sync on a stale cache deleted %v as well as %v", got, first)
	}

	// Now the deletion itself is observed: the node counts as unavailable and the budget
	// stays spent.
	was := pods[slices.IndexFunc(pods, func(p *corev1.Pod) bool { return p.Name == first[0] })]
	gone := was.DeepCopy()
	gone.ResourceVersion = "2"
	terminating(gone)
	f.addToCache(gone)
	f.c.updatePod(was, gone)
	if !f.c.expectations.Satisfied("default/web") {
		t.Fatal("the deletion was observed but expectations are not satisfied")
	}
	if err := f.syncFresh(ds); err != nil {
		t.Fatal(err)
	}
	if got := f.deletedPods(); len(got) != 0 {
		t.Errorf("deleted %v while %s is still terminating", got, first[0])
	}
}
