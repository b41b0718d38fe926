package apiserver

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

const (
	// progressRequestGap is the least time between two progress requests of one cache.
	// Reads that start within it share one request; it bounds what a storm of reads costs
	// etcd (one small message and one reply per gap) while adding at most a couple of
	// milliseconds to any of them.
	progressRequestGap = 2 * time.Millisecond
	// progressRetryInterval is how often the request is repeated while reads still wait.
	// etcd drops a request while a watch on the stream is not in step with the store: a
	// watch opened at a revision already written (etcd's sync loop catches it up within
	// 100ms), or one whose client fell behind under load. Changes then move the cache on by
	// themselves; the repeat covers a backlog that ends with no further change of this
	// resource. kube-apiserver repeats every 100ms; a read here waits for one of these
	// retries at most, so a shorter one keeps the worst case to tens of milliseconds.
	progressRetryInterval = 25 * time.Millisecond
)

// progressRequester asks the store for progress reports of one cache's watch while reads
// wait for a revision the cache has not reached, and never otherwise: an idle server
// sends etcd nothing. A read that starts waiting gets a request sent after it arrived
// (so the report covers the revision it waits for) within progressRequestGap.
type progressRequester struct {
	request func(context.Context) error
	clock   clock.Clock
	log     *slog.Logger

	mu      sync.Mutex
	waiting int
	// wake tells run that a read started waiting. One buffered slot is enough: reads
	// that arrive before run takes it are all covered by the next request.
	wake chan struct{}
}

func newProgressRequester(request func(context.Context) error, clk clock.Clock, log *slog.Logger) *progressRequester {
	return &progressRequester{request: request, clock: clk, log: log, wake: make(chan struct{}, 1)}
}

// add registers a waiting read; it must be paired with done.
func (p *progressRequester) add() {
	p.mu.Lock()
	p.waiting++
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// done unregisters a read that stopped waiting.
func (p *progressRequester) done() {
	p.mu.Lock()
	p.waiting--
	p.mu.Unlock()
}

func (p *progressRequester) pending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting > 0
}

// run sends the requests until ctx ends: one as soon as a read starts waiting (at most
// one per progressRequestGap), then one every progressRetryInterval while any still waits.
func (p *progressRequester) run(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		for p.pending() {
			if !last.IsZero() {
				if gap := progressRequestGap - p.clock.Since(last); gap > 0 && !p.sleep(ctx, gap) {
					return
				}
			}
			last = p.clock.Now()
			if err := p.request(ctx); err != nil && ctx.Err() == nil {
				p.log.Debug("progress request failed", "err", err)
			}
			retry := p.clock.NewTimer(progressRetryInterval)
			select {
			case <-ctx.Done():
				retry.Stop()
				return
			case <-p.wake: // a read arrived after the request: its revision may be newer
			case <-retry.C():
			}
			retry.Stop()
		}
	}
}

// sleep waits d on the requester's clock; it returns false if ctx ended first.
func (p *progressRequester) sleep(ctx context.Context, d time.Duration) bool {
	t := p.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
