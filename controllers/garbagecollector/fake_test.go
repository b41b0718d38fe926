package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
)

// kindInfo is a fixture kind: how ownerReferences name it and how discovery serves it.
type kindInfo struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

func (k kindInfo) apiVersion() string { return k.gvr.GroupVersion().String() }

var (
	podKind       = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true}
	configMapKind = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true}
	secretKind    = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "Secret", true}
	eventKind     = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "events"}, "Event", true}
	nodeKind      = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false}
	dsKind        = kindInfo{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, "DaemonSet", true}
	revisionKind  = kindInfo{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "controllerrevisions"}, "ControllerRevision", true}
	// widgetKind is a custom resource: it is served only when a test says so.
	widgetKind = kindInfo{schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, "Widget", true}
	crdKind    = kindInfo{schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "CustomResourceDefinition", false}

	// builtinKinds is what the fake discovery serves by default.
	builtinKinds = []kindInfo{podKind, configMapKind, secretKind, eventKind, nodeKind, dsKind, revisionKind}
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

func (l *apiLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...)
}

// fakeDiscovery serves a list of kinds that tests change at run time.
type fakeDiscovery struct {
	mu    sync.Mutex
	kinds []kindInfo
	err   error
	reads int
}

func (d *fakeDiscovery) serve(kinds ...kindInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.kinds = kinds
}

func (d *fakeDiscovery) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

func (d *fakeDiscovery) readCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads
}

func (d *fakeDiscovery) ServerPreferredResourcesWithContext(context.Context) ([]*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	byGV := map[schema.GroupVersion]*metav1.APIResourceList{}
	var out []*metav1.APIResourceList
	for _, k := range d.kinds {
		gv := k.gvr.GroupVersion()
		list := byGV[gv]
		if list == nil {
			list = &metav1.APIResourceList{GroupVersion: gv.String()}
			byGV[gv] = list
			out = append(out, list)
		}
		list.APIResources = append(list.APIResources,
			metav1.APIResource{Name: k.gvr.Resource, Kind: k.kind, Namespaced: k.namespaced,
				Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
			// A subresource, as real discovery lists them: it must not be watched.
			metav1.APIResource{Name: k.gvr.Resource + "/status", Kind: k.kind, Namespaced: k.namespaced,
				Verbs: metav1.Verbs{"get", "patch", "update"}})
	}
	return out, d.err
}

// fakeAPI emulates what the API server does with the metadata client's deletes and merge
// patches: DELETE honours the UID precondition; Foreground and Orphan set deletionTimestamp
// and their finalizer; an object with finalizers only gets a deletionTimestamp; a patch
// honours its uid and resourceVersion preconditions, bumps resourceVersion, and removes a
// deleting object whose last finalizer it removed. Objects listed in slow terminate
// gracefully: their DELETE only sets deletionTimestamp (a kubelet finishes pods).
type fakeAPI struct {
	client *metadatafake.FakeMetadataClient
	disc   *fakeDiscovery
	log    *apiLog
	slow   map[string]bool
	mu     sync.Mutex
	rv     int
}

func newFakeAPI(objs ...*metav1.PartialObjectMetadata) *fakeAPI {
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	var ros []runtime.Object
	for _, o := range objs {
		ros = append(ros, o)
	}
	api := &fakeAPI{client: metadatafake.NewSimpleMetadataClient(scheme, ros...), disc: &fakeDiscovery{},
		log: &apiLog{}, slow: map[string]bool{}, rv: 100}
	api.disc.serve(builtinKinds...)
	api.client.PrependReactor("delete", "*", api.reactDelete)
	api.client.PrependReactor("patch", "*", api.reactPatch)
	return api
}

func (a *fakeAPI) nextRV() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rv++
	return strconv.Itoa(a.rv)
}

func (a *fakeAPI) stored(gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	obj, err := a.client.Tracker().Get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	return obj.(*metav1.PartialObjectMetadata).DeepCopy(), nil
}

func (a *fakeAPI) reactDelete(action k8stesting.Action) (bool, runtime.Object, error) {
	d := action.(k8stesting.DeleteAction)
	gvr := d.GetResource()
	obj, err := a.stored(gvr, d.GetNamespace(), d.GetName())
	if err != nil {
		return true, nil, err
	}
	opts := d.GetDeleteOptions()
	if opts.Preconditions != nil && opts.Preconditions.UID != nil && *opts.Preconditions.UID != obj.UID {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), d.GetName(), fmt.Errorf("uid precondition failed"))
	}
	policy := metav1.DeletePropagationBackground
	if opts.PropagationPolicy != nil {
		policy = *opts.PropagationPolicy
	}
	a.log.add("delete %s %s %s", gvr.Resource, d.GetName(), policy)
	switch policy {
	case metav1.DeletePropagationForeground:
		obj.Finalizers = append(obj.Finalizers, metav1.FinalizerDeleteDependents)
	case metav1.DeletePropagationOrphan:
		obj.Finalizers = append(obj.Finalizers, metav1.FinalizerOrphanDependents)
	}
	if len(obj.Finalizers) == 0 && !a.slow[d.GetName()] {
		a.log.add("removed %s %s", gvr.Resource, d.GetName())
		return true, nil, a.client.Tracker().Delete(gvr, d.GetNamespace(), d.GetName())
	}
	now := metav1.Now()
	obj.DeletionTimestamp = &now
	obj.ResourceVersion = a.nextRV()
	return true, nil, a.client.Tracker().Update(gvr, obj, d.GetNamespace())
}

func (a *fakeAPI) reactPatch(action k8stesting.Action) (bool, runtime.Object, error) {
	p := action.(k8stesting.PatchAction)
	gvr := p.GetResource()
	if p.GetPatchType() != types.MergePatchType {
		return true, nil, apierrors.NewBadRequest("only merge patches are expected")
	}
	cur, err := a.stored(gvr, p.GetNamespace(), p.GetName())
	if err != nil {
		return true, nil, err
	}
	var pre struct {
		Metadata struct {
			UID             types.UID `json:"uid"`
			ResourceVersion string    `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.GetPatch(), &pre); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	if (pre.Metadata.UID != "" && pre.Metadata.UID != cur.UID) ||
		(pre.Metadata.ResourceVersion != "" && pre.Metadata.ResourceVersion != cur.ResourceVersion) {
		a.log.add("conflict %s %s", gvr.Resource, p.GetName())
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), p.GetName(), fmt.Errorf("precondition failed"))
	}
	curJSON, err := json.Marshal(cur)
	if err != nil {
		return true, nil, err
	}
	patched, err := jsonpatch.MergePatch(curJSON, p.GetPatch())
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	next := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(patched, next); err != nil {
		return true, nil, err
	}
	next.TypeMeta = cur.TypeMeta
	next.ResourceVersion = a.nextRV()
	a.log.add("patch %s %s", gvr.Resource, p.GetName())
	if next.DeletionTimestamp != nil && len(next.Finalizers) == 0 {
		a.log.add("removed %s %s", gvr.Resource, p.GetName())
		return true, next, a.client.Tracker().Delete(gvr, p.GetNamespace(), p.GetName())
	}
	return true, next, a.client.Tracker().Update(gvr, next, p.GetNamespace())
}

// finish completes a slow object's termination, as a pod's kubelet would.
func (a *fakeAPI) finish(t *testing.T, k kindInfo, name string) {
	t.Helper()
	a.log.add("removed %s %s", k.gvr.Resource, name)
	if err := a.client.Tracker().Delete(k.gvr, "default", name); err != nil {
		t.Fatal(err)
	}
}

func namespaceOf(k kindInfo) string {
	if k.namespaced {
		return "default"
	}
	return ""
}

func (a *fakeAPI) exists(k kindInfo, name string) bool {
	_, err := a.client.Tracker().Get(k.gvr, namespaceOf(k), name)
	return err == nil
}

func (a *fakeAPI) get(t *testing.T, k kindInfo, name string) *metav1.PartialObjectMetadata {
	t.Helper()
	obj, err := a.stored(k.gvr, namespaceOf(k), name)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// add stores obj as a client creating it would.
func (a *fakeAPI) add(t *testing.T, k kindInfo, obj *metav1.PartialObjectMetadata) {
	t.Helper()
	if err := a.client.Tracker().Create(k.gvr, obj, obj.Namespace); err != nil {
		t.Fatal(err)
	}
}

func (a *fakeAPI) deleteWith(t *testing.T, k kindInfo, name string, policy metav1.DeletionPropagation) {
	t.Helper()
	err := a.client.Resource(k.gvr).Namespace(namespaceOf(k)).Delete(context.Background(), name,
		metav1.DeleteOptions{PropagationPolicy: &policy})
	if err != nil {
		t.Fatal(err)
	}
}

// object returns a fixture object of kind k named name (UID "uid-<name>"), owned by owners
// (the first one its controller).
func object(k kindInfo, name string, owners ...*metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: k.apiVersion(), Kind: k.kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespaceOf(k), Name: name, UID: types.UID("uid-" + name),
			ResourceVersion: "1", OwnerReferences: ownedBy(owners...)},
	}
}

func ownedBy(owners ...*metav1.PartialObjectMetadata) []metav1.OwnerReference {
	var refs []metav1.OwnerReference
	for i, o := range owners {
		t, ctrl := true, i == 0
		refs = append(refs, metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID,
			Controller: &ctrl, BlockOwnerDeletion: &t})
	}
	return refs
}

// waitTimeout bounds every wait for the collector's workers and informers. A run takes well
// under a second; the margin is for the race detector on a loaded two-core machine, where 5 s
// once ran out.
const waitTimeout = 30 * time.Second

// testPeriod is the discovery period of test collectors; tests step the fake clock by it.
const testPeriod = 30 * time.Second

// newTestGC builds a collector against api with a fake clock.
func newTestGC(t *testing.T, api *fakeAPI, mutate func(*Options)) (*GarbageCollector, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := configs.DefaultGarbageCollectorController()
	cfg.Workers = 2
	cfg.DiscoveryPeriod = testPeriod
	opts := Options{Metadata: api.client, Discovery: api.disc, Logger: slog.New(slog.DiscardHandler), Clock: clk}
	if mutate != nil {
		mutate(&opts)
	}
	gc, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return gc, clk
}

// startGC runs a collector against api until the test ends and waits for it to sync.
func startGC(t *testing.T, api *fakeAPI, mutate func(*Options)) (*GarbageCollector, *testingclock.FakeClock) {
	t.Helper()
	gc, clk := newTestGC(t, api, mutate)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gc.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	poll.Until(t, waitTimeout, "the collector to sync", gc.HasSynced)
	return gc, clk
}
