package gcbudget

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestPercent(t *testing.T) {
	const mi = 1 << 20
	tests := []struct {
		name         string
		live, budget uint64
		want         int
	}{
		{"no budget", 100 * mi, 0, MaxPercent},
		{"nothing live yet", 0, 256 * mi, MaxPercent},
		{"small heap: lazy", 10 * mi, 256 * mi, MaxPercent},
		{"goal exactly the budget", 64 * mi, 320 * mi, 400},
		{"between", 100 * mi, 350 * mi, 250},
		{"half the budget: Go's default", 128 * mi, 256 * mi, MinPercent},
		{"above half: never below Go's default", 200 * mi, 256 * mi, MinPercent},
		{"live beyond the budget", 1024 * mi, 256 * mi, MinPercent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percent(tt.live, tt.budget); got != tt.want {
				t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", tt.live/mi, tt.budget/mi, got, tt.want)
			}
		})
	}
}

// TestRunFollowsLiveHeap: the percent follows the live heap on each tick, is set only when
// it changes, and Run stops with its context.
func TestRunFollowsLiveHeap(t *testing.T) {
	const mi = 1 << 20
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	var live atomic.Uint64
	live.Store(10 * mi)
	var mu sync.Mutex
	var set []int
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, 256*mi, Options{Clock: clk, LiveHeap: live.Load, SetPercent: func(p int) {
			mu.Lock()
			defer mu.Unlock()
			set = append(set, p)
		}})
	}()
	settings := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), set...)
	}
	step := func(heap uint64, want []int) {
		t.Helper()
		live.Store(heap)
		deadline := time.Now().Add(10 * time.Second)
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("Run is not waiting on its ticker")
			}
			time.Sleep(time.Millisecond)
		}
		clk.Step(Interval)
		for len(settings()) < len(want) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := settings(); !slices.Equal(got, want) {
			t.Fatalf("after a live heap of %d MiB: settings %v, want %v", heap/mi, got, want)
		}
	}
	step(10*mi, []int{MaxPercent})                  // unchanged: not set again
	step(200*mi, []int{MaxPercent, MinPercent})     // outgrew the budget
	step(64*mi, []int{MaxPercent, MinPercent, 300}) // (256-64)/64
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestRunWithoutBudget sets the lazy collector once and returns.
func TestRunWithoutBudget(t *testing.T) {
	var set []int
	Run(context.Background(), 0, Options{LiveHeap: func() uint64 { return 1 << 30 }, SetPercent: func(p int) { set = append(set, p) }})
	if !slices.Equal(set, []int{MaxPercent}) {
		t.Errorf("settings %v, want [%d]", set, MaxPercent)
	}
}

func TestReadLiveHeap(t *testing.T) {
	keep := make([]byte, 8<<20)
	runtime.GC() // the metric is what the last collection found
	if got := readLiveHeap(); got == 0 {
		t.Errorf("live heap read as 0 with %d bytes held", len(keep))
	}
	_ = keep[0]
}
