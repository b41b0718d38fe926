package garbagecollector

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The owner graph is not a structure of its own: every watched resource's informer indexes
// its objects by the UIDs in their ownerReferences (ownerUIDIndex), and those indexes are the
// graph's edges, owner → dependents. An owner is found from a dependent by its
// ownerReference: the kind names the resource (from discovery), the dependent's namespace and
// the name give the cache key, and the UID must match.

// ownerUIDIndex indexes objects by the UIDs in their ownerReferences. The name is qualified
// because shared informers carry other controllers' indexes too.
const ownerUIDIndex = "miniplane.io/garbagecollector-owner-uid"

// indexByOwnerUID is the ownerUIDIndex function.
func indexByOwnerUID(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	refs := m.GetOwnerReferences()
	if len(refs) == 0 {
		return nil, nil
	}
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = string(r.UID)
	}
	return out, nil
}

// objectRef identifies one object of a watched resource; it is the work queues' item.
type objectRef struct {
	resource  schema.GroupVersionResource
	namespace string
	name      string
	uid       types.UID
}

func (r objectRef) key() string {
	if r.namespace == "" {
		return r.name
	}
	return r.namespace + "/" + r.name
}

func refTo(gvr schema.GroupVersionResource, m metav1.Object) objectRef {
	return objectRef{resource: gvr, namespace: m.GetNamespace(), name: m.GetName(), uid: m.GetUID()}
}

// groupKindOf returns the group and kind an ownerReference points to ("apps/v1" → "apps").
func groupKindOf(ref metav1.OwnerReference) schema.GroupKind {
	group := ""
	if i := strings.Index(ref.APIVersion, "/"); i >= 0 {
		group = ref.APIVersion[:i]
	}
	return schema.GroupKind{Group: group, Kind: ref.Kind}
}

// dependent is a cached object that names some owner UID.
type dependent struct {
	ref objectRef
	obj metav1.Object
}

// dependents lists the cached objects of every watched resource that name owner uid.
func (gc *GarbageCollector) dependents(uid types.UID) []dependent {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	var out []dependent
	for gvr, m := range gc.monitors {
		objs, err := m.informer.GetIndexer().ByIndex(ownerUIDIndex, string(uid))
		if err != nil {
			continue
		}
		for _, obj := range objs {
			if a, err := meta.Accessor(obj); err == nil {
				out = append(out, dependent{ref: refTo(gvr, a), obj: a})
			}
		}
	}
	return out
}

// cachedOwner returns the owner ref points to as cached (with the same UID), or nil when it
// is not in a cache: not watched, not delivered yet, gone or replaced.
func (gc *GarbageCollector) cachedOwner(namespace string, ref metav1.OwnerReference) (objectRef, metav1.Object) {
	res, ok := gc.kindFor(groupKindOf(ref))
	if !ok || (res.namespaced && namespace == "") {
		return objectRef{}, nil
	}
	key := ref.Name
	if res.namespaced {
		key = namespace + "/" + ref.Name
	}
	gc.mu.RLock()
	m := gc.monitors[res.gvr]
	gc.mu.RUnlock()
	if m == nil {
		return objectRef{}, nil
	}
	obj, exists, err := m.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return objectRef{}, nil
	}
	a, err := meta.Accessor(obj)
	if err != nil || a.GetUID() != ref.UID {
		return objectRef{}, nil
	}
	return refTo(res.gvr, a), a
}

// cached returns a copy of item's metadata from its informer cache, or nil when it is gone,
// replaced by another object of the same name, or its resource is no longer watched. Only
// the metadata is copied, also from typed shared informers: it is all the collector needs.
func (gc *GarbageCollector) cached(item objectRef) *metav1.PartialObjectMetadata {
	gc.mu.RLock()
	m := gc.monitors[item.resource]
	gc.mu.RUnlock()
	if m == nil {
		return nil
	}
	obj, exists, err := m.informer.GetIndexer().GetByKey(item.key())
	if err != nil || !exists {
		return nil
	}
	a, err := meta.Accessor(obj)
	if err != nil || a.GetUID() != item.uid {
		return nil
	}
	return meta.AsPartialObjectMetadata(a).DeepCopy()
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

// park remembers that item names an owner of kind gk, which discovery does not list: the
// owner cannot be judged, so item is checked again when the kind appears.
func (gc *GarbageCollector) park(item objectRef, gk schema.GroupKind) {
	gc.parkedMu.Lock()
	defer gc.parkedMu.Unlock()
	if gc.parked[gk] == nil {
		gc.parked[gk] = map[objectRef]struct{}{}
	}
	gc.parked[gk][item] = struct{}{}
}

// unpark forgets item (deleted) wherever it waits for a kind.
func (gc *GarbageCollector) unpark(item objectRef, refs []metav1.OwnerReference) {
	gc.parkedMu.Lock()
	defer gc.parkedMu.Unlock()
	for _, ref := range refs {
		gk := groupKindOf(ref)
		if waiting := gc.parked[gk]; waiting != nil {
			delete(waiting, item)
			if len(waiting) == 0 {
				delete(gc.parked, gk)
			}
		}
	}
}

// releaseParked queues again the objects that wait for any of kinds, which discovery now
// lists.
func (gc *GarbageCollector) releaseParked(kinds []schema.GroupKind) {
	gc.parkedMu.Lock()
	defer gc.parkedMu.Unlock()
	for _, gk := range kinds {
		for item := range gc.parked[gk] {
			gc.attemptToDelete.Add(item)
		}
		delete(gc.parked, gk)
	}
}

func hasFinalizer(m metav1.Object, finalizer string) bool {
	for _, f := range m.GetFinalizers() {
		if f == finalizer {
			return true
		}
	}
	return false
}
