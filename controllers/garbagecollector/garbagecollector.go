package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
)

// UserAgent identifies the collector's API requests.
const UserAgent = "garbage-collector"

// absentOwnerCacheSize bounds the set of owner UIDs known to be gone. UIDs are never reused,
// so an entry never goes stale; the bound only caps memory (the set is cleared when full).
const absentOwnerCacheSize = 10000

// Options are the collector's dependencies. Client and Informers are required.
type Options struct {
	// Client reads owners live, deletes dependents and updates ownerReferences/finalizers.
	Client kubernetes.Interface
	// Informers provides the pod, daemonset and controllerrevision informers (shared with
	// the other controllers); the caller starts it after New.
	Informers informers.SharedInformerFactory
	// Clock drives the work queues' delays; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer, when set, receives the collector's metrics.
	Registerer prometheus.Registerer
}

// GarbageCollector deletes dependents of deleted owners and serves the foregroundDeletion and
// orphan finalizers. Create it with New and start it with Run.
type GarbageCollector struct {
	resources []*resource
	synced    []cache.InformerSynced
	workers   int
	logger    *slog.Logger

	// attemptToDelete holds dependents to check against their owners, and owners being
	// deleted in the foreground whose dependents must go first.
	attemptToDelete workqueue.TypedRateLimitingInterface[objectRef]
	// attemptToOrphan holds owners being deleted with the orphan finalizer.
	attemptToOrphan workqueue.TypedRateLimitingInterface[objectRef]

	absentMu     sync.Mutex
	absentOwners map[types.UID]struct{}

	deletions *prometheus.CounterVec
	orphaned  prometheus.Counter
}

// New validates cfg and builds a collector from it and opts, registering indexers and
// handlers on the served informers. Call it before the informer factory is started.
func New(cfg configs.GarbageCollectorController, opts Options) (*GarbageCollector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("garbagecollector: %w", err)
	}
	if opts.Client == nil || opts.Informers == nil {
		return nil, errors.New("garbagecollector: Options.Client and Options.Informers are required")
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	gc := &GarbageCollector{
		resources:    servedResources(opts.Client, opts.Informers),
		workers:      cfg.Workers,
		logger:       logger,
		absentOwners: map[types.UID]struct{}{},
		attemptToDelete: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[objectRef](),
			workqueue.TypedRateLimitingQueueConfig[objectRef]{Clock: clk}),
		attemptToOrphan: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[objectRef](),
			workqueue.TypedRateLimitingQueueConfig[objectRef]{Clock: clk}),
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "garbagecollector_deletions_total",
			Help: "Dependents deleted by the garbage collector, by resource.",
		}, []string{"resource"}),
		orphaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "garbagecollector_orphaned_total",
			Help: "Dependents whose ownerReference was removed for an orphaning delete.",
		}),
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(gc.deletions); err != nil {
			return nil, fmt.Errorf("garbagecollector: metrics: %w", err)
		}
		if err := opts.Registerer.Register(gc.orphaned); err != nil {
			return nil, fmt.Errorf("garbagecollector: metrics: %w", err)
		}
	}
	if err := gc.watch(); err != nil {
		return nil, fmt.Errorf("garbagecollector: %w", err)
	}
	return gc, nil
}

// validate reports the first problem with cfg. configs.GarbageCollectorController has no
// Validate method of its own; the rule is the one configs.ControllerManager.Validate applies.

// watch adds the owner index and the event handlers to every served informer.
func (gc *GarbageCollector) watch() error {
	for i, r := range gc.resources {
		if _, exists := r.informer.GetIndexer().GetIndexers()[ownerUIDIndex]; !exists {
			if err := r.informer.AddIndexers(cache.Indexers{ownerUIDIndex: indexByOwnerUID}); err != nil {
				return fmt.Errorf("%s index: %w", r.name, err)
			}
		}
		reg, err := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { gc.onChange(i, nil, obj) },
			UpdateFunc: func(oldObj, newObj any) { gc.onChange(i, oldObj, newObj) },
			DeleteFunc: func(obj any) { gc.onDelete(i, obj) },
		})
		if err != nil {
			return fmt.Errorf("%s handler: %w", r.name, err)
		}
		gc.synced = append(gc.synced, reg.HasSynced)
	}
	return nil
}

// Run waits for every served informer, then works both queues until ctx is cancelled.
func (gc *GarbageCollector) Run(ctx context.Context) error {
	defer gc.attemptToDelete.ShutDown()
	defer gc.attemptToOrphan.ShutDown()
	gc.logger.Info("starting garbage collector", "workers", gc.workers)
	// Deciding on a partial graph would take owners for absent; wait for all of it.
	if !cache.WaitForCacheSync(ctx.Done(), gc.synced...) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for range gc.workers {
		wg.Go(func() {
			for gc.processNext(ctx, gc.attemptToDelete, gc.attemptToDeleteItem) {
			}
		})
	}
	wg.Go(func() {
		for gc.processNext(ctx, gc.attemptToOrphan, gc.orphanDependents) {
		}
	})
	<-ctx.Done()
	gc.attemptToDelete.ShutDown()
	gc.attemptToOrphan.ShutDown()
	wg.Wait()
	gc.logger.Info("stopped garbage collector")
	return nil
}

func (gc *GarbageCollector) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[objectRef],
	handle func(context.Context, objectRef) error) bool {
	item, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(item)
	if err := handle(ctx, item); err != nil {
		if ctx.Err() == nil {
			q.AddRateLimited(item)
			// Warn, not Debug: an item that keeps failing is a stuck collector, and the retry
			// count tells a transient failure from a persistent one.
			gc.logger.Warn("garbage collection failed; retrying", "resource", gc.resources[item.res].name,
				"object", item.key(), "retries", q.NumRequeues(item), "err", err)
		}
		return true
	}
	q.Forget(item)
	return true
}

func (gc *GarbageCollector) ref(res int, m metav1.Object) objectRef {
	return objectRef{res: res, namespace: m.GetNamespace(), name: m.GetName(), uid: m.GetUID()}
}

// onChange reacts to an added or updated object: finalizers to serve, owners to check, and
// foreground-deleting owners to re-examine when a dependent changed.
func (gc *GarbageCollector) onChange(res int, oldObj, newObj any) {
	m, err := meta.Accessor(newObj)
	if err != nil {
		return
	}
	item := gc.ref(res, m)
	if m.GetDeletionTimestamp() != nil {
		if hasFinalizer(m, metav1.FinalizerOrphanDependents) {
			gc.attemptToOrphan.Add(item)
		}
		if hasFinalizer(m, metav1.FinalizerDeleteDependents) {
			gc.attemptToDelete.Add(item)
		}
	}
	refs := m.GetOwnerReferences()
	if len(refs) == 0 {
		if oldObj != nil {
			gc.enqueueWaitingOwners(res, oldObj) // orphaned: its old owners may be unblocked
		}
		return
	}
	if !gc.ownersPresentInCache(res, m) {
		gc.attemptToDelete.Add(item)
	}
	if oldObj != nil {
		gc.enqueueWaitingOwners(res, oldObj)
	}
	if m.GetDeletionTimestamp() != nil {
		gc.enqueueWaitingOwners(res, newObj)
	}
}

// onDelete reacts to a deleted object: its dependents may now be dangling, and its owners
// deleting in the foreground may be unblocked.
func (gc *GarbageCollector) onDelete(res int, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	// The informer saw this UID deleted; UIDs are never reused.
	gc.markAbsent(m.GetUID())
	for _, d := range gc.dependents(m.GetUID()) {
		gc.attemptToDelete.Add(d.ref)
	}
	gc.enqueueWaitingOwners(res, obj)
}

// enqueueWaitingOwners queues the owners of obj that are being deleted in the foreground.
func (gc *GarbageCollector) enqueueWaitingOwners(res int, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	for _, ref := range m.GetOwnerReferences() {
		ownerRes, owner := gc.cachedOwner(res, m.GetNamespace(), ref)
		if owner != nil && owner.GetDeletionTimestamp() != nil && hasFinalizer(owner, metav1.FinalizerDeleteDependents) {
			gc.attemptToDelete.Add(gc.ref(ownerRes, owner))
		}
	}
}

// ownersPresentInCache reports whether every owner of m of a served kind is in the informer
// cache with the referenced UID. Unknown kinds count as present: the collector does not
// judge owners it cannot see.
func (gc *GarbageCollector) ownersPresentInCache(res int, m metav1.Object) bool {
	for _, ref := range m.GetOwnerReferences() {
		ownerRes := gc.resourceFor(ref)
		if ownerRes < 0 {
			continue
		}
		if _, owner := gc.cachedOwner(res, m.GetNamespace(), ref); owner == nil {
			return false
		}
	}
	return true
}

// resourceFor returns the index of the served resource an ownerReference points to, or -1.
func (gc *GarbageCollector) resourceFor(ref metav1.OwnerReference) int {
	group := groupOf(ref.APIVersion)
	for i, r := range gc.resources {
		if r.kind == ref.Kind && r.group == group {
			return i
		}
	}
	return -1
}

// cachedOwner returns the cached owner ref points to (with the same UID), or nil.
func (gc *GarbageCollector) cachedOwner(_ int, namespace string, ref metav1.OwnerReference) (int, metav1.Object) {
	ownerRes := gc.resourceFor(ref)
	if ownerRes < 0 {
		return -1, nil
	}
	r := gc.resources[ownerRes]
	key := ref.Name
	if r.namespaced {
		key = namespace + "/" + ref.Name
	}
	obj, exists, err := r.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return ownerRes, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil || m.GetUID() != ref.UID {
		return ownerRes, nil
	}
	return ownerRes, m
}

// dependent is a cached object that names some owner UID.
type dependent struct {
	ref objectRef
	obj metav1.Object
}

// dependents lists the cached objects of every served resource that name owner uid.
func (gc *GarbageCollector) dependents(uid types.UID) []dependent {
	var out []dependent
	for i, r := range gc.resources {
		objs, err := r.informer.GetIndexer().ByIndex(ownerUIDIndex, string(uid))
		if err != nil {
			continue
		}
		for _, obj := range objs {
			if m, err := meta.Accessor(obj); err == nil {
				out = append(out, dependent{ref: gc.ref(i, m), obj: m})
			}
		}
	}
	return out
}

func (gc *GarbageCollector) markAbsent(uid types.UID) {
	gc.absentMu.Lock()
	defer gc.absentMu.Unlock()
	if len(gc.absentOwners) >= absentOwnerCacheSize {
		clear(gc.absentOwners)
	}
	gc.absentOwners[uid] = struct{}{}
}

func (gc *GarbageCollector) knownAbsent(uid types.UID) bool {
	gc.absentMu.Lock()
	defer gc.absentMu.Unlock()
	_, ok := gc.absentOwners[uid]
	return ok
}
