package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kwRuns is how many times TestKubectlWatchDuringRollout repeats the scenario; before the
// watch cache asked etcd for progress, every run failed.
const kwRuns = 10

// kwWatchLine is kubectl's -v=6 log of the watch request, with the time to its response.
var kwWatchLine = regexp.MustCompile(`GET \S+/pods\?resourceVersion=\d+&watch=true (\d+) \S+ in (\d+) milliseconds`)

// TestKubectlWatchDuringRollout is what a new user tried, with the real binary and
// kubectl: `kubectl apply` a DaemonSet on three stub nodes, `kubectl rollout restart`,
// half a second later `kubectl get pods -w`. kubectl lists the pods (from etcd, at its
// latest revision, which the newest writes to other resources moved on) and then watches
// from the list's resourceVersion; the watch must be answered at once every time, not
// end in "Timeout: Too large resource version".
func TestKubectlWatchDuringRollout(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	if testing.Short() {
		t.Skip("builds and runs the miniplane binary")
	}
	tmp := t.TempDir()
	kubeconfig, home := kwStartUp(t, tmp)
	kubectl := func(args ...string) string { t.Helper(); return ksMustKubectl(t, kubeconfig, home, args...) }
	ksEventually(t, "three Ready stub nodes", func() (string, bool) {
		out, err := ksKubectl(t, kubeconfig, home, "get", "nodes")
		return out, err == nil && strings.Count(out, " Ready ") == 3
	})
	manifest := filepath.Join(tmp, "ds.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: registry.example/agent:1.0}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	kubectl("rollout", "status", "ds/agent", "--timeout=60s")

	var starts []time.Duration
	for run := 0; run < kwRuns; run++ {
		// kubectl stamps a restart to the second and refuses two in one second.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		kubectl("rollout", "restart", "ds/agent")
		// The user's pause: the rollout is under way, and its writes (pods, the DaemonSet's
		// status, events, leases) keep moving the store's revision.
		time.Sleep(500 * time.Millisecond)
		took, out := kwWatchStart(t, kubeconfig, home)
		if strings.Contains(out, "Too large resource version") || took < 0 {
			t.Fatalf("run %d: kubectl get pods -w did not start watching:\n%s", run, out)
		}
		starts = append(starts, took)
		kubectl("rollout", "status", "ds/agent", "--timeout=60s")
	}
	slices.Sort(starts)
	t.Logf("kubectl get pods -w during a rollout, %d runs: watch answered in median %v, max %v", len(starts), starts[len(starts)/2], starts[len(starts)-1])
}

// kwStartUp starts `miniplane up` with three stub nodes in dir and returns its kubeconfig
// and a HOME for kubectl; the server is stopped when the test ends.
func kwStartUp(t *testing.T, dir string) (kubeconfig, home string) {
	t.Helper()
	bin := ksBuild(t, dir)
	dataDir := filepath.Join(dir, "data")
	home = filepath.Join(dir, "home")
	up := startUpProcess(t, bin, dataDir, nil, "--nodes", "3", "--log-level", "warn")
	ksEventually(t, "the kubeconfig", func() (string, bool) {
		_, err := os.Stat(up.Kubeconfig)
		return up.Out.String(), err == nil
	})
	return up.Kubeconfig, home
}

// kwWatchStart runs `kubectl get pods -w -v=6` until its watch request is answered (or
// kubectl exits), then stops it. It returns how long the server took to answer the watch
// as kubectl logged it (-1 if it never was) and kubectl's output.
func kwWatchStart(t *testing.T, kubeconfig, home string) (time.Duration, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", "get", "pods", "-w", "-v=6")
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + kubeconfig, "PATH=" + os.Getenv("PATH")}
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Kill() // the process this call started, by its handle
		<-exited
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := kwWatchLine.FindStringSubmatch(out.String()); m != nil {
			ms, _ := strconv.Atoi(m[2])
			if m[1] != "200" {
				return -1, out.String()
			}
			return time.Duration(ms) * time.Millisecond, out.String()
		}
		select {
		case <-exited:
			return -1, out.String()
		case <-ctx.Done():
			return -1, out.String()
		case <-tick.C:
		}
	}
}
