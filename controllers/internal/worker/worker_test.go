package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/miniplane/miniplane/internal/poll"
)

// TestRun: a failing item comes back until it syncs, with its requeue count growing, and is
// then forgotten; an item that fails after the context is done is not requeued; Run returns
// once the queue is shut down.
func TestRun(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	var synced, failures []string
	var requeues []int
	left := map[string]int{"flaky": 2} // fails this many times, then syncs
	syncItem := func(_ context.Context, item string) error {
		mu.Lock()
		defer mu.Unlock()
		synced = append(synced, item)
		if item == "late" {
			cancel() // the controller stops while this sync fails
			return errors.New("stopping")
		}
		if left[item] > 0 {
			left[item]--
			return errors.New("not yet")
		}
		return nil
	}
	failed := func(item string, n int, _ error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, item)
		requeues = append(requeues, n)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, q, syncItem, failed)
	}()

	q.Add("steady")
	q.Add("flaky")
	count := func(item string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range synced {
			if s == item {
				n++
			}
		}
		return n
	}
	poll.Until(t, 10*time.Second, "steady synced once and flaky three times", func() bool {
		return count("steady") == 1 && count("flaky") == 3
	})
	q.Add("late")
	poll.Until(t, 10*time.Second, "late synced", func() bool { return count("late") == 1 })
	q.ShutDownWithDrain()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the queue was shut down")
	}
	// Shut down and drained: every sync has returned and been accounted for.
	if q.NumRequeues("flaky") != 0 {
		t.Errorf("flaky synced, but the rate limiter still counts %d requeues", q.NumRequeues("flaky"))
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(failures, []string{"flaky", "flaky"}) || !slices.Equal(requeues, []int{1, 2}) {
		t.Errorf("failures %v with requeue counts %v, want flaky twice, counted 1 and 2 (and nothing for late, which failed after its context ended)", failures, requeues)
	}
	if q.NumRequeues("late") != 0 {
		t.Errorf("late failed after the context ended and was requeued")
	}
}
