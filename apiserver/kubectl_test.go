package apiserver_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/miniplane/miniplane/test/testenv"
)

// kubectl runs kubectl against an env with its admin kubeconfig and default flags, in a
// private HOME so that its discovery and OpenAPI caches belong to this test.
type kubectl struct {
	t    *testing.T
	path string
	env  []string
}

func newKubectl(t *testing.T, env *testenv.Env) *kubectl {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on the PATH")
	}
	home := t.TempDir()
	return &kubectl{t: t, path: path, env: []string{
		"HOME=" + home,
		"KUBECONFIG=" + env.KubeconfigPath,
		"KUBECACHEDIR=" + filepath.Join(home, "cache"),
		"PATH=" + os.Getenv("PATH"),
	}}
}

// run runs kubectl with args and returns stdout and stderr; failing fails the test.
func (k *kubectl) run(args ...string) (string, string) {
	k.t.Helper()
	stdout, stderr, err := k.try(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout, stderr
}

func (k *kubectl) try(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.path, args...)
	cmd.Env = k.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestKubectl drives the server with kubectl's default flags: get, apply (create, then the
// strategic-merge patch path), get -o yaml, describe, delete.
func TestKubectl(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	k := newKubectl(t, env)
	ctx := testCtx(t)
	_, err := env.Client.CoreV1().Nodes().Create(ctx, node("worker-1"), metav1.CreateOptions{})
	check(t, err)

	out, _ := k.run("get", "nodes")
	if !strings.Contains(out, "worker-1") || !strings.Contains(out, "Ready") || !strings.Contains(out, "STATUS") {
		t.Fatalf("kubectl get nodes:\n%s", out)
	}
	out, _ = k.run("get", "ns")
	for _, ns := range []string{"default", "kube-system", "kube-node-lease"} {
		if !strings.Contains(out, ns) {
			t.Fatalf("kubectl get ns lacks %s:\n%s", ns, out)
		}
	}

	manifest := filepath.Join(repoRoot(t), "configs", "examples", "daemonset.yaml")
	out, stderr := k.run("apply", "-f", manifest)
	if !strings.Contains(out, "daemonset.apps/node-agent created") {
		t.Fatalf("kubectl apply:\n%s\n%s", out, stderr)
	}
	if strings.Contains(stderr, "Warning") {
		t.Fatalf("kubectl apply warned:\n%s", stderr)
	}

	out, _ = k.run("get", "ds", "node-agent", "-o", "yaml")
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal([]byte(out), &ds); err != nil {
		t.Fatalf("kubectl get ds -o yaml: %v\n%s", err, out)
	}
	if ds.Spec.RevisionHistoryLimit == nil || *ds.Spec.RevisionHistoryLimit != 10 ||
		ds.Spec.UpdateStrategy.RollingUpdate == nil || ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge == nil ||
		ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge.IntValue() != 0 ||
		ds.Spec.Template.Spec.RestartPolicy != "Always" || ds.Spec.Template.Spec.SchedulerName != "default-scheduler" ||
		ds.Spec.Template.Spec.Containers[0].TerminationMessagePath != "/dev/termination-log" ||
		ds.Spec.Template.Spec.Containers[0].Ports[0].Protocol != "TCP" {
		t.Fatalf("defaults missing from kubectl get ds -o yaml:\n%s", out)
	}
	if ds.Generation != 1 || ds.Annotations[templateGeneration] != "1" ||
		ds.Annotations["kubectl.kubernetes.io/last-applied-configuration"] == "" {
		t.Fatalf("metadata after apply: generation %d annotations %v", ds.Generation, ds.Annotations)
	}
	for _, want := range []string{"revisionHistoryLimit: 10", "maxSurge: 0", "apiVersion: apps/v1", "kind: DaemonSet"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl get ds -o yaml lacks %q:\n%s", want, out)
		}
	}

	out, _ = k.run("get", "ds")
	if !strings.Contains(out, "node-agent") || !strings.Contains(out, "kubernetes.io/os=linux") {
		t.Fatalf("kubectl get ds:\n%s", out)
	}

	out, _ = k.run("describe", "ds", "node-agent")
	for _, want := range []string{"Name:", "node-agent", "Selector:", "app=node-agent", "registry.example/node-agent:1.0", "kubernetes.io/os=linux"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl describe ds lacks %q:\n%s", want, out)
		}
	}

	// Apply again with a new image: kubectl sends a strategic merge patch.
	data, err := os.ReadFile(manifest)
	check(t, err)
	edited := strings.Replace(string(data), "registry.example/node-agent:1.0", "registry.example/node-agent:1.1", 1)
	if edited == string(data) {
		t.Fatal("the example manifest no longer has the image this test edits")
	}
	editedPath := filepath.Join(t.TempDir(), "daemonset.yaml")
	check(t, os.WriteFile(editedPath, []byte(edited), 0o600))
	out, _ = k.run("apply", "-f", editedPath)
	if !strings.Contains(out, "daemonset.apps/node-agent configured") {
		t.Fatalf("second kubectl apply:\n%s", out)
	}
	got, err := env.Client.AppsV1().DaemonSets("default").Get(ctx, "node-agent", metav1.GetOptions{})
	check(t, err)
	if got.Spec.Template.Spec.Containers[0].Image != "registry.example/node-agent:1.1" ||
		got.Generation != 2 || got.Annotations[templateGeneration] != "2" {
		t.Fatalf("after the second apply: image %s generation %d template generation %q",
			got.Spec.Template.Spec.Containers[0].Image, got.Generation, got.Annotations[templateGeneration])
	}
	// Unchanged: apply is a no-op.
	out, _ = k.run("apply", "-f", editedPath)
	if !strings.Contains(out, "unchanged") {
		t.Fatalf("third kubectl apply:\n%s", out)
	}

	// kubectl validates through the server (fieldValidation=Strict, advertised in the
	// OpenAPI document): an unknown field fails the apply and changes nothing.
	bogus := strings.Replace(edited, "spec:\n  selector:", "spec:\n  bogusField: 1\n  selector:", 1)
	if bogus == edited {
		t.Fatal("could not add an unknown field to the manifest")
	}
	bogusPath := filepath.Join(t.TempDir(), "bogus.yaml")
	check(t, os.WriteFile(bogusPath, []byte(bogus), 0o600))
	if out, stderr, err := k.try("apply", "-f", bogusPath); err == nil || !strings.Contains(stderr, `unknown field "spec.bogusField"`) {
		t.Fatalf("kubectl apply with an unknown field: err %v\n%s\n%s", err, out, stderr)
	}

	out, _ = k.run("delete", "ds", "node-agent")
	if !strings.Contains(out, `daemonset.apps "node-agent" deleted`) {
		t.Fatalf("kubectl delete:\n%s", out)
	}
	out, stderr = k.run("get", "ds")
	if strings.Contains(out, "node-agent") || !strings.Contains(stderr, "No resources found") {
		t.Fatalf("kubectl get ds after delete:\n%s\n%s", out, stderr)
	}
}

// TestKubectlOpenAPI drives what kubectl reads from the OpenAPI documents: explain (v3,
// and v2 with --output=plaintext-openapiv2) prints the API's field documentation, apply
// with default flags validates through the server, and a misspelled field fails the
// apply naming the field, on create and on patch.
func TestKubectlOpenAPI(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	k := newKubectl(t, env)

	out, _ := k.run("explain", "daemonset.spec.updateStrategy")
	for _, want := range []string{"KIND:       DaemonSet", "FIELD: updateStrategy <DaemonSetUpdateStrategy>", "An update strategy to replace existing DaemonSet pods with new pods.",
		"rollingUpdate\t<RollingUpdateDaemonSet>", "enum: OnDelete, RollingUpdate"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl explain daemonset.spec.updateStrategy lacks %q:\n%s", want, out)
		}
	}
	out, _ = k.run("explain", "--output=plaintext-openapiv2", "pods.spec.containers.image")
	if !strings.Contains(out, "Container image name.") {
		t.Fatalf("kubectl explain (OpenAPI v2) pods.spec.containers.image:\n%s", out)
	}

	dir := t.TempDir()
	manifest := `apiVersion: v1
kind: Namespace
metadata:
  name: agents
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: agents
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: registry.example/agent:1.0
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: agent-leader
  namespace: agents
spec:
  holderIdentity: agent-0
`
	path := filepath.Join(dir, "agents.yaml")
	check(t, os.WriteFile(path, []byte(manifest), 0o600))
	out, stderr := k.run("apply", "-f", path)
	for _, want := range []string{"namespace/agents created", "daemonset.apps/agent created", "lease.coordination.k8s.io/agent-leader created"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl apply lacks %q:\n%s\n%s", want, out, stderr)
		}
	}
	if stderr != "" {
		t.Fatalf("kubectl apply wrote to stderr:\n%s", stderr)
	}

	misspelled := strings.Replace(manifest, "    spec:\n      containers:", "    spec:\n      containerz: []\n      containers:", 1)
	if misspelled == manifest {
		t.Fatal("could not misspell the manifest")
	}
	for _, tc := range []struct{ name, from, to string }{
		{"on create", "name: agent\n", "name: agent-2\n"},
		{"on patch", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			check(t, os.WriteFile(path, []byte(strings.Replace(misspelled, tc.from, tc.to, 1)), 0o600))
			out, stderr, err := k.try("apply", "-f", path)
			if err == nil || !strings.Contains(stderr, `unknown field "spec.template.spec.containerz"`) {
				t.Fatalf("kubectl apply of a misspelled field: err %v\n%s\n%s", err, out, stderr)
			}
		})
	}
	ds, err := env.Client.AppsV1().DaemonSets("agents").List(testCtx(t), metav1.ListOptions{})
	check(t, err)
	if len(ds.Items) != 1 || ds.Items[0].Name != "agent" || ds.Items[0].Generation != 1 {
		t.Fatalf("after the failed applies: %+v", ds.Items)
	}
}
