package garbagecollector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
)

var (
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
	dsGVR   = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	crGVR   = appsv1.SchemeGroupVersion.WithResource("controllerrevisions")
)

// apiLog records the writes the fake API server applied, in order.
type apiLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *apiLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf(format, args...))
}

func (l *apiLog) index(entry string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range l.entries {
		if e == entry {
			return i
		}
	}
	return -1
}

// fakeAPI emulates what the API server does with deletes and finalizers: DELETE honours the
// UID precondition; Foreground and Orphan set deletionTimestamp and their finalizer; an
// object with finalizers only gets a deletionTimestamp; an update that removes the last
// finalizer of a deleting object removes it. Pods listed in slowPods terminate gracefully:
// their DELETE only sets deletionTimestamp (a kubelet finishes them).
type fakeAPI struct {
	client   *fake.Clientset
	log      *apiLog
	slowPods map[string]bool
}

func newFakeAPI(objs ...runtime.Object) *fakeAPI {
	api := &fakeAPI{client: fake.NewClientset(objs...), log: &apiLog{}, slowPods: map[string]bool{}}
	api.client.PrependReactor("delete", "*", api.reactDelete)
	api.client.PrependReactor("update", "*", api.reactUpdate)
	return api
}

func (a *fakeAPI) reactDelete(action k8stesting.Action) (bool, runtime.Object, error) {
	d := action.(k8stesting.DeleteAction)
	gvr := d.GetResource()
	obj, err := a.client.Tracker().Get(gvr, d.GetNamespace(), d.GetName())
	if err != nil {
		return true, nil, err
	}
	obj = obj.DeepCopyObject()
	m, _ := meta.Accessor(obj)
	opts := d.GetDeleteOptions()
	if opts.Preconditions != nil && opts.Preconditions.UID != nil && *opts.Preconditions.UID != m.GetUID() {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), d.GetName(), fmt.Errorf("uid precondition failed"))
	}
	policy := metav1.DeletePropagationBackground
	if opts.PropagationPolicy != nil {
		policy = *opts.PropagationPolicy
	}
	a.log.add("delete %s %s %s", gvr.Resource, d.GetName(), policy)
	finalizers := m.GetFinalizers()
	switch policy {
	case metav1.DeletePropagationForeground:
		finalizers = append(finalizers, metav1.FinalizerDeleteDependents)
	case metav1.DeletePropagationOrphan:
		finalizers = append(finalizers, metav1.FinalizerOrphanDependents)
	}
	if len(finalizers) == 0 && !(gvr == podsGVR && a.slowPods[d.GetName()]) {
		a.log.add("removed %s %s", gvr.Resource, d.GetName())
		return true, obj, a.client.Tracker().Delete(gvr, d.GetNamespace(), d.GetName())
	}
	now := metav1.Now()
	m.SetDeletionTimestamp(&now)
	m.SetFinalizers(finalizers)
	return true, obj, a.client.Tracker().Update(gvr, obj, d.GetNamespace())
}

func (a *fakeAPI) reactUpdate(action k8stesting.Action) (bool, runtime.Object, error) {
	u := action.(k8stesting.UpdateAction)
	obj := u.GetObject()
	m, _ := meta.Accessor(obj)
	gvr := u.GetResource()
	a.log.add("update %s %s", gvr.Resource, m.GetName())
	if m.GetDeletionTimestamp() != nil && len(m.GetFinalizers()) == 0 {
		a.log.add("removed %s %s", gvr.Resource, m.GetName())
		return true, obj, a.client.Tracker().Delete(gvr, u.GetNamespace(), m.GetName())
	}
	return false, nil, nil
}

// finish completes a slow pod's termination, as its kubelet would.
func (a *fakeAPI) finish(t *testing.T, name string) {
	t.Helper()
	a.log.add("removed pods %s", name)
	if err := a.client.Tracker().Delete(podsGVR, "default", name); err != nil {
		t.Fatal(err)
	}
}

func (a *fakeAPI) exists(gvr schema.GroupVersionResource, name string) bool {
	_, err := a.client.Tracker().Get(gvr, "default", name)
	return err == nil
}

func (a *fakeAPI) get(t *testing.T, gvr schema.GroupVersionResource, name string) metav1.Object {
	t.Helper()
	obj, err := a.client.Tracker().Get(gvr, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := meta.Accessor(obj)
	return m
}

func (a *fakeAPI) deleteWith(t *testing.T, gvr schema.GroupVersionResource, name string, policy metav1.DeletionPropagation) {
	t.Helper()
	var err error
	opts := metav1.DeleteOptions{PropagationPolicy: &policy}
	switch gvr {
	case dsGVR:
		err = a.client.AppsV1().DaemonSets("default").Delete(context.Background(), name, opts)
	case podsGVR:
		err = a.client.CoreV1().Pods("default").Delete(context.Background(), name, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// startGC runs a collector against api until the test ends.
func startGC(t *testing.T, api *fakeAPI, factory informers.SharedInformerFactory) *GarbageCollector {
	t.Helper()
	if factory == nil {
		factory = informers.NewSharedInformerFactory(api.client, 0)
	}
	cfg := configs.DefaultGarbageCollectorController()
	cfg.Workers = 2
	gc, err := New(cfg, Options{Client: api.client, Informers: factory, Logger: slog.New(slog.DiscardHandler),
		Clock: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	factory.Start(ctx.Done())
	go func() {
		defer close(done)
		_ = gc.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
	return gc
}

// waitTimeout bounds every wait for the collector's workers and informers.
const waitTimeout = 5 * time.Second

func daemonSet(name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
}

func ownedBy(owners ...*appsv1.DaemonSet) []metav1.OwnerReference {
	var refs []metav1.OwnerReference
	for i, o := range owners {
		t, ctrl := true, i == 0
		refs = append(refs, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: o.Name, UID: o.UID,
			Controller: &ctrl, BlockOwnerDeletion: &t})
	}
	return refs
}

func pod(name string, owners ...*appsv1.DaemonSet) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
		OwnerReferences: ownedBy(owners...)}}
}

func revision(name string, owner *appsv1.DaemonSet) *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		UID: types.UID("uid-" + name), OwnerReferences: ownedBy(owner)}}
}

func TestBackgroundDeletesDependentsOfDeletedOwner(t *testing.T) {
	ds, other := daemonSet("ds"), daemonSet("other")
	api := newFakeAPI(ds, other, pod("a", ds), pod("b", ds), revision("ds-1", ds),
		pod("shared", ds, other), pod("unrelated", other))
	startGC(t, api, nil)

	api.deleteWith(t, dsGVR, "ds", metav1.DeletePropagationBackground)
	poll.Until(t, waitTimeout, "dependents to be deleted", func() bool {
		return !api.exists(podsGVR, "a") && !api.exists(podsGVR, "b") && !api.exists(crGVR, "ds-1")
	})
	poll.Until(t, waitTimeout, "the shared pod to lose its reference to the deleted owner", func() bool {
		refs := api.get(t, podsGVR, "shared").GetOwnerReferences()
		return len(refs) == 1 && refs[0].UID == other.UID
	})
	if !api.exists(podsGVR, "unrelated") {
		t.Fatal("pod of a living owner was deleted")
	}
	if api.log.index("delete pods a Background") < 0 {
		t.Fatalf("pods not deleted in the background: %v", api.log.snapshot())
	}
}

func TestDependentOfOwnerGoneBeforeStartIsDeleted(t *testing.T) {
	gone := daemonSet("gone")
	api := newFakeAPI(pod("orphan-to-be", gone))
	startGC(t, api, nil)
	poll.Until(t, waitTimeout, "the dangling dependent to be deleted", func() bool { return !api.exists(podsGVR, "orphan-to-be") })
}

func TestOwnerReplacedUnderTheSameNameIsDangling(t *testing.T) {
	old := daemonSet("ds")
	replacement := daemonSet("ds")
	replacement.UID = "uid-ds-2"
	api := newFakeAPI(replacement, pod("a", old), pod("b", replacement))
	startGC(t, api, nil)
	poll.Until(t, waitTimeout, "the pod of the old owner to be deleted", func() bool { return !api.exists(podsGVR, "a") })
	if !api.exists(podsGVR, "b") {
		t.Fatal("pod of the replacement owner was deleted")
	}
}

// An owner the informer has not delivered yet must not be taken for absent: the collector
// confirms with a live GET.
func TestOwnerMissingFromCacheIsCheckedLive(t *testing.T) {
	ds := daemonSet("ds")
	api := newFakeAPI(ds, pod("a", ds))
	// The daemonset informer lags: its list and watch show nothing.
	api.client.PrependReactor("list", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &appsv1.DaemonSetList{}, nil
	})
	api.client.PrependWatchReactor("daemonsets", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	gc := startGC(t, api, nil)
	poll.Until(t, waitTimeout, "the pod to be checked", func() bool {
		return gc.attemptToDelete.Len() == 0 && len(api.client.Actions()) > 0 && gotLiveGet(api.client, "ds")
	})
	if !api.exists(podsGVR, "a") {
		t.Fatal("pod deleted although its owner exists")
	}
}

func gotLiveGet(c *fake.Clientset, name string) bool {
	for _, a := range c.Actions() {
		if g, ok := a.(k8stesting.GetAction); ok && a.GetVerb() == "get" && a.GetResource() == dsGVR && g.GetName() == name {
			return true
		}
	}
	return false
}

func TestForegroundDeletesBlockingDependentsBeforeOwner(t *testing.T) {
	ds := daemonSet("ds")
	api := newFakeAPI(ds, pod("a", ds), pod("b", ds), revision("ds-1", ds))
	api.slowPods["a"] = true // a kubelet takes its time to finish this pod
	startGC(t, api, nil)

	api.deleteWith(t, dsGVR, "ds", metav1.DeletePropagationForeground)
	poll.Until(t, waitTimeout, "dependents to be deleted", func() bool {
		return api.log.index("delete pods a Background") >= 0 && !api.exists(podsGVR, "b") && !api.exists(crGVR, "ds-1")
	})
	// Pod a is still terminating and blocks its owner.
	if !api.exists(dsGVR, "ds") {
		t.Fatalf("owner removed while a blocking dependent still exists: %v", api.log.snapshot())
	}
	if fs := api.get(t, dsGVR, "ds").GetFinalizers(); len(fs) != 1 || fs[0] != metav1.FinalizerDeleteDependents {
		t.Fatalf("owner finalizers = %v", fs)
	}
	api.finish(t, "a")
	poll.Until(t, waitTimeout, "the owner to be removed", func() bool { return !api.exists(dsGVR, "ds") })
	if api.log.index("removed pods a") > api.log.index("removed daemonsets ds") {
		t.Fatalf("owner removed before its dependent: %v", api.log.snapshot())
	}
}

func TestForegroundDoesNotWaitForNonBlockingDependents(t *testing.T) {
	ds := daemonSet("ds")
	p := pod("a", ds)
	f := false
	p.OwnerReferences[0].BlockOwnerDeletion = &f
	api := newFakeAPI(ds, p)
	api.slowPods["a"] = true
	startGC(t, api, nil)
	api.deleteWith(t, dsGVR, "ds", metav1.DeletePropagationForeground)
	poll.Until(t, waitTimeout, "the owner to be removed", func() bool { return !api.exists(dsGVR, "ds") })
	// The owner did not wait: its dependent is still terminating (it is slow) or not yet
	// deleted at all; either way the collector deletes it, before or after the owner.
	if api.log.index("removed pods a") >= 0 {
		t.Fatalf("owner removed only after its non-blocking dependent: %v", api.log.snapshot())
	}
	poll.Until(t, waitTimeout, "the non-blocking dependent to be deleted", func() bool {
		return api.log.index("delete pods a Background") >= 0
	})
}

func TestOrphanRemovesOwnerReferencesThenFinalizer(t *testing.T) {
	ds, other := daemonSet("ds"), daemonSet("other")
	api := newFakeAPI(ds, other, pod("a", ds), pod("b", ds, other), revision("ds-1", ds))
	gc := startGC(t, api, nil)

	api.deleteWith(t, dsGVR, "ds", metav1.DeletePropagationOrphan)
	poll.Until(t, waitTimeout, "the owner to be removed", func() bool { return !api.exists(dsGVR, "ds") })
	for _, name := range []string{"a", "b"} {
		for _, ref := range api.get(t, podsGVR, name).GetOwnerReferences() {
			if ref.UID == ds.UID {
				t.Fatalf("pod %s still references the orphaning owner", name)
			}
		}
	}
	if refs := api.get(t, podsGVR, "b").GetOwnerReferences(); len(refs) != 1 || refs[0].UID != other.UID {
		t.Fatalf("pod b references = %v, want only the other owner", refs)
	}
	if refs := api.get(t, crGVR, "ds-1").GetOwnerReferences(); len(refs) != 0 {
		t.Fatalf("revision references = %v", refs)
	}
	if api.log.index("update pods a") > api.log.index("removed daemonsets ds") {
		t.Fatalf("finalizer removed before dependents were orphaned: %v", api.log.snapshot())
	}
	// Orphans stay: checked now that their owner is gone — whether or not the informers have
	// caught up with the orphaning — they must not be taken for its dependents.
	for _, d := range []struct{ resource, name string }{{"pods", "a"}, {"controllerrevisions", "ds-1"}} {
		item := itemFor(t, gc, d.resource, d.name)
		if err := gc.attemptToDeleteItem(context.Background(), item); err != nil {
			t.Fatalf("checking orphaned %s %s: %v", d.resource, d.name, err)
		}
	}
	if !api.exists(podsGVR, "a") || !api.exists(crGVR, "ds-1") {
		t.Fatalf("orphaned dependents were deleted: %v", api.log.snapshot())
	}
}

func (l *apiLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...)
}

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	valid := configs.DefaultGarbageCollectorController()
	tests := []struct {
		name    string
		cfg     configs.GarbageCollectorController
		opts    Options
		wantErr string
	}{
		{name: "defaults", cfg: valid, opts: Options{Client: client, Informers: factory}},
		{name: "zero config", opts: Options{Client: client, Informers: factory}, wantErr: "workers"},
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

// itemFor returns the queue item of the fixture object resource/name (UID "uid-<name>").
func itemFor(t *testing.T, gc *GarbageCollector, resource, name string) objectRef {
	t.Helper()
	for i, r := range gc.resources {
		if r.name == resource {
			return objectRef{res: i, namespace: "default", name: name, uid: types.UID("uid-" + name)}
		}
	}
	t.Fatalf("resource %s is not served", resource)
	return objectRef{}
}

// A failed item is retried and logged at a level the default (Info) handler shows, with its
// retry count: a stuck collector must be visible.
func TestFailedItemIsLoggedAboveDebug(t *testing.T) {
	var logs bytes.Buffer
	api := newFakeAPI()
	gc, err := New(configs.DefaultGarbageCollectorController(), Options{Client: api.client,
		Informers: informers.NewSharedInformerFactory(api.client, 0), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Clock: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.attemptToDelete.ShutDown()
	item := itemFor(t, gc, "pods", "a")
	gc.attemptToDelete.Add(item)
	gc.processNext(context.Background(), gc.attemptToDelete, func(context.Context, objectRef) error {
		return errors.New("api unavailable")
	})
	if n := gc.attemptToDelete.NumRequeues(item); n != 1 {
		t.Errorf("requeues = %d, want 1", n)
	}
	for _, want := range []string{"level=WARN", `msg="garbage collection failed; retrying"`, "object=default/a", "retries=1", `err="api unavailable"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q lacks %s", logs.String(), want)
		}
	}
}
