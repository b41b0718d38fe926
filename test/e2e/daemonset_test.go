package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/placement"
	"github.com/miniplane/miniplane/test/testenv"
)

// End-to-end tests of the DaemonSet controller (issue 5, "What it must show"): each test
// starts its own control plane (etcd, API server, controller-manager, scheduler, stub
// kubelets) and drives it through the API only. Tests whose behaviour exists in both
// placement modes run once per mode, as parallel subtests.

// dsMode is one placement mode of the DaemonSet controller.
type dsMode struct {
	name string
	// legacy turns the ScheduleDaemonSetPods gate off: the controller runs the predicates
	// and binds pods itself (LEGACY-BIND).
	legacy bool
}

var dsModes = []dsMode{{name: "current"}, {name: "legacy-bind", legacy: true}}

const (
	dsNS = "default"
	// dsTimeout bounds each wait; a healthy run needs a small fraction of it.
	dsTimeout = 30 * time.Second
	// dsImage1 and dsImage2 are the two templates the update tests switch between.
	dsImage1 = "registry.example/agent:1"
	dsImage2 = "registry.example/agent:2"
)

// dsStart runs a control plane with nodes stub nodes (stub-node-0 …) in the given mode;
// overrides customise single nodes.
func dsStart(t *testing.T, mode dsMode, nodes int, overrides ...configs.StubNodeOverride) *testenv.Env {
	t.Helper()
	cfg := testenv.Everything(nodes)
	cfg.ControllerManager.FeatureGates = map[string]bool{configs.FeatureScheduleDaemonSetPods: !mode.legacy}
	// Unschedulable pods are retried sooner than kube-scheduler's 1s..10s so a test waiting
	// for a binding does not wait out a backoff.
	cfg.Scheduler.PodInitialBackoff = 100 * time.Millisecond
	cfg.Scheduler.PodMaxBackoff = time.Second
	cfg.KubeletStub.Overrides = overrides
	return testenv.New(t, cfg)
}

// dsNodeName is the name of fleet node i.
func dsNodeName(i int) string { return fmt.Sprintf("%s-%d", configs.DefaultStubNodePrefix, i) }

// dsNodeNames lists fleet nodes 0 … n-1.
func dsNodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = dsNodeName(i)
	}
	return out
}

// dsNewDaemonSet is a DaemonSet selecting app=name with one container.
func dsNewDaemonSet(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: dsNS},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: dsImage1}}},
			},
		},
	}
}

func dsCreate(t *testing.T, c kubernetes.Interface, ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	t.Helper()
	created, err := c.AppsV1().DaemonSets(ds.Namespace).Create(context.Background(), ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create daemonset %s: %v", ds.Name, err)
	}
	return created
}

// dsUpdate changes the DaemonSet with mutate, retrying on conflicts.
func dsUpdate(t *testing.T, c kubernetes.Interface, name string, mutate func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	t.Helper()
	var out *appsv1.DaemonSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := c.AppsV1().DaemonSets(dsNS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(ds)
		out, err = c.AppsV1().DaemonSets(dsNS).Update(context.Background(), ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update daemonset %s: %v", name, err)
	}
	return out
}

// dsUpdateNode changes a node's labels or taints with mutate, retrying on conflicts with
// the stub's own writes.
func dsUpdateNode(t *testing.T, c kubernetes.Interface, name string, mutate func(*corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(node)
		_, err = c.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update node %s: %v", name, err)
	}
}

// dsEventually polls cond until it reports done or timeout passes; cond's description of
// the state it saw is printed on timeout.
func dsEventually(t *testing.T, timeout time.Duration, what string, cond func() (state string, done bool)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		state, done := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// dsAvailable: running, Ready and not being deleted (minReadySeconds is 0 in these tests).
func dsAvailable(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func dsTarget(p *corev1.Pod) string {
	n, _ := placement.TargetNodeName(p)
	return n
}

// dsStatus is the part of DaemonSetStatus the controller writes.
type dsStatus struct {
	Desired, Current, Misscheduled, Ready, Updated, Available, Unavailable int32
}

func dsStatusOf(ds *appsv1.DaemonSet) dsStatus {
	s := ds.Status
	return dsStatus{s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.NumberMisscheduled, s.NumberReady,
		s.UpdatedNumberScheduled, s.NumberAvailable, s.NumberUnavailable}
}

// dsWaitStatus waits until the DaemonSet's controller has observed its generation and
// reports want, and returns the DaemonSet.
func dsWaitStatus(t *testing.T, c kubernetes.Interface, name string, want dsStatus) *appsv1.DaemonSet {
	t.Helper()
	var ds *appsv1.DaemonSet
	dsEventually(t, dsTimeout, fmt.Sprintf("daemonset %s status %+v", name, want), func() (string, bool) {
		var err error
		ds, err = c.AppsV1().DaemonSets(dsNS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		got := dsStatusOf(ds)
		return fmt.Sprintf("%+v observedGeneration=%d generation=%d", got, ds.Status.ObservedGeneration, ds.Generation),
			got == want && ds.Status.ObservedGeneration == ds.Generation
	})
	return ds
}

// dsListPods lists the pods of app=name.
func dsListPods(t *testing.T, c kubernetes.Interface, name string) []corev1.Pod {
	t.Helper()
	pods, err := c.CoreV1().Pods(dsNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	return pods.Items
}

// dsLivePodsByNode groups the pods not being deleted by the node they are pinned or bound to.
func dsLivePodsByNode(pods []*corev1.Pod) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out[dsTarget(p)] = append(out[dsTarget(p)], p)
		}
	}
	return out
}

func dsPtrs(pods []corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	return out
}

// dsWaitOnePodPerNode waits until the live pods of app=name are exactly one per node of
// want, each available, and returns them by node.
func dsWaitOnePodPerNode(t *testing.T, c kubernetes.Interface, name string, want []string) map[string]*corev1.Pod {
	t.Helper()
	var out map[string]*corev1.Pod
	dsEventually(t, dsTimeout, fmt.Sprintf("one available pod of %s on each of %v", name, want), func() (string, bool) {
		pods := dsPtrs(dsListPods(t, c, name))
		byNode := dsLivePodsByNode(pods)
		state := dsDescribe(pods)
		if len(byNode) != len(want) || len(pods) != len(want) {
			return state, false
		}
		out = map[string]*corev1.Pod{}
		for _, n := range want {
			if len(byNode[n]) != 1 || !dsAvailable(byNode[n][0]) {
				return state, false
			}
			out[n] = byNode[n][0]
		}
		return state, true
	})
	return out
}

// dsDescribe summarises pods for failure messages.
func dsDescribe(pods []*corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		s := fmt.Sprintf("%s@%s(%s", p.Name, dsTarget(p), p.Status.Phase)
		if dsAvailable(p) {
			s += ",available"
		}
		if p.DeletionTimestamp != nil {
			s += ",deleting"
		}
		parts = append(parts, s+",hash="+p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]+")")
	}
	sort.Strings(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// dsPodEvent is one pod watch event as the test saw it.
type dsPodEvent struct {
	at  time.Time
	typ watch.EventType
	pod *corev1.Pod
}

// dsPodWatch follows the pods of one DaemonSet through a watch, keeps the current set and
// the history of events, and runs an invariant on the state after every event.
type dsPodWatch struct {
	mu        sync.Mutex
	pods      map[types.UID]*corev1.Pod
	events    []dsPodEvent
	check     func(pods []*corev1.Pod) string
	violation string
	watchErr  string
}

// dsWatchPods starts following the pods of app=name from now on. check, if not nil, is run
// on the pods after each event; its first non-empty answer is kept as the violation.
func dsWatchPods(t *testing.T, c kubernetes.Interface, name string, check func(pods []*corev1.Pod) string) *dsPodWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := c.CoreV1().Pods(dsNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		cancel()
		t.Fatalf("list pods: %v", err)
	}
	w := &dsPodWatch{pods: map[types.UID]*corev1.Pod{}, check: check}
	for i := range list.Items {
		w.pods[list.Items[i].UID] = &list.Items[i]
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = "app=" + name
			return c.CoreV1().Pods(dsNS).Watch(ctx, opts)
		},
	})
	if err != nil {
		cancel()
		t.Fatalf("watch pods: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range rw.ResultChan() {
			w.apply(ev)
		}
	}()
	t.Cleanup(func() {
		cancel()
		rw.Stop()
		<-done
	})
	return w
}

func (w *dsPodWatch) apply(ev watch.Event) {
	pod, ok := ev.Object.(*corev1.Pod)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !ok {
		if ev.Type == watch.Error && w.watchErr == "" {
			w.watchErr = fmt.Sprintf("watch error: %v", apierrors.FromObject(ev.Object))
		}
		return
	}
	switch ev.Type {
	case watch.Added, watch.Modified:
		w.pods[pod.UID] = pod
	case watch.Deleted:
		delete(w.pods, pod.UID)
	default:
		return
	}
	w.events = append(w.events, dsPodEvent{at: time.Now(), typ: ev.Type, pod: pod})
	if w.check != nil && w.violation == "" {
		if v := w.check(w.snapshotLocked()); v != "" {
			w.violation = fmt.Sprintf("after %s %s (event %d): %s", ev.Type, pod.Name, len(w.events), v)
		}
	}
}

func (w *dsPodWatch) snapshotLocked() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(w.pods))
	for _, p := range w.pods {
		out = append(out, p)
	}
	return out
}

// Events returns the events seen so far.
func (w *dsPodWatch) Events() []dsPodEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

// Check fails the test if the invariant was ever broken or the watch failed.
func (w *dsPodWatch) Check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watchErr != "" {
		t.Error(w.watchErr)
	}
	if w.violation != "" {
		t.Errorf("invariant broken %s", w.violation)
	}
}

// dsCreatedPods returns the names of the pods the watch saw being created, in order.
func dsCreatedPods(events []dsPodEvent) []string {
	var out []string
	for _, e := range events {
		if e.typ == watch.Added {
			out = append(out, e.pod.Name)
		}
	}
	return out
}

// dsUnavailableNodes lists the nodes among want that have no available pod.
func dsUnavailableNodes(want []string, pods []*corev1.Pod) []string {
	ok := map[string]bool{}
	for _, p := range pods {
		if dsAvailable(p) {
			ok[dsTarget(p)] = true
		}
	}
	var out []string
	for _, n := range want {
		if !ok[n] {
			out = append(out, n)
		}
	}
	return out
}

// dsHash is the controller-revision-hash label of a pod.
func dsHash(p *corev1.Pod) string { return p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] }

// dsRevisions lists the ControllerRevisions of app=name by name.
func dsRevisions(t *testing.T, c kubernetes.Interface, name string) map[string]appsv1.ControllerRevision {
	t.Helper()
	list, err := c.AppsV1().ControllerRevisions(dsNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatalf("list controllerrevisions: %v", err)
	}
	out := map[string]appsv1.ControllerRevision{}
	for _, cr := range list.Items {
		out[cr.Name] = cr
	}
	return out
}

// dsEvents lists the events recorded on the DaemonSet.
func dsEvents(t *testing.T, c kubernetes.Interface, name string) []corev1.Event {
	t.Helper()
	list, err := c.CoreV1().Events(dsNS).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	return list.Items
}

// TestDaemonSetPlacesOnePodPerEligibleNode: nodes that differ in labels, taints and capacity;
// the DaemonSet selects role=web, tolerates one taint and asks for more CPU than one node
// has. Each eligible node gets exactly one pod, nothing is created twice, and every status
// field is right. The undersized node is where the modes differ: CURRENT creates the pod
// and the scheduler leaves it pending; LEGACY-BIND creates nothing and reports
// FailedPlacement, counting the node as desired but not scheduled.
func TestDaemonSetPlacesOnePodPerEligibleNode(t *testing.T) {
	web := map[string]string{"role": "web"}
	overrides := []configs.StubNodeOverride{
		{Name: dsNodeName(0), StubNodeTemplate: configs.StubNodeTemplate{Labels: web}},
		{Name: dsNodeName(1), StubNodeTemplate: configs.StubNodeTemplate{Labels: web,
			Taints: []configs.StubTaint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}}},
		// stub-node-2: no role label.
		{Name: dsNodeName(3), StubNodeTemplate: configs.StubNodeTemplate{Labels: web,
			Capacity: configs.StubResources{CPU: "100m"}}},
		{Name: dsNodeName(4), StubNodeTemplate: configs.StubNodeTemplate{Labels: web,
			Taints: []configs.StubTaint{{Key: "tolerated", Value: "yes", Effect: "NoSchedule"}}}},
	}
	for _, mode := range dsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			env := dsStart(t, mode, 5, overrides...)
			c := env.Client
			w := dsWatchPods(t, c, "place", nil)

			ds := dsNewDaemonSet("place")
			ds.Spec.Template.Spec.NodeSelector = web
			ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "tolerated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			ds.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}
			ds = dsCreate(t, c, ds)

			tiny := dsNodeName(3)
			running := []string{dsNodeName(0), dsNodeName(4)}
			want := dsStatus{Desired: 3, Current: 3, Ready: 2, Updated: 3, Available: 2, Unavailable: 1}
			if mode.legacy {
				want = dsStatus{Desired: 3, Current: 2, Ready: 2, Updated: 2, Available: 2, Unavailable: 1}
			}
			got := dsWaitStatus(t, c, ds.Name, want)
			if got.Status.ObservedGeneration != 1 || got.Status.CollisionCount != nil || len(got.Status.Conditions) != 0 {
				t.Errorf("status %+v: want observedGeneration 1, no collisionCount, no conditions", got.Status)
			}

			// Pods: one available pod on each eligible node with room; in CURRENT mode one
			// pending, unbound pod pinned to the undersized node.
			var pods []*corev1.Pod
			dsEventually(t, dsTimeout, "the daemon pods to settle", func() (string, bool) {
				pods = dsPtrs(dsListPods(t, c, ds.Name))
				byNode := dsLivePodsByNode(pods)
				for _, n := range running {
					if len(byNode[n]) != 1 || !dsAvailable(byNode[n][0]) {
						return dsDescribe(pods), false
					}
				}
				wantPods := len(running)
				if !mode.legacy {
					wantPods++
				}
				return dsDescribe(pods), len(pods) == wantPods
			})
			revs := dsRevisions(t, c, ds.Name)
			if len(revs) != 1 {
				t.Fatalf("want one ControllerRevision, got %d", len(revs))
			}
			var hash string
			for name, cr := range revs {
				hash = cr.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
				if name != ds.Name+"-"+hash || cr.Revision != 1 {
					t.Errorf("ControllerRevision %s: revision %d, hash label %q", name, cr.Revision, hash)
				}
			}
			for _, p := range pods {
				node := dsTarget(p)
				if p.DeletionTimestamp != nil {
					t.Errorf("pod %s is being deleted", p.Name)
				}
				ref := metav1.GetControllerOf(p)
				if ref == nil || ref.Kind != "DaemonSet" || ref.Name != ds.Name || ref.UID != ds.UID ||
					ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
					t.Errorf("pod %s: controller reference %+v", p.Name, ref)
				}
				if !strings.HasPrefix(p.Name, ds.Name+"-") {
					t.Errorf("pod %s: name not generated from %q", p.Name, ds.Name+"-")
				}
				if dsHash(p) != hash || p.Labels["pod-template-generation"] != "1" {
					t.Errorf("pod %s: labels %v, want hash %s and template generation 1", p.Name, p.Labels, hash)
				}
				for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeUnschedulable,
					corev1.TaintNodeDiskPressure, corev1.TaintNodeMemoryPressure, corev1.TaintNodePIDPressure} {
					if !slices.ContainsFunc(p.Spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == key }) {
						t.Errorf("pod %s: no automatic toleration for %s", p.Name, key)
					}
				}
				_, pinned := dsAffinityTarget(p)
				switch {
				case mode.legacy && (pinned || p.Spec.NodeName == ""):
					t.Errorf("pod %s: LEGACY-BIND pods are bound by the controller, not pinned (nodeName %q, pinned %v)", p.Name, p.Spec.NodeName, pinned)
				case !mode.legacy && !pinned:
					t.Errorf("pod %s: not pinned to a node by affinity", p.Name)
				}
				switch {
				case node == tiny:
					if mode.legacy || p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
						t.Errorf("pod %s on the undersized node: nodeName %q phase %s, want pending and unbound", p.Name, p.Spec.NodeName, p.Status.Phase)
					}
				case slices.Contains(running, node):
					if p.Spec.NodeName != node {
						t.Errorf("pod %s pinned to %s is bound to %q", p.Name, node, p.Spec.NodeName)
					}
				default:
					t.Errorf("pod %s on ineligible node %q", p.Name, node)
				}
			}
			if created := dsCreatedPods(w.Events()); len(created) != len(pods) {
				t.Errorf("%d pods were created for %d nodes: %v", len(created), len(pods), created)
			}
			w.Check(t)

			if mode.legacy {
				msg := fmt.Sprintf("failed to place pod on %q: Insufficient cpu", tiny)
				dsEventually(t, dsTimeout, "a FailedPlacement event", func() (string, bool) {
					for _, e := range dsEvents(t, c, ds.Name) {
						if e.Reason == "FailedPlacement" && e.Type == corev1.EventTypeWarning && e.Message == msg &&
							e.Source.Component == "daemonset-controller" {
							return "", true
						}
					}
					return "no event " + msg, false
				})
			}
		})
	}
}

// dsAffinityTarget returns the node a pod's required matchFields affinity pins it to.
func dsAffinityTarget(p *corev1.Pod) (string, bool) {
	cp := p.DeepCopy()
	cp.Spec.NodeName = ""
	return placement.TargetNodeName(cp)
}

// TestDaemonSetFollowsNodeLabelsAndTaints: labelling a node adds a pod, unlabelling removes
// it, a NoExecute taint evicts, a NoSchedule taint keeps the running pod (it becomes
// misscheduled), and lifting the taints brings the pods back.
func TestDaemonSetFollowsNodeLabelsAndTaints(t *testing.T) {
	web := map[string]string{"role": "web"}
	for _, mode := range dsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			env := dsStart(t, mode, 3,
				configs.StubNodeOverride{Name: dsNodeName(0), StubNodeTemplate: configs.StubNodeTemplate{Labels: web}},
				configs.StubNodeOverride{Name: dsNodeName(1), StubNodeTemplate: configs.StubNodeTemplate{Labels: web}})
			c := env.Client
			ds := dsNewDaemonSet("follow")
			ds.Spec.Template.Spec.NodeSelector = web
			ds = dsCreate(t, c, ds)
			n0, n1, n2 := dsNodeName(0), dsNodeName(1), dsNodeName(2)

			step := func(what string, nodes []string, want dsStatus) map[string]*corev1.Pod {
				t.Helper()
				pods := dsWaitOnePodPerNode(t, c, ds.Name, nodes)
				dsWaitStatus(t, c, ds.Name, want)
				t.Logf("%s: pods on %v", what, nodes)
				return pods
			}
			step("initially", []string{n0, n1}, dsStatus{Desired: 2, Current: 2, Ready: 2, Updated: 2, Available: 2})

			dsUpdateNode(t, c, n2, func(n *corev1.Node) { n.Labels["role"] = "web" })
			step("label added", []string{n0, n1, n2}, dsStatus{Desired: 3, Current: 3, Ready: 3, Updated: 3, Available: 3})

			dsUpdateNode(t, c, n0, func(n *corev1.Node) { delete(n.Labels, "role") })
			step("label removed", []string{n1, n2}, dsStatus{Desired: 2, Current: 2, Ready: 2, Updated: 2, Available: 2})

			dsUpdateNode(t, c, n1, func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "evict", Value: "yes", Effect: corev1.TaintEffectNoExecute})
			})
			before := step("NoExecute taint", []string{n2}, dsStatus{Desired: 1, Current: 1, Ready: 1, Updated: 1, Available: 1})

			// A NoSchedule taint stops new pods but lets the running one stay.
			dsUpdateNode(t, c, n2, func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "drain", Value: "soon", Effect: corev1.TaintEffectNoSchedule})
			})
			dsWaitStatus(t, c, ds.Name, dsStatus{Misscheduled: 1})
			after := dsWaitOnePodPerNode(t, c, ds.Name, []string{n2})
			if after[n2].UID != before[n2].UID {
				t.Errorf("the pod on %s was replaced after a NoSchedule taint: %s → %s", n2, before[n2].Name, after[n2].Name)
			}

			dsUpdateNode(t, c, n1, func(n *corev1.Node) { n.Spec.Taints = nil })
			dsUpdateNode(t, c, n2, func(n *corev1.Node) { n.Spec.Taints = nil })
			final := step("taints removed", []string{n1, n2}, dsStatus{Desired: 2, Current: 2, Ready: 2, Updated: 2, Available: 2})
			if final[n2].UID != before[n2].UID {
				t.Errorf("the pod on %s was replaced", n2)
			}
		})
	}
}

// TestDaemonSetBacksOffFromRejectingNode: a node whose kubelet rejects every pod gets
// replacement pods further and further apart (failed-pod backoff, 1s doubling), never in a
// hot loop, while the other node keeps its single pod. Pods are counted through a watch,
// since the event recorder folds and rate-limits repeated events. The surge case covers a
// DaemonSet with maxSurge, whose "keep one live pod per node" rule must not replace a failed
// pod that is still waiting out its backoff.
func TestDaemonSetBacksOffFromRejectingNode(t *testing.T) {
	const deletions = 4 // three gaps: ≥1s, ≥2s, ≥4s
	cases := []struct {
		mode  dsMode
		name  string
		surge bool
	}{
		{mode: dsModes[0], name: dsModes[0].name},
		{mode: dsModes[1], name: dsModes[1].name},
		{mode: dsModes[0], name: dsModes[0].name + "-maxsurge", surge: true},
	}
	for _, tc := range cases {
		mode := tc.mode
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			good, bad := dsNodeName(0), dsNodeName(1)
			web := map[string]string{"role": "web"}
			env := dsStart(t, mode, 2,
				configs.StubNodeOverride{Name: good, StubNodeTemplate: configs.StubNodeTemplate{Labels: web}},
				configs.StubNodeOverride{Name: bad, StubNodeTemplate: configs.StubNodeTemplate{
					Annotations: map[string]string{"stub.miniplane.io/reject-pods": "NotToday"}}})
			c := env.Client
			w := dsWatchPods(t, c, "reject", nil)
			ds := dsNewDaemonSet("reject")
			ds.Spec.Template.Spec.NodeSelector = web
			if tc.surge {
				one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
				ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}}
			}
			ds = dsCreate(t, c, ds)
			// The backoff is keyed by status.observedGeneration (as upstream), so a pod that
			// fails before the controller has seen its own first status write gets a fresh
			// backoff afterwards. The bad node joins the DaemonSet only once the controller has
			// written a second status (its cache holds the first), so every failure is
			// measured against one backoff entry.
			dsWaitStatus(t, c, ds.Name, dsStatus{Desired: 1, Current: 1, Ready: 1, Updated: 1, Available: 1})
			dsUpdateNode(t, c, bad, func(n *corev1.Node) { n.Labels["role"] = "web" })

			// deletedAt is when the watch first saw each pod on the bad node being deleted.
			type seen struct {
				name      string
				deletedAt time.Time
			}
			var gone []seen
			collect := func() []seen {
				byPod := map[string]int{}
				var out []seen
				for _, e := range w.Events() {
					if dsTarget(e.pod) != bad || (e.typ != watch.Deleted && e.pod.DeletionTimestamp == nil) {
						continue
					}
					if _, ok := byPod[e.pod.Name]; ok {
						continue
					}
					byPod[e.pod.Name] = len(out)
					out = append(out, seen{e.pod.Name, e.at})
				}
				return out
			}
			dsEventually(t, 25*time.Second, fmt.Sprintf("%d failed pods deleted on %s", deletions, bad), func() (string, bool) {
				gone = collect()
				return fmt.Sprintf("%d deleted", len(gone)), len(gone) >= deletions
			})
			events := w.Events()
			gone = gone[:deletions]
			var gaps []time.Duration
			for i := 1; i < len(gone); i++ {
				gaps = append(gaps, gone[i].deletedAt.Sub(gone[i-1].deletedAt))
			}
			t.Logf("gaps between deletions of failed pods: %v", gaps)
			// The controller waits 1s·2^i after the i-th deletion. The times here are when the
			// watch delivered each deletion, which may lag by a varying amount on a busy
			// machine, so single gaps are held to half their backoff (a hot loop makes them
			// milliseconds), growth is judged from the first to the last gap, and the whole
			// span, which only its end points' lags can shorten, to 90% of 1+2+4 s.
			var span, want time.Duration
			for i, g := range gaps {
				backoff := time.Second << i
				if g < backoff/2 {
					t.Errorf("gap %d is %v, want about %v (failed-pod backoff)", i+1, g, backoff)
				}
				span, want = span+g, want+backoff
			}
			if last, first := gaps[len(gaps)-1], gaps[0]; last < 2*first {
				t.Errorf("gaps do not grow: %v", gaps)
			}
			if span < want*9/10 {
				t.Errorf("%d deletions took %v, want at least %v", deletions, span, want*9/10)
			}

			// Not a hot loop: up to the last deletion seen, each failed pod was replaced once.
			last := gone[len(gone)-1].deletedAt
			created, healthy := 0, map[string]bool{}
			for _, e := range events {
				if e.typ != watch.Added || e.at.After(last) {
					continue
				}
				switch dsTarget(e.pod) {
				case bad:
					created++
				default:
					healthy[e.pod.Name] = true
				}
			}
			if created > deletions+1 {
				t.Errorf("%d pods created on %s for %d deletions", created, bad, deletions)
			}
			if len(healthy) != 1 {
				t.Errorf("the healthy node %s got %d pods, want 1", good, len(healthy))
			}
			for _, e := range events {
				if dsTarget(e.pod) == bad && e.pod.Status.Phase == corev1.PodFailed && e.pod.Status.Reason != "NotToday" {
					t.Errorf("pod %s failed with reason %q, want the injected NotToday", e.pod.Name, e.pod.Status.Reason)
				}
			}

			// Each deletion was announced with a FailedDaemonPod event on the DaemonSet.
			dsEventually(t, dsTimeout, "FailedDaemonPod events for the deleted pods", func() (string, bool) {
				msgs := map[string]bool{}
				for _, e := range dsEvents(t, c, ds.Name) {
					if e.Reason == "FailedDaemonPod" && e.Type == corev1.EventTypeWarning && e.Source.Component == "daemonset-controller" {
						msgs[e.Message] = true
					}
				}
				for _, g := range gone {
					want := fmt.Sprintf("Found failed daemon pod %s/%s on node %s, will try to kill it", dsNS, g.name, bad)
					if !msgs[want] {
						return "missing: " + want, false
					}
				}
				return "", true
			})
		})
	}
}

// TestDaemonSetRollingUpdateMaxUnavailable: a template change rolls over five nodes with
// maxUnavailable=1. After every pod event the watch checks that at most one node lacks an
// available pod; the rollout ends with every pod on the new revision and status to match.
func TestDaemonSetRollingUpdateMaxUnavailable(t *testing.T) {
	const n = 5
	for _, mode := range dsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			env := dsStart(t, mode, n)
			c := env.Client
			nodes := dsNodeNames(n)
			ds := dsNewDaemonSet("roll")
			one := intstr.FromInt32(1)
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one}}
			ds = dsCreate(t, c, ds)
			oldPods := dsWaitOnePodPerNode(t, c, ds.Name, nodes)
			dsWaitStatus(t, c, ds.Name, dsStatus{Desired: n, Current: n, Ready: n, Updated: n, Available: n})

			maxSeen := 0
			w := dsWatchPods(t, c, ds.Name, func(pods []*corev1.Pod) string {
				un := dsUnavailableNodes(nodes, pods)
				maxSeen = max(maxSeen, len(un))
				if len(un) > 1 {
					return fmt.Sprintf("%d nodes without an available pod %v: %s", len(un), un, dsDescribe(pods))
				}
				return ""
			})
			updated := dsUpdate(t, c, ds.Name, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = dsImage2 })
			if updated.Generation != 2 {
				t.Fatalf("generation %d after a template change, want 2", updated.Generation)
			}
			final := dsWaitStatus(t, c, ds.Name, dsStatus{Desired: n, Current: n, Ready: n, Updated: n, Available: n})
			newPods := dsWaitOnePodPerNode(t, c, ds.Name, nodes)
			var newHash string
			for _, p := range newPods {
				if p.Spec.Containers[0].Image != dsImage2 || dsHash(p) == dsHash(oldPods[dsTarget(p)]) {
					t.Errorf("pod %s not updated: image %s hash %s", p.Name, p.Spec.Containers[0].Image, dsHash(p))
				}
				newHash = dsHash(p)
			}
			if _, ok := dsRevisions(t, c, ds.Name)[ds.Name+"-"+newHash]; !ok {
				t.Errorf("no ControllerRevision %s-%s", ds.Name, newHash)
			}
			if final.Status.ObservedGeneration != 2 {
				t.Errorf("observedGeneration %d, want 2", final.Status.ObservedGeneration)
			}
			w.Check(t)
			w.mu.Lock()
			if maxSeen != 1 {
				t.Errorf("at most %d nodes were unavailable at once; the rollout should use its budget of 1", maxSeen)
			}
			w.mu.Unlock()
			if created := dsCreatedPods(w.Events()); len(created) != n {
				t.Errorf("%d pods created during the rollout of %d nodes: %v", len(created), n, created)
			}
		})
	}
}

// TestDaemonSetRollingUpdateMaxSurge: with maxSurge=1 (maxUnavailable=0) a new pod starts
// next to the old one before the old one goes. After every pod event the watch checks that
// at most one node runs an extra pod and that no node is ever without an available pod.
// LEGACY-BIND has no surge (its simulation would double-book nodes): it falls back to
// maxUnavailable=1, so there it is checked that no node ever runs two pods and at most one
// is unavailable.
func TestDaemonSetRollingUpdateMaxSurge(t *testing.T) {
	const n = 5
	for _, mode := range dsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			env := dsStart(t, mode, n)
			c := env.Client
			nodes := dsNodeNames(n)
			ds := dsNewDaemonSet("surge")
			one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}}
			ds = dsCreate(t, c, ds)
			dsWaitOnePodPerNode(t, c, ds.Name, nodes)
			dsWaitStatus(t, c, ds.Name, dsStatus{Desired: n, Current: n, Ready: n, Updated: n, Available: n})

			maxExtra, maxUnavailable := 1, 0
			if mode.legacy {
				maxExtra, maxUnavailable = 0, 1
			}
			extraSeen := 0
			w := dsWatchPods(t, c, ds.Name, func(pods []*corev1.Pod) string {
				live := 0
				for _, p := range pods {
					if p.DeletionTimestamp == nil {
						live++
					}
				}
				extraSeen = max(extraSeen, live-n)
				if live-n > maxExtra {
					return fmt.Sprintf("%d pods for %d nodes: %s", live, n, dsDescribe(pods))
				}
				if un := dsUnavailableNodes(nodes, pods); len(un) > maxUnavailable {
					return fmt.Sprintf("nodes without an available pod %v: %s", un, dsDescribe(pods))
				}
				return ""
			})
			dsUpdate(t, c, ds.Name, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = dsImage2 })
			dsWaitStatus(t, c, ds.Name, dsStatus{Desired: n, Current: n, Ready: n, Updated: n, Available: n})
			for _, p := range dsWaitOnePodPerNode(t, c, ds.Name, nodes) {
				if p.Spec.Containers[0].Image != dsImage2 {
					t.Errorf("pod %s not updated", p.Name)
				}
			}
			w.Check(t)
			w.mu.Lock()
			if extraSeen != maxExtra {
				t.Errorf("at most %d extra pods ran at once, want %d", extraSeen, maxExtra)
			}
			w.mu.Unlock()
		})
	}
}

// dsKubectl runs the kubectl on PATH against env with a private HOME, skipping the test
// when there is none.
func dsKubectl(t *testing.T, env *testenv.Env, home string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + env.KubeconfigPath, "PATH=" + os.Getenv("PATH")}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestDaemonSetKubectlRollout: `kubectl rollout status` waits for a rollout and reports
// it, `kubectl rollout history` lists both revisions, `kubectl rollout undo` returns the
// DaemonSet to its previous template, whose ControllerRevision is reused (same name and
// hash, renumbered) and whose hash the pods carry again, and `kubectl rollout restart`
// replaces every pod under a new revision.
func TestDaemonSetKubectlRollout(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	const n = 3
	for _, mode := range dsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			env := dsStart(t, mode, n)
			c := env.Client
			home := t.TempDir()
			nodes := dsNodeNames(n)
			ds := dsCreate(t, c, dsNewDaemonSet("undo"))
			status := func() {
				t.Helper()
				out := dsKubectl(t, env, home, "rollout", "status", "ds/undo", "--timeout=60s")
				if !strings.Contains(out, `daemon set "undo" successfully rolled out`) {
					t.Fatalf("kubectl rollout status said:\n%s", out)
				}
			}
			status()
			first := dsWaitOnePodPerNode(t, c, ds.Name, nodes)
			hash1 := dsHash(first[nodes[0]])

			dsKubectl(t, env, home, "set", "image", "ds/undo", "c="+dsImage2)
			status()
			dsWaitStatus(t, c, ds.Name, dsStatus{Desired: n, Current: n, Ready: n, Updated: n, Available: n})
			second := dsWaitOnePodPerNode(t, c, ds.Name, nodes)
			hash2 := dsHash(second[nodes[0]])
			if hash2 == hash1 {
				t.Fatalf("the template changed but the hash did not: %s", hash1)
			}
			if out := dsKubectl(t, env, home, "rollout", "history", "ds/undo"); !dsLinesStartWith(out, "1", "2") {
				t.Errorf("kubectl rollout history lists no revisions 1 and 2:\n%s", out)
			}

			out := dsKubectl(t, env, home, "rollout", "undo", "ds/undo")
			if !strings.Contains(out, "daemonset.apps/undo rolled back") {
				t.Errorf("kubectl rollout undo said:\n%s", out)
			}
			status()
			back := dsWaitStatus(t, c, ds.Name, dsStatus{Desired: n, Current: n, Ready: n, Updated: n, Available: n})
			if img := back.Spec.Template.Spec.Containers[0].Image; img != dsImage1 {
				t.Errorf("template image after undo is %s, want %s", img, dsImage1)
			}
			if back.Generation != 3 {
				t.Errorf("generation %d after undo, want 3", back.Generation)
			}
			for _, p := range dsWaitOnePodPerNode(t, c, ds.Name, nodes) {
				if dsHash(p) != hash1 || p.Spec.Containers[0].Image != dsImage1 {
					t.Errorf("pod %s after undo: hash %s image %s, want %s %s", p.Name, dsHash(p), p.Spec.Containers[0].Image, hash1, dsImage1)
				}
			}
			// The first revision is reused and renumbered above the second; no third is made.
			dsEventually(t, dsTimeout, "revision 1 to be renumbered 3", func() (string, bool) {
				revs := dsRevisions(t, c, ds.Name)
				r1, r2 := revs[ds.Name+"-"+hash1], revs[ds.Name+"-"+hash2]
				return fmt.Sprintf("%d revisions; %s=%d %s=%d", len(revs), r1.Name, r1.Revision, r2.Name, r2.Revision),
					len(revs) == 2 && r1.Revision == 3 && r2.Revision == 2
			})

			// `kubectl rollout restart` stamps the template, which makes a fourth revision
			// that every pod is replaced with.
			if out := dsKubectl(t, env, home, "rollout", "restart", "ds/undo"); !strings.Contains(out, "daemonset.apps/undo restarted") {
				t.Errorf("kubectl rollout restart said:\n%s", out)
			}
			status()
			dsWaitStatus(t, c, ds.Name, dsStatus{Desired: n, Current: n, Ready: n, Updated: n, Available: n})
			restarted := dsWaitOnePodPerNode(t, c, ds.Name, nodes)
			hash4 := dsHash(restarted[nodes[0]])
			for _, p := range restarted {
				if h := dsHash(p); h == hash1 || h == hash2 || h != hash4 {
					t.Errorf("pod %s after restart has hash %s (before: %s, %s)", p.Name, h, hash1, hash2)
				}
			}
			if cr, ok := dsRevisions(t, c, ds.Name)[ds.Name+"-"+hash4]; !ok || cr.Revision != 4 {
				t.Errorf("no ControllerRevision %s-%s with revision 4 (%+v)", ds.Name, hash4, cr.Revision)
			}
		})
	}
}

// dsLinesStartWith reports whether some line of out starts with each of the given words.
func dsLinesStartWith(out string, words ...string) bool {
	for _, w := range words {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestDaemonSetDeletionRemovesPods: deleting a DaemonSet (background propagation, the
// apps/v1 default) removes its pods and ControllerRevisions through the garbage collector,
// and nothing recreates them.
func TestDaemonSetDeletionRemovesPods(t *testing.T) {
	const n = 3
	for _, mode := range dsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			env := dsStart(t, mode, n)
			c := env.Client
			ds := dsCreate(t, c, dsNewDaemonSet("doomed"))
			dsWaitOnePodPerNode(t, c, ds.Name, dsNodeNames(n))
			w := dsWatchPods(t, c, ds.Name, nil)
			if err := c.AppsV1().DaemonSets(dsNS).Delete(context.Background(), ds.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			dsEventually(t, dsTimeout, "pods and ControllerRevisions to be collected", func() (string, bool) {
				pods := dsListPods(t, c, ds.Name)
				revs := dsRevisions(t, c, ds.Name)
				return fmt.Sprintf("%d pods, %d revisions", len(pods), len(revs)), len(pods) == 0 && len(revs) == 0
			})
			if _, err := c.AppsV1().DaemonSets(dsNS).Get(context.Background(), ds.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("daemonset still there: %v", err)
			}
			if created := dsCreatedPods(w.Events()); len(created) != 0 {
				t.Errorf("pods created after the DaemonSet was deleted: %v", created)
			}
			w.Check(t)
		})
	}
}

// TestDaemonSetRefusedByPodSecurity: a node agent's DaemonSet (host network, privileged) in
// a namespace that enforces the baseline Pod Security Standard, the most common way a
// DaemonSet gets no pods: it is created (with a warning), every pod it creates is refused by
// the PodSecurity admission plugin, and the controller reports FailedCreate with the
// plugin's message while desired stays above current.
func TestDaemonSetRefusedByPodSecurity(t *testing.T) {
	t.Parallel()
	env := dsStart(t, dsModes[0], 2)
	c := env.Client
	_, err := c.CoreV1().Namespaces().Patch(context.Background(), dsNS, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"baseline"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds := dsNewDaemonSet("agent")
	ds.Spec.Template.Spec.HostNetwork = true
	privileged := true
	ds.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
	dsCreate(t, c, ds)

	dsWaitRefused(t, c, "agent", 2, `is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), privileged (container "c" must not set securityContext.privileged=true)`)
}

// dsWaitRefused waits until the DaemonSet name, over desired nodes, has a FailedCreate event
// whose message contains want and reports desired pods unavailable, none created.
func dsWaitRefused(t *testing.T, c kubernetes.Interface, name string, desired int32, want string) {
	t.Helper()
	dsEventually(t, dsTimeout, "a FailedCreate event containing "+want, func() (string, bool) {
		var seen []string
		for _, e := range dsEvents(t, c, name) {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == "FailedCreate" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
				return "", true
			}
		}
		return strings.Join(seen, "\n"), false
	})
	dsWaitStatus(t, c, name, dsStatus{Desired: desired, Unavailable: desired})
	if pods := dsListPods(t, c, name); len(pods) != 0 {
		t.Errorf("%d pods exist", len(pods))
	}
}
