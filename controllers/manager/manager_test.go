package manager

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
)

func TestRunRejectsBadConfiguration(t *testing.T) {
	bad := configs.DefaultControllerManager()
	bad.Controllers = []string{"replicaset"}
	zeroGC := configs.DefaultControllerManager()
	zeroGC.GarbageCollector = configs.GarbageCollectorController{}
	rc := &rest.Config{Host: "http://127.0.0.1:1"}
	tests := []struct {
		name string
		cfg  configs.ControllerManager
		rc   *rest.Config
	}{
		{name: "unknown controller", cfg: bad, rc: rc},
		{name: "zero garbage collector section", cfg: zeroGC, rc: rc},
		{name: "zero configuration", rc: rc},
		{name: "no rest config", cfg: configs.DefaultControllerManager()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Run(context.Background(), tt.cfg, RunOptions{RestConfig: tt.rc, Logger: slog.New(slog.DiscardHandler)}); err == nil {
				t.Fatal("Run accepted a bad configuration")
			}
		})
	}
}

// Against an API server that never answers, the manager is alive but not ready, and it
// stops when its context is cancelled.
func TestHealthWhileInformersCannotSync(t *testing.T) {
	cfg := configs.DefaultControllerManager()
	cfg.HealthListen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, RunOptions{
			RestConfig:  &rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second},
			Logger:      slog.New(slog.DiscardHandler),
			HealthBound: func(a net.Addr) { addr <- a.String() },
		})
	}()
	base := "http://" + <-addr
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := status("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	poll.Until(t, 5*time.Second, "/readyz to fail while the controllers cannot sync", func() bool {
		return status("/readyz") == http.StatusInternalServerError
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
}

// The garbage collector is handed the typed informers of the enabled controllers only:
// asking the factory for others would make it cache objects nobody else needs, typed.
func TestSharedWithGC(t *testing.T) {
	all := []string{"configmaps", "controllerrevisions", "daemonsets", "leases", "namespaces", "nodes", "pods"}
	tests := []struct {
		controllers []string
		want        []string
	}{
		{controllers: []string{"*"}, want: all},
		{controllers: []string{"garbagecollector"}, want: nil},
		{controllers: []string{"garbagecollector", "nodelifecycle"}, want: []string{"leases", "nodes", "pods"}},
		{controllers: []string{"*", "-nodelifecycle"}, want: []string{"configmaps", "controllerrevisions", "daemonsets", "namespaces", "nodes", "pods"}},
		{controllers: []string{"garbagecollector", "root-ca-cert-publisher"}, want: []string{"configmaps", "namespaces"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.controllers, ","), func(t *testing.T) {
			cfg := configs.DefaultControllerManager()
			cfg.Controllers = tt.controllers
			factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
			var got []string
			for gvr, inf := range sharedWithGC(cfg, factory) {
				if inf == nil {
					t.Fatalf("%s: nil informer", gvr)
				}
				got = append(got, gvr.Resource)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("shared = %v, want %v", got, tt.want)
			}
		})
	}
	// They are the factory's own informers, those the other controllers get: the same cache.
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	shared := sharedWithGC(configs.DefaultControllerManager(), factory)
	if shared[corev1.SchemeGroupVersion.WithResource("pods")].GetIndexer() != factory.Core().V1().Pods().Informer().GetIndexer() {
		t.Fatal("the shared pod informer is not the factory's")
	}
}
