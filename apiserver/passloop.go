package apiserver

import (
	"context"
	"time"
)

// passRetry is how long a passLoop waits before trying again after a failed pass; a
// trigger in the meantime tries at once.
const passRetry = time.Second

// passLoop runs a controller inside the API server that recomputes the whole of what it
// keeps (every aggregated ClusterRole, every APIService's availability) in one pass, from
// the watch caches, whenever something it reads changes. Triggers that come while a pass
// runs fold into one more pass.
type passLoop struct {
	s    *Server
	what string // for the log: what a failed pass did not update
	pass func(ctx context.Context) error
	kick chan struct{}
}

func newPassLoop(s *Server, what string, pass func(ctx context.Context) error) *passLoop {
	return &passLoop{s: s, what: what, pass: pass, kick: make(chan struct{}, 1)}
}

// trigger asks for a pass; it never blocks (caches call it under their lock).
func (l *passLoop) trigger() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run makes one pass at once and one after every trigger, until ctx ends.
func (l *passLoop) run(ctx context.Context) {
	l.trigger()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		}
		if err := l.pass(ctx); err != nil && ctx.Err() == nil {
			l.s.log.Warn(l.what+" not updated", "err", err)
			go func() {
				select {
				case <-ctx.Done():
				case <-l.s.clock.After(passRetry):
					l.trigger()
				}
			}()
		}
	}
}
