package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/kubeletstub"
	"github.com/miniplane/miniplane/test/testenv"
)

// BenchmarkStubFleet measures the stub kubelets alone: a fleet of N nodes registers against
// one API server (etcd with fsync, as `miniplane up` runs it), and then heartbeats in steady
// state (a Lease renewal per node every 10s, status checks, no status writes within the 5m
// report interval). The fleet runs in a child process so its CPU and memory are its own;
// the API server and etcd run in this one. Run it with
//
//	go test -run '^$' -bench StubFleet -benchtime 1x ./test/bench/
var (
	flagFleetNodes  = flag.String("bench.fleet-nodes", "1000,5000", "comma-separated fleet sizes of BenchmarkStubFleet")
	flagFleetSteady = flag.Duration("bench.fleet-steady", 30*time.Second, "steady-state window of BenchmarkStubFleet (at least one lease renew interval)")
)

// fleetChildEnv carries "kubeconfig,nodes,prefix" to the child process that runs the fleet.
const fleetChildEnv = "MINIPLANE_BENCH_FLEET_CHILD"

// fleetResult is one fleet size's figures.
type fleetResult struct {
	nodes int
	// ready is the fleet's own time from Run to every node registered with its first status
	// and Lease; apiReady is from starting the child until the API lists every node Ready.
	ready, apiReady time.Duration
	// stubCPU and serverCPU are cores used during the steady window by the fleet's process
	// and by the API server + etcd process.
	stubCPU, serverCPU float64
	// rss is the fleet process's resident set at the end of the window; heap the Go heap
	// in use after a GC.
	rss, heap int64
}

func BenchmarkStubFleet(b *testing.B) {
	var results []fleetResult
	for _, n := range fleetSizes(b, *flagFleetNodes) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var last fleetResult
			for i := 0; i < b.N; i++ {
				last = runFleet(b, n)
			}
			b.ReportMetric(last.ready.Seconds(), "s-ready")
			b.ReportMetric(last.stubCPU, "stub-cores")
			b.ReportMetric(last.stubCPU*1e6/float64(n), "stub-µcores/node")
			b.ReportMetric(float64(last.rss)/float64(n)/1024, "stub-rss-kB/node")
			b.ReportMetric(last.serverCPU, "server-cores")
			results = append(results, last)
		})
	}
	printFleetTable(os.Stdout, results)
}

func runFleet(b *testing.B, n int) fleetResult {
	b.StopTimer()
	res := fleetResult{nodes: n}
	cfg := configs.DefaultKubeletStub()
	cfg.Nodes = n
	identity := testenv.StubIdentity(cfg)
	dir := b.TempDir()
	if _, err := testenv.EnsureTokens(filepath.Join(dir, "tokens.csv"), []auth.User{identity}); err != nil {
		b.Fatal(err)
	}
	env, err := testenv.Start(context.Background(), testenv.Config{
		DataDir: dir,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatalf("testenv: %v", err)
	}
	defer env.Stop()
	kubeconfig := filepath.Join(dir, "fleet.kubeconfig")
	if err := pki.WriteKubeconfig(kubeconfig, env.URL, env.CAPEM, identity.Name, env.Token(identity.Name)); err != nil {
		b.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^TestStubFleetProcess$", "-test.bench=^$")
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%s", fleetChildEnv, kubeconfig, n, cfg.NodePrefix))
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	started := time.Now()
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	readLine := func(prefix string) string {
		b.Helper()
		timeout := time.After(5 * time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					b.Fatalf("fleet process ended before %q", prefix)
				}
				if v, found := strings.CutPrefix(l, prefix+" "); found {
					return v
				}
			case <-timeout:
				b.Fatalf("fleet process did not report %q", prefix)
			}
		}
	}
	if res.ready, err = time.ParseDuration(readLine("ready")); err != nil {
		b.Fatal(err)
	}
	waitNodesReady(b, env.Client, n, nil)
	res.apiReady = time.Since(started)
	b.StopTimer()

	stub0, server0, t0 := childCPU(b, child.Process.Pid), selfCPU(), time.Now()
	time.Sleep(*flagFleetSteady)
	stub1, server1, window := childCPU(b, child.Process.Pid), selfCPU(), time.Since(t0)
	res.stubCPU = (stub1 - stub0).Seconds() / window.Seconds()
	res.serverCPU = (server1 - server0).Seconds() / window.Seconds()
	res.rss = procStatus(b, child.Process.Pid, "VmRSS")

	_ = child.Process.Signal(syscall.SIGTERM)
	if res.heap, err = strconv.ParseInt(readLine("heap"), 10, 64); err != nil {
		b.Fatal(err)
	}
	return res
}

// readyNodes counts the nodes the API lists with a Ready condition that is True.
func readyNodes(c kubernetes.Interface) (int, error) {
	list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	ready := 0
	for _, node := range list.Items {
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready, nil
}

// TestStubFleetProcess is the child process of BenchmarkStubFleet (it does nothing in a
// normal test run): it runs the fleet, prints "ready <duration>" once every node is
// registered and heartbeating, and on SIGTERM prints "heap <bytes>" (Go heap in use after a
// GC, measured while the fleet still runs) and stops.
func TestStubFleetProcess(t *testing.T) {
	spec := os.Getenv(fleetChildEnv)
	if spec == "" {
		t.Skip("child process of BenchmarkStubFleet")
	}
	parts := strings.Split(spec, ",")
	n, _ := strconv.Atoi(parts[1])
	cfg := configs.DefaultKubeletStub()
	cfg.Nodes, cfg.NodePrefix = n, parts[2]
	// No controller-manager runs here to assign pod CIDRs.
	cfg.PodCIDR = "10.128.0.0/9"
	rc, err := clientcmd.BuildConfigFromFlags("", parts[0])
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fleet, err := kubeletstub.New(cfg, kubeletstub.Options{RestConfig: rc, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fleet.Run(ctx) }()
	for !fleet.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("ready %s\n", time.Since(start))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("heap %d\n", ms.HeapInuse)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// childCPU is the user and system CPU time process pid has used (from /proc).
func childCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) may hold spaces; utime and stime are fields 14 and 15.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// selfCPU is the user and system CPU time of this process (API server and etcd).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func printFleetTable(w io.Writer, results []fleetResult) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "\nstub fleet (steady window %s, lease renew 10s, report 5m)\n", *flagFleetSteady)
	fmt.Fprintf(w, "%7s %9s %11s %10s %15s %9s %12s %11s %13s\n",
		"nodes", "ready", "api-ready", "stub-cpu", "stub-µcpu/node", "stub-rss", "rss-kB/node", "heap-kB/node", "server-cpu")
	for _, r := range results {
		fmt.Fprintf(w, "%7d %9s %11s %10.3f %15.1f %8dM %12.1f %11.1f %13.3f\n",
			r.nodes, r.ready.Round(time.Millisecond), r.apiReady.Round(time.Millisecond),
			r.stubCPU, r.stubCPU*1e6/float64(r.nodes), r.rss>>20, float64(r.rss)/1024/float64(r.nodes),
			float64(r.heap)/1024/float64(r.nodes), r.serverCPU)
	}
}
