package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Discovery is the part of client-go's discovery client the collector uses
// (*discovery.DiscoveryClient implements it).
type Discovery interface {
	// ServerPreferredResourcesWithContext lists every served resource at its group's preferred
	// version. With some groups failing it returns the others and a
	// *discovery.ErrGroupDiscoveryFailed.
	ServerPreferredResourcesWithContext(ctx context.Context) ([]*metav1.APIResourceList, error)
}

// discoveryTriggers are the resources whose changes change discovery: a new or deleted CRD
// adds or removes a resource, an APIService a whole group. An event on one of them makes the
// collector look at discovery at once instead of at the next period.
var discoveryTriggers = map[schema.GroupResource]bool{
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: true,
	{Group: "apiregistration.k8s.io", Resource: "apiservices"}:             true,
}

// collectable selects the resources the collector watches: it must list and watch them to
// build its graph and delete their objects to collect them.
var collectable = discovery.SupportsAllVerbs{Verbs: []string{"list", "watch", "delete"}}

// apiResource is a served resource as discovery describes it.
type apiResource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// monitor watches one resource for the collector: an informer of its own over object
// metadata, or the typed informer another controller runs (shared).
type monitor struct {
	apiResource
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
	shared   bool
	// cancel stops an own informer and done is closed when it has stopped; nil for shared ones.
	cancel context.CancelFunc
	done   chan struct{}
}

func (m *monitor) hasSynced() bool { return m.reg.HasSynced() }

// kindFor returns the served resource of a kind: the one discovery listed last.
func (gc *GarbageCollector) kindFor(gk schema.GroupKind) (apiResource, bool) {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	r, ok := gc.kinds[gk]
	return r, ok
}

// requestDiscovery makes the discovery loop look again now; requests coalesce.
func (gc *GarbageCollector) requestDiscovery() {
	select {
	case gc.rediscover <- struct{}{}:
	default:
	}
}

// discoveryLoop re-reads discovery at every tick, and whenever requestDiscovery asks, until
// ctx ends.
func (gc *GarbageCollector) discoveryLoop(ctx context.Context, ticker clock.Ticker) {
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-gc.rediscover:
		}
		if err := gc.resync(ctx); err != nil && ctx.Err() == nil {
			gc.logger.Warn("garbage collector discovery failed; keeping the resources watched so far", "err", err)
		}
	}
}

// discover reads discovery: the resources to watch (every one that supports list, watch and
// delete, except the ignored ones), every kind that can be read (owners of a kind that is not
// watched are read live), and the group versions whose discovery failed.
func (gc *GarbageCollector) discover(ctx context.Context) (watch map[schema.GroupVersionResource]apiResource,
	kinds map[schema.GroupKind]apiResource, failed map[schema.GroupVersion]error, err error) {
	lists, err := gc.discovery.ServerPreferredResourcesWithContext(ctx)
	failed, partial := discovery.GroupDiscoveryFailedErrorGroups(err)
	if err != nil && !partial {
		return nil, nil, nil, fmt.Errorf("discovery: %w", err)
	}
	watch = map[schema.GroupVersionResource]apiResource{}
	kinds = map[schema.GroupKind]apiResource{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			res := apiResource{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced}
			if slices.Contains(r.Verbs, "get") {
				kinds[schema.GroupKind{Group: gv.Group, Kind: r.Kind}] = res
			}
			if collectable.Match(list.GroupVersion, &r) && !gc.ignored[res.gvr.GroupResource()] {
				watch[res.gvr] = res
			}
		}
	}
	if len(watch) == 0 {
		// An API server serves namespaces at least: an empty answer is a failure, and
		// acting on it would stop every informer.
		return nil, nil, nil, errors.New("discovery listed no resource to watch")
	}
	return watch, kinds, failed, nil
}

// resync brings the watched resources in line with discovery: informers start for resources
// that appeared and stop for those that went. Resources of groups whose discovery failed are
// kept as they are, as are the kinds they serve.
func (gc *GarbageCollector) resync(ctx context.Context) error {
	gc.resyncMu.Lock()
	defer gc.resyncMu.Unlock()
	watch, kinds, failed, err := gc.discover(ctx)
	if err != nil {
		gc.syncErrors.Inc()
		return err
	}
	gc.mu.Lock()
	for gk, r := range gc.kinds {
		if _, fail := failed[r.gvr.GroupVersion()]; fail {
			kinds[gk] = r
		}
	}
	var removed []*monitor
	var added []schema.GroupVersionResource
	for gvr, m := range gc.monitors {
		if _, ok := watch[gvr]; ok {
			continue
		}
		if _, fail := failed[gvr.GroupVersion()]; fail {
			continue
		}
		delete(gc.monitors, gvr)
		removed = append(removed, m)
	}
	var errs []error
	for gvr, res := range watch {
		if _, ok := gc.monitors[gvr]; ok {
			continue
		}
		m, err := gc.newMonitor(ctx, res)
		if err != nil {
			errs = append(errs, fmt.Errorf("watching %s: %w", gvr.GroupResource(), err))
			continue
		}
		gc.monitors[gvr] = m
		added = append(added, gvr)
	}
	var newKinds []schema.GroupKind
	for gk := range kinds {
		if _, ok := gc.kinds[gk]; !ok {
			newKinds = append(newKinds, gk)
		}
	}
	gc.kinds = kinds
	watched := len(gc.monitors)
	gc.discovered = true
	gc.mu.Unlock()

	gc.watched.Set(float64(watched))
	if len(added) > 0 || len(removed) > 0 {
		gc.logger.Info("garbage collector resources changed", "added", resourceNames(added),
			"removed", monitorNames(removed), "watched", watched)
	}
	for _, m := range removed {
		gc.stopMonitor(ctx, m)
	}
	gc.releaseParked(newKinds)
	if len(errs) > 0 {
		gc.syncErrors.Inc()
	}
	return errors.Join(errs...)
}

// newMonitor builds and starts the monitor of res. Called with gc.mu held; the handlers it
// registers take gc.mu themselves, from the informers' goroutines.
func (gc *GarbageCollector) newMonitor(ctx context.Context, res apiResource) (*monitor, error) {
	m := &monitor{apiResource: res}
	if inf, ok := gc.shared[res.gvr]; ok {
		m.informer, m.shared = inf, true
		if _, indexed := inf.GetIndexer().GetIndexers()[ownerUIDIndex]; !indexed {
			if err := inf.AddIndexers(cache.Indexers{ownerUIDIndex: indexByOwnerUID}); err != nil {
				return nil, err
			}
		}
	} else {
		m.informer = metadatainformer.NewFilteredMetadataInformer(gc.metadata, res.gvr, metav1.NamespaceAll, 0,
			cache.Indexers{ownerUIDIndex: indexByOwnerUID}, nil).Informer()
		if err := m.informer.SetTransform(slimMetadata); err != nil {
			return nil, err
		}
		if err := m.informer.SetWatchErrorHandlerWithContext(gc.watchError); err != nil {
			return nil, err
		}
	}
	gvr := res.gvr
	trigger := discoveryTriggers[gvr.GroupResource()]
	reg, err := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			gc.onChange(gvr, nil, obj)
			if trigger {
				gc.requestDiscovery()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			gc.onChange(gvr, oldObj, newObj)
			if trigger {
				gc.requestDiscovery()
			}
		},
		DeleteFunc: func(obj any) {
			gc.onDelete(gvr, obj)
			if trigger {
				gc.requestDiscovery()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	m.reg = reg
	if !m.shared {
		runCtx, cancel := context.WithCancel(ctx)
		m.cancel, m.done = cancel, make(chan struct{})
		go func() {
			defer close(m.done)
			m.informer.RunWithContext(runCtx)
		}()
	}
	gc.logger.Debug("watching resource", "resource", gvr.GroupResource().String(), "version", gvr.Version, "shared", m.shared)
	return m, nil
}

// watchError is the watch error handler of the collector's own informers. A resource that
// went away (its CRD deleted) answers NotFound until discovery stops its informer: expected, so
// it is logged at Debug, and it is a reason to read discovery now rather than at the next
// period. A stopped monitor's canceled watch is no error at all. Anything else is reported as
// client-go's default handler would.
func (gc *GarbageCollector) watchError(ctx context.Context, r *cache.Reflector, err error) {
	switch {
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
	case apierrors.IsNotFound(err):
		gc.logger.Debug("watched resource is no longer served; reading discovery", "err", err)
		gc.requestDiscovery()
	default:
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}
}

// stopMonitor stops watching a resource discovery no longer lists. When the API server
// confirms the resource is gone (its list answers NotFound: a deleted CRD takes its objects
// with it), the objects the informer held are gone too, and their dependents are checked
// as those of deleted owners; otherwise the dependents keep their owners, unjudged, until
// the kind appears again.
func (gc *GarbageCollector) stopMonitor(ctx context.Context, m *monitor) {
	if m.shared {
		if err := m.informer.RemoveEventHandler(m.reg); err != nil {
			gc.logger.Warn("garbage collector could not stop watching a shared informer", "resource", m.gvr.GroupResource().String(), "err", err)
		}
	} else {
		m.cancel()
		<-m.done
	}
	if _, stillKnown := gc.kindFor(schema.GroupKind{Group: m.gvr.Group, Kind: m.kind}); stillKnown {
		return // served at another version, or readable though not watchable: not gone
	}
	_, err := gc.metadata.Resource(m.gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if !apierrors.IsNotFound(err) {
		return
	}
	objs := m.informer.GetStore().List()
	for _, obj := range objs {
		a, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		gc.markAbsent(a.GetUID())
		for _, d := range gc.dependents(a.GetUID()) {
			gc.attemptToDelete.Add(d.ref)
		}
	}
	gc.logger.Info("garbage collector resource is gone with its objects", "resource", m.gvr.GroupResource().String(), "objects", len(objs))
}

// stopMonitors stops every informer of the collector's own, when it stops.
func (gc *GarbageCollector) stopMonitors() {
	gc.mu.Lock()
	monitors := gc.monitors
	gc.monitors = map[schema.GroupVersionResource]*monitor{}
	gc.mu.Unlock()
	for _, m := range monitors {
		if m.shared {
			_ = m.informer.RemoveEventHandler(m.reg)
			continue
		}
		m.cancel()
		<-m.done
	}
}

// HasSynced reports whether discovery has been read and every watched resource's informer
// has delivered its initial list to the collector.
func (gc *GarbageCollector) HasSynced() bool {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	if !gc.discovered {
		return false
	}
	for _, m := range gc.monitors {
		if !m.hasSynced() {
			return false
		}
	}
	return true
}

// unsynced names the watched resources whose informers have not synced yet.
func (gc *GarbageCollector) unsynced() []string {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	var out []string
	for gvr, m := range gc.monitors {
		if !m.hasSynced() {
			out = append(out, gvr.GroupResource().String())
		}
	}
	slices.Sort(out)
	return out
}

// watching reports whether gvr is watched (for tests and logs).
func (gc *GarbageCollector) watching(gvr schema.GroupVersionResource) bool {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	_, ok := gc.monitors[gvr]
	return ok
}

// slimMetadata keeps of an object's metadata what the collector reads — identity,
// resourceVersion, ownerReferences, finalizers, deletionTimestamp — before the informer
// stores it. Labels, annotations (kubectl's last-applied copy of the whole object among
// them) and managed fields would be most of the cache's memory otherwise.
func slimMetadata(obj any) (any, error) {
	p, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name:              p.Name,
		Namespace:         p.Namespace,
		UID:               p.UID,
		ResourceVersion:   p.ResourceVersion,
		DeletionTimestamp: p.DeletionTimestamp,
		OwnerReferences:   p.OwnerReferences,
		Finalizers:        p.Finalizers,
	}}, nil
}

func resourceNames(gvrs []schema.GroupVersionResource) []string {
	out := make([]string, len(gvrs))
	for i, gvr := range gvrs {
		out[i] = gvr.GroupResource().String()
	}
	slices.Sort(out)
	return out
}

func monitorNames(ms []*monitor) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.gvr.GroupResource().String()
	}
	slices.Sort(out)
	return out
}
