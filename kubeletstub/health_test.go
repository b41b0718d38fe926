package kubeletstub

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/miniplane/miniplane/configs"
)

// TestServeHealthProfiling: the health listener serves /debug/pprof/ only when the fleet's
// Profiling option is on, and its health and metrics endpoints either way.
func TestServeHealthProfiling(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[profiling], func(t *testing.T) {
			cfg := configs.DefaultKubeletStub()
			cfg.NodeName = "n1"
			cfg.HealthListen = "127.0.0.1:0"
			cfg.Profiling = profiling
			f, err := New(cfg, Options{Client: fake.NewClientset(), Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr, err := f.ServeHealth(ctx, cfg.HealthListen, prometheus.NewRegistry(), quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			get := func(path string) (int, string) {
				t.Helper()
				resp, err := http.Get("http://" + addr.String() + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			if code, _ := get("/healthz"); code != http.StatusOK {
				t.Errorf("/healthz: %d", code)
			}
			wantCode := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[profiling]
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
				code, body := get(path)
				if code != wantCode {
					t.Errorf("%s with profiling %v: %d, want %d", path, profiling, code, wantCode)
				}
				if profiling && path == "/debug/pprof/goroutine?debug=1" && !strings.HasPrefix(body, "goroutine profile:") {
					t.Errorf("%s: %.40q", path, body)
				}
			}
		})
	}
}
