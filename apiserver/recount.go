package apiserver

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// recountLoop recomputes something per namespace (quota usage, disruption budgets) from
// the watch caches whenever anything in the namespace changes. Changes only mark a
// namespace; the loop recounts marked namespaces at most every recountInterval, so that
// a burst of writes (a rollout over thousands of nodes) costs a few recounts, not one
// per write.
type recountLoop struct {
	name    string
	log     *slog.Logger
	recount func(ctx context.Context, namespace string) error
	kick    chan struct{}

	mu    sync.Mutex
	dirty map[string]bool
}

// recountInterval bounds how often one loop recounts.
const recountInterval = 50 * time.Millisecond

func newRecountLoop(name string, log *slog.Logger, recount func(ctx context.Context, namespace string) error) *recountLoop {
	return &recountLoop{name: name, log: log, recount: recount, kick: make(chan struct{}, 1), dirty: map[string]bool{}}
}

// changed marks namespace for a recount. It is called for every change the watch caches
// see, so it must stay cheap.
func (l *recountLoop) changed(namespace string) {
	if l == nil || namespace == "" {
		return
	}
	l.mu.Lock()
	l.dirty[namespace] = true
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run recounts marked namespaces until ctx ends; a failed recount is retried.
func (l *recountLoop) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-tick.C:
		}
		l.mu.Lock()
		dirty := l.dirty
		l.dirty = map[string]bool{}
		l.mu.Unlock()
		for ns := range dirty {
			if err := l.recount(ctx, ns); err != nil && ctx.Err() == nil {
				l.log.Warn("recount failed", "loop", l.name, "namespace", ns, "err", err)
				l.changed(ns)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(recountInterval):
		}
	}
}
