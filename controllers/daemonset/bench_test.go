package daemonset

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// benchmarkSteadySync measures one full sync of a DaemonSet that already has its pod on every
// node (the common case during a rollout's status churn): claim, placement for every node,
// rolling-update scan and status, with no writes.
func benchmarkSteadySync(b *testing.B, n int, legacy bool) {
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
	b.ResetTimer()
	for b.Loop() {
		if err := f.sync(ds); err != nil {
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
