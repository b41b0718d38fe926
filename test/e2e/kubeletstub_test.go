package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/kubeletstub"
	"github.com/miniplane/miniplane/test/testenv"
)

// End-to-end tests of the stub kubelets (issue 3, "What it must show"): the first drives the
// real binary, `miniplane up --nodes 3`, with kubectl only; the second runs a fleet against
// an in-process API server to restart it.

const ksTimeout = 60 * time.Second

// ksBuild builds the miniplane binary into dir.
func ksBuild(t *testing.T, dir string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(dir, "miniplane")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/miniplane")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// ksKubectl runs kubectl with the given kubeconfig and a private HOME, returning its output
// and error (callers that expect failure look at both).
func ksKubectl(t *testing.T, kubeconfig, home string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + kubeconfig, "PATH=" + os.Getenv("PATH")}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func ksMustKubectl(t *testing.T, kubeconfig, home string, args ...string) string {
	t.Helper()
	out, err := ksKubectl(t, kubeconfig, home, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// ksEventually polls cond until it reports done, failing with its last state on timeout.
func ksEventually(t *testing.T, what string, cond func() (state string, done bool)) {
	t.Helper()
	deadline := time.Now().Add(ksTimeout)
	for {
		state, done := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last state: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ksTokenOf reads user's bearer token from a token file.
func ksTokenOf(t *testing.T, tokenFile, user string) string {
	t.Helper()
	f, err := os.Open(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	records, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range records {
		if len(rec) >= 2 && rec[1] == user {
			return rec[0]
		}
	}
	t.Fatalf("no token for %s in %s", user, tokenFile)
	return ""
}

const ksUpConfig = `kubeletstub:
  template:
    labels:
      topology.kubernetes.io/zone: e2e-zone
    capacity:
      cpu: "2"
      memory: 4Gi
      pods: 20
`

// TestKubeletStubsUnderMiniplaneUp is the scenario with the real binary and kubectl:
// three Ready nodes with the configured labels and capacity; a pod bound to a node runs and
// turns Ready; a pod asking for more cpu than the node has fails with OutOfcpu; after
// `kubectl annotate node … stub.miniplane.io/reject-pods=Rejected` new pods on that node
// fail; deleting a running pod removes it; the stubs' credential may update its own nodes
// but gets 403 on any other node.
func TestKubeletStubsUnderMiniplaneUp(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	if testing.Short() {
		t.Skip("builds and runs the miniplane binary")
	}
	tmp := t.TempDir()
	bin := ksBuild(t, tmp)
	dataDir, home := filepath.Join(tmp, "data"), filepath.Join(tmp, "home")
	cfgFile := filepath.Join(tmp, "miniplane.yaml")
	if err := os.WriteFile(cfgFile, []byte(ksUpConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := startUpProcess(t, bin, dataDir, nil, "--nodes", "3", "--config", cfgFile, "--log-level", "warn").Kubeconfig
	kubectl := func(args ...string) string { t.Helper(); return ksMustKubectl(t, kubeconfig, home, args...) }

	// Three Ready nodes with the configured labels and capacity.
	var nodes corev1.NodeList
	ksEventually(t, "three Ready stub nodes", func() (string, bool) {
		if _, err := os.Stat(kubeconfig); err != nil {
			return "no kubeconfig yet", false
		}
		out, err := ksKubectl(t, kubeconfig, home, "get", "nodes", "-o", "json")
		if err != nil {
			return out, false
		}
		nodes = corev1.NodeList{}
		if err := json.Unmarshal([]byte(out), &nodes); err != nil {
			return err.Error(), false
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return fmt.Sprintf("%d nodes, %d Ready", len(nodes.Items), ready), len(nodes.Items) == 3 && ready == 3
	})
	for i, n := range nodes.Items {
		want := fmt.Sprintf("stub-node-%d", i)
		if n.Name != want || n.Labels[corev1.LabelHostname] != want || n.Labels[corev1.LabelOSStable] != "linux" ||
			n.Labels["topology.kubernetes.io/zone"] != "e2e-zone" {
			t.Errorf("node %d = %s with labels %v", i, n.Name, n.Labels)
		}
		if cpu := n.Status.Allocatable[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("2")) != 0 {
			t.Errorf("%s allocatable cpu = %s, want 2", n.Name, cpu.String())
		}
		if pods := n.Status.Capacity[corev1.ResourcePods]; pods.Value() != 20 {
			t.Errorf("%s capacity pods = %s, want 20", n.Name, pods.String())
		}
	}
	if out := kubectl("get", "nodes"); strings.Count(out, " Ready ") != 3 {
		t.Errorf("kubectl get nodes:\n%s", out)
	}
	if out := kubectl("get", "leases", "-n", corev1.NamespaceNodeLease, "-o", "name"); strings.Count(out, "lease.coordination.k8s.io/stub-node-") != 3 {
		t.Errorf("node leases:\n%s", out)
	}
	// kubectl describe node shows the node controller's and the kubelet's events, and the
	// kubelet sees a cordon.
	kubectl("cordon", "stub-node-2")
	ksEventually(t, "the node's events in kubectl describe", func() (string, bool) {
		out := kubectl("describe", "node", "stub-node-2")
		for _, want := range []string{
			`RegisteredNode +.* node-controller +Node stub-node-2 event: Registered Node stub-node-2 in Controller`,
			`Starting +.* kubelet +Starting kubelet\.`,
			`NodeHasSufficientMemory +.* kubelet +Node stub-node-2 status is now: NodeHasSufficientMemory`,
			`NodeAllocatableEnforced +.* kubelet +Updated Node Allocatable limit across pods`,
			`NodeNotSchedulable +.* kubelet +Node stub-node-2 status is now: NodeNotSchedulable`,
		} {
			if !regexp.MustCompile(`Normal +` + want).MatchString(out) {
				return out, false
			}
		}
		return out, true
	})
	kubectl("uncordon", "stub-node-2")

	podPhase := func(name string) (corev1.Pod, string) {
		out, err := ksKubectl(t, kubeconfig, home, "get", "pod", name, "-o", "json")
		var p corev1.Pod
		if err != nil {
			return p, out
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			return p, err.Error()
		}
		return p, fmt.Sprintf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	applyPod := func(name, node, cpu string) {
		t.Helper()
		manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  nodeName: %s
  containers:
  - name: app
    image: registry.example/app:1
    resources: {requests: {cpu: %q}}
`, name, node, cpu)
		path := filepath.Join(tmp, name+".yaml")
		if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		kubectl("apply", "-f", path)
	}

	// A pod bound to a node runs and turns Ready.
	applyPod("runs", "stub-node-0", "500m")
	ksEventually(t, "pod runs to turn Ready", func() (string, bool) {
		p, state := podPhase("runs")
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		return state, p.Status.Phase == corev1.PodRunning && ready && p.Status.PodIP != "" && p.Status.StartTime != nil
	})
	// kubectl describe shows what a kubelet reports of the container it started.
	ksEventually(t, "the kubelet's events of runs in kubectl describe", func() (string, bool) {
		out := kubectl("describe", "pod", "runs")
		for _, want := range []string{
			`Pulling +.* Pulling image "registry\.example/app:1"`,
			`Pulled +.* Successfully pulled image "registry\.example/app:1" in 0s`,
			`Created +.* Container created`,
			`Started +.* Container started`,
		} {
			if !regexp.MustCompile(`Normal +` + want).MatchString(out) {
				return out, false
			}
		}
		return out, true
	})

	// More cpu than the node has: Failed with OutOfcpu.
	applyPod("too-big", "stub-node-0", "3")
	ksEventually(t, "pod too-big to fail with OutOfcpu", func() (string, bool) {
		p, state := podPhase("too-big")
		return state, p.Status.Phase == corev1.PodFailed && p.Status.Reason == "OutOfcpu" &&
			strings.Contains(p.Status.Message, "Node didn't have enough resource: cpu, requested: 3000, used: 500, capacity: 2000")
	})

	// After the annotation, new pods on that node are rejected. The stub sees the node and
	// the pod through separate watches, so the first pod may still win the race: create
	// pods until one is rejected, then every later one must be.
	kubectl("annotate", "node", "stub-node-1", kubeletstub.AnnotationRejectPods+"=Rejected")
	attempt := 0
	ksEventually(t, "a pod on stub-node-1 to be rejected", func() (string, bool) {
		attempt++
		name := fmt.Sprintf("probe-%d", attempt)
		applyPod(name, "stub-node-1", "10m")
		var p corev1.Pod
		var state string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if p, state = podPhase(name); p.Status.Phase != "" && p.Status.Phase != corev1.PodPending {
				break
			}
		}
		return state, p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Rejected"
	})
	for i := range 2 {
		name := fmt.Sprintf("rejected-%d", i)
		applyPod(name, "stub-node-1", "10m")
		ksEventually(t, name+" to be rejected", func() (string, bool) {
			p, state := podPhase(name)
			return state, p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Rejected"
		})
	}
	if out := kubectl("get", "events", "--field-selector", "involvedObject.name=rejected-0", "-o", "name"); strings.TrimSpace(out) == "" {
		t.Errorf("no event for the rejected pod")
	}

	// Deleting a running pod removes it (kubectl waits until it is gone).
	kubectl("delete", "pod", "runs", "--timeout=60s")
	if out, err := ksKubectl(t, kubeconfig, home, "get", "pod", "runs"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("pod runs still there after delete: %v\n%s", err, out)
	}
	ksEventually(t, "a Killing event for runs' container", func() (string, bool) {
		out := kubectl("get", "events", "--field-selector", "involvedObject.name=runs,reason=Killing",
			"-o", "jsonpath={.items[*].involvedObject.fieldPath} {.items[*].message}")
		return out, strings.TrimSpace(out) == "spec.containers{app} Stopping container app"
	})

	// The stubs' credential: allowed on its own nodes, 403 on another.
	outsider := filepath.Join(tmp, "outsider.yaml")
	if err := os.WriteFile(outsider, []byte("apiVersion: v1\nkind: Node\nmetadata: {name: outsider}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("create", "-f", outsider)
	token := ksTokenOf(t, filepath.Join(dataDir, "tokens.csv"), auth.FleetUserPrefix+configs.DefaultStubNodePrefix)
	kubectl("annotate", "node", "stub-node-2", "--token="+token, "e2e.miniplane.io/touched=yes")
	out, err := ksKubectl(t, kubeconfig, home, "annotate", "node", "outsider", "--token="+token, "e2e.miniplane.io/touched=yes")
	if err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("the stubs' credential annotated another node: %v\n%s", err, out)
	}
	out, err = ksKubectl(t, kubeconfig, home, "label", "node", "stub-node-0", "--token="+token, "--overwrite", "e2e=1")
	if err != nil {
		t.Errorf("the stubs' credential cannot label its own node: %v\n%s", err, out)
	}
}

// TestKubeletStubRestartReusesNodesAndPods restarts a fleet against a real API server: the
// Nodes are re-used (same UIDs, no second registration), running pods keep their IPs and
// start times and still count for admission, and a new pod gets a fresh IP. A fail-after
// annotation then fails a running pod.
func TestKubeletStubRestartReusesNodesAndPods(t *testing.T) {
	cfg := configs.DefaultKubeletStub()
	cfg.Nodes = 2
	cfg.NodePrefix = "restart"
	// No controller-manager runs here to assign pod CIDRs.
	cfg.PodCIDR = "10.128.0.0/9"
	cfg.Template.Capacity = configs.StubResources{CPU: "1", Memory: "1Gi", Pods: 10}

	dir := t.TempDir()
	if _, err := testenv.EnsureTokens(filepath.Join(dir, "tokens.csv"), []auth.User{testenv.StubIdentity(cfg)}); err != nil {
		t.Fatal(err)
	}
	env := testenv.New(t, testenv.Config{DataDir: dir})
	c := cpAdminClient(t, env)
	stubConfig := env.ConfigFor(testenv.StubIdentity(cfg).Name)

	runFleet := func() (stop func()) {
		t.Helper()
		fleet, err := kubeletstub.New(cfg, kubeletstub.Options{RestConfig: stubConfig, Logger: cpTestLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- fleet.Run(ctx) }()
		ksEventually(t, "the fleet to be ready", func() (string, bool) { return "", fleet.Ready() })
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("fleet Run: %v", err)
			}
		}
		t.Cleanup(stop)
		return stop
	}
	ctx := context.Background()
	stop := runFleet()
	uids := map[string]string{}
	for _, name := range []string{"restart-0", "restart-1"} {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = string(n.UID)
	}
	ksCreatePod(t, c, "old", "restart-0", "600m")
	old := ksWaitPod(t, c, "old", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	stop()

	runFleet()
	for name, want := range uids {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || string(n.UID) != want {
			t.Errorf("node %s after restart: %v, uid %s, want %s", name, err, n.UID, want)
		}
	}
	ksCreatePod(t, c, "new", "restart-0", "100m")
	fresh := ksWaitPod(t, c, "new", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if fresh.Status.PodIP == old.Status.PodIP {
		t.Errorf("new pod got the old pod's IP %s", fresh.Status.PodIP)
	}
	again := ksWaitPod(t, c, "old", func(p *corev1.Pod) bool { return true })
	if again.Status.PodIP != old.Status.PodIP || !again.Status.StartTime.Equal(old.Status.StartTime) || again.Status.Phase != corev1.PodRunning {
		t.Errorf("old pod changed across the restart: %+v -> %+v", old.Status, again.Status)
	}
	// "old" still holds 600m of the node's 1 cpu.
	ksCreatePod(t, c, "squeezed", "restart-0", "500m")
	ksWaitPod(t, c, "squeezed", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "OutOfcpu"
	})

	// fail-after: "old" has run longer than 1ms, so it fails at once.
	n, err := c.CoreV1().Nodes().Get(ctx, "restart-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations = map[string]string{kubeletstub.AnnotationFailAfter: "1ms"}
	if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	failed := ksWaitPod(t, c, "old", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if cs := failed.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 1 {
		t.Errorf("failed pod containers = %+v", cs)
	}
}

func ksCreatePod(t *testing.T, c kubernetes.Interface, name, node, cpu string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
	if _, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

func ksWaitPod(t *testing.T, c kubernetes.Interface, name string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	ksEventually(t, "pod "+name, func() (string, bool) {
		got, err := c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err != nil {
			return fmt.Sprint(err), false
		}
		p = got
		return fmt.Sprintf("phase %s reason %q", got.Status.Phase, got.Status.Reason), ok(got)
	})
	return p
}
