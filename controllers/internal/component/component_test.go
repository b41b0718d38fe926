package component

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/miniplane/miniplane/configs"
)

// TestHealthProfiling: /debug/pprof/ is served only with Profiling, since the health
// listener has no authentication.
func TestHealthProfiling(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		h := NewHealth()
		h.Profiling = profiling
		srv := httptest.NewServer(h.Handler())
		want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[profiling]
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s with Profiling %v: %d, want %d", path, profiling, resp.StatusCode, want)
			}
			if profiling && path == "/debug/pprof/goroutine?debug=1" && !strings.HasPrefix(string(body), "goroutine profile:") {
				t.Errorf("%s: %.40q", path, body)
			}
		}
		srv.Close()
	}
}

func TestHealthEndpoints(t *testing.T) {
	h := NewHealth()
	ready := atomic.Bool{}
	h.AddLiveness(Check{Name: "ping", Check: func(*http.Request) error { return nil }})
	h.AddReadiness(Check{Name: "synced", Check: func(*http.Request) error {
		if !ready.Load() {
			return errors.New("not yet")
		}
		return nil
	}})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "term_counter_total", Help: "h"})
	h.NewTermRegistry().MustRegister(c)
	c.Inc()
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		path     string
		ready    bool
		code     int
		contains string
	}{
		{"/healthz", false, 200, "ok"},
		{"/readyz", false, 500, "[-]synced failed: not yet"},
		{"/readyz", true, 200, "ok"},
		{"/readyz?verbose", true, 200, "[+]ping ok\n[+]synced ok\nok"},
		{"/metrics", true, 200, "term_counter_total 1"},
		{"/metrics", true, 200, "go_goroutines"},
	}
	for _, tt := range tests {
		ready.Store(tt.ready)
		code, body := get(tt.path)
		if code != tt.code || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s (ready=%v) = %d %q, want %d containing %q", tt.path, tt.ready, code, body, tt.code, tt.contains)
		}
	}
	// A new term replaces the previous term's metrics.
	h.NewTermRegistry()
	if _, body := get("/metrics"); strings.Contains(body, "term_counter_total") {
		t.Error("previous term's metrics still served")
	}
}

// Two candidates: one leads at a time, and the lease is released only after the leader's
// work has returned, so the successor never overlaps it.
func TestRunElectedHandsOverWithoutOverlap(t *testing.T) {
	client := fake.NewClientset()
	var leading atomic.Int32
	var overlap atomic.Bool
	release := make(chan struct{}) // holds the first leader's shutdown until the test says so
	var releaseOnce sync.Once
	started := make(chan string, 4)
	type candidate struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(identity string) candidate {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			cfg := configs.LeaderElection{LeaderElect: true, ResourceNamespace: "kube-system", ResourceName: "test",
				LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
			err := RunElected(ctx, cfg, Election{Client: client, Identity: identity, Logger: slog.New(slog.DiscardHandler)}, func(ctx context.Context) {
				if leading.Add(1) > 1 {
					overlap.Store(true)
				}
				started <- identity
				<-ctx.Done()
				<-release
				leading.Add(-1)
			})
			if err != nil {
				t.Errorf("%s: %v", identity, err)
			}
		}()
		return candidate{cancel: cancel, done: done}
	}
	candidates := map[string]candidate{"a": start("a"), "b": start("b")}
	defer func() {
		releaseOnce.Do(func() { close(release) })
		for _, c := range candidates {
			c.cancel()
			<-c.done
		}
	}()
	var first string
	select {
	case first = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody acquired the lease")
	}
	second := "a"
	if first == "a" {
		second = "b"
	}
	candidates[first].cancel()
	// The first leader is still shutting down: the lease must not be released yet.
	select {
	case who := <-started:
		t.Fatalf("%s started leading while %s was still stopping", who, first)
	case <-time.After(500 * time.Millisecond):
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case who := <-started:
		if who != second {
			t.Fatalf("%s leads, want %s", who, second)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the released lease was not taken over promptly")
	}
	if overlap.Load() {
		t.Fatal("two candidates led at once")
	}
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "test", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != second {
		t.Fatalf("lease = %+v, %v", l, err)
	}
}

func TestRunElectedValidates(t *testing.T) {
	valid := configs.DefaultLeaderElection("test")
	valid.LeaderElect = true
	noName := valid
	noName.ResourceName = ""
	tests := []struct {
		name    string
		cfg     configs.LeaderElection
		e       Election
		wantErr string
	}{
		{name: "no client", cfg: valid, wantErr: "Client"},
		{name: "no lease name", cfg: noName, e: Election{Client: fake.NewClientset()}, wantErr: "resource-name"},
		{name: "zero configuration", e: Election{Client: fake.NewClientset()}, wantErr: "must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RunElected(context.Background(), tt.cfg, tt.e, func(context.Context) { t.Error("lead ran") })
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("RunElected = %v, want an error about %s", err, tt.wantErr)
			}
		})
	}
}
