// Package poll waits in tests for a condition to hold, checking it often and failing the
// test at a deadline. Tests poll instead of sleeping a fixed time, so they are as fast as the
// system under test and fail with a message instead of hanging.
//
// Only tests import this package: it imports "testing", which the miniplane binary must not
// link (test/imports checks that).
package poll

import (
	"context"
	"testing"
	"time"
)

// Interval is the pause between two checks. It is short because the conditions are cheap
// reads of caches or of a loopback API server.
const Interval = 2 * time.Millisecond

// Until checks cond until it returns true and fails t when timeout passes first, naming what
// it waited for.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilErr(t, timeout, what, func() (bool, error) { return cond(), nil })
}

// UntilErr is Until for conditions that can explain why they do not hold yet: the last
// error returned is part of the failure message.
func UntilErr(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, err := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, err)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(Interval)
	}
}

// Context checks cond until it returns true, ctx ends or timeout passes, and returns how long
// it took. cond gets ctx for its requests and returns a status that describes the state it
// saw; the last one is part of the failure message.
func Context(ctx context.Context, t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	interval := Interval
	for {
		done, status := cond(ctx)
		if done {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after %s: %s", what, timeout, status)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v (last: %s)", what, ctx.Err(), status)
		case <-time.After(interval):
		}
		// Slow conditions (docker commands, requests to several containers) back off to once a
		// second.
		interval = min(2*interval, time.Second)
	}
}
