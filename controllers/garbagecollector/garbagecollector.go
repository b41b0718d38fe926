package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/worker"
)

// UserAgent identifies the collector's API requests.
const UserAgent = "garbage-collector"

// absentOwnerCacheSize bounds the set of owner UIDs known to be gone. UIDs are never reused,
// so an entry never goes stale; the bound only caps memory (the set is cleared when full).
const absentOwnerCacheSize = 10000

// Options are the collector's dependencies. Metadata and Discovery are required.
type Options struct {
	// Metadata feeds the collector's informers (object metadata only, one informer per
	// watched resource), reads owners and dependents live, deletes dependents and patches
	// ownerReferences and finalizers: no typed client is needed, so custom resources are
	// collected like built-in ones.
	Metadata metadata.Interface
	// Discovery lists the served resources; the collector watches every one that supports
	// list, watch and delete.
	Discovery Discovery
	// Shared are informers that other controllers of the process already run, by resource
	// (typed informers of a factory they start). The collector watches those resources
	// through them, adding its index and handlers, rather than caching their objects a second
	// time; it neither starts nor stops them.
	Shared map[schema.GroupVersionResource]cache.SharedIndexInformer
	// Clock drives the discovery period and the work queues' delays; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer, when set, receives the collector's metrics.
	Registerer prometheus.Registerer
}

// GarbageCollector deletes dependents of deleted owners and serves the foregroundDeletion and
// orphan finalizers, for every resource discovery lists. Create it with New and start it
// with Run.
type GarbageCollector struct {
	metadata  metadata.Interface
	discovery Discovery
	shared    map[schema.GroupVersionResource]cache.SharedIndexInformer
	ignored   map[schema.GroupResource]bool
	period    time.Duration
	workers   int
	clock     clock.WithTicker
	logger    *slog.Logger

	// resyncMu serializes discovery resyncs.
	resyncMu sync.Mutex
	// mu guards monitors, kinds and discovered.
	mu sync.RWMutex
	// monitors are the watched resources.
	monitors map[schema.GroupVersionResource]*monitor
	// kinds maps every kind discovery lists as readable to its resource: ownerReferences name
	// kinds.
	kinds map[schema.GroupKind]apiResource
	// discovered is set once discovery has been read.
	discovered bool
	// rediscover asks the discovery loop to look now.
	rediscover chan struct{}

	// attemptToDelete holds dependents to check against their owners, and owners being
	// deleted in the foreground whose dependents must go first.
	attemptToDelete workqueue.TypedRateLimitingInterface[objectRef]
	// attemptToOrphan holds owners being deleted with the orphan finalizer.
	attemptToOrphan workqueue.TypedRateLimitingInterface[objectRef]

	absentMu     sync.Mutex
	absentOwners map[types.UID]struct{}

	// parked holds objects naming an owner of a kind discovery does not list, by that kind.
	parkedMu sync.Mutex
	parked   map[schema.GroupKind]map[objectRef]struct{}

	deletions  *prometheus.CounterVec
	orphaned   prometheus.Counter
	watched    prometheus.Gauge
	syncErrors prometheus.Counter
}

// New validates cfg and builds a collector from it and opts. It watches nothing until Run
// reads discovery. Shared informers may be started before or after New.
func New(cfg configs.GarbageCollectorController, opts Options) (*GarbageCollector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("garbagecollector: %w", err)
	}
	if opts.Metadata == nil || opts.Discovery == nil {
		return nil, errors.New("garbagecollector: Options.Metadata and Options.Discovery are required")
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	ignored := map[schema.GroupResource]bool{}
	for _, r := range cfg.IgnoredResources {
		ignored[schema.ParseGroupResource(r)] = true
	}
	gc := &GarbageCollector{
		metadata:     opts.Metadata,
		discovery:    opts.Discovery,
		shared:       opts.Shared,
		ignored:      ignored,
		period:       cfg.DiscoveryPeriod,
		workers:      cfg.Workers,
		clock:        clk,
		logger:       logger,
		monitors:     map[schema.GroupVersionResource]*monitor{},
		kinds:        map[schema.GroupKind]apiResource{},
		rediscover:   make(chan struct{}, 1),
		absentOwners: map[types.UID]struct{}{},
		parked:       map[schema.GroupKind]map[objectRef]struct{}{},
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
		watched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "garbagecollector_watched_resources",
			Help: "Resources the garbage collector watches, from discovery.",
		}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "garbagecollector_resources_sync_errors_total",
			Help: "Discovery reads that failed or could not start watching every resource.",
		}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{gc.deletions, gc.orphaned, gc.watched, gc.syncErrors} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("garbagecollector: metrics: %w", err)
			}
		}
	}
	return gc, nil
}

// Run reads discovery, starts an informer per watched resource, waits (at most one discovery
// period) for them to sync, then works both queues and re-reads discovery every period until
// ctx is cancelled; it stops its informers before it returns.
func (gc *GarbageCollector) Run(ctx context.Context) error {
	gc.logger.Info("starting garbage collector", "workers", gc.workers, "discoveryPeriod", gc.period)
	var wg sync.WaitGroup
	defer func() {
		gc.attemptToDelete.ShutDown()
		gc.attemptToOrphan.ShutDown()
		wg.Wait()
		gc.stopMonitors()
		gc.logger.Info("stopped garbage collector")
	}()
	// The ticker starts with the first discovery read, not when the loop's goroutine first
	// runs, so that the period counts from that read; and before the read, so that once
	// the caches it starts have synced, the next period is already being waited for.
	ticker := gc.clock.NewTicker(gc.period)
	if err := gc.resync(ctx); err != nil && ctx.Err() == nil {
		gc.logger.Warn("garbage collector discovery failed; retrying every period", "err", err)
	}
	wg.Go(func() { gc.discoveryLoop(ctx, ticker) })
	if !gc.waitForSync(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		// Deciding with some caches incomplete is safe — an owner missing from a cache is
		// read live before its dependents go, and finalizers are only removed after a live
		// list — only slower; waiting for ever on one broken resource would stop collection
		// of all the others.
		gc.logger.Warn("garbage collector resources not synced; collecting anyway", "resources", gc.unsynced())
	}
	for range gc.workers {
		wg.Go(func() {
			worker.Run(ctx, gc.attemptToDelete, gc.attemptToDeleteItem, gc.collectFailed)
		})
	}
	wg.Go(func() {
		worker.Run(ctx, gc.attemptToOrphan, gc.orphanDependents, gc.collectFailed)
	})
	<-ctx.Done()
	return nil
}

// waitForSync waits for HasSynced for at most one discovery period.
func (gc *GarbageCollector) waitForSync(ctx context.Context) bool {
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := gc.clock.NewTimer(gc.period)
	defer timer.Stop()
	go func() {
		select {
		case <-timer.C():
			cancel()
		case <-waitCtx.Done():
		}
	}()
	return cache.WaitForCacheSync(waitCtx.Done(), gc.HasSynced)
}

// collectFailed logs an item the collector could not handle; the worker tries it again.
// Warn, not Debug: an item that keeps failing is a stuck collector, and the retry count
// tells a transient failure from a persistent one.
func (gc *GarbageCollector) collectFailed(item objectRef, requeues int, err error) {
	gc.logger.Warn("garbage collection failed; retrying", "resource", item.resource.GroupResource().String(),
		"object", item.key(), "retries", requeues, "err", err)
}

// onChange reacts to an added or updated object: finalizers to serve, owners to check, and
// foreground-deleting owners to re-examine when a dependent changed.
func (gc *GarbageCollector) onChange(gvr schema.GroupVersionResource, oldObj, newObj any) {
	m, err := meta.Accessor(newObj)
	if err != nil {
		return
	}
	item := refTo(gvr, m)
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
			gc.enqueueWaitingOwners(oldObj) // orphaned: its old owners may be unblocked
		}
		return
	}
	if !gc.ownersPresentInCache(m) {
		gc.attemptToDelete.Add(item)
	}
	if oldObj != nil {
		gc.enqueueWaitingOwners(oldObj)
	}
	if m.GetDeletionTimestamp() != nil {
		gc.enqueueWaitingOwners(newObj)
	}
}

// onDelete reacts to a deleted object: its dependents may now be dangling, and its owners
// deleting in the foreground may be unblocked.
func (gc *GarbageCollector) onDelete(gvr schema.GroupVersionResource, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	// The informer saw this UID deleted; UIDs are never reused.
	gc.markAbsent(m.GetUID())
	gc.unpark(refTo(gvr, m), m.GetOwnerReferences())
	for _, d := range gc.dependents(m.GetUID()) {
		gc.attemptToDelete.Add(d.ref)
	}
	gc.enqueueWaitingOwners(obj)
}

// enqueueWaitingOwners queues the owners of obj that are being deleted in the foreground.
func (gc *GarbageCollector) enqueueWaitingOwners(obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	for _, ref := range m.GetOwnerReferences() {
		ownerRef, owner := gc.cachedOwner(m.GetNamespace(), ref)
		if owner != nil && owner.GetDeletionTimestamp() != nil && hasFinalizer(owner, metav1.FinalizerDeleteDependents) {
			gc.attemptToDelete.Add(ownerRef)
		}
	}
}

// ownersPresentInCache reports whether every owner of m is in an informer cache with the
// referenced UID. An owner that is not — of a kind that is not watched, or not known at
// all — gets m checked, which reads it live or parks m until its kind appears.
func (gc *GarbageCollector) ownersPresentInCache(m metav1.Object) bool {
	for _, ref := range m.GetOwnerReferences() {
		if _, owner := gc.cachedOwner(m.GetNamespace(), ref); owner == nil {
			return false
		}
	}
	return true
}
