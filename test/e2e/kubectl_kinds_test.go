package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/internal/poll"
	"github.com/miniplane/miniplane/test/testenv"
)

// kubectlFails runs kubectl and returns its output, failing the test if kubectl succeeds.
func kubectlFails(t *testing.T, env *testenv.Env, home string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + env.KubeconfigPath, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("kubectl %s succeeded, want a failure:\n%s", strings.Join(args, " "), out)
	}
	return string(out)
}

// TestKubectlKinds drives the kinds a DaemonSet's manifests bring along the way kubectl
// users do: the create generators, cluster-info, get all, api-resources, and a drain that
// evicts under a disruption budget.
func TestKubectlKinds(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	home := t.TempDir()
	env := testenv.New(t, testenv.Everything(2))
	k := func(args ...string) string { t.Helper(); return dsKubectl(t, env, home, args...) }

	for _, args := range [][]string{
		{"create", "configmap", "settings", "--from-literal=level=debug"},
		{"create", "secret", "generic", "token", "--from-literal=key=s3cret"},
		{"create", "serviceaccount", "reader"},
		{"create", "service", "clusterip", "web", "--tcp=80:8080"},
		{"create", "service", "nodeport", "edge", "--tcp=443:8443"},
		{"create", "quota", "small", "--hard=pods=20,services=5"},
		{"create", "priorityclass", "batch-low", "--value=10", "--description=low"},
		{"create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods"},
		{"create", "rolebinding", "read-pods", "--role=pod-reader", "--serviceaccount=default:reader"},
		{"create", "clusterrole", "node-reader", "--verb=get,list", "--resource=nodes"},
		{"create", "clusterrolebinding", "read-nodes", "--clusterrole=node-reader", "--group=readers"},
		{"create", "poddisruptionbudget", "web", "--selector=app=web", "--min-available=1"},
		{"create", "deployment", "api", "--image=registry.example/api:1"},
		{"create", "job", "once", "--image=registry.example/task:1"},
		{"create", "cronjob", "nightly", "--image=registry.example/task:1", "--schedule=0 2 * * *"},
	} {
		out := k(args...)
		if countApplied(out, "created") != 1 {
			t.Errorf("kubectl %s: %s", strings.Join(args, " "), out)
		}
		// What no controller runs says so where the command's output is read.
		kind := args[1]
		notRun := kind == "deployment" || kind == "job" || kind == "cronjob"
		if warned := strings.Contains(out, "Warning: miniplane runs no "+kind+" controller"); warned != notRun {
			t.Errorf("kubectl %s: warned %v, want %v:\n%s", strings.Join(args, " "), warned, notRun, out)
		}
	}
	if out := k("get", "cm,secret,sa,svc,quota,pc,role,rolebinding,pdb"); !strings.Contains(out, "configmap/settings") ||
		!strings.Contains(out, "service/edge") || !strings.Contains(out, "443:3") || !strings.Contains(out, "priorityclass.scheduling.k8s.io/batch-low") {
		t.Errorf("kubectl get:\n%s", out)
	}
	if out := k("cluster-info"); !strings.Contains(out, "Kubernetes control plane is running at "+env.URL) {
		t.Errorf("kubectl cluster-info:\n%s", out)
	}
	if out := k("get", "all", "-A"); !strings.Contains(out, "service/kubernetes") || !strings.Contains(out, "deployment.apps/api") ||
		!strings.Contains(out, "cronjob.batch/nightly") {
		t.Errorf("kubectl get all -A:\n%s", out)
	}
	out := k("api-resources")
	for _, want := range []string{"configmaps", "cm", "serviceaccounts", "sa", "services", "svc", "endpoints", "ep", "priorityclasses", "pc",
		"poddisruptionbudgets", "pdb", "deployments", "deploy", "replicasets", "rs", "statefulsets", "sts", "networkpolicies", "netpol",
		"resourcequotas", "quota", "limitranges", "limits", "endpointslices", "clusterrolebindings"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl api-resources lacks %q:\n%s", want, out)
		}
	}
	if out := k("describe", "deployment", "api"); !strings.Contains(out, "NoController") {
		t.Errorf("kubectl describe deployment does not say that no controller runs it:\n%s", out)
	}

	// Drain evicts: a budget that allows no disruption holds the pod, one that does lets it go.
	node := dsNodeName(0)
	dsKubectlStdin(t, env, home, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},
		"spec":{"nodeName":"`+node+`","containers":[{"name":"c","image":"registry.example/web:1"}]}}`, "apply", "-f", "-")
	poll.Until(t, dsTimeout, "the budget to count the running pod", func() bool {
		pdb, err := env.Client.PolicyV1().PodDisruptionBudgets("default").Get(context.Background(), "web", metav1.GetOptions{})
		return err == nil && pdb.Status.CurrentHealthy == 1 && pdb.Status.ObservedGeneration == pdb.Generation
	})
	if out := kubectlFails(t, env, home, "drain", node, "--ignore-daemonsets", "--force", "--timeout=6s"); !strings.Contains(out, "evicting pod default/web") ||
		!strings.Contains(out, "global timeout reached") {
		t.Errorf("kubectl drain under a budget of 0 disruptions:\n%s", out)
	}
	k("patch", "pdb", "web", "--type=merge", "-p", `{"spec":{"minAvailable":0}}`)
	if out := k("drain", node, "--ignore-daemonsets", "--force", "--timeout=60s"); !strings.Contains(out, "pod/web evicted") {
		t.Errorf("kubectl drain:\n%s", out)
	}
}

// TestKubectlScale: `kubectl scale` changes a workload's replicas through its scale
// subresource, with the generation following, and refuses a negative count.
func TestKubectlScale(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	home := t.TempDir()
	env := testenv.New(t, testenv.Config{})
	k := func(args ...string) string { t.Helper(); return dsKubectl(t, env, home, args...) }
	k("create", "deployment", "api", "--image=registry.example/api:1", "--replicas=2")
	if out := k("scale", "deployment/api", "--replicas=5"); !strings.Contains(out, "deployment.apps/api scaled") {
		t.Fatalf("kubectl scale: %s", out)
	}
	d, err := env.Client.AppsV1().Deployments("default").Get(context.Background(), "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 5 || d.Generation != 2 {
		t.Errorf("after scale: replicas %d generation %d, want 5 and 2", *d.Spec.Replicas, d.Generation)
	}
	s, err := env.Client.AppsV1().Deployments("default").GetScale(context.Background(), "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Spec.Replicas != 5 || s.Status.Selector != "app=api" {
		t.Errorf("scale %+v", s)
	}
	if out := kubectlFails(t, env, home, "scale", "deployment/api", "--replicas=-1"); !strings.Contains(out, "replicas") {
		t.Errorf("kubectl scale --replicas=-1: %s", out)
	}
}

// TestKubectlServerSideApply: `kubectl apply --server-side` creates and updates, a second
// field manager conflicts with the first (and --force-conflicts takes over), managed fields
// show with --show-managed-fields, and an object made by client-side `kubectl apply`
// migrates: a field dropped from the manifest is removed.
func TestKubectlServerSideApply(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	home := t.TempDir()
	env := testenv.New(t, testenv.Config{})
	k := func(stdin string, args ...string) string {
		t.Helper()
		return dsKubectlStdin(t, env, home, stdin, args...)
	}
	const a = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"shared"},"data":{"owner":"team-a"}}`
	const b = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"shared"},"data":{"owner":"team-b"}}`
	if out := k(a, "apply", "--server-side", "--field-manager=team-a", "-f", "-"); !strings.Contains(out, "serverside-applied") {
		t.Fatalf("apply --server-side: %s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", "apply", "--server-side", "--field-manager=team-b", "-f", "-")
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + env.KubeconfigPath, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(b)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `conflict with "team-a": .data.owner`) {
		t.Errorf("a conflicting apply: %v\n%s", err, out)
	}
	k(b, "apply", "--server-side", "--field-manager=team-b", "--force-conflicts", "-f", "-")
	if out := k("", "get", "configmap", "shared", "-o", "yaml", "--show-managed-fields"); !strings.Contains(out, "owner: team-b") ||
		!strings.Contains(out, "manager: team-b") || !strings.Contains(out, "operation: Apply") {
		t.Errorf("kubectl get --show-managed-fields:\n%s", out)
	}

	k(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"csa"},"data":{"keep":"1","drop":"2"}}`, "apply", "-f", "-")
	k(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"csa"},"data":{"keep":"1"}}`, "apply", "--server-side", "-f", "-")
	cm, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, "csa", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, still := cm.Data["drop"]; still || cm.Data["keep"] != "1" {
		t.Errorf("after migrating to server-side apply: %v", cm.Data)
	}
}
