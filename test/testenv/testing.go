package testenv

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

var quietKlog sync.Once

// New starts a control plane for a test in its own temporary directory and on a free
// loopback port, and stops it when the test ends. Logs are discarded unless the test runs
// with -v.
func New(t testing.TB, cfg Config) *Env {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.UnsafeNoFsync = true
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
	}
	// client-go logs through klog, a process-wide logger; tests keep its chatter (such as
	// event writes failing while an environment stops) out of their output.
	quietKlog.Do(func() {
		if !testing.Verbose() {
			klog.SetLogger(logr.Discard())
		}
	})
	env, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(env.Stop)
	return env
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
