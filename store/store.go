package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Sentinel errors. Every error the store returns for these conditions wraps one of them,
// so callers test with errors.Is and map them to an HTTP status in one place.
var (
	// ErrNotFound: no object at the key.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: Create found an object at the key.
	ErrAlreadyExists = errors.New("already exists")
	// ErrConflict: a resourceVersion or uid precondition did not hold.
	ErrConflict = errors.New("conflict")
	// ErrExpired: the requested revision has been compacted away.
	ErrExpired = errors.New("resource version expired")
	// ErrInvalidObject: the object cannot be stored as given (e.g. resourceVersion set on create).
	ErrInvalidObject = errors.New("invalid object")
)

// Error carries the key and a human message alongside the sentinel it wraps.
type Error struct {
	// Err is one of the sentinels above.
	Err error
	// Key is the etcd key concerned, if any.
	Key string
	// Message is what a user should read.
	Message string
	// Continue, on an ErrExpired answer to a paginated list, resumes the list from where
	// the expired token left off at the newest revision: an inconsistent list, as
	// kube-apiserver offers one.
	Continue string
}

func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("%s: %s", e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func newError(sentinel error, key, format string, args ...any) error {
	return &Error{Err: sentinel, Key: key, Message: fmt.Sprintf(format, args...)}
}

// Preconditions must hold for a Delete (or an update) to go ahead; nil fields are not checked.
type Preconditions struct {
	UID             *types.UID
	ResourceVersion *string
}

// Check returns an ErrConflict error when obj does not satisfy p.
func (p *Preconditions) Check(key string, obj runtime.Object) error {
	if p == nil {
		return nil
	}
	uid, rv, err := uidAndRV(obj)
	if err != nil {
		return err
	}
	if p.UID != nil && *p.UID != uid {
		return newError(ErrConflict, key, "Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, uid)
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != rv {
		return newError(ErrConflict, key, "Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, rv)
	}
	return nil
}

// UpdateFunc computes the next state of an object from its current one. It may modify cur,
// which is its own copy, and may return it.
// Returning a nil object (and nil error) deletes the key instead; returning an error aborts
// the update with that error.
type UpdateFunc func(cur runtime.Object) (next runtime.Object, err error)

// UpdateOptions tune GuaranteedUpdate.
type UpdateOptions struct {
	// TTL, when positive, makes the stored object expire after about that long.
	TTL time.Duration
	// Suggestion is a recent copy of the current object (for example from a watch cache).
	// The first attempt uses it instead of reading etcd; a stale suggestion costs one retry.
	// It is only read, never modified, so it may be shared.
	Suggestion runtime.Object
}

// ListOptions select a page of a list.
type ListOptions struct {
	// Revision reads at that store revision; 0 reads the latest.
	Revision int64
	// Limit caps the number of items returned; 0 means no limit.
	Limit int64
	// Continue resumes a paginated list from the token a previous page returned.
	Continue string
	// Predicate keeps only the objects it returns true for; nil keeps all.
	Predicate func(runtime.Object) bool
}

// ListResult is one page of a list.
type ListResult struct {
	Items []runtime.Object
	// Revision is the store revision the list was read at: its resourceVersion.
	Revision int64
	// Continue is the token for the next page, empty on the last page.
	Continue string
	// RemainingItemCount estimates the keys after this page when a Predicate was not used.
	RemainingItemCount *int64
}

// EventType says what happened to a key.
type EventType string

// Event types. Progress carries no object: it reports that the watch has seen every
// change up to Revision.
const (
	Added      EventType = "ADDED"
	Modified   EventType = "MODIFIED"
	Deleted    EventType = "DELETED"
	Progress   EventType = "PROGRESS"
	ErrorEvent EventType = "ERROR"
)

// Event is one change seen by Watch.
type Event struct {
	Type EventType
	Key  string
	// Object is the new state; nil for Deleted. A watcher that needs the last state of a
	// deleted key keeps it from the events before, as the API server's watch cache does:
	// reading it back would cost etcd a read of its backend for every event.
	Object runtime.Object
	// Revision is the store revision of the change.
	Revision int64
	// Err is set for Error events; the channel closes right after one.
	Err error
}

// Store is the storage contract the API server builds on.
type Store interface {
	// Create stores obj at key and returns obj itself, its resourceVersion set. It fails with
	// ErrAlreadyExists if key exists and ErrInvalidObject if obj has a resourceVersion.
	// A positive ttl makes the object expire after about that long.
	Create(ctx context.Context, key string, obj runtime.Object, ttl time.Duration) (runtime.Object, error)
	// Get returns the object at key with its resourceVersion, or ErrNotFound.
	Get(ctx context.Context, key string) (runtime.Object, error)
	// List returns the objects whose keys start with prefix (which should end in "/"),
	// in key order. It fails with ErrExpired when the revision (or the continue token's)
	// has been compacted.
	List(ctx context.Context, prefix string, opts ListOptions) (*ListResult, error)
	// GuaranteedUpdate reads key, applies tryUpdate and writes the result only if the key
	// has not changed since the read (compare-and-swap on its mod revision), retrying from
	// a fresh read otherwise. It fails with ErrNotFound if key does not exist. It returns
	// the object tryUpdate returned, its resourceVersion set; an update that produces
	// identical bytes writes nothing and keeps the current resourceVersion.
	GuaranteedUpdate(ctx context.Context, key string, tryUpdate UpdateFunc, opts UpdateOptions) (runtime.Object, error)
	// Delete removes key if preconditions hold, after validate (if not nil) accepts the
	// current object, and returns the last state. It fails with ErrNotFound or ErrConflict.
	Delete(ctx context.Context, key string, preconditions *Preconditions, validate func(cur runtime.Object) error) (runtime.Object, error)
	// Watch streams every change under prefix with a revision greater than fromRevision,
	// exactly once and in order, until ctx ends. A compacted fromRevision yields one
	// Error event wrapping ErrExpired. Progress events report the revision reached: every
	// change under prefix up to that revision has been sent before the Progress event.
	// They come unasked now and then, and soon after RequestProgress for prefix.
	Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan Event, error)
	// RequestProgress asks the open watches of exactly prefix to report a Progress event
	// at the store's current revision, so that a watcher whose prefix has not changed
	// lately learns within milliseconds that it is up to date. The request may go
	// unanswered while a watch of prefix still has older changes to deliver (those
	// changes then tell the watcher of its progress), so a caller waiting for a revision
	// asks again until it is reached. Watches of other prefixes are not affected, and
	// without an open watch of prefix the request does nothing.
	RequestProgress(ctx context.Context, prefix string) error
	// CurrentRevision returns the store's latest revision, read with quorum.
	CurrentRevision(ctx context.Context) (int64, error)
	// Count returns the number of keys under prefix.
	Count(ctx context.Context, prefix string) (int64, error)
}
