package apiserver

import (
	"context"
	"runtime/pprof"
	"sync"

	"github.com/miniplane/miniplane/internal/profiling"
)

// requestLabels gives each request's goroutine profiler labels naming what it serves, so that
// a CPU profile of the server (or of `miniplane up`) says which requests the time went to:
// `go tool pprof -tags` lists the shares of each resource and verb, `-tagfocus
// resource=leases.coordination.k8s.io` keeps one. The labelled contexts are made once per
// resource, subresource and verb and reused, so labelling a request allocates nothing.
type requestLabels struct {
	base   context.Context // only the component label: what a goroutine goes back to
	byKind sync.Map        // requestLabelKey → context.Context
}

type requestLabelKey struct {
	res       *resource
	sub, verb string
}

func newRequestLabels() *requestLabels {
	return &requestLabels{base: pprof.WithLabels(context.Background(), pprof.Labels(profiling.ComponentLabel, "apiserver"))}
}

// set labels the calling goroutine for info; reset takes the request labels off again, for
// a connection's goroutine that goes on to read the next request (HTTP/1.1).
func (l *requestLabels) set(info *requestInfo) {
	key := requestLabelKey{res: info.res, sub: info.subresource, verb: info.verb}
	ctx, ok := l.byKind.Load(key)
	if !ok {
		resource := info.res.name
		if info.res.group != "" {
			resource += "." + info.res.group
		}
		if info.subresource != "" {
			resource += "/" + info.subresource
		}
		ctx, _ = l.byKind.LoadOrStore(key, pprof.WithLabels(l.base, pprof.Labels("resource", resource, "verb", info.verb)))
	}
	pprof.SetGoroutineLabels(ctx.(context.Context))
}

func (l *requestLabels) reset() { pprof.SetGoroutineLabels(l.base) }
