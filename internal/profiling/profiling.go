// Package profiling serves Go's runtime profiles (net/http/pprof) under /debug/pprof/, for
// the API server and for the components' health listeners. Who may reach them is the
// server's decision: the API server serves them to administrators only, the components
// only when their --profiling option is on.
package profiling

import (
	"context"
	"net/http"
	"net/http/pprof"
	runtimepprof "runtime/pprof"
)

// Path is where the profiles are served; every URL under it belongs to Handler.
const Path = "/debug/pprof/"

// Handler serves the profile index at Path and, under it, every runtime profile (heap,
// goroutine, allocs, block, mutex, threadcreate), the CPU profile (profile?seconds=N), the
// execution trace (trace?seconds=N), the command line (cmdline) and symbol lookup (symbol).
func Handler() http.Handler {
	mux := http.NewServeMux()
	// Index answers the index page and, for any other name under Path, that profile.
	mux.HandleFunc(Path, pprof.Index)
	mux.HandleFunc(Path+"cmdline", pprof.Cmdline)
	mux.HandleFunc(Path+"profile", pprof.Profile)
	mux.HandleFunc(Path+"symbol", pprof.Symbol)
	mux.HandleFunc(Path+"trace", pprof.Trace)
	return mux
}

// ComponentLabel is the profiler label naming the part of a process a goroutine works for.
// Where several components share one process (miniplane up), a CPU or goroutine profile is
// split by it: `go tool pprof -tags` for the shares, `-tagfocus component=scheduler` for one.
const ComponentLabel = "component"

// Component runs f with the calling goroutine labelled as working for component. Labels are
// inherited, so every goroutine f starts, and every goroutine those start, carries the label
// too: a component's informers, workers and client connections are counted as its own.
func Component(ctx context.Context, component string, f func(context.Context)) {
	runtimepprof.Do(ctx, runtimepprof.Labels(ComponentLabel, component), f)
}
