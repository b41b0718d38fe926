package daemonset

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// benchmarkSteadySync measures one full sync of a DaemonSet that already has its pod on every
// node (the common case during a rollout's status churn): claim, placement for every node,
// rolling-update scan and status, with no writes.
func benchmarkSteadySync(b *testing.B, n int, legacy bool) {
	benchmarkSync(b, n, legacy, func(f *fixture, ds *appsv1.DaemonSet) error { return f.sync(ds) })
}

// benchmarkNoopResync measures the re-sync of a settled DaemonSet whose inputs no informer
// event has changed since (its own status write, an early wake-up, a periodic resync): the
// first sync settles it, the timed ones find nothing new (steady.go).
func benchmarkNoopResync(b *testing.B, n int) {
	benchmarkSync(b, n, false, func(f *fixture, ds *appsv1.DaemonSet) error {
		return f.c.syncDaemonSet(context.Background(), ds.Namespace+"/"+ds.Name)
	})
}

func benchmarkSync(b *testing.B, n int, legacy bool, sync func(*fixture, *appsv1.DaemonSet) error) {
	ds := newDS("web")
	hash := hashOf(ds)
	objs := []runtime.Object{ds, revisionFor(b, ds, 1)}
	for i := range n {
		node := newNode(fmt.Sprintf("node-%d", i))
		objs = append(objs, node, newDaemonPodFor(ds, node.Name, hash, ready(t0.Add(-time.Hour))))
	}
	// Status already correct so no write happens.
	ds.Status.DesiredNumberScheduled = int32(n)
	ds.Status.CurrentNumberScheduled = int32(n)
	ds.Status.NumberReady = int32(n)
	ds.Status.NumberAvailable = int32(n)
	ds.Status.UpdatedNumberScheduled = int32(n)
	ds.Status.ObservedGeneration = 1
	var opts []fixtureOpt
	if legacy {
		opts = append(opts, legacyMode)
	}
	f := newFixture(b, objs, opts...)
	if err := sync(f, ds); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := sync(f, ds); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if got := len(f.client.Actions()); got != 0 {
		b.Fatalf("steady-state sync wrote: %d actions", got)
	}
}

func BenchmarkSteadySync1000(b *testing.B)       { benchmarkSteadySync(b, 1000, false) }
func BenchmarkSteadySync5000(b *testing.B)       { benchmarkSteadySync(b, 5000, false) }
func BenchmarkSteadySync5000Legacy(b *testing.B) { benchmarkSteadySync(b, 5000, true) }
func BenchmarkNoopResync5000(b *testing.B)       { benchmarkNoopResync(b, 5000) }
