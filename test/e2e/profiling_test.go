package e2e

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/manager"
	"github.com/miniplane/miniplane/controllers/scheduler"
	"github.com/miniplane/miniplane/test/testenv"
)

// TestComponentProfiling: the controller-manager and the scheduler serve /debug/pprof/ on
// their health listener only when --profiling is on; /healthz either way.
func TestComponentProfiling(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	type run func(ctx context.Context, profiling bool, bound func(net.Addr)) error
	components := map[string]run{
		"controller-manager": func(ctx context.Context, profiling bool, bound func(net.Addr)) error {
			cfg := cpManagerConfig(configs.ControllerGarbageCollector)
			cfg.HealthListen, cfg.Profiling = "127.0.0.1:0", profiling
			return manager.Run(ctx, cfg, manager.RunOptions{RestConfig: env.ConfigFor(testenv.ControllerManagerUser), Logger: cpTestLogger(t), HealthBound: bound})
		},
		"scheduler": func(ctx context.Context, profiling bool, bound func(net.Addr)) error {
			cfg := configs.DefaultScheduler()
			cfg.HealthListen, cfg.Profiling = "127.0.0.1:0", profiling
			return scheduler.Run(ctx, cfg, scheduler.RunOptions{RestConfig: env.ConfigFor(testenv.SchedulerUser), Logger: cpTestLogger(t), HealthBound: bound})
		},
	}
	for name, start := range components {
		for _, profiling := range []bool{false, true} {
			addr := make(chan string, 1)
			cpRun(t, name, func(ctx context.Context) error {
				return start(ctx, profiling, func(a net.Addr) { addr <- a.String() })
			})
			var base string
			select {
			case base = <-addr:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not open its health listener", name)
			}
			want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[profiling]
			for path, code := range map[string]int{"/healthz": http.StatusOK, "/debug/pprof/": want, "/debug/pprof/heap": want} {
				resp, err := http.Get("http://" + base + path)
				if err != nil {
					t.Fatalf("%s %s: %v", name, path, err)
				}
				resp.Body.Close()
				if resp.StatusCode != code {
					t.Errorf("%s with --profiling=%v: %s answered %d, want %d", name, profiling, path, resp.StatusCode, code)
				}
			}
		}
	}
}
