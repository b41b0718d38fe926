package daemonset

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// expectations remembers, per DaemonSet key, how many pod creations and deletions the
// controller issued but has not yet seen through its informer
// (docs/daemonset-controller.md#expectations). A sync that acts while its own writes are still
// in flight would act twice on a stale cache, so syncs only manage pods once the counts drop to
// zero. A record older than ttl counts as satisfied so that a lost watch event cannot wedge a
// DaemonSet forever.
type expectations struct {
	clock clock.PassiveClock
	ttl   time.Duration

	mu      sync.Mutex
	records map[string]*expectation
}

// expectation is one DaemonSet's outstanding creations (add) and deletions (del). Either may
// go negative: a pod's deletionTimestamp and its final removal are both observed as deletions.
type expectation struct {
	add, del int64
	at       time.Time
}

func newExpectations(c clock.PassiveClock, ttl time.Duration) *expectations {
	return &expectations{clock: c, ttl: ttl, records: map[string]*expectation{}}
}

// Set replaces key's record with add creations and del deletions, timestamped now.
func (e *expectations) Set(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records[key] = &expectation{add: int64(add), del: int64(del), at: e.clock.Now()}
}

// Lower decrements key's counts by add and del; a missing record is left missing.
func (e *expectations) Lower(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.records[key]; ok {
		r.add -= int64(add)
		r.del -= int64(del)
	}
}

// CreationObserved records that one expected creation happened (or will never happen).
func (e *expectations) CreationObserved(key string) { e.Lower(key, 1, 0) }

// DeletionObserved records that one expected deletion happened (or will never happen).
func (e *expectations) DeletionObserved(key string) { e.Lower(key, 0, 1) }

// Satisfied reports whether key may act: no record, both counts ≤ 0, or the record expired.
func (e *expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records[key]
	if !ok {
		return true
	}
	if r.add <= 0 && r.del <= 0 {
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

// get returns key's counts (for tests and logs).
func (e *expectations) get(key string) (add, del int64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records[key]
	if !ok {
		return 0, 0, false
	}
	return r.add, r.del, true
}
