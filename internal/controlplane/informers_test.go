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

// TestComponentsShareInformers: without leader election the controller-manager and the
// scheduler read Pods and Nodes from one shared cache, so the process opens two watches
// fewer than when the scheduler keeps its own (with leader election, each term's fresh
// factory). That the shared caches serve both is what every end-to-end test through
// testenv exercises.
func TestComponentsShareInformers(t *testing.T) {
	watchers := func(schedulerElects bool) int {
		cm, sched := configs.DefaultControllerManager(), configs.DefaultScheduler()
		sched.LeaderElection.LeaderElect = schedulerElects
		cm.HealthListen, sched.HealthListen = "", "" // as up runs them
		cp := start(t, Config{DataDir: t.TempDir(), APIServer: apiConfig(t.TempDir()), ControllerManager: &cm, Scheduler: &sched})
		if shared := cp.informers != nil; shared == schedulerElects {
			t.Fatalf("scheduler electing %v: informers shared %v", schedulerElects, shared)
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
	separate, shared := watchers(true), watchers(false)
	if separate-shared != 2 {
		t.Errorf("watches: %d with shared informers, %d with the scheduler's own; want 2 fewer (pods, nodes)", shared, separate)
	}
}
