package kubeletstub

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// timerQueue is a work queue with AddAfter: a FIFO work queue (client-go's, so processing
// and de-duplication semantics are the usual ones) fed by one goroutine that keeps the
// delayed keys in a heap and sleeps on one timer until the earliest is due. Thousands of
// nodes' periodic jobs therefore cost a heap entry each, not a goroutine or a ticker.
//
// It replaces client-go's delaying queue for one reason: that queue reads the clock, then
// creates its timer from the difference, so a fake clock stepped in between pushes the
// deadline out by the step and a test waits forever. This loop re-reads the clock after
// arming the timer and arms it again if the clock jumped meanwhile.
type timerQueue[T comparable] struct {
	workqueue.TypedInterface[T]
	clock clock.WithTicker

	mu      sync.Mutex
	waiting timerHeap[T]
	index   map[T]*timerEntry[T]
	wake    chan struct{}
	stop    chan struct{}
	once    sync.Once
	started sync.Once
}

var _ workqueue.TypedDelayingInterface[string] = (*timerQueue[string])(nil)

// rearmAfterClockMove is how far the clock may move while a timer is armed before the
// timer is armed again: far above the microseconds a real clock moves in between (so it
// does not spin), far below the steps tests give a fake clock.
const rearmAfterClockMove = time.Millisecond

type timerEntry[T comparable] struct {
	key     T
	readyAt time.Time
	pos     int
}

// newTimerQueue returns a queue whose timers run once start is called; ShutDown stops them.
// Keys added before start wait in the heap.
func newTimerQueue[T comparable](clk clock.WithTicker) *timerQueue[T] {
	q := &timerQueue[T]{
		TypedInterface: workqueue.NewTyped[T](),
		clock:          clk,
		index:          map[T]*timerEntry[T]{},
		wake:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
	}
	return q
}

// start runs the timer goroutine until ShutDown; calls after the first do nothing.
func (q *timerQueue[T]) start() {
	q.started.Do(func() { go q.loop() })
}

// AddAfter adds key once delay has passed. A key already waiting keeps the earlier of its
// two deadlines.
func (q *timerQueue[T]) AddAfter(key T, delay time.Duration) {
	if delay <= 0 {
		q.Add(key)
		return
	}
	q.AddAt(key, q.clock.Now().Add(delay))
}

// AddAt adds key at readyAt (at once if that has passed). Callers that computed a deadline
// use it rather than AddAfter so that a clock moving in between cannot shift it.
func (q *timerQueue[T]) AddAt(key T, readyAt time.Time) {
	if q.ShuttingDown() {
		return
	}
	if !q.clock.Now().Before(readyAt) {
		q.Add(key)
		return
	}
	q.mu.Lock()
	e, ok := q.index[key]
	switch {
	case !ok:
		e = &timerEntry[T]{key: key, readyAt: readyAt}
		heap.Push(&q.waiting, e)
		q.index[key] = e
	case readyAt.Before(e.readyAt):
		e.readyAt = readyAt
		heap.Fix(&q.waiting, e.pos)
	}
	// The loop's timer is armed for the earliest deadline, so only a key that became the
	// earliest needs it woken. A fleet re-adds each node's next heartbeat as it sends one,
	// always behind the others: waking for those was one timer re-armed per heartbeat.
	earliest := q.waiting[0] == e
	q.mu.Unlock()
	if earliest {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// ShutDown stops the timer goroutine and the work queue.
func (q *timerQueue[T]) ShutDown() {
	q.once.Do(func() { close(q.stop) })
	q.TypedInterface.ShutDown()
}

// ShutDownWithDrain stops the timer goroutine and drains the work queue.
func (q *timerQueue[T]) ShutDownWithDrain() {
	q.once.Do(func() { close(q.stop) })
	q.TypedInterface.ShutDownWithDrain()
}

func (q *timerQueue[T]) loop() {
	for {
		next, ok := q.releaseDue()
		var fire <-chan time.Time
		var timer clock.Timer
		if ok {
			armedAt := q.clock.Now()
			if !next.After(armedAt) {
				// Due already: the clock moved since releaseDue looked. A timer for a past
				// instant would wait for the next move of a fake clock, so release it now.
				continue
			}
			timer = q.clock.NewTimer(next.Sub(armedAt))
			if q.clock.Since(armedAt) > rearmAfterClockMove {
				// The clock jumped while the timer was armed, so its deadline may be
				// late by the jump: arm it again.
				timer.Stop()
				continue
			}
			fire = timer.C()
		}
		select {
		case <-q.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		case <-q.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// releaseDue moves every due key to the work queue and returns the next deadline.
func (q *timerQueue[T]) releaseDue() (time.Time, bool) {
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.waiting.Len() > 0 {
		e := q.waiting[0]
		if e.readyAt.After(now) {
			return e.readyAt, true
		}
		heap.Pop(&q.waiting)
		delete(q.index, e.key)
		q.Add(e.key)
	}
	return time.Time{}, false
}

// timerHeap orders entries by deadline.
type timerHeap[T comparable] []*timerEntry[T]

func (h timerHeap[T]) Len() int           { return len(h) }
func (h timerHeap[T]) Less(i, j int) bool { return h[i].readyAt.Before(h[j].readyAt) }
func (h timerHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *timerHeap[T]) Push(x any) {
	e := x.(*timerEntry[T])
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *timerHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
