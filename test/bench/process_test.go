package bench

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/store"
	"github.com/miniplane/miniplane/test/testenv"
)

// BenchmarkProcessRollout measures what a user of the all-in-one sees, the way issue 13 did:
// `miniplane up --nodes 0` runs as one process and `miniplane kubeletstub --nodes N` as
// another (both the binary built once with CGO_ENABLED=0), a DaemonSet is created over the N
// nodes and then rolled to a new image at maxUnavailable 10%. Each process's peak resident
// set (VmHWM) and CPU seconds are read from /proc, and the raw etcd write rate is measured
// in the same run on a member started in this process on the same file system with fsync
// (the floor any control plane on this machine writes at). Run it with `make bench`, or
//
//	go test -run '^$' -bench ProcessRollout -benchtime 1x -bench.nodes 1000,5000 ./test/bench/
var (
	flagBinary    = flag.String("bench.binary", "", "miniplane binary of BenchmarkProcessRollout; empty builds ./cmd/miniplane into a temporary directory")
	flagUpArgs    = flag.String("bench.up-args", "", "extra arguments of `miniplane up` in BenchmarkProcessRollout (space-separated)")
	flagFleetArgs = flag.String("bench.fleet-args", "", "extra arguments of `miniplane kubeletstub` in BenchmarkProcessRollout (space-separated)")
	flagInProcess = flag.Bool("bench.in-process", false, "run the stub fleet inside `miniplane up --nodes N` (one process, as the README's command does) instead of as a `miniplane kubeletstub` process of its own")
	// The API server's CPU profile cannot be stopped early (net/http/pprof profiles for a
	// number of seconds), so BenchmarkProcessRollout takes it over a fixed window.
	flagCPUWindow = flag.Duration("bench.cpuprofile-window", 30*time.Second, "how long BenchmarkProcessRollout profiles `miniplane up` from the DaemonSet's creation when -bench.cpuprofile is set")
	// Every node renews its Lease every 10 s whatever else happens, so a window of that
	// length sees each renewal once.
	flagIdleWindow = flag.Duration("bench.idle-window", 10*time.Second, "how long BenchmarkProcessRollout measures the CPU of the cluster standing still (every node Ready, no DaemonSet: the nodes' heartbeats) before it creates the DaemonSet; 0 skips it")
)

// processResult is one fleet size's figures of BenchmarkProcessRollout.
type processResult struct {
	nodes         int
	etcdWrites    float64 // raw Puts per second, the floor
	registered    time.Duration
	allCreated    time.Duration // DaemonSet created → last of the N pods seen
	ready         time.Duration // DaemonSet created → status.numberReady == N
	rollingUpdate time.Duration // template changed → every pod updated and available
	// notReady is how many times the node lifecycle controller found a node's heartbeats
	// late (NodeNotReady events): a fleet too busy to renew its Leases shows here.
	notReady int
	// up and fleet are the two processes' figures over the whole run.
	up, fleet procStats
	// upIdle and fleetIdle are the cores each process used while the cluster stood still:
	// the floor under both phases (docs/performance.md, "Seventeenth round").
	upIdle, fleetIdle float64
	// load is the 1-minute load average at the start and at the end of the run.
	loadStart, loadEnd float64
	// readyLatency is the API server's request histogram when the DaemonSet was created and
	// when its pods were all ready.
	readyLatency struct{ before, after latencyTotals }
}

// procStats is what /proc tells of one process.
type procStats struct {
	peakRSS int64         // VmHWM, bytes
	cpu     time.Duration // utime + stime since start
	// readyCPU and rollingCPU are the CPU used in each phase.
	readyCPU, rollingCPU time.Duration
}

func BenchmarkProcessRollout(b *testing.B) {
	bin := *flagBinary
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "miniplane")
		build := exec.Command("go", "build", "-o", bin, "github.com/miniplane/miniplane/cmd/miniplane")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
	}
	bin = copyBinary(b, bin)
	var results []processResult
	for _, n := range fleetSizes(b, *flagNodes) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var last processResult
			for i := 0; i < b.N; i++ {
				last = runProcessRollout(b, bin, n)
			}
			b.ReportMetric(float64(n)/last.allCreated.Seconds(), "pods/s")
			b.ReportMetric(last.ready.Seconds(), "s-ready")
			b.ReportMetric(last.rollingUpdate.Seconds(), "s-rolling")
			b.ReportMetric(float64(last.up.peakRSS)/(1<<20), "up-peak-MiB")
			if last.fleet.peakRSS > 0 {
				b.ReportMetric(float64(last.fleet.peakRSS)/1024/float64(n), "fleet-peak-KiB/node")
			}
			b.ReportMetric(last.etcdWrites, "etcd-puts/s")
			if *flagIdleWindow > 0 {
				b.ReportMetric(last.upIdle, "up-idle-cores")
			}
			createMean, _ := last.readyLatency.after.meanSince(last.readyLatency.before, latencyKinds[0])
			b.ReportMetric(float64(createMean)/float64(time.Millisecond), "create-ms")
			results = append(results, last)
		})
	}
	printProcessTable(os.Stdout, results)
	printLatencyTable(os.Stdout, results)
}

// fleetSizes parses a comma-separated list of fleet sizes.
func fleetSizes(b *testing.B, list string) []int {
	var sizes []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("-bench.nodes: %q is not a fleet size", s)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

func runProcessRollout(b *testing.B, bin string, n int) processResult {
	b.StopTimer()
	res := processResult{nodes: n, loadStart: loadAverage()}
	dir := b.TempDir()
	res.etcdWrites = measureEtcdFloor(b, filepath.Join(dir, "etcd-floor"))

	upDir := filepath.Join(dir, "up")
	if err := os.MkdirAll(upDir, 0o700); err != nil {
		b.Fatal(err)
	}
	upNodes := strconv.Itoa(n)
	var fleetIdentity fleetIdentity
	if !*flagInProcess {
		upNodes, fleetIdentity = "0", newFleetIdentity(b, upDir, n)
	}
	addr := freeAddr(b)
	upArgs := append([]string{"up", "--nodes", upNodes, "--data-dir", upDir, "--listen", addr}, strings.Fields(*flagUpArgs)...)
	started := time.Now()
	up := startProcess(b, bin, filepath.Join(dir, "up.log"), upArgs...)
	rc := waitUp(b, filepath.Join(upDir, "kubeconfig"), up)
	c := kubernetes.NewForConfigOrDie(rc)

	// In one process the nodes count from up's start (it serves once they have registered);
	// otherwise from the fleet's.
	var fleet *process
	if !*flagInProcess {
		started = time.Now()
		fleet = fleetIdentity.start(b, bin, dir, rc, n)
	}
	waitNodesReady(b, c, n, cmp.Or(fleet, up))
	res.registered = time.Since(started)
	res.upIdle, res.fleetIdle = idleCores(b, *flagIdleWindow, up, fleet)

	ctx := context.Background()
	pods, stopWatch := watchPods(b, c, "bench", n)
	defer stopWatch()
	ds := newDaemonSet("bench")
	b.StartTimer()
	res.readyLatency.before = readLatencyTotals(b, c)
	up0, fleet0 := up.cpu(b), fleet.cpu(b)
	profiled := startRemoteCPUProfile(b, c, n)
	defer profiled()
	created := time.Now()
	if _, err := c.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitStatus(b, c, ds, pods, func(s appsv1.DaemonSetStatus) int32 { return s.NumberReady }, "numberReady == nodes",
		func(s appsv1.DaemonSetStatus, _ int64) bool {
			return s.NumberReady == int32(n) && s.DesiredNumberScheduled == int32(n)
		})
	res.ready = time.Since(created)
	up1, fleet1 := up.cpu(b), fleet.cpu(b)
	res.readyLatency.after = readLatencyTotals(b, c)
	if *flagMemProfile != "" {
		// What is live at the busiest moment, when the resident set peaks, rather than what
		// stays once the work is done; taken after the CPU reading, so it is not counted.
		writeRemoteHeapProfile(b, c, fmt.Sprintf("%d-ready", n))
	}
	res.up.readyCPU, res.fleet.readyCPU = up1-up0, fleet1-fleet0
	_, last, count := pods.stats()
	if count < n {
		b.Fatalf("%d pods seen created for %d nodes", count, n)
	}
	res.allCreated = last.Sub(created)

	updated := time.Now()
	setImage(ctx, b, c, ds, "registry.example/agent:2")
	waitStatus(b, c, ds, pods, func(s appsv1.DaemonSetStatus) int32 { return s.UpdatedNumberScheduled }, "every pod updated and available",
		func(s appsv1.DaemonSetStatus, generation int64) bool {
			return s.ObservedGeneration >= generation && generation >= 2 &&
				s.UpdatedNumberScheduled == int32(n) && s.NumberAvailable == int32(n) && s.DesiredNumberScheduled == int32(n)
		})
	res.rollingUpdate = time.Since(updated)
	b.StopTimer()
	up2, fleet2 := up.cpu(b), fleet.cpu(b)
	res.up.rollingCPU, res.fleet.rollingCPU = up2-up1, fleet2-fleet1
	time.Sleep(settleFor)
	if *flagMemProfile != "" {
		writeRemoteHeapProfile(b, c, strconv.Itoa(n))
	}
	for _, p := range []struct {
		proc *process
		st   *procStats
	}{{up, &res.up}, {fleet, &res.fleet}} {
		if p.proc != nil {
			p.st.peakRSS = procStatus(b, p.proc.Process.Pid, "VmHWM")
			p.st.cpu = p.proc.cpu(b)
		}
	}
	res.notReady = countEvents(b, c, "NodeNotReady")
	res.loadEnd = loadAverage()
	return res
}

// fleetIdentity is the credential of a stub fleet in a process of its own.
type fleetIdentity struct {
	user  auth.User
	token string
	stub  configs.KubeletStub
}

// newFleetIdentity gives a fleet of n nodes its own identity, as in production: a token in
// the token file of the `miniplane up` whose data directory is upDir, made before up starts
// (up keeps the tokens it finds).
func newFleetIdentity(b *testing.B, upDir string, n int) fleetIdentity {
	b.Helper()
	stub := configs.DefaultKubeletStub()
	stub.Nodes = n
	user := testenv.StubIdentity(stub)
	tokens, err := testenv.EnsureTokens(filepath.Join(upDir, "tokens.csv"), []auth.User{user})
	if err != nil {
		b.Fatal(err)
	}
	return fleetIdentity{user: user, token: tokens[user.Name], stub: stub}
}

// start starts `miniplane kubeletstub --nodes n` with the identity against the server rc
// names.
func (id fleetIdentity) start(b *testing.B, bin, dir string, rc *rest.Config, n int) *process {
	b.Helper()
	fleetConfig := filepath.Join(dir, "fleet.kubeconfig")
	if err := pki.WriteKubeconfig(fleetConfig, rc.Host, rc.CAData, id.user.Name, id.token); err != nil {
		b.Fatal(err)
	}
	fleetArgs := append([]string{"kubeletstub", "--kubeconfig", fleetConfig, "--nodes", strconv.Itoa(n), "--node-prefix", id.stub.NodePrefix},
		strings.Fields(*flagFleetArgs)...)
	return startProcess(b, bin, filepath.Join(dir, "fleet.log"), fleetArgs...)
}

// countEvents counts the occurrences of Events of reason in every namespace.
func countEvents(b *testing.B, c kubernetes.Interface, reason string) int {
	b.Helper()
	events, err := c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
	if err != nil {
		b.Fatalf("listing %s events: %v", reason, err)
	}
	// The recorder folds repeats for one object into one Event with a count.
	total := 0
	for _, e := range events.Items {
		total += max(int(e.Count), 1)
	}
	return total
}

// startProcess starts bin with args, its output going to logPath, and stops it (SIGTERM,
// then SIGKILL after a grace period) when the benchmark ends. A failing benchmark prints
// the log's tail.
func startProcess(b *testing.B, bin, logPath string, args ...string) *process {
	b.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logFile.Close()
		if b.Failed() {
			if out, err := os.ReadFile(logPath); err == nil {
				if len(out) > 4096 {
					out = out[len(out)-4096:]
				}
				b.Logf("%s %s:\n%s", filepath.Base(bin), args[0], out)
			}
		}
	})
	return &process{Cmd: cmd, exited: exited}
}

// process is a started child process.
type process struct {
	*exec.Cmd
	exited <-chan struct{} // closed once it has exited and been waited for
}

// cpu is the process's CPU time so far; none for a process that was not started.
func (p *process) cpu(b *testing.B) time.Duration {
	b.Helper()
	if p == nil {
		return 0
	}
	return childCPU(b, p.Process.Pid)
}

// idleCores is the CPU each process uses over window, in cores; zeros for a zero window.
func idleCores(b *testing.B, window time.Duration, up, fleet *process) (upCores, fleetCores float64) {
	b.Helper()
	if window <= 0 {
		return 0, 0
	}
	up0, fleet0, start := up.cpu(b), fleet.cpu(b), time.Now()
	time.Sleep(window)
	up.failIfExited(b)
	fleet.failIfExited(b)
	elapsed := time.Since(start).Seconds()
	return (up.cpu(b) - up0).Seconds() / elapsed, (fleet.cpu(b) - fleet0).Seconds() / elapsed
}

// failIfExited ends the benchmark when the process has exited, with how it did: a
// component that failed to start (a bad flag, say) would otherwise look like one that is
// only slow until a deadline minutes away.
func (p *process) failIfExited(b *testing.B) {
	b.Helper()
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		b.Fatalf("%s %s exited: %v", filepath.Base(p.Path), p.Args[1], p.ProcessState)
	default:
	}
}

// waitUp waits until `miniplane up` has written its admin kubeconfig and answers /readyz.
func waitUp(b *testing.B, kubeconfig string, up *process) *rest.Config {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		up.failIfExited(b)
		if rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
			rc.QPS, rc.Burst = 1000, 2000
			c, err := kubernetes.NewForConfig(rc)
			if err == nil {
				if _, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background()); err == nil {
					return rc
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatal("miniplane up did not become ready within 2m")
	return nil
}

// waitNodesReady waits until the API lists n nodes whose Ready condition is True, and
// fails as soon as fleet, when not nil, has exited.
func waitNodesReady(b *testing.B, c kubernetes.Interface, n int, fleet *process) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		fleet.failIfExited(b)
		ready, err := readyNodes(c)
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d nodes Ready (last error %v)", ready, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// measureEtcdFloor starts an etcd member with fsync in dir, measures its raw write rate
// and stops it.
func measureEtcdFloor(b *testing.B, dir string) float64 {
	b.Helper()
	cfg := configs.DefaultEtcd()
	cfg.Name, cfg.DataDir = "floor", dir
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.ListenPeerURLs = []string{"http://127.0.0.1:0"}
	member, err := store.StartEmbeddedEtcd(cfg, "error")
	if err != nil {
		b.Fatal(err)
	}
	defer member.Close()
	return measureEtcdWritesAt(b, member.ClientURLs())
}

// writeRemoteHeapProfile saves the API server process's heap profile (served to admins
// under /debug/pprof) to -bench.memprofile with "-up-" and tag inserted before the
// extension.
func writeRemoteHeapProfile(b *testing.B, c kubernetes.Interface, tag string) {
	b.Helper()
	data, err := c.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("heap profile: %v", err)
	}
	ext := filepath.Ext(*flagMemProfile)
	path := fmt.Sprintf("%s-up-%s%s", strings.TrimSuffix(*flagMemProfile, ext), tag, ext)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
}

// startRemoteCPUProfile, when -bench.cpuprofile is set, starts a CPU profile of the API
// server process over -bench.cpuprofile-window and returns a wait for it to be written to
// -bench.cpuprofile with "-up-N" inserted before the extension.
func startRemoteCPUProfile(b *testing.B, c kubernetes.Interface, n int) (wait func()) {
	b.Helper()
	if *flagProfile == "" {
		return func() {}
	}
	done := make(chan error, 1)
	go func() {
		data, err := c.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(flagCPUWindow.Seconds()))).
			Timeout(*flagCPUWindow + time.Minute).DoRaw(context.Background())
		if err == nil {
			ext := filepath.Ext(*flagProfile)
			path := fmt.Sprintf("%s-up-%d%s", strings.TrimSuffix(*flagProfile, ext), n, ext)
			if err = os.WriteFile(path, data, 0o600); err == nil {
				printComponentShares(path, n)
			}
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("CPU profile: %v", err)
		}
	}
}

// printComponentShares prints how the profile at path splits by the profiler label that
// names each part of the process (etcd, apiserver, controller-manager, scheduler,
// kubeletstub, informers; the rest is mostly the garbage collector's own workers), from `go
// tool pprof -tags`: in one process the CPU seconds of the whole are all /proc has.
func printComponentShares(path string, n int) {
	out, err := exec.Command("go", "tool", "pprof", "-tags", path).Output()
	if err != nil {
		fmt.Printf("CPU profile %s: go tool pprof -tags: %v\n", path, err)
		return
	}
	section, _, _ := strings.Cut(string(out), "\n\n")
	fmt.Printf("\nCPU profile of up, %d nodes, by component (%s):\n%s\n", n, path, section)
}

// procStatus is a "kB" field of /proc/PID/status (VmRSS, VmHWM) in bytes.
func procStatus(b *testing.B, pid int, field string) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// loadAverage is the machine's 1-minute load average.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(bytes.Fields(data)[0]), 64)
	return v
}

// freeAddr is a free loopback TCP address.
func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func printProcessTable(w io.Writer, results []processResult) {
	if len(results) == 0 {
		return
	}
	processes := "`miniplane up --nodes 0` + `miniplane kubeletstub --nodes N`"
	if *flagInProcess {
		processes = "`miniplane up --nodes N`, one process (registered: from up's start)"
	}
	fmt.Fprintf(w, "\nDaemonSet rollout, %s (etcd fsync on) %s\n", processes, *flagUpArgs)
	fmt.Fprintf(w, "%7s %12s %11s %11s %12s %9s %9s %11s %11s %10s %10s %11s %10s %10s %13s %9s %9s\n",
		"nodes", "etcd puts/s", "registered", "idle cores", "all created", "pods/s", "ready", "rolling 10%",
		"up peak MiB", "up cpu-s", "(ready/rol)", "fleet MiB", "KiB/node", "fleet cpu-s", "(ready/rol)", "NotReady", "load")
	for _, r := range results {
		// In one process there is no fleet of its own to report.
		fleetMiB, fleetPerNode, fleetCPU, fleetPhases := "-", "-", "-", "-"
		idle := fmt.Sprintf("%.2f", r.upIdle)
		if r.fleet.peakRSS > 0 {
			fleetMiB = fmt.Sprintf("%.0f", float64(r.fleet.peakRSS)/(1<<20))
			fleetPerNode = fmt.Sprintf("%.1f", float64(r.fleet.peakRSS)/1024/float64(r.nodes))
			fleetCPU = fmt.Sprintf("%.1f", r.fleet.cpu.Seconds())
			fleetPhases = fmt.Sprintf("%.1f/%.1f", r.fleet.readyCPU.Seconds(), r.fleet.rollingCPU.Seconds())
			idle = fmt.Sprintf("%.2f+%.2f", r.upIdle, r.fleetIdle)
		}
		if *flagIdleWindow <= 0 {
			idle = "-"
		}
		fmt.Fprintf(w, "%7d %12.0f %11s %11s %12s %9.0f %9s %11s %11.0f %10.1f %10s %11s %10s %10s %13s %9d %9s\n",
			r.nodes, r.etcdWrites, fmtDur(r.registered), idle, fmtDur(r.allCreated), float64(r.nodes)/r.allCreated.Seconds(),
			fmtDur(r.ready), fmtDur(r.rollingUpdate),
			float64(r.up.peakRSS)/(1<<20), r.up.cpu.Seconds(), fmt.Sprintf("%.1f/%.1f", r.up.readyCPU.Seconds(), r.up.rollingCPU.Seconds()),
			fleetMiB, fleetPerNode, fleetCPU, fleetPhases, r.notReady,
			fmt.Sprintf("%.1f→%.1f", r.loadStart, r.loadEnd))
	}
	fmt.Fprintln(w)
}

// copyBinary runs a copy of bin made with plain writes. How much of an executable a process
// keeps resident depends on how its file sits in the page cache: the same binary as the
// linker wrote it has been seen to add 14 MiB to up's peak RSS over a copy of it
// (docs/performance.md, twenty-second round), enough to decide a comparison of two builds.
// Every run starting from such a copy compares the code and not the files.
func copyBinary(b *testing.B, bin string) string {
	b.Helper()
	src, err := os.Open(bin)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(b.TempDir(), "miniplane-run")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	return dst
}
