// Package garbagecollector deletes objects whose owners are gone, as kube-controller-manager's
// garbage collector does for the resources miniplane serves (pods, daemonsets,
// controllerrevisions):
//
//   - Background: a dependent whose every owner is gone — confirmed by a live GET by UID, not
//     just the informer cache, so informer lag cannot delete the dependents of a new owner —
//     is deleted.
//   - Foreground: an owner being deleted with the foregroundDeletion finalizer has all its
//     dependents deleted, and the finalizer is removed once no dependent with
//     blockOwnerDeletion remains; the API server then removes the owner.
//   - Orphan: an owner being deleted with the orphan finalizer has its ownerReference removed
//     from every dependent, then the finalizer is removed.
//
// The owner graph is not stored separately: each served informer carries an index from
// owner UID to dependents, which is the graph's edge list.
package garbagecollector
