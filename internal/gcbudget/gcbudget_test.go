package gcbudget

import (
	"context"
	"runtime"
	"runtime/debug"
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

func TestTune(t *testing.T) {
	const mi = 1 << 20
	tests := []struct {
		name                string
		live, other, budget uint64
		want                Setting
	}{
		{"no budget", 100 * mi, 20 * mi, 0, Setting{MaxPercent, NoLimit}},
		{"nothing live yet", 0, 10 * mi, 256 * mi, Setting{MaxPercent, 256 * mi}},
		{"small heap: lazy, limit unreached", 10 * mi, 20 * mi, 256 * mi, Setting{MaxPercent, 256 * mi}},
		{"heap goal is what the rest leaves", 80 * mi, 16 * mi, 256 * mi, Setting{200, 256 * mi}},
		{"half the heap's share: Go's default, no limit", 120 * mi, 16 * mi, 256 * mi, Setting{MinPercent, NoLimit}},
		{"live beyond the budget", 1024 * mi, 40 * mi, 256 * mi, Setting{MinPercent, NoLimit}},
		{"the rest alone fills the budget", 10 * mi, 300 * mi, 256 * mi, Setting{MinPercent, NoLimit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Tune(tt.live, tt.other, tt.budget); got != tt.want {
				t.Errorf("Tune(%d MiB, %d MiB, %d MiB) = %+v, want %+v", tt.live/mi, tt.other/mi, tt.budget/mi, got, tt.want)
			}
		})
	}
}

// TestRunFollowsLiveHeap: the setting follows the memory read on each tick, is applied only
// when it changes, and Run stops with its context.
func TestRunFollowsLiveHeap(t *testing.T) {
	const mi = 1 << 20
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	var live atomic.Uint64
	live.Store(10 * mi)
	var mu sync.Mutex
	var set []Setting
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, 256*mi, Options{Clock: clk,
			Read: func() (uint64, uint64) { return live.Load(), 0 },
			Set: func(s Setting) {
				mu.Lock()
				defer mu.Unlock()
				set = append(set, s)
			}})
	}()
	settings := func() []Setting {
		mu.Lock()
		defer mu.Unlock()
		return append([]Setting(nil), set...)
	}
	step := func(heap uint64, want []Setting) {
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
	lazy := Setting{MaxPercent, 256 * mi}
	untuned := Setting{MinPercent, NoLimit}
	step(10*mi, []Setting{lazy})                           // unchanged: not set again
	step(200*mi, []Setting{lazy, untuned})                 // outgrew the budget
	step(64*mi, []Setting{lazy, untuned, {300, 256 * mi}}) // (256-64)/64
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestRunWithoutBudget sets the lazy collector once, without a limit, and returns.
func TestRunWithoutBudget(t *testing.T) {
	var set []Setting
	Run(context.Background(), 0, Options{Read: func() (uint64, uint64) { return 1 << 30, 0 }, Set: func(s Setting) { set = append(set, s) }})
	if want := []Setting{{MaxPercent, NoLimit}}; !slices.Equal(set, want) {
		t.Errorf("settings %v, want %v", set, want)
	}
}

func TestReadMemory(t *testing.T) {
	keep := make([]byte, 8<<20)
	runtime.GC() // the live heap is what the last collection found
	live, other := readMemory()
	if live < uint64(len(keep)) {
		t.Errorf("live heap read as %d bytes with %d held", live, len(keep))
	}
	// Goroutine stacks and the runtime's metadata are always there, and are not heap.
	if other == 0 || other >= live+uint64(len(keep)) {
		t.Errorf("memory besides the heap read as %d bytes (live heap %d)", other, live)
	}
	runtime.KeepAlive(keep)
}

// TestApply: a setting reaches the runtime.
func TestApply(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	apply(Setting{Percent: 250, Limit: 300 << 20})
	if got := debug.SetGCPercent(100); got != 250 {
		t.Errorf("GOGC %d after applying 250", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("memory limit %d after applying %d", got, 300<<20)
	}
}
