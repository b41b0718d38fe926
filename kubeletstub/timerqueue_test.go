package kubeletstub

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/internal/poll"
)

// get takes the next key off q within a deadline, or reports that none came.
func get[T comparable](t *testing.T, q *timerQueue[T]) (T, bool) {
	t.Helper()
	got := make(chan T, 1)
	go func() {
		if k, quit := q.Get(); !quit {
			q.Done(k)
			got <- k
		}
	}()
	select {
	case k := <-got:
		return k, true
	case <-time.After(5 * time.Second):
		var zero T
		return zero, false
	}
}

func TestTimerQueueOrderAndDeduplication(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	q := newTimerQueue[string](clk)
	q.start()
	defer q.ShutDown()
	q.AddAfter("a", 5*time.Second)
	q.AddAfter("b", 2*time.Second)
	q.AddAfter("a", time.Second) // the earlier deadline wins
	q.AddAfter("b", 9*time.Second)
	q.AddAfter("now", 0)
	if k, ok := get(t, q); !ok || k != "now" {
		t.Fatalf("first key = %q, %v; want now", k, ok)
	}
	if q.Len() != 0 {
		t.Fatalf("%d keys ready before their time", q.Len())
	}
	for _, want := range []string{"a", "b"} {
		clk.Step(time.Second)
		if k, ok := get(t, q); !ok || k != want {
			t.Fatalf("at t0+%s got %q, %v; want %s", clk.Now().Sub(t0), k, ok, want)
		}
	}
	clk.Step(time.Minute)
	poll.Until(t, waitTimeout, "nothing else is released", func() bool { return q.Len() == 0 })
	if n := len(q.index); n != 0 {
		t.Errorf("%d keys still waiting, want none: each key waits once", n)
	}
}

// TestTimerQueueSurvivesClockJumps steps the clock right after each AddAfter, racing the
// timer goroutine as tests do; every key must still be released by its step.
func TestTimerQueueSurvivesClockJumps(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	q := newTimerQueue[int](clk)
	q.start()
	defer q.ShutDown()
	for i := range 300 {
		q.AddAfter(i, time.Second)
		q.AddAfter(-1, time.Hour) // keeps the goroutine arming timers
		clk.Step(time.Second)
		if k, ok := get(t, q); !ok || k != i {
			t.Fatalf("iteration %d: got %d, %v", i, k, ok)
		}
	}
}

func TestTimerQueueShutDown(t *testing.T) {
	q := newTimerQueue[string](testingclock.NewFakeClock(t0))
	q.start()
	q.AddAfter("later", time.Hour)
	q.ShutDown()
	if _, quit := q.Get(); !quit {
		t.Errorf("Get after ShutDown did not report quit")
	}
	q.AddAfter("ignored", time.Second) // must not panic or block
}

// TestTimerQueueWakesForNewEarliest: since keys added behind the earliest no longer wake the
// timer goroutine, a key that becomes the earliest (new, or an old one moved forward) must:
// it is released on time only if the goroutine re-armed its timer for it.
func TestTimerQueueWakesForNewEarliest(t *testing.T) {
	for _, moved := range []bool{false, true} {
		clk := testingclock.NewFakeClock(t0)
		q := newTimerQueue[string](clk)
		q.start()
		q.AddAfter("first", 10*time.Second)
		// The goroutine sleeps on the timer for "first" before anything else comes.
		poll.Until(t, waitTimeout, "timer armed", clk.HasWaiters)
		for _, k := range []string{"x", "y", "z"} {
			q.AddAfter(k, time.Hour) // behind "first"
		}
		if moved {
			q.AddAfter("z", time.Second) // z moves to the front of the heap
		} else {
			q.AddAfter("new", time.Second)
		}
		want := map[bool]string{false: "new", true: "z"}[moved]
		// Released only if the goroutine was woken to arm a timer for 1 s: the one for
		// "first" does not fire at this step.
		clk.Step(time.Second)
		if k, ok := get(t, q); !ok || k != want {
			t.Fatalf("moved=%v: got %q, %v; want %s", moved, k, ok, want)
		}
		q.ShutDown()
	}
}
