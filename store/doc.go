// Package store keeps Kubernetes objects in etcd and launches an embedded etcd member.
//
// The contract is the Store interface: keys are /<prefix>/<resource>/<namespace>/<name>,
// an object's resourceVersion is the etcd mod revision of its key, a list's is the store
// revision it was read at, writes are compare-and-swap on the mod revision, and a watch
// delivers every change after a revision exactly once, in order. Errors are sentinels
// (ErrNotFound, ErrAlreadyExists, ErrConflict, ErrExpired) tested with errors.Is.
//
// Only the apiserver package (and the binary that wires it) imports store: every other
// component sees objects through the Kubernetes API.
package store
