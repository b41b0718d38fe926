package controlplane

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/miniplane/miniplane/configs"
)

// registeredWatchers reads apiserver_registered_watchers from the API server's /metrics.
func registeredWatchers(t *testing.T, cp *ControlPlane) int {
	t.Helper()
	client, err := cp.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	data, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^apiserver_registered_watchers (\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no apiserver_registered_watchers in /metrics")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestComponentsShareInformers: without leader election the controller-manager, the
// scheduler and the stub fleet read Pods and Nodes from one shared cache, so the process
// opens two watches fewer per component that would otherwise keep its own (with leader
// election, each term's fresh factory; the fleet then has its own too). That the shared
// caches serve them all is what every end-to-end test through testenv exercises.
func TestComponentsShareInformers(t *testing.T) {
	watchers := func(t *testing.T, schedulerElects, fleet bool) int {
		cm, sched := configs.DefaultControllerManager(), configs.DefaultScheduler()
		sched.LeaderElection.LeaderElect = schedulerElects
		cm.HealthListen, sched.HealthListen = "", "" // as up runs them
		cfg := Config{DataDir: t.TempDir(), APIServer: apiConfig(t.TempDir()), ControllerManager: &cm, Scheduler: &sched}
		if fleet {
			stub := configs.DefaultKubeletStub()
			stub.Nodes = 2
			cfg.KubeletStub = &stub
		}
		cp := start(t, cfg)
		if shared := cp.informers != nil; shared == schedulerElects {
			t.Fatalf("scheduler electing %v: informers shared %v", schedulerElects, shared)
		}
		if fleet && !cp.Fleet.Ready() {
			t.Fatal("Start returned before the stub nodes registered")
		}
		// The count settles once every informer (and the garbage collector's metadata
		// informers) watches; wait for it to hold still.
		last, stableSince := -1, time.Now()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-cp.Failed():
				t.Fatalf("a component failed: %v", err)
			default:
			}
			n := registeredWatchers(t, cp)
			if n != last {
				last, stableSince = n, time.Now()
			} else if n > 0 && time.Since(stableSince) > 3*time.Second {
				return n
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("watcher count did not settle (last %d)", last)
		return 0
	}
	for _, tc := range []struct {
		name  string
		fleet bool
		fewer int // watches saved by sharing: pods and nodes, per component sharing them
	}{
		{name: "controller-manager and scheduler", fewer: 2},
		{name: "with a stub fleet", fleet: true, fewer: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			separate, shared := watchers(t, true, tc.fleet), watchers(t, false, tc.fleet)
			if separate-shared != tc.fewer {
				t.Errorf("watches: %d with shared informers, %d with the scheduler's own; want %d fewer", shared, separate, tc.fewer)
			}
		})
	}
}
