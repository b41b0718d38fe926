// Package garbagecollector deletes objects whose owners are gone, as kube-controller-manager's
// garbage collector does, for every resource the API server serves — custom resources
// included, as they come and go:
//
//   - Background: a dependent whose every owner is gone — confirmed by a live GET by UID, not
//     just the informer cache, so informer lag cannot delete the dependents of a new owner —
//     is deleted.
//   - Foreground: an owner being deleted with the foregroundDeletion finalizer has all its
//     dependents deleted (those with dependents of their own in the foreground too, so that
//     a chain goes bottom-up), and the finalizer is removed once no dependent with
//     blockOwnerDeletion remains; the API server then removes the owner.
//   - Orphan: an owner being deleted with the orphan finalizer has its ownerReference removed
//     from every dependent, then the finalizer is removed.
//
// The resources come from discovery: every one that supports list, watch and delete, except
// the ignored ones (events by default), is watched through an informer of object metadata
// (or through the typed informer another controller already runs for it), and discovery is
// read again every period, and at once when a CRD or an APIService changes, to watch new
// resources and stop watching those that went. Writes go through the metadata client:
// deletes with a UID precondition, and JSON merge patches of ownerReferences and finalizers
// with uid and resourceVersion preconditions, so no typed client is needed.
//
// The owner graph is not stored separately: each watched informer carries an index from
// owner UID to dependents, which is the graph's edge list. See docs/garbage-collector.md.
package garbagecollector
