package component

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/miniplane/miniplane/internal/profiling"
)

// Check is a named health check; a nil error means healthy.
type Check struct {
	Name  string
	Check func(*http.Request) error
}

// Health is the /healthz, /readyz and /metrics endpoint of one component. Liveness checks
// run on /healthz and /readyz; readiness checks only on /readyz.
type Health struct {
	mu        sync.RWMutex
	liveness  []Check
	readiness []Check
	term      *prometheus.Registry
	// Registry holds the component's metrics; it starts with the Go and process collectors.
	Registry *prometheus.Registry
	// Profiling adds Go's profiles under /debug/pprof/ to Handler. The endpoint has no
	// authentication, so components set it only when their --profiling option is on.
	Profiling bool
}

// NewTermRegistry returns a fresh registry whose metrics /metrics serves beside Registry's,
// replacing the previous term's. Controllers rebuilt each time leadership is acquired
// register here, so that a second term does not collide with the first one's collectors.
func (h *Health) NewTermRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.term = reg
	return reg
}

// Gather implements prometheus.Gatherer over Registry and the current term registry.
func (h *Health) Gather() ([]*dto.MetricFamily, error) {
	h.mu.RLock()
	gs := prometheus.Gatherers{h.Registry}
	if h.term != nil {
		gs = append(gs, h.term)
	}
	h.mu.RUnlock()
	return gs.Gather()
}

// NewHealth returns an endpoint with no checks and a fresh metrics registry.
func NewHealth() *Health {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Health{Registry: reg}
}

// AddLiveness adds checks to /healthz (and /readyz).
func (h *Health) AddLiveness(checks ...Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.liveness = append(h.liveness, checks...)
}

// AddReadiness adds checks to /readyz only.
func (h *Health) AddReadiness(checks ...Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readiness = append(h.readiness, checks...)
}

// Handler serves /healthz, /readyz (each with ?verbose, like the Kubernetes components) and
// /metrics, and with Profiling /debug/pprof/.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, false) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, true) })
	mux.Handle("/metrics", promhttp.HandlerFor(h, promhttp.HandlerOpts{}))
	if h.Profiling {
		mux.Handle(profiling.Path, profiling.Handler())
	}
	return mux
}

func (h *Health) serve(w http.ResponseWriter, r *http.Request, ready bool) {
	h.mu.RLock()
	checks := append([]Check(nil), h.liveness...)
	if ready {
		checks = append(checks, h.readiness...)
	}
	h.mu.RUnlock()
	failed := false
	var report []byte
	for _, c := range checks {
		if err := c.Check(r); err != nil {
			failed = true
			report = fmt.Appendf(report, "[-]%s failed: %v\n", c.Name, err)
		} else {
			report = fmt.Appendf(report, "[+]%s ok\n", c.Name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if failed {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write(report)
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		_, _ = w.Write(report)
	}
	_, _ = w.Write([]byte("ok"))
}

// Serve listens on addr and serves Handler until ctx is cancelled. The bound address (useful
// with port 0) is sent to bound, when not nil, once listening.
func (h *Health) Serve(ctx context.Context, addr string, logger *slog.Logger, bound func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health listener: %w", err)
	}
	if bound != nil {
		bound(ln.Addr())
	}
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	logger.Info("serving health and metrics", "addr", ln.Addr().String(), "profiling", h.Profiling)
	err = srv.Serve(ln)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
