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

// runner runs Run on a fake clock with a live heap and a floor the test sets, and records
// every setting Run applies.
type runner struct {
	t       *testing.T
	clk     *testingclock.FakeClock
	live    atomic.Uint64
	atLeast atomic.Uint64
	mu      sync.Mutex
	set     []Setting
	cancel  context.CancelFunc
	done    chan struct{}
}

const mi = 1 << 20

func startRunner(t *testing.T, budget uint64, growing bool) *runner {
	r := &runner{t: t, clk: testingclock.NewFakeClock(time.Unix(0, 0)), done: make(chan struct{})}
	r.live.Store(10 * mi)
	opts := Options{Clock: r.clk,
		Read: func() (uint64, uint64) { return r.live.Load(), 0 },
		Set: func(s Setting) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.set = append(r.set, s)
		}}
	if growing {
		opts.AtLeast = r.atLeast.Load
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		Run(ctx, budget, opts)
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *runner) settings() []Setting {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Setting(nil), r.set...)
}

// step sets the live heap and the floor, lets one tick pass and checks every setting so far.
func (r *runner) step(heap, atLeast uint64, want []Setting) {
	r.t.Helper()
	r.live.Store(heap)
	r.atLeast.Store(atLeast)
	deadline := time.Now().Add(10 * time.Second)
	for !r.clk.HasWaiters() {
		if time.Now().After(deadline) {
			r.t.Fatal("Run is not waiting on its ticker")
		}
		time.Sleep(time.Millisecond)
	}
	r.clk.Step(Interval)
	for len(r.settings()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := r.settings(); !slices.Equal(got, want) {
		r.t.Fatalf("after a live heap of %d MiB and a floor of %d MiB: settings %v, want %v", heap/mi, atLeast/mi, got, want)
	}
}

func (r *runner) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.t.Fatal("Run did not return after its context ended")
	}
}

// TestRunFollowsLiveHeap: the setting follows the memory read on each tick, is applied only
// when it changes, and Run stops with its context.
func TestRunFollowsLiveHeap(t *testing.T) {
	r := startRunner(t, 256*mi, false)
	lazy := Setting{MaxPercent, 256 * mi}
	untuned := Setting{MinPercent, NoLimit}
	r.step(10*mi, 0, []Setting{lazy})                           // unchanged: not set again
	r.step(200*mi, 0, []Setting{lazy, untuned})                 // outgrew the budget
	r.step(64*mi, 0, []Setting{lazy, untuned, {300, 256 * mi}}) // (256-64)/64
	r.stop()
}

// TestRunBudgetGrows: with AtLeast the budget is the larger of the two at every tick, so a
// heap that outgrew the fixed budget is held to the grown one, and a floor below the fixed
// budget changes nothing.
func TestRunBudgetGrows(t *testing.T) {
	r := startRunner(t, 256*mi, true)
	r.step(10*mi, 100*mi, []Setting{{MaxPercent, 256 * mi}})
	r.step(200*mi, 100*mi, []Setting{{MaxPercent, 256 * mi}, {MinPercent, NoLimit}})
	r.step(200*mi, 800*mi, []Setting{{MaxPercent, 256 * mi}, {MinPercent, NoLimit}, {300, 800 * mi}}) // (800-200)/200
	r.step(200*mi, 0, []Setting{{MaxPercent, 256 * mi}, {MinPercent, NoLimit}, {300, 800 * mi}, {MinPercent, NoLimit}})
}

// TestRunWithoutBudgetIgnoresFloor: a budget of 0 means no limit, whatever AtLeast says.
func TestRunWithoutBudgetIgnoresFloor(t *testing.T) {
	var set []Setting
	Run(context.Background(), 0, Options{Read: func() (uint64, uint64) { return 1 << 30, 0 },
		Set: func(s Setting) { set = append(set, s) }, AtLeast: func() uint64 { return 4 << 30 }})
	if want := []Setting{{MaxPercent, NoLimit}}; !slices.Equal(set, want) {
		t.Errorf("settings %v, want %v", set, want)
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
