package apiserver

import (
	"context"
	"runtime/pprof"
	"runtime/trace"
	"sync"

	"github.com/miniplane/miniplane/internal/profiling"
)

// requestLabels gives each request's goroutine profiler labels naming what it serves, so that
// a CPU profile of the server (or of `miniplane up`) says which requests the time went to:
// `go tool pprof -tags` lists the shares of each resource and verb, `-tagfocus
// resource=leases.coordination.k8s.io` keeps one. The labelled contexts are made once per
// resource, subresource and verb and reused, so labelling a request allocates nothing.
//
// The same names mark each request as a region of an execution trace (/debug/pprof/trace), so
// that `go tool trace` breaks the latency of each kind of request into running, waiting for
// a CPU and waiting on etcd (docs/performance.md, "Profiles of one process"). While no trace
// is being taken a region costs one check.
type requestLabels struct {
	base   context.Context // only the component label: what a goroutine goes back to
	byKind sync.Map        // requestLabelKey → *requestKind
}

// requestKind is what one kind of request is labelled and traced as.
type requestKind struct {
	ctx  context.Context // the base labels plus resource and verb
	name string          // "verb resource[/subresource]", the trace region's type
}

type requestLabelKey struct {
	res       *resource
	sub, verb string
}

func newRequestLabels() *requestLabels {
	return &requestLabels{base: pprof.WithLabels(context.Background(), pprof.Labels(profiling.ComponentLabel, "apiserver"))}
}

// set labels the calling goroutine for info and starts its trace region; end ends the region
// and takes the request labels off again, for a connection's goroutine that goes on to read
// the next request (HTTP/1.1).
func (l *requestLabels) set(ctx context.Context, info *requestInfo) *trace.Region {
	key := requestLabelKey{res: info.res, sub: info.subresource, verb: info.verb}
	kind, ok := l.byKind.Load(key)
	if !ok {
		resource := info.res.name
		if info.res.group != "" {
			resource += "." + info.res.group
		}
		if info.subresource != "" {
			resource += "/" + info.subresource
		}
		kind, _ = l.byKind.LoadOrStore(key, &requestKind{
			ctx:  pprof.WithLabels(l.base, pprof.Labels("resource", resource, "verb", info.verb)),
			name: info.verb + " " + resource,
		})
	}
	k := kind.(*requestKind)
	pprof.SetGoroutineLabels(k.ctx)
	return trace.StartRegion(ctx, k.name)
}

func (l *requestLabels) end(region *trace.Region) {
	region.End()
	pprof.SetGoroutineLabels(l.base)
}
