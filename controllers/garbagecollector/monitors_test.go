package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/miniplane/miniplane/internal/poll"
)

// A kind that appears in discovery at run time (the custom resources of a new CRD) is watched
// within one discovery period: its objects join the graph as owners and as dependents, and
// the objects that named it while it was unknown, which the collector could not judge, are
// judged at last.
func TestResourceAppearingInDiscoveryIsWatched(t *testing.T) {
	ds := object(dsKind, "ds")
	w1 := object(widgetKind, "w1")
	api := newFakeAPI(ds, w1,
		object(widgetKind, "w2", ds),                                     // a custom resource owned by a DaemonSet
		object(configMapKind, "of-w1", w1),                               // a ConfigMap owned by a custom resource
		object(configMapKind, "of-nothing", object(widgetKind, "never"))) // its owner never existed
	gc, clk := startGC(t, api, nil)

	if gc.watching(widgetKind.gvr) {
		t.Fatal("widgets watched before discovery lists them")
	}
	poll.Until(t, waitTimeout, "the dependents of the unknown kind to be checked", func() bool {
		return gc.attemptToDelete.Len() == 0 && parkedCount(gc, widgetKind) == 2
	})
	if !api.exists(configMapKind, "of-w1") || !api.exists(configMapKind, "of-nothing") {
		t.Fatalf("dependents of a kind discovery does not list were deleted: %v", api.log.snapshot())
	}

	api.disc.serve(append(slices.Clone(builtinKinds), widgetKind)...)
	reads := api.disc.readCount()
	clk.Step(testPeriod)
	poll.Until(t, waitTimeout, "widgets to be watched after one period", func() bool { return gc.watching(widgetKind.gvr) })
	if got := api.disc.readCount(); got != reads+1 {
		t.Errorf("discovery read %d times in one period, want once", got-reads)
	}
	poll.Until(t, waitTimeout, "the widget informer to sync", gc.HasSynced)
	if deps := gc.dependents(ds.UID); len(deps) != 1 || deps[0].ref.resource != widgetKind.gvr {
		t.Fatalf("dependents of the DaemonSet = %v, want widget w2", deps)
	}
	if _, owner := gc.cachedOwner("default", ownedBy(w1)[0]); owner == nil {
		t.Fatal("widget w1 not found as an owner in the cache")
	}
	poll.Until(t, waitTimeout, "the ConfigMap of a widget that never existed to be deleted", func() bool {
		return !api.exists(configMapKind, "of-nothing")
	})
	if !api.exists(configMapKind, "of-w1") {
		t.Fatal("the ConfigMap of an existing widget was deleted")
	}

	api.deleteWith(t, widgetKind, "w1", metav1.DeletePropagationBackground)
	poll.Until(t, waitTimeout, "the ConfigMap owned by the deleted widget to be deleted", func() bool {
		return !api.exists(configMapKind, "of-w1")
	})
	api.deleteWith(t, dsKind, "ds", metav1.DeletePropagationBackground)
	poll.Until(t, waitTimeout, "the widget owned by the deleted DaemonSet to be deleted", func() bool {
		return !api.exists(widgetKind, "w2")
	})
}

func parkedCount(gc *GarbageCollector, k kindInfo) int {
	gc.parkedMu.Lock()
	defer gc.parkedMu.Unlock()
	return len(gc.parked[schema.GroupKind{Group: k.gvr.Group, Kind: k.kind}])
}

// A resource that leaves discovery is no longer watched: its informer stops.
func TestResourceDisappearingFromDiscoveryStopsItsInformer(t *testing.T) {
	w1 := object(widgetKind, "w1")
	api := newFakeAPI(w1, object(configMapKind, "of-w1", w1))
	api.disc.serve(append(slices.Clone(builtinKinds), widgetKind)...)
	gc, clk := startGC(t, api, nil)
	gc.mu.RLock()
	m := gc.monitors[widgetKind.gvr]
	gc.mu.RUnlock()
	if m == nil {
		t.Fatal("widgets not watched")
	}

	// The CRD is not gone, discovery only stopped listing it for a while: the widgets still
	// answer, so their dependents must stay.
	api.disc.serve(builtinKinds...)
	clk.Step(testPeriod)
	poll.Until(t, waitTimeout, "widgets to be no longer watched", func() bool { return !gc.watching(widgetKind.gvr) })
	select {
	case <-m.done:
	default:
		t.Fatal("the widget informer still runs")
	}
	if _, ok := gc.kindFor(schema.GroupKind{Group: "example.com", Kind: "Widget"}); ok {
		t.Fatal("the kind of a resource discovery no longer lists still resolves")
	}
	if err := gc.attemptToDeleteItem(context.Background(), objectRef{resource: configMapKind.gvr, namespace: "default",
		name: "of-w1", uid: "uid-of-w1"}); err != nil {
		t.Fatal(err)
	}
	if !api.exists(configMapKind, "of-w1") {
		t.Fatalf("the dependent of an owner of an unlisted kind was deleted: %v", api.log.snapshot())
	}
	before, reads := len(api.client.Actions()), api.disc.readCount()
	clk.Step(testPeriod)
	poll.Until(t, waitTimeout, "another discovery read", func() bool { return api.disc.readCount() > reads })
	for _, a := range api.client.Actions()[before:] {
		if a.GetResource() == widgetKind.gvr && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
			t.Fatalf("widgets still listed or watched after they left discovery: %v", a)
		}
	}
}

// When the resource is gone with its objects (its CRD deleted) and the collector did not see
// them go, their dependents are collected as those of deleted owners.
func TestResourceGoneWithItsObjectsReleasesTheirDependents(t *testing.T) {
	w1 := object(widgetKind, "w1")
	api := newFakeAPI(w1, object(configMapKind, "of-w1", w1))
	api.disc.serve(append(slices.Clone(builtinKinds), widgetKind)...)
	gc, clk := startGC(t, api, nil)
	if !gc.watching(widgetKind.gvr) {
		t.Fatal("widgets not watched")
	}
	// The CRD goes: the API server answers NotFound for widgets, and discovery drops them,
	// before the widget informer saw w1 go.
	api.client.PrependReactor("list", "widgets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(widgetKind.gvr.GroupResource(), "")
	})
	api.client.PrependReactor("get", "widgets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(widgetKind.gvr.GroupResource(), "")
	})
	api.disc.serve(builtinKinds...)
	clk.Step(testPeriod)
	poll.Until(t, waitTimeout, "the ConfigMap of the vanished widget to be deleted", func() bool {
		return !api.exists(configMapKind, "of-w1")
	})
}

// An event on a CRD makes the collector read discovery at once, without waiting for the
// period: the new resource is watched before the clock moves.
func TestCRDChangeTriggersDiscovery(t *testing.T) {
	api := newFakeAPI()
	api.disc.serve(append(slices.Clone(builtinKinds), crdKind)...)
	gc, _ := startGC(t, api, nil)
	api.disc.serve(append(slices.Clone(builtinKinds), crdKind, widgetKind)...)
	api.add(t, crdKind, object(crdKind, "widgets.example.com"))
	poll.Until(t, waitTimeout, "widgets to be watched", func() bool { return gc.watching(widgetKind.gvr) })
}

// Discovery that fails for some groups keeps the resources of those groups watched; one that
// fails altogether changes nothing.
func TestDiscoveryFailureKeepsWatchedResources(t *testing.T) {
	api := newFakeAPI()
	api.disc.serve(append(slices.Clone(builtinKinds), widgetKind)...)
	gc, _ := newTestGC(t, api, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		gc.stopMonitors()
	})
	if err := gc.resync(ctx); err != nil {
		t.Fatal(err)
	}
	// The widgets' group fails: discovery returns the other groups only.
	api.disc.serve(builtinKinds...)
	api.disc.fail(&discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{
		widgetKind.gvr.GroupVersion(): errors.New("unavailable")}})
	if err := gc.resync(ctx); err != nil {
		t.Fatalf("partial discovery: %v", err)
	}
	if !gc.watching(widgetKind.gvr) {
		t.Fatal("the resource of a failed group was dropped")
	}
	if _, ok := gc.kindFor(schema.GroupKind{Group: "example.com", Kind: "Widget"}); !ok {
		t.Fatal("the kind of a failed group was dropped")
	}
	api.disc.fail(errors.New("connection refused"))
	if err := gc.resync(ctx); err == nil {
		t.Fatal("a failed discovery was not reported")
	}
	for _, k := range append(slices.Clone(builtinKinds), widgetKind) {
		if k != eventKind && !gc.watching(k.gvr) {
			t.Errorf("%s dropped after a failed discovery", k.gvr.Resource)
		}
	}
}

func TestIgnoredAndUncollectableResourcesAreNotWatched(t *testing.T) {
	api := newFakeAPI()
	gc, _ := newTestGC(t, api, nil)
	t.Cleanup(gc.stopMonitors)
	if err := gc.resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gc.watching(eventKind.gvr) {
		t.Error("events are watched although ignored by default")
	}
	if !gc.watching(podKind.gvr) || !gc.watching(configMapKind.gvr) {
		t.Error("pods or configmaps not watched")
	}
	for gvr := range gc.monitors {
		if gvr.Resource == "pods/status" || gvr.Resource == "configmaps/status" {
			t.Errorf("subresource %s watched", gvr.Resource)
		}
	}
	if _, ok := gc.kindFor(schema.GroupKind{Kind: "Event"}); !ok {
		t.Error("an ignored kind cannot be read as an owner")
	}
}

// Resources another controller already caches in a typed informer are watched through it:
// no metadata informer lists them a second time, and the collector still acts on them.
func TestSharedInformerIsUsedInsteadOfAMetadataInformer(t *testing.T) {
	ds := object(dsKind, "ds")
	typedPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: "uid-a",
		OwnerReferences: ownedBy(ds)}}
	typed := fake.NewClientset(typedPod)
	factory := informers.NewSharedInformerFactory(typed, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	factory.Start(ctx.Done())

	api := newFakeAPI(ds, object(podKind, "a", ds))
	startGC(t, api, func(o *Options) {
		o.Shared = map[schema.GroupVersionResource]cache.SharedIndexInformer{podKind.gvr: podInformer}
	})
	if _, ok := podInformer.GetIndexer().GetIndexers()[ownerUIDIndex]; !ok {
		t.Fatal("the shared informer lacks the owner index")
	}
	api.deleteWith(t, dsKind, "ds", metav1.DeletePropagationBackground)
	poll.Until(t, waitTimeout, "the pod of the deleted DaemonSet to be deleted", func() bool { return !api.exists(podKind, "a") })
	for _, a := range api.client.Actions() {
		if a.GetResource() == podKind.gvr && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
			t.Fatalf("pods %s through the metadata client although a shared informer caches them", a.GetVerb())
		}
	}
}

// A watch that fails because its resource went away asks for discovery at once instead of
// waiting for the period; a canceled watch (a stopped monitor) asks for nothing.
func TestWatchErrorOfAVanishedResourceTriggersDiscovery(t *testing.T) {
	gone := apierrors.NewNotFound(widgetKind.gvr.GroupResource(), "")
	for _, tc := range []struct {
		name     string
		ctx      func() context.Context
		err      error
		wantScan bool
	}{
		{"resource gone", context.Background, gone, true},
		{"resource gone, wrapped", context.Background, fmt.Errorf("listing: %w", gone), true},
		{"watch canceled", context.Background, fmt.Errorf("get: %w", context.Canceled), false},
		{"informer stopping", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, gone, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gc, _ := newTestGC(t, newFakeAPI(), nil)
			gc.watchError(tc.ctx(), nil, tc.err)
			if got := len(gc.rediscover) == 1; got != tc.wantScan {
				t.Errorf("discovery requested = %v, want %v", got, tc.wantScan)
			}
		})
	}
}
