package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"github.com/miniplane/miniplane/test/testenv"
)

var (
	flagNodes       = flag.String("bench.nodes", "1000,5000", "comma-separated fleet sizes of BenchmarkDaemonSetRollout")
	flagFsync       = flag.Bool("bench.fsync", true, "run etcd with fsync, as `miniplane up` does (false: as tests do)")
	flagQPS         = flag.Float64("bench.kube-api-qps", 0, "override the controller-manager's client QPS (burst twice that); 0 keeps the default")
	flagBurst       = flag.Int("bench.burst-replicas", 0, "override the DaemonSet controller's burst-replicas (creates or deletes per sync); 0 keeps the default 250")
	flagPodWorkers  = flag.Int("bench.pod-workers", 0, "override the stub fleet's pod workers (kubeletstub pod-workers); 0 keeps the default")
	flagLogLevel    = flag.String("bench.log-level", "", "print the components' logs from this level on (debug, info, warn, error); empty prints none")
	flagProfile     = flag.String("bench.cpuprofile", "", "write a CPU profile of the measured phases (rollout and rolling update, not start-up) to this file; the fleet size is inserted before the extension")
	flagMemProfile  = flag.String("bench.memprofile", "", "write a heap profile (live objects, sampled every 64 KiB) when the heap is measured to this file; the fleet size is inserted before the extension. `go tool pprof -sample_index=inuse_space -focus=garbagecollector` then shows what one component holds")
	flagTimeline    = flag.Bool("bench.timeline", false, "print pod counts every sampleEvery during each phase")
	flagControllers = flag.String("bench.controllers", "", "override the controller-manager's --controllers (e.g. \"*,-garbagecollector\" to see what the garbage collector costs); empty keeps the default")
)

// Benchmark parameters.
const (
	// etcdWriters and etcdWriteFor size the raw etcd write measurement: many concurrent
	// clients, as the API server has, for long enough to average out.
	etcdWriters  = 64
	etcdWriteFor = 2 * time.Second
	// etcdValueSize is about the size of a stored pod.
	etcdValueSize = 1024
	// idleFor is how long the idle fleet's CPU use is measured.
	idleFor = 2 * time.Second
	// settleFor is how long the control plane runs on after the rolling update before the
	// heap is measured, so that event queues and watch buffers still draining the last
	// status updates (longer on a busy machine) do not count.
	settleFor = 2 * time.Second
	// pollEvery is how often the DaemonSet's status is read.
	pollEvery = 10 * time.Millisecond
	// sampleEvery spaces the timeline's samples.
	sampleEvery = 250 * time.Millisecond
	// phaseTimeout bounds each phase so that a stuck rollout fails instead of hanging.
	phaseTimeout = 5 * time.Minute
)

// rolloutResult is one fleet size's figures.
type rolloutResult struct {
	nodes         int
	startup       time.Duration // control plane up and every stub node registered
	etcdWrites    float64       // raw Puts per second
	firstPod      time.Duration // DaemonSet created → first pod seen
	allCreated    time.Duration // DaemonSet created → last of the N pods seen
	ready         time.Duration // DaemonSet created → status.numberReady == N
	rollingUpdate time.Duration // template changed → every pod updated and available
	// readyCPU and rollingCPU are the CPU time the whole process (every component) used in
	// each phase: unlike wall time, it barely depends on what else runs on the machine.
	readyCPU, rollingCPU time.Duration
	// idleCores is the CPU the fleet uses with nothing to roll out (heartbeats and Lease
	// renewals of every node, and the controllers watching them), in cores.
	idleCores float64
	// heap is the live Go heap of the whole process (etcd, API server and its watch cache,
	// every controller's informers, the fleet) settleFor after the rolling update, measured
	// after a forced collection so that it does not depend on when the runtime last
	// collected.
	heap uint64
}

// createRate is the pods created per second over the initial rollout.
func (r rolloutResult) createRate() float64 {
	return float64(r.nodes) / r.allCreated.Seconds()
}

// targets are the goals on this 2-core machine, by fleet size.
var targets = map[int]struct{ ready, rolling time.Duration }{
	1000: {2500 * time.Millisecond, 5 * time.Second},
	5000: {12 * time.Second, 25 * time.Second},
}

// BenchmarkDaemonSetRollout rolls one DaemonSet out over fleets of stub nodes and then
// through a rolling update with maxUnavailable=10%, on a whole control plane in this
// process, and measures etcd's raw write rate in the same run for comparison. It prints
// a table at the end; the figures are also reported as benchmark metrics.
func BenchmarkDaemonSetRollout(b *testing.B) {
	var results []rolloutResult
	for _, n := range fleetSizes(b, *flagNodes) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var last rolloutResult
			for i := 0; i < b.N; i++ {
				last = runRollout(b, n)
			}
			b.ReportMetric(last.firstPod.Seconds(), "s-first-pod")
			b.ReportMetric(last.createRate(), "pods/s")
			b.ReportMetric(last.ready.Seconds(), "s-ready")
			b.ReportMetric(last.rollingUpdate.Seconds(), "s-rolling")
			b.ReportMetric(last.etcdWrites, "etcd-puts/s")
			b.ReportMetric(last.readyCPU.Seconds(), "cpu-s-ready")
			b.ReportMetric(last.rollingCPU.Seconds(), "cpu-s-rolling")
			b.ReportMetric(float64(last.heap)/(1<<20), "heap-MiB")
			results = append(results, last)
		})
	}
	printTable(os.Stdout, results)
}

// runRollout runs the whole scenario on a fresh control plane with n stub nodes.
func runRollout(b *testing.B, n int) rolloutResult {
	b.StopTimer()
	res := rolloutResult{nodes: n}
	cfg := testenv.Everything(n)
	cfg.DataDir = b.TempDir()
	cfg.UnsafeNoFsync = !*flagFsync
	if *flagQPS > 0 {
		cfg.ControllerManager.KubeAPIQPS = float32(*flagQPS)
		cfg.ControllerManager.KubeAPIBurst = int(2 * *flagQPS)
	}
	if *flagBurst > 0 {
		cfg.ControllerManager.DaemonSet.BurstReplicas = *flagBurst
	}
	if *flagPodWorkers > 0 {
		cfg.KubeletStub.PodWorkers = *flagPodWorkers
	}
	if *flagControllers != "" {
		cfg.ControllerManager.Controllers = strings.Split(*flagControllers, ",")
	}
	if *flagMemProfile != "" {
		// Finer than the default 512 KiB, so that a component's share of the heap is
		// sampled well enough to compare builds; set before the control plane allocates.
		runtime.MemProfileRate = 64 << 10
	}
	var level slog.Level
	out := io.Discard
	if *flagLogLevel != "" {
		if err := level.UnmarshalText([]byte(*flagLogLevel)); err != nil {
			b.Fatalf("-bench.log-level: %v", err)
		}
		out = os.Stderr
	}
	cfg.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	start := time.Now()
	env, err := testenv.Start(context.Background(), cfg)
	if err != nil {
		b.Fatalf("testenv: %v", err)
	}
	defer env.Stop()
	res.startup = time.Since(start)

	idleFrom, idleCPU := time.Now(), processCPU()
	time.Sleep(idleFor)
	res.idleCores = (processCPU() - idleCPU).Seconds() / time.Since(idleFrom).Seconds()
	res.etcdWrites = measureEtcdWritesAt(b, env.EtcdEndpoints())

	c := env.Client
	ctx := context.Background()
	// Every informer in the process decodes every pod event, and so does this watch: unless a
	// timeline is wanted, it stops once the n pods of the rollout are seen, so that the
	// harness costs as little as it can.
	stopAfter := n
	if *flagTimeline {
		stopAfter = 0
	}
	pods, stopWatch := watchPods(b, c, "bench", stopAfter)
	defer stopWatch() // before env.Stop, so the watch does not outlive its server
	ds := newDaemonSet("bench")

	stopProfile := startProfile(b, n)
	defer stopProfile() // also when a phase fails
	b.StartTimer()
	cpu0 := processCPU()
	created := time.Now()
	if _, err := c.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	numberReady := func(s appsv1.DaemonSetStatus) int32 { return s.NumberReady }
	waitStatus(b, c, ds, pods, numberReady, "numberReady == nodes", func(s appsv1.DaemonSetStatus, _ int64) bool {
		return s.NumberReady == int32(n) && s.DesiredNumberScheduled == int32(n)
	})
	res.ready = time.Since(created)
	cpu1 := processCPU()
	res.readyCPU = cpu1 - cpu0
	first, lastCreated, count := pods.stats()
	if count < n {
		b.Fatalf("%d pods seen created for %d nodes", count, n)
	}
	res.firstPod, res.allCreated = first.Sub(created), lastCreated.Sub(created)

	pods.reset()
	updated := time.Now()
	setImage(ctx, b, c, ds, "registry.example/agent:2")
	updatedNumber := func(s appsv1.DaemonSetStatus) int32 { return s.UpdatedNumberScheduled }
	waitStatus(b, c, ds, pods, updatedNumber, "every pod updated and available", func(s appsv1.DaemonSetStatus, generation int64) bool {
		return s.ObservedGeneration >= generation && generation >= 2 &&
			s.UpdatedNumberScheduled == int32(n) && s.NumberAvailable == int32(n) && s.DesiredNumberScheduled == int32(n)
	})
	res.rollingUpdate = time.Since(updated)
	res.rollingCPU = processCPU() - cpu1
	b.StopTimer()
	stopProfile()
	time.Sleep(settleFor)
	res.heap = liveHeap()
	writeHeapProfile(b, n)
	if *flagTimeline {
		pods.mu.Lock()
		printTimeline(os.Stdout, fmt.Sprintf("\nnodes=%d: initial rollout", n), created, updated, pods.samples, "ready")
		printTimeline(os.Stdout, fmt.Sprintf("nodes=%d: rolling update", n), updated, time.Now(), pods.samples, "updated")
		pods.mu.Unlock()
	}
	return res
}

// startProfile starts the CPU profile of -bench.cpuprofile, if set, and returns its stop,
// which may be called more than once.
func startProfile(b *testing.B, n int) (stop func()) {
	if *flagProfile == "" {
		return func() {}
	}
	ext := filepath.Ext(*flagProfile)
	path := fmt.Sprintf("%s-%d%s", strings.TrimSuffix(*flagProfile, ext), n, ext)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				b.Error(err)
			}
		})
	}
}

// writeHeapProfile writes the heap profile of -bench.memprofile, if set, for fleet size n.
func writeHeapProfile(b *testing.B, n int) {
	if *flagMemProfile == "" {
		return
	}
	ext := filepath.Ext(*flagMemProfile)
	f, err := os.Create(fmt.Sprintf("%s-%d%s", strings.TrimSuffix(*flagMemProfile, ext), n, ext))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// liveHeap is the bytes of live heap objects after a forced collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func newDaemonSet(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	tenPercent := intstr.FromString("10%")
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}}},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &tenPercent},
			},
		},
	}
}

// waitStatus polls the DaemonSet until done holds for its status and generation. Every
// sampleEvery it records the pod tracker's counters with the status figure shown.
// setImage starts a rolling update: the first container of ds's template gets image.
func setImage(ctx context.Context, b *testing.B, c kubernetes.Interface, ds *appsv1.DaemonSet, image string) {
	b.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Image = image
		_, err = c.AppsV1().DaemonSets(ds.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func waitStatus(b *testing.B, c kubernetes.Interface, ds *appsv1.DaemonSet, pods *podTracker, shown func(appsv1.DaemonSetStatus) int32,
	what string, done func(appsv1.DaemonSetStatus, int64) bool) {
	b.Helper()
	deadline := time.Now().Add(phaseTimeout)
	var last appsv1.DaemonSetStatus
	var sampled time.Time
	for time.Now().Before(deadline) {
		cur, err := c.AppsV1().DaemonSets(ds.Namespace).Get(context.Background(), ds.Name, metav1.GetOptions{})
		if err == nil {
			last = cur.Status
			if time.Since(sampled) >= sampleEvery {
				pods.sampleNow(int(shown(last)))
				sampled = time.Now()
			}
			if done(cur.Status, cur.Generation) {
				pods.sampleNow(int(shown(last)))
				return
			}
		}
		time.Sleep(pollEvery)
	}
	b.Fatalf("timed out after %v waiting for %s; status %+v", phaseTimeout, what, last)
}

// printTimeline writes the samples taken from from until until, one line each.
func printTimeline(w io.Writer, title string, from, until time.Time, samples []sample, statusName string) {
	fmt.Fprintf(w, "%s\n%8s %8s %8s %8s %8s %8s\n", title, "t", "created", "bound", "ready", "deleted", statusName)
	for _, s := range samples {
		if s.at.Before(from) || s.at.After(until) {
			continue
		}
		fmt.Fprintf(w, "%8s %8d %8d %8d %8d %8d\n", fmtDur(s.at.Sub(from)), s.created, s.bound, s.ready, s.deleted, s.status)
	}
}

// podTracker follows the benchmark's pods through a watch: when they were created, and how
// many are created, bound, ready and gone, so that a timeline can show which stage lags.
type podTracker struct {
	mu          sync.Mutex
	first, last time.Time // first and last creation since reset
	count       int       // creations since reset
	state       map[string]podState
	created     int // creations since the tracker started
	deleted     int // pods gone (or being deleted) since the tracker started
	samples     []sample
}

type podState struct{ bound, ready, deleting bool }

// sample is the tracker's counters at one moment.
type sample struct {
	at                                     time.Time
	created, bound, ready, deleted, status int
}

func (p *podTracker) stats() (first, last time.Time, count int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first, p.last, p.count
}

func (p *podTracker) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.first, p.last, p.count = time.Time{}, time.Time{}, 0
}

// observe applies one event and returns the number of creations seen so far.
func (p *podTracker) observe(ev watch.Event) int {
	pod, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return 0
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	old, known := p.state[pod.Name]
	if ev.Type == watch.Added && !known {
		if p.count == 0 {
			p.first = now
		}
		p.last = now
		p.count++
		p.created++
	}
	if ev.Type == watch.Deleted {
		if known && !old.deleting {
			p.deleted++
		}
		delete(p.state, pod.Name)
		return p.created
	}
	st := podState{bound: pod.Spec.NodeName != "", deleting: pod.DeletionTimestamp != nil}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			st.ready = true
		}
	}
	if st.deleting && !old.deleting {
		p.deleted++
	}
	p.state[pod.Name] = st
	return p.created
}

// sampleNow records the counters; status is the DaemonSet's numberReady or updated count.
func (p *podTracker) sampleNow(status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := sample{at: time.Now(), created: p.created, deleted: p.deleted, status: status}
	for _, st := range p.state {
		if st.deleting {
			continue
		}
		if st.bound {
			s.bound++
		}
		if st.ready {
			s.ready++
		}
	}
	p.samples = append(p.samples, s)
}

// watchPods follows the pods labelled app=name through a watch until stop is called or,
// when stopAfter > 0, stopAfter pods have been created.
func watchPods(b *testing.B, c kubernetes.Interface, name string, stopAfter int) (p *podTracker, stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = "app=" + name
			return c.CoreV1().Pods("default").Watch(ctx, opts)
		},
	})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	p = &podTracker{state: map[string]podState{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range rw.ResultChan() {
			if p.observe(ev) >= stopAfter && stopAfter > 0 {
				rw.Stop()
				return
			}
		}
	}()
	return p, func() {
		cancel()
		rw.Stop()
		<-done
	}
}

// measureEtcdWritesAt puts ~1KB values from etcdWriters concurrent clients for etcdWriteFor on
// the etcd at endpoints and returns the rate, then removes what it wrote.
func measureEtcdWritesAt(b *testing.B, endpoints []string) float64 {
	b.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	const prefix = "/miniplane-bench/"
	value := strings.Repeat("x", etcdValueSize)
	ctx, cancel := context.WithTimeout(context.Background(), etcdWriteFor)
	defer cancel()
	var puts atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range etcdWriters {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if _, err := cli.Put(ctx, fmt.Sprintf("%s%d/%d", prefix, w, i), value); err == nil {
					puts.Add(1)
				}
			}
		})
	}
	wg.Wait()
	rate := float64(puts.Load()) / time.Since(start).Seconds()
	if _, err := cli.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
		b.Fatalf("etcd cleanup: %v", err)
	}
	return rate
}

// printTable writes the figures of every fleet size next to the targets.
func printTable(w io.Writer, results []rolloutResult) {
	if len(results) == 0 {
		return
	}
	fsync := "on"
	if !*flagFsync {
		fsync = "off"
	}
	fmt.Fprintf(w, "\nDaemonSet rollout (etcd fsync %s)\n", fsync)
	fmt.Fprintf(w, "%7s %9s %11s %12s %10s %9s %13s %9s %13s %11s %9s %10s %12s %9s\n",
		"nodes", "startup", "idle cores", "etcd puts/s", "first pod", "pods/s", "all created", "ready", "target ready", "rolling 10%", "target",
		"ready cpu", "rolling cpu", "heap MiB")
	for _, r := range results {
		tr, trr := "-", "-"
		if t, ok := targets[r.nodes]; ok {
			tr, trr = fmtDur(t.ready), fmtDur(t.rolling)
		}
		fmt.Fprintf(w, "%7d %9s %11.2f %12.0f %10s %9.0f %13s %9s %13s %11s %9s %10s %12s %9.1f\n",
			r.nodes, fmtDur(r.startup), r.idleCores, r.etcdWrites, fmtDur(r.firstPod), r.createRate(), fmtDur(r.allCreated),
			fmtDur(r.ready), tr, fmtDur(r.rollingUpdate), trr, fmtDur(r.readyCPU), fmtDur(r.rollingCPU), float64(r.heap)/(1<<20))
	}
	fmt.Fprintln(w)
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
