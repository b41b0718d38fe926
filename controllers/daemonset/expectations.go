package daemonset

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// expectations remembers, per DaemonSet key, how many pod creations the controller issued and
// which pods it asked to delete, that its informer has not yet shown
// (docs/daemonset-controller.md#expectations). A sync that acts while its own writes are still
// in flight would act twice on a stale cache, so syncs only manage pods once nothing is
// outstanding. A record older than ttl counts as satisfied so that a lost watch event cannot
// wedge a DaemonSet forever.
//
// Deletions are tracked by pod name, not counted. A deletion is observed several times (when
// the deletionTimestamp appears, on later updates of the terminating pod, and at its final
// removal), and those observations can arrive after the next round of deletions was issued.
// Counted, a late one would stand in for a deletion not yet seen, and a rolling update would
// act on a cache that still shows that pod available.
type expectations struct {
	clock clock.PassiveClock
	ttl   time.Duration

	mu      sync.Mutex
	records map[string]*expectation
}

// expectation is one DaemonSet's outstanding creations (add, which may go negative) and the
// names of the pods whose deletion it has yet to observe.
type expectation struct {
	add      int64
	deleting map[string]struct{}
	at       time.Time
}

func newExpectations(c clock.PassiveClock, ttl time.Duration) *expectations {
	return &expectations{clock: c, ttl: ttl, records: map[string]*expectation{}}
}

// Set replaces key's record with add creations and the deletion of the named pods,
// timestamped now.
func (e *expectations) Set(key string, add int, deleting []string) {
	r := &expectation{add: int64(add), at: e.clock.Now()}
	if len(deleting) > 0 {
		r.deleting = make(map[string]struct{}, len(deleting))
		for _, name := range deleting {
			r.deleting[name] = struct{}{}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records[key] = r
}

// LowerCreations takes n creations off key's record; a missing record is left missing.
func (e *expectations) LowerCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.records[key]; ok {
		r.add -= int64(n)
	}
}

// CreationObserved records that one expected creation happened (or will never happen).
func (e *expectations) CreationObserved(key string) { e.LowerCreations(key, 1) }

// DeletionObserved records that the named pod's deletion happened (or will never happen). The
// deletion of a pod the record does not wait for changes nothing.
func (e *expectations) DeletionObserved(key, pod string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.records[key]; ok {
		delete(r.deleting, pod)
	}
}

// Satisfied reports whether key may act: no record, no creation or deletion outstanding, or
// the record expired.
func (e *expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records[key]
	if !ok {
		return true
	}
	if r.add <= 0 && len(r.deleting) == 0 {
		return true
	}
	return e.clock.Since(r.at) > e.ttl
}

// Delete forgets key's record.
func (e *expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.records, key)
}

// get returns key's outstanding creations and deletions (for tests and logs).
func (e *expectations) get(key string) (add, del int64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records[key]
	if !ok {
		return 0, 0, false
	}
	return r.add, int64(len(r.deleting)), true
}
