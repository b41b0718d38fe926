package daemonset

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/configs"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller over a fake clientset whose informer caches are seeded directly,
// for sync-once tests: seed, call sync, assert the recorded API calls and events.
type fixture struct {
	t        testing.TB
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	c        *Controller
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
	created  atomic.Int64

	mu     sync.Mutex
	afters []after // delayed enqueues, captured instead of reaching the queue
}

type after struct {
	key string
	d   time.Duration
}

func (f *fixture) takeAfters() []after {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.afters
	f.afters = nil
	return out
}

// fixtureSetup is what newFixture passes to New; a fixtureOpt changes it.
type fixtureSetup struct {
	cfg  configs.DaemonSetController
	opts Options
}

type fixtureOpt func(*fixtureSetup)

func legacyMode(s *fixtureSetup) { s.opts.ScheduleDaemonSetPods = false }

func newFixture(t testing.TB, objs []runtime.Object, opts ...fixtureOpt) *fixture {
	t.Helper()
	client := fake.NewSimpleClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	clk := testingclock.NewFakeClock(t0)
	setup := fixtureSetup{
		cfg: configs.DefaultDaemonSetController(),
		opts: Options{
			Client:                client,
			Informers:             factory,
			ScheduleDaemonSetPods: true,
			Clock:                 clk,
			Logger:                slog.New(slog.NewTextHandler(io.Discard, nil)),
		},
	}
	for _, opt := range opts {
		opt(&setup)
	}
	c, err := New(setup.cfg, setup.opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f := &fixture{t: t, client: client, factory: factory, c: c, clock: clk, recorder: record.NewFakeRecorder(100000)}
	c.recorder = f.recorder
	c.addAfter = func(key string, d time.Duration) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.afters = append(f.afters, after{key, d})
	}
	t.Cleanup(c.queue.ShutDown)
	for _, o := range objs {
		f.addToCache(o)
	}
	// The fake tracker does not implement generateName.
	client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		pod := a.(core.CreateAction).GetObject().(*corev1.Pod)
		if pod.Name == "" && pod.GenerateName != "" {
			pod.Name = fmt.Sprintf("%s%05d", pod.GenerateName, f.created.Add(1))
		}
		return false, nil, nil
	})
	return f
}

func (f *fixture) addToCache(o runtime.Object) {
	f.t.Helper()
	var err error
	switch o := o.(type) {
	case *appsv1.DaemonSet:
		err = f.factory.Apps().V1().DaemonSets().Informer().GetIndexer().Add(o)
	case *appsv1.ControllerRevision:
		err = f.factory.Apps().V1().ControllerRevisions().Informer().GetIndexer().Add(o)
	case *corev1.Pod:
		err = f.factory.Core().V1().Pods().Informer().GetIndexer().Add(o)
	case *corev1.Node:
		err = f.factory.Core().V1().Nodes().Informer().GetIndexer().Add(o)
	default:
		f.t.Fatalf("cannot cache %T", o)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// add puts objects both in the API (tracker) and the cache.
func (f *fixture) add(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		if err := f.client.Tracker().Add(o); err != nil {
			f.t.Fatal(err)
		}
		f.addToCache(o)
	}
}

func (f *fixture) sync(ds *appsv1.DaemonSet) error {
	f.t.Helper()
	// Tests seed and change the caches directly, past the handlers that version the
	// inputs, so every sync here runs in full; steady_test.go covers the shortcut.
	f.c.steady.invalidate()
	return f.c.syncDaemonSet(context.Background(), ds.Namespace+"/"+ds.Name)
}

func (f *fixture) mustSync(ds *appsv1.DaemonSet) {
	f.t.Helper()
	if err := f.sync(ds); err != nil {
		f.t.Fatalf("sync: %v", err)
	}
}

// syncFresh runs a sync with a cleared action log and event channel.
func (f *fixture) syncFresh(ds *appsv1.DaemonSet) error {
	f.t.Helper()
	f.client.ClearActions()
	f.events()
	return f.sync(ds)
}

// actions returns the recorded actions with the given verb on resource (and subresource).
func (f *fixture) actions(verb, resource, sub string) []core.Action {
	var out []core.Action
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == sub {
			out = append(out, a)
		}
	}
	return out
}

func (f *fixture) createdPods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, a := range f.actions("create", "pods", "") {
		out = append(out, a.(core.CreateAction).GetObject().(*corev1.Pod))
	}
	return out
}

// createdOn lists the node each created pod is pinned to.
func (f *fixture) createdOn() []string {
	var out []string
	for _, p := range f.createdPods() {
		if p.Spec.NodeName != "" {
			out = append(out, p.Spec.NodeName)
			continue
		}
		out = append(out, p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0])
	}
	return sortedCopy(out)
}

func (f *fixture) deletedPods() []string {
	var out []string
	for _, a := range f.actions("delete", "pods", "") {
		out = append(out, a.(core.DeleteAction).GetName())
	}
	return sortedCopy(out)
}

func (f *fixture) statusWrites() []*appsv1.DaemonSet {
	var out []*appsv1.DaemonSet
	for _, a := range f.actions("update", "daemonsets", "status") {
		out = append(out, a.(core.UpdateAction).GetObject().(*appsv1.DaemonSet))
	}
	return out
}

// events drains and returns the recorded events ("Type Reason message").
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func countPrefix(events []string, prefix string) int {
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

func sortedCopy(in []string) []string {
	out := append([]string(nil), in...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// --- object builders ---

var uidCounter atomic.Int64

func newUID() types.UID { return types.UID(fmt.Sprintf("uid-%d", uidCounter.Add(1))) }

type dsOpt func(*appsv1.DaemonSet)

func newDS(name string, opts ...dsOpt) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: newUID(), Generation: 1, ResourceVersion: "1",
			Annotations: map[string]string{TemplateGenerationAnnotation: "1"},
		},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					Containers:    []corev1.Container{{Name: "c", Image: "busybox:1"}},
					RestartPolicy: corev1.RestartPolicyAlways,
				},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{
					MaxUnavailable: ptr.To(intstr.FromInt32(1)),
					MaxSurge:       ptr.To(intstr.FromInt32(0)),
				},
			},
			RevisionHistoryLimit: ptr.To[int32](10),
		},
	}
	for _, o := range opts {
		o(ds)
	}
	return ds
}

func withMaxUnavailable(v intstr.IntOrString) dsOpt {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = &v
		ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
	}
}

func withMaxSurge(v intstr.IntOrString) dsOpt {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge = &v
		ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(0))
	}
}

func withOnDelete(ds *appsv1.DaemonSet) {
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
}

func withNodeSelector(sel map[string]string) dsOpt {
	return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = sel }
}

func withMinReady(s int32) dsOpt {
	return func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = s }
}

func withRequests(cpu string) dsOpt {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
}

func withHostPort(port int32) dsOpt {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP}}
	}
}

type nodeOpt func(*corev1.Node)

func newNode(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: newUID(), ResourceVersion: "1", Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("2"),
				corev1.ResourceMemory: resource.MustParse("4Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func withLabels(l map[string]string) nodeOpt {
	return func(n *corev1.Node) {
		for k, v := range l {
			n.Labels[k] = v
		}
	}
}

func withTaint(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "x", Effect: effect})
	}
}

func withCondition(t corev1.NodeConditionType) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue})
	}
}

func withAllocatable(cpu, pods string) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(cpu)
		n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse(pods)
	}
}

var podCounter atomic.Int64

type podOpt func(*corev1.Pod)

// newDaemonPodFor builds a pod owned by ds on node with the given hash label (bound).
func newDaemonPodFor(ds *appsv1.DaemonSet, node, hash string, opts ...podOpt) *corev1.Pod {
	labels := map[string]string{}
	for k, v := range ds.Spec.Template.Labels {
		labels[k] = v
	}
	if hash != "" {
		labels[RevisionHashLabel] = hash
	}
	n := podCounter.Add(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-p%03d", ds.Name, n), Namespace: ds.Namespace, UID: newUID(), ResourceVersion: "1",
			Labels:            labels,
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour + time.Duration(n)*time.Second)),
			OwnerReferences:   []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Spec:   corev1.PodSpec{NodeName: node, Containers: ds.Spec.Template.Spec.Containers},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ready(since time.Time) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(since)}}
	}
}

func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func terminating(p *corev1.Pod) {
	p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
}

func unbound(node string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = ""
		p.Spec.Affinity = replaceNodeNameAffinity(nil, node)
	}
}

func orphan(p *corev1.Pod) { p.OwnerReferences = nil }

func created(at time.Time) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(at) }
}

// hashOf is the hash the controller will use for ds's template.
func hashOf(ds *appsv1.DaemonSet) string {
	return computeHash(&ds.Spec.Template, ds.Status.CollisionCount)
}

// nodes builds n plain nodes named node-0..n-1.
func nodes(n int, opts ...nodeOpt) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		out[i] = newNode(fmt.Sprintf("node-%d", i), opts...)
	}
	return out
}

// objects flattens runtime.Objects and slices of nodes, pods or objects into one list.
func objects(items ...any) []runtime.Object {
	var out []runtime.Object
	for _, it := range items {
		switch v := it.(type) {
		case []runtime.Object:
			out = append(out, v...)
		case []*corev1.Node:
			for _, o := range v {
				out = append(out, o)
			}
		case []*corev1.Pod:
			for _, o := range v {
				out = append(out, o)
			}
		case runtime.Object:
			out = append(out, v)
		default:
			panic(fmt.Sprintf("objects: unsupported %T", it))
		}
	}
	return out
}

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// drainQueue takes every key currently in the work queue.
func drainQueue(f *fixture) []string {
	var out []string
	for f.c.queue.Len() > 0 {
		k, _ := f.c.queue.Get()
		f.c.queue.Done(k)
		f.c.queue.Forget(k)
		out = append(out, k)
	}
	return sortedCopy(out)
}

// pollTimeout bounds the real-time waits (poll.Until) used only where a client-go goroutine
// (the delaying queue, an informer, the event sink) has to react to a fake clock step or
// to a write; 5s is far above what they take on a loaded CI machine.
const pollTimeout = 5 * time.Second
