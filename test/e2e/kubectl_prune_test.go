package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miniplane/miniplane/test/testenv"
)

// pruneManifest is a node agent's file as a project publishes it, and the claim, volume,
// replication controller and ingress it may carry: kubectl's default prune list names these
// kinds, and `apply --prune` maps every kind of that list before it prunes anything.
const pruneManifest = `apiVersion: v1
kind: ConfigMap
metadata: {name: agent-config, labels: {app.kubernetes.io/part-of: agent}}
data: {level: info}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: agent-state, labels: {app.kubernetes.io/part-of: agent}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: agent-legacy, labels: {app.kubernetes.io/part-of: agent}}
spec:
  replicas: 1
  template:
    metadata: {labels: {app: agent-legacy}}
    spec: {containers: [{name: c, image: registry.example/legacy:1}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: agent-ui, labels: {app.kubernetes.io/part-of: agent}}
spec:
  rules:
  - host: agent.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: agent-ui, port: {number: 80}}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, labels: {app.kubernetes.io/part-of: agent}}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: registry.example/agent:1}]}
`

// TestKubectlApplyPrune: `kubectl apply --prune -l` with kubectl's default prune list, and
// with an ApplySet, removes what a file no longer holds and keeps the rest.
func TestKubectlApplyPrune(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	home := t.TempDir()
	env := testenv.New(t, testenv.Config{})
	k := func(args ...string) string { t.Helper(); return dsKubectl(t, env, home, args...) }
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	all := write("all.yaml", pruneManifest)
	docs := strings.Split(pruneManifest, "---\n")
	// Without the claim and the ingress.
	fewer := write("fewer.yaml", strings.Join([]string{docs[0], docs[2], docs[4]}, "---\n"))

	const selector = "-l=app.kubernetes.io/part-of=agent"
	if out := k("apply", "--prune", selector, "-f", all); countApplied(out, "created") != 5 {
		t.Fatalf("kubectl apply --prune, first time:\n%s", out)
	}
	out := k("apply", "--prune", selector, "-f", fewer)
	for _, want := range []string{"persistentvolumeclaim/agent-state pruned", "ingress.networking.k8s.io/agent-ui pruned",
		"configmap/agent-config unchanged", "daemonset.apps/agent unchanged"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply --prune without two objects: no %q in\n%s", want, out)
		}
	}
	left := k("get", "cm,pvc,rc,ing,ds", selector, "-o", "name")
	if got := strings.Fields(left); len(got) != 3 || strings.Contains(left, "agent-state") || strings.Contains(left, "agent-ui") {
		t.Errorf("left after pruning: %v", got)
	}

	// The same with an ApplySet, which records the kinds it applied in a parent Secret.
	cmd := func(args ...string) string {
		t.Helper()
		c := exec.Command("kubectl", args...)
		c.Env = []string{"HOME=" + home, "KUBECONFIG=" + env.KubeconfigPath, "PATH=" + os.Getenv("PATH"), "KUBECTL_APPLYSET=true"}
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	k("delete", "cm,rc,ds", selector)
	cmd("apply", "-n=default", "--prune", "--applyset=agent", "-f", all)
	out = cmd("apply", "-n=default", "--prune", "--applyset=agent", "-f", fewer)
	for _, want := range []string{"persistentvolumeclaim/agent-state pruned", "ingress.networking.k8s.io/agent-ui pruned"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply --applyset without two objects: no %q in\n%s", want, out)
		}
	}
	if kinds := k("get", "secret", "agent", "-o", "jsonpath={.metadata.annotations.applyset\\.kubernetes\\.io/contains-group-kinds}"); kinds != "ConfigMap,DaemonSet.apps,ReplicationController" {
		t.Errorf("the ApplySet's kinds: %q", kinds)
	}
}
