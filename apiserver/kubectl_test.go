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
