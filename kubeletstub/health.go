package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/miniplane/miniplane/internal/profiling"
)

// ServeHealth serves liveness (/healthz: the process answers), readiness (/readyz: every node
// is registered and heartbeating), the metrics of gatherer (/metrics) and, when the fleet's
// Profiling option is on, Go's profiles (/debug/pprof/) on addr until ctx ends. It returns once the listener is open, with the address it got (port 0 picks one);
// a later failure of the server is logged.
func (f *Fleet) ServeHealth(ctx context.Context, addr string, gatherer prometheus.Gatherer, log *slog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !f.Ready() {
			http.Error(w, "stub nodes are not all registered and heartbeating yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	if f.cfg.Profiling {
		// Opt-in: the listener has no authentication.
		mux.Handle(profiling.Path, profiling.Handler())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("kubeletstub health server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	log.Info("kubeletstub health endpoints listening", "addr", ln.Addr().String(), "profiling", f.cfg.Profiling)
	return ln.Addr(), nil
}
