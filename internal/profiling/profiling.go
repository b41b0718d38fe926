// Package profiling serves Go's runtime profiles (net/http/pprof) under /debug/pprof/, for
// the API server and for the components' health listeners. Who may reach them is the
// server's decision: the API server serves them to administrators only, the components
// only when their --profiling option is on.
package profiling

import (
	"net/http"
	"net/http/pprof"
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
