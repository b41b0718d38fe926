package garbagecollector

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxUpdateAttempts bounds optimistic-concurrency retries of one ownerReference or
// finalizer patch before the item goes back to the rate-limited queue.
const maxUpdateAttempts = 5

// attemptToDeleteItem is the dependents check, after kube's attemptToDeleteItem:
//
//   - an object being deleted with the foregroundDeletion finalizer is an owner waiting for
//     its dependents: they are queued for deletion, and the finalizer is removed once none
//     with blockOwnerDeletion is left;
//   - otherwise each owner is solid (exists, or cannot be judged), dangling (gone: verified
//     by a live GET) or waiting (being deleted in the foreground). With a solid owner the
//     dependent stays and only loses references to dangling and waiting owners; without one
//     it is deleted — in the foreground when a waiting owner must wait for its own
//     dependents too.
func (gc *GarbageCollector) attemptToDeleteItem(ctx context.Context, item objectRef) error {
	m := gc.cached(item)
	if m == nil {
		return nil // gone, replaced by another object with the same name, or no longer watched
	}
	if m.DeletionTimestamp != nil {
		if !hasFinalizer(m, metav1.FinalizerDeleteDependents) {
			return nil // already being deleted; nothing for the collector to do
		}
		return gc.processDeletingDependents(ctx, item)
	}
	if len(m.OwnerReferences) == 0 {
		return nil
	}
	act, err := gc.decide(ctx, item, m)
	if err != nil || act.kind == actNone {
		return err
	}
	// The cache may be behind (an orphaning or adoption that just happened): decide again
	// on the live object before changing anything, as kube's collector does.
	live, err := gc.get(ctx, item.resource, item.namespace, item.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting %s %s: %w", item.resource.GroupResource(), item.key(), err)
	}
	if live.UID != item.uid || live.DeletionTimestamp != nil {
		return nil
	}
	if act, err = gc.decide(ctx, item, live); err != nil {
		return err
	}
	logger := gc.logger.With("resource", item.resource.GroupResource().String(), "object", item.key())
	switch act.kind {
	case actDropRefs:
		logger.Debug("removing references to deleted owners", "owners", len(act.owners))
		return gc.patchMetadata(ctx, item, live, func(m metav1.Object) bool { return removeOwnerRefs(m, act.owners) })
	case actDeleteForeground:
		// The waiting owner must wait for this object's dependents as well: delete it in the
		// foreground, so that the chain goes bottom-up. Should one of its dependents wait for
		// its own dependents too, the references may form a cycle, in which every object
		// would wait for ever: as kube's collector does, this object then stops blocking its
		// owners before it is deleted.
		if gc.dependentDeletingInForeground(item.uid) {
			logger.Debug("unblocking owners to break a possible cycle of foreground deletions")
			if err := gc.patchMetadata(ctx, item, live, func(m metav1.Object) bool { return unblockOwnerRefs(m, act.owners) }); err != nil {
				return err
			}
		}
		logger.Debug("deleting object in the foreground for an owner that waits for its dependents")
		return gc.deleteObject(ctx, item, metav1.DeletePropagationForeground)
	case actDelete:
		policy := metav1.DeletePropagationBackground
		switch {
		case hasFinalizer(live, metav1.FinalizerOrphanDependents):
			policy = metav1.DeletePropagationOrphan
		case hasFinalizer(live, metav1.FinalizerDeleteDependents):
			policy = metav1.DeletePropagationForeground
		}
		logger.Debug("deleting object whose owners are gone", "propagationPolicy", policy)
		return gc.deleteObject(ctx, item, policy)
	}
	return nil
}

type actionKind int

const (
	actNone             actionKind = iota
	actDropRefs                    // keep the object, drop references to gone or going owners
	actDeleteForeground            // delete it in the foreground, after unblocking waiting owners
	actDelete                      // delete it
)

type action struct {
	kind   actionKind
	owners map[types.UID]bool
}

// decide classifies m's owners and returns what to do with m.
func (gc *GarbageCollector) decide(ctx context.Context, item objectRef, m metav1.Object) (action, error) {
	if len(m.GetOwnerReferences()) == 0 {
		return action{}, nil // orphaned meanwhile
	}
	var solid, dangling, waiting []metav1.OwnerReference
	for _, ref := range m.GetOwnerReferences() {
		state, err := gc.classifyOwner(ctx, item, ref)
		if err != nil {
			return action{}, err
		}
		switch state {
		case ownerSolid:
			solid = append(solid, ref)
		case ownerDangling:
			dangling = append(dangling, ref)
		case ownerWaiting:
			waiting = append(waiting, ref)
		}
	}
	uids := func(refs ...[]metav1.OwnerReference) map[types.UID]bool {
		out := map[types.UID]bool{}
		for _, rs := range refs {
			for _, r := range rs {
				out[r.UID] = true
			}
		}
		return out
	}
	switch {
	case len(solid) > 0:
		if len(dangling) == 0 && len(waiting) == 0 {
			return action{}, nil
		}
		return action{kind: actDropRefs, owners: uids(dangling, waiting)}, nil
	case len(waiting) > 0 && len(gc.dependents(item.uid)) > 0:
		return action{kind: actDeleteForeground, owners: uids(waiting)}, nil
	default:
		return action{kind: actDelete}, nil
	}
}

// processDeletingDependents serves an owner's foregroundDeletion finalizer.
func (gc *GarbageCollector) processDeletingDependents(ctx context.Context, item objectRef) error {
	blocking := 0
	for _, d := range gc.dependents(item.uid) {
		if blocks(d.obj, item.uid) {
			blocking++
		}
		if d.obj.GetDeletionTimestamp() == nil {
			gc.attemptToDelete.Add(d.ref)
		}
	}
	if blocking > 0 {
		// Each dependent's deletion event queues the owner again.
		return nil
	}
	owner := gc.cached(item)
	if owner == nil {
		return nil
	}
	// Dropping the finalizer cannot be undone: confirm on a live read that no blocking
	// dependent exists that the informers have not delivered yet.
	live, err := gc.liveDependents(ctx, item)
	if err != nil {
		return err
	}
	for _, d := range live {
		if blocks(d.obj, item.uid) {
			blocking++
		}
		if d.obj.GetDeletionTimestamp() == nil {
			gc.attemptToDelete.Add(d.ref)
		}
	}
	if blocking > 0 {
		return fmt.Errorf("%d dependents of %s %s not yet in the cache", blocking, item.resource.GroupResource(), item.key())
	}
	gc.logger.Debug("dependents are gone; removing finalizer", "resource", item.resource.GroupResource().String(),
		"object", item.key(), "finalizer", metav1.FinalizerDeleteDependents)
	return gc.patchMetadata(ctx, item, owner, func(m metav1.Object) bool {
		return removeFinalizer(m, metav1.FinalizerDeleteDependents)
	})
}

// dependentDeletingInForeground reports whether a cached dependent of uid is itself being
// deleted in the foreground.
func (gc *GarbageCollector) dependentDeletingInForeground(uid types.UID) bool {
	for _, d := range gc.dependents(uid) {
		if d.obj.GetDeletionTimestamp() != nil && hasFinalizer(d.obj, metav1.FinalizerDeleteDependents) {
			return true
		}
	}
	return false
}

// blocks reports whether dependent m blocks the foreground deletion of owner uid.
func blocks(m metav1.Object, uid types.UID) bool {
	for _, ref := range m.GetOwnerReferences() {
		if ref.UID == uid && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
			return true
		}
	}
	return false
}

// orphanDependents serves an owner's orphan finalizer: every dependent loses its reference
// to the owner, then the finalizer goes.
func (gc *GarbageCollector) orphanDependents(ctx context.Context, item objectRef) error {
	owner := gc.cached(item)
	if owner == nil || owner.DeletionTimestamp == nil || !hasFinalizer(owner, metav1.FinalizerOrphanDependents) {
		return nil
	}
	drop := map[types.UID]bool{item.uid: true}
	// Orphan what a live read finds, not only what the cache holds: a dependent created just
	// before its owner was deleted may not have reached the informer, and once the finalizer
	// is gone it would be collected as the dependent of a missing owner.
	live, err := gc.liveDependents(ctx, item)
	if err != nil {
		return err
	}
	for _, d := range live {
		if err := gc.patchMetadata(ctx, d.ref, d.obj, func(m metav1.Object) bool {
			return removeOwnerRefs(m, drop)
		}); err != nil {
			return fmt.Errorf("orphaning %s %s: %w", d.ref.resource.GroupResource(), d.ref.key(), err)
		}
		gc.orphaned.Inc()
	}
	gc.logger.Debug("dependents orphaned; removing finalizer", "resource", item.resource.GroupResource().String(),
		"object", item.key(), "finalizer", metav1.FinalizerOrphanDependents)
	return gc.patchMetadata(ctx, item, owner, func(m metav1.Object) bool {
		return removeFinalizer(m, metav1.FinalizerOrphanDependents)
	})
}

type ownerState int

const (
	ownerSolid ownerState = iota
	ownerDangling
	ownerWaiting
)

// classifyOwner decides what ref's owner is. The cache can say "present" but never "absent":
// an owner created a moment ago may not have reached the informer, so absence is confirmed
// with a live GET (and remembered, as UIDs are never reused). An owner that cannot be read
// is never taken for absent: a kind discovery does not list (a custom resource whose CRD is
// not served yet) parks the dependent until the kind appears, and a namespaced owner of a
// cluster-scoped object is an invalid reference that is left alone, as kube's collector does.
func (gc *GarbageCollector) classifyOwner(ctx context.Context, item objectRef, ref metav1.OwnerReference) (ownerState, error) {
	if gc.knownAbsent(ref.UID) {
		return ownerDangling, nil
	}
	gk := groupKindOf(ref)
	res, ok := gc.kindFor(gk)
	if !ok {
		gc.park(item, gk)
		return ownerSolid, nil
	}
	if res.namespaced && item.namespace == "" {
		return ownerSolid, nil
	}
	var owner metav1.Object
	if _, cached := gc.cachedOwner(item.namespace, ref); cached != nil {
		owner = cached
	} else {
		ns := ""
		if res.namespaced {
			ns = item.namespace
		}
		live, err := gc.get(ctx, res.gvr, ns, ref.Name)
		switch {
		case apierrors.IsNotFound(err):
			gc.markAbsent(ref.UID)
			return ownerDangling, nil
		case err != nil:
			return ownerSolid, fmt.Errorf("getting owner %s %s: %w", res.kind, ref.Name, err)
		}
		if live.UID != ref.UID {
			gc.markAbsent(ref.UID)
			return ownerDangling, nil
		}
		owner = live
	}
	if owner.GetDeletionTimestamp() != nil && hasFinalizer(owner, metav1.FinalizerDeleteDependents) {
		return ownerWaiting, nil
	}
	return ownerSolid, nil
}

// deleteObject deletes item with a UID precondition, so a new object that took the name is
// never deleted in its place.
func (gc *GarbageCollector) deleteObject(ctx context.Context, item objectRef, policy metav1.DeletionPropagation) error {
	uid := item.uid
	err := gc.metadata.Resource(item.resource).Namespace(item.namespace).Delete(ctx, item.name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: &policy,
	})
	switch {
	case err == nil:
		gc.deletions.WithLabelValues(item.resource.GroupResource().String()).Inc()
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // already gone, or the name now belongs to another object
	default:
		return fmt.Errorf("deleting %s %s: %w", item.resource.GroupResource(), item.key(), err)
	}
}

// liveDependent is a dependent read live from the API server.
type liveDependent struct {
	ref objectRef
	obj *metav1.PartialObjectMetadata
}

// liveDependents lists, straight from the API server, the objects that name the owner: those
// of every watched namespaced resource in a namespaced owner's namespace (dependents share
// their owner's namespace), of every watched resource for a cluster-scoped owner. Only the
// irreversible decisions use it.
func (gc *GarbageCollector) liveDependents(ctx context.Context, owner objectRef) ([]liveDependent, error) {
	gc.mu.RLock()
	var resources []apiResource
	for _, m := range gc.monitors {
		if owner.namespace == "" || m.namespaced {
			resources = append(resources, m.apiResource)
		}
	}
	gc.mu.RUnlock()
	var out []liveDependent
	for _, r := range resources {
		list, err := gc.metadata.Resource(r.gvr).Namespace(owner.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", r.gvr.GroupResource(), err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			for _, ref := range obj.OwnerReferences {
				if ref.UID == owner.uid {
					out = append(out, liveDependent{ref: refTo(r.gvr, obj), obj: obj})
					break
				}
			}
		}
	}
	return out, nil
}

func removeOwnerRefs(m metav1.Object, drop map[types.UID]bool) bool {
	refs := m.GetOwnerReferences()
	kept := make([]metav1.OwnerReference, 0, len(refs))
	for _, ref := range refs {
		if !drop[ref.UID] {
			kept = append(kept, ref)
		}
	}
	if len(kept) == len(refs) {
		return false
	}
	m.SetOwnerReferences(kept)
	return true
}

func unblockOwnerRefs(m metav1.Object, uids map[types.UID]bool) bool {
	refs := m.GetOwnerReferences()
	changed := false
	for i := range refs {
		if uids[refs[i].UID] && refs[i].BlockOwnerDeletion != nil && *refs[i].BlockOwnerDeletion {
			f := false
			refs[i].BlockOwnerDeletion = &f
			changed = true
		}
	}
	if changed {
		m.SetOwnerReferences(refs)
	}
	return changed
}

func removeFinalizer(m metav1.Object, finalizer string) bool {
	fs := m.GetFinalizers()
	kept := make([]string, 0, len(fs))
	for _, f := range fs {
		if f != finalizer {
			kept = append(kept, f)
		}
	}
	if len(kept) == len(fs) {
		return false
	}
	m.SetFinalizers(kept)
	return true
}
