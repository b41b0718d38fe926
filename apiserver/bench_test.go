package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedv1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/miniplane/miniplane/test/testenv"
)

// benchWatchers is the fan-out the issue asks about: a thousand kubelets watching.
const benchWatchers = 1000

// BenchmarkPodCreate measures pod creation through the API with client-go, from many
// goroutines sharing one clientset as controllers do.
func BenchmarkPodCreate(b *testing.B) {
	env := testenv.New(b, testenv.Config{})
	pods := env.Client.CoreV1().Pods("default")
	ctx := context.Background()
	parallelClients(b, "pods/s", func(seq int64) error {
		_, err := pods.Create(ctx, podOn("default", fmt.Sprintf("bench-%d", seq), ""), metav1.CreateOptions{})
		return err
	})
}

// parallelClients runs op from eight goroutines a core, sharing one clientset as the
// controllers and the fleet do, and reports the operations a second in unit. seq counts the
// operations from 1.
func parallelClients(b *testing.B, unit string, op func(seq int64) error) {
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(seq.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkWatchFanOut measures events delivered per second to 1,000 concurrent watchers of
// all pods: every pod created reaches every watcher. An iteration is one pod; the clock
// stops when the last watcher has its last event.
func BenchmarkWatchFanOut(b *testing.B) {
	benchmarkFanOut(b, func(int) metav1.ListOptions { return metav1.ListOptions{} }, func(int) string { return "" }, benchWatchers)
}

// BenchmarkWatchFanOutRaw is BenchmarkWatchFanOut with watchers that count frames instead
// of decoding them, so that the figure is the server's (and TLS's) cost alone: with
// client-go, decoding in the same process dominates.
func BenchmarkWatchFanOutRaw(b *testing.B) {
	env := testenv.New(b, testenv.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := env.Client.CoreV1().Pods("default")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	transports := make([]*http.Transport, 8)
	for i := range transports {
		raw := newRawClient(b, env)
		tr := raw.http.Transport.(*http.Transport)
		tr.ForceAttemptHTTP2 = true
		transports[i] = tr
	}
	expected := int64(b.N * benchWatchers)
	var delivered atomic.Int64
	done := make(chan struct{})
	var closeOnce sync.Once
	var wg sync.WaitGroup
	path := env.URL + podsPath + "?watch=true&resourceVersion=" + list.ResourceVersion
	for w := 0; w < benchWatchers; w++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+env.Token(testenv.AdminUser))
		resp, err := transports[w%len(transports)].RoundTrip(req)
		if err != nil {
			b.Fatalf("watcher %d: %v", w, err)
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			b.Fatalf("watcher %d: %s over %s", w, resp.Status, resp.Proto)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if delivered.Add(1) == expected {
					closeOnce.Do(func() { close(done) })
				}
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	b.ResetTimer()
	createPods(ctx, b, pods, func(int) string { return "" })
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("delivered %d of %d events", delivered.Load(), expected)
	}
	b.StopTimer()
	b.ReportMetric(float64(expected)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(benchWatchers, "watchers")
}

// BenchmarkWatchFanOutPerNode is the kubelet pattern: each of 1,000 watchers selects the
// pods of its own node (spec.nodeName), and each pod created goes to one of them.
func BenchmarkWatchFanOutPerNode(b *testing.B) {
	benchmarkFanOut(b,
		func(w int) metav1.ListOptions {
			return metav1.ListOptions{FieldSelector: "spec.nodeName=node-" + fmt.Sprint(w)}
		},
		func(i int) string { return "node-" + fmt.Sprint(i%benchWatchers) },
		1)
}

// benchmarkFanOut starts benchWatchers watches with the options selectorFor gives, creates
// b.N pods on the nodes nodeFor gives from 8 writers, and waits until every watcher has
// received what it selects: each pod reaches perPod watchers.
func benchmarkFanOut(b *testing.B, selectorFor func(w int) metav1.ListOptions, nodeFor func(i int) string, perPod int) {
	env := testenv.New(b, testenv.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := env.Client.CoreV1().Pods("default")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}

	// Several clientsets with their own connections, as separate kubelets would have.
	// client-go shares one transport between equal configs; a Proxy function makes a
	// config uncacheable (loopback is never proxied, so it changes nothing else).
	clients := make([]kubernetes.Interface, 8)
	for i := range clients {
		cfg := env.ConfigFor(testenv.AdminUser)
		cfg.UserAgent = fmt.Sprintf("bench-watcher-%d", i)
		cfg.Proxy = http.ProxyFromEnvironment
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}

	expected := int64(b.N * perPod)
	var delivered atomic.Int64
	done := make(chan struct{})
	var closeOnce sync.Once
	var stopping atomic.Bool
	var wg sync.WaitGroup
	watchers := make([]watch.Interface, benchWatchers)
	for w := range watchers {
		opts := selectorFor(w)
		opts.ResourceVersion = list.ResourceVersion
		watcher, err := clients[w%len(clients)].CoreV1().Pods("default").Watch(ctx, opts)
		if err != nil {
			b.Fatalf("watcher %d: %v", w, err)
		}
		watchers[w] = watcher
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range watcher.ResultChan() {
				if ev.Type == watch.Error {
					if !stopping.Load() { // stopping a watch may surface as an error event
						b.Errorf("watch error: %v", ev.Object)
					}
					return
				}
				if delivered.Add(1) == expected {
					closeOnce.Do(func() { close(done) })
				}
			}
		}()
	}
	defer func() {
		stopping.Store(true)
		for _, w := range watchers {
			w.Stop()
		}
		wg.Wait()
	}()

	b.ResetTimer()
	createPods(ctx, b, pods, nodeFor)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("delivered %d of %d events", delivered.Load(), expected)
	}
	b.StopTimer()
	b.ReportMetric(float64(expected)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(benchWatchers, "watchers")
}

// createPods creates b.N pods, on the nodes nodeFor names, from 8 concurrent writers.
func createPods(ctx context.Context, b *testing.B, pods typedv1.PodInterface, nodeFor func(i int) string) {
	const writers = 8
	var next atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if _, err := pods.Create(ctx, podOn("default", fmt.Sprintf("fan-%d", i), nodeFor(i)), metav1.CreateOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkLeaseRenew measures a node's lease renewal as a stub fleet (or a kubelet) sends
// it: an UPDATE of the Lease it last got back, with only renewTime changed, from many
// goroutines sharing one clientset. It is the write a fleet sends most (one per node every
// 10 s), so its CPU and allocations are a floor under any rollout at scale.
func BenchmarkLeaseRenew(b *testing.B) {
	env := testenv.New(b, testenv.Config{UnsafeNoFsync: true})
	leases := env.Client.CoordinationV1().Leases("kube-node-lease")
	ctx := context.Background()
	const nodes = 256
	held := make([]*coordinationv1.Lease, nodes)
	locks := make([]sync.Mutex, nodes)
	for i := range held {
		holder, seconds := fmt.Sprintf("node-%d", i), int32(40)
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: holder},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &now},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		l.ManagedFields = nil // as the fleet keeps it
		held[i] = l
	}
	parallelClients(b, "renewals/s", func(seq int64) error {
		i := int(seq) % nodes
		locks[i].Lock()
		defer locks[i].Unlock()
		l := held[i].DeepCopy()
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		got.ManagedFields = nil
		held[i] = got
		return nil
	})
}

// BenchmarkPodLifecycleWrites measures the writes a daemon pod goes through after its
// create, as the scheduler, the DaemonSet controller and the kubelet send them: the binding,
// the graceful delete (which only marks it), and the kubelet's final delete. An operation is
// all three, on a pod created before the clock starts.
func BenchmarkPodLifecycleWrites(b *testing.B) {
	env := testenv.New(b, testenv.Config{UnsafeNoFsync: true})
	pods := env.Client.CoreV1().Pods("default")
	ctx := context.Background()
	const ready = 4096 // created in advance; b.N beyond that creates as it goes
	for i := range ready {
		if _, err := pods.Create(ctx, podOn("default", fmt.Sprintf("life-%d", i+1), ""), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	grace, now := int64(30), int64(0)
	parallelClients(b, "pods/s", func(seq int64) error {
		name := fmt.Sprintf("life-%d", seq)
		if seq > ready {
			if _, err := pods.Create(ctx, podOn("default", name, ""), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
		if err := pods.Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			return err
		}
		return pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &now})
	})
}
