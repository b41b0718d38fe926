package garbagecollector

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// maxUpdateAttempts bounds optimistic-concurrency retries of one ownerReference or
// finalizer update before the item goes back to the rate-limited queue.
const maxUpdateAttempts = 5

// attemptToDeleteItem is the dependents check, after kube's attemptToDeleteItem:
//
//   - an object being deleted with the foregroundDeletion finalizer is an owner waiting for
//     its dependents: they are queued for deletion, and the finalizer is removed once none
//     with blockOwnerDeletion is left;
//   - otherwise each owner is solid (exists), dangling (gone: verified by a live GET) or
//     waiting (being deleted in the foreground). With a solid owner the dependent stays and
//     only loses references to dangling and waiting owners; without one it is deleted —
//     in the foreground when a waiting owner must wait for its own dependents too.
func (gc *GarbageCollector) attemptToDeleteItem(ctx context.Context, item objectRef) error {
	r := gc.resources[item.res]
	_, m := gc.cached(item)
	if m == nil {
		return nil // gone, or replaced by another object with the same name
	}
	if m.GetDeletionTimestamp() != nil {
		if !hasFinalizer(m, metav1.FinalizerDeleteDependents) {
			return nil // already being deleted; nothing for the collector to do
		}
		return gc.processDeletingDependents(ctx, item)
	}
	if len(m.GetOwnerReferences()) == 0 {
		return nil
	}
	act, err := gc.decide(ctx, item, m)
	if err != nil || act.kind == actNone {
		return err
	}
	// The cache may be behind (an orphaning or adoption that just happened): decide again
	// on the live object before changing anything, as kube's collector does.
	obj, err := r.get(ctx, item.namespace, item.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting %s %s: %w", r.name, item.key(), err)
	}
	if m, err = meta.Accessor(obj); err != nil || m.GetUID() != item.uid || m.GetDeletionTimestamp() != nil {
		return err
	}
	if act, err = gc.decide(ctx, item, m); err != nil {
		return err
	}
	logger := gc.logger.With("resource", r.name, "object", item.key())
	switch act.kind {
	case actDropRefs:
		logger.Debug("removing references to deleted owners", "owners", len(act.owners))
		return gc.updateObject(ctx, item, obj, func(m metav1.Object) bool { return removeOwnerRefs(m, act.owners) })
	case actDeleteForeground:
		// The waiting owner must wait for this object's dependents as well: delete it in the
		// foreground. Unblock the owner first, so that it does not wait on this object while
		// this object waits on its own dependents.
		if err := gc.updateObject(ctx, item, obj, func(m metav1.Object) bool { return unblockOwnerRefs(m, act.owners) }); err != nil {
			return err
		}
		return gc.deleteObject(ctx, item, metav1.DeletePropagationForeground)
	case actDelete:
		policy := metav1.DeletePropagationBackground
		switch {
		case hasFinalizer(m, metav1.FinalizerOrphanDependents):
			policy = metav1.DeletePropagationOrphan
		case hasFinalizer(m, metav1.FinalizerDeleteDependents):
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
		for _, ref := range d.obj.GetOwnerReferences() {
			if ref.UID == item.uid && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
				blocking++
			}
		}
		if d.obj.GetDeletionTimestamp() == nil {
			gc.attemptToDelete.Add(d.ref)
		}
	}
	if blocking > 0 {
		// Each dependent's deletion event queues the owner again.
		return nil
	}
	obj, _ := gc.cached(item)
	if obj == nil {
		return nil
	}
	// Dropping the finalizer cannot be undone: confirm on a live read that no blocking
	// dependent exists that the informers have not delivered yet.
	live, err := gc.liveDependents(ctx, item)
	if err != nil {
		return err
	}
	for _, d := range live {
		for _, ref := range d.obj.GetOwnerReferences() {
			if ref.UID == item.uid && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
				blocking++
			}
		}
		if d.obj.GetDeletionTimestamp() == nil {
			gc.attemptToDelete.Add(d.ref)
		}
	}
	if blocking > 0 {
		return fmt.Errorf("%d dependents of %s %s not yet in the cache", blocking, gc.resources[item.res].name, item.key())
	}
	gc.logger.Debug("dependents are gone; removing finalizer", "resource", gc.resources[item.res].name,
		"object", item.key(), "finalizer", metav1.FinalizerDeleteDependents)
	return gc.updateObject(ctx, item, obj, func(m metav1.Object) bool {
		return removeFinalizer(m, metav1.FinalizerDeleteDependents)
	})
}

// orphanDependents serves an owner's orphan finalizer: every dependent loses its reference
// to the owner, then the finalizer goes.
func (gc *GarbageCollector) orphanDependents(ctx context.Context, item objectRef) error {
	obj, m := gc.cached(item)
	if m == nil || m.GetDeletionTimestamp() == nil || !hasFinalizer(m, metav1.FinalizerOrphanDependents) {
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
		depObj := d.live
		if err := gc.updateObject(ctx, d.ref, depObj, func(m metav1.Object) bool {
			return removeOwnerRefs(m, drop)
		}); err != nil {
			return fmt.Errorf("orphaning %s %s: %w", gc.resources[d.ref.res].name, d.ref.key(), err)
		}
		gc.orphaned.Inc()
	}
	gc.logger.Debug("dependents orphaned; removing finalizer", "resource", gc.resources[item.res].name,
		"object", item.key(), "finalizer", metav1.FinalizerOrphanDependents)
	return gc.updateObject(ctx, item, obj, func(m metav1.Object) bool {
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
// with a live GET (and remembered, as UIDs are never reused).
func (gc *GarbageCollector) classifyOwner(ctx context.Context, item objectRef, ref metav1.OwnerReference) (ownerState, error) {
	ownerRes := gc.resourceFor(ref)
	if ownerRes < 0 {
		return ownerSolid, nil // a kind the collector does not serve is never judged
	}
	if gc.knownAbsent(ref.UID) {
		return ownerDangling, nil
	}
	owner := metav1.Object(nil)
	if _, cached := gc.cachedOwner(item.res, item.namespace, ref); cached != nil {
		owner = cached
	} else {
		r := gc.resources[ownerRes]
		ns := ""
		if r.namespaced {
			ns = item.namespace
		}
		obj, err := r.get(ctx, ns, ref.Name)
		switch {
		case apierrors.IsNotFound(err):
			gc.markAbsent(ref.UID)
			return ownerDangling, nil
		case err != nil:
			return ownerSolid, fmt.Errorf("getting owner %s %s: %w", r.kind, ref.Name, err)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return ownerSolid, err
		}
		if m.GetUID() != ref.UID {
			gc.markAbsent(ref.UID)
			return ownerDangling, nil
		}
		owner = m
	}
	if owner.GetDeletionTimestamp() != nil && hasFinalizer(owner, metav1.FinalizerDeleteDependents) {
		return ownerWaiting, nil
	}
	return ownerSolid, nil
}

// cached returns a deep copy of item's object from the informer cache, or nils when it is
// gone or its UID differs.
func (gc *GarbageCollector) cached(item objectRef) (runtime.Object, metav1.Object) {
	obj, exists, err := gc.resources[item.res].informer.GetIndexer().GetByKey(item.key())
	if err != nil || !exists {
		return nil, nil
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, nil
	}
	ro = ro.DeepCopyObject()
	m, err := meta.Accessor(ro)
	if err != nil || m.GetUID() != item.uid {
		return nil, nil
	}
	return ro, m
}

// updateObject applies mutate to obj and writes it; on a conflict it re-reads the object
// live and tries again. mutate returns false when there is nothing to change.
func (gc *GarbageCollector) updateObject(ctx context.Context, item objectRef, obj runtime.Object, mutate func(metav1.Object) bool) error {
	r := gc.resources[item.res]
	for attempt := 0; ; attempt++ {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		if m.GetUID() != item.uid || !mutate(m) {
			return nil
		}
		err = r.update(ctx, obj)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || attempt+1 >= maxUpdateAttempts:
			return fmt.Errorf("updating %s %s: %w", r.name, item.key(), err)
		}
		obj, err = r.get(ctx, item.namespace, item.name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("re-reading %s %s: %w", r.name, item.key(), err)
		}
	}
}

// deleteObject deletes item with a UID precondition, so a new object that took the name is
// never deleted in its place.
func (gc *GarbageCollector) deleteObject(ctx context.Context, item objectRef, policy metav1.DeletionPropagation) error {
	r := gc.resources[item.res]
	uid := item.uid
	err := r.delete(ctx, item.namespace, item.name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: &policy,
	})
	switch {
	case err == nil:
		gc.deletions.WithLabelValues(r.name).Inc()
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // already gone, or the name now belongs to another object
	default:
		return fmt.Errorf("deleting %s %s: %w", r.name, item.key(), err)
	}
}

// liveDependent is a dependent read live from the API server.
type liveDependent struct {
	dependent
	live runtime.Object
}

// liveDependents lists, straight from the API server, the objects in the owner's namespace
// of every served resource that name the owner. Only the irreversible decisions use it.
func (gc *GarbageCollector) liveDependents(ctx context.Context, owner objectRef) ([]liveDependent, error) {
	var out []liveDependent
	for i, r := range gc.resources {
		if r.list == nil {
			continue
		}
		objs, err := r.list(ctx, owner.namespace)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", r.name, err)
		}
		for _, obj := range objs {
			m, err := meta.Accessor(obj)
			if err != nil {
				continue
			}
			for _, ref := range m.GetOwnerReferences() {
				if ref.UID == owner.uid {
					out = append(out, liveDependent{dependent: dependent{ref: gc.ref(i, m), obj: m}, live: obj})
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
	if len(kept) == 0 {
		kept = nil
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
	if len(kept) == 0 {
		kept = nil
	}
	m.SetFinalizers(kept)
	return true
}
