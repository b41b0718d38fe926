package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/miniplane/miniplane/internal/gcbudget"
	"github.com/miniplane/miniplane/internal/poll"
)

// startUp runs `miniplane up` with args and extra environment on a fresh data dir, waits
// until it serves, and returns an admin client and its output.
func startUp(t *testing.T, bin string, env []string, args ...string) (kubernetes.Interface, *lockedBuffer) {
	t.Helper()
	up := startUpProcess(t, bin, filepath.Join(t.TempDir(), "data"), env, args...)
	var client kubernetes.Interface
	poll.UntilErr(t, ksTimeout, "miniplane up to write its kubeconfig and serve", func() (bool, error) {
		select {
		case err := <-up.Done:
			t.Fatalf("miniplane up exited: %v\n%s", err, up.Out.String())
		default:
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", up.Kubeconfig)
		if err != nil {
			return false, err
		}
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return false, err
		}
		_, err = client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil, err
	})
	return client, up.Out
}

// legacyNodesConfig gives up two nodes: stub-node-0 roomy, stub-node-1 too small for the
// daemon pod, so the v1.12 controller must report FailedPlacement there.
const legacyNodesConfig = `kubeletstub:
  overrides:
    - name: stub-node-1
      capacity: {cpu: 100m, memory: 1Gi, pods: 10}
`

// TestUpLegacyPlacementFromEverySource is the reported bug, with the real binary: the
// ScheduleDaemonSetPods feature gate turned off in the YAML file (in either case), the
// environment or a flag selects the v1.12 placement mode on every start — the controller sets
// spec.nodeName itself, pins no node affinity, and reports FailedPlacement for a node the pod
// does not fit.
func TestUpLegacyPlacementFromEverySource(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the miniplane binary")
	}
	bin := ksBuild(t, t.TempDir())
	writeConfig := func(t *testing.T, extra string) string {
		file := filepath.Join(t.TempDir(), "miniplane.yaml")
		if err := os.WriteFile(file, []byte(legacyNodesConfig+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	for _, tc := range []struct {
		name  string
		gate  string // appended to the YAML file
		env   []string
		flags []string
	}{
		{name: "yaml", gate: "controller-manager:\n  feature-gates:\n    ScheduleDaemonSetPods: false\n"},
		{name: "yaml lower case", gate: "controller-manager:\n  feature-gates:\n    scheduledaemonsetpods: false\n"},
		{name: "env", env: []string{"MINIPLANE_CONTROLLER_MANAGER_FEATURE_GATES=ScheduleDaemonSetPods=false"}},
		{name: "flag", flags: []string{"--controller-manager-feature-gates", "ScheduleDaemonSetPods=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--nodes", "2", "--config", writeConfig(t, tc.gate)}, tc.flags...)
			client, out := startUp(t, bin, tc.env, args...)
			expectLegacyPlacement(t, client)
			if !strings.Contains(out.String(), "scheduleDaemonSetPods=false") {
				t.Errorf("the controller did not log scheduleDaemonSetPods=false:\n%s", out.String())
			}
		})
	}
}

// expectLegacyPlacement creates a DaemonSet asking for half a cpu and checks the v1.12 mode's
// marks on what the controller does.
func expectLegacyPlacement(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "legacy"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "agent", Image: "registry.example/agent:1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}},
				}}},
			},
		},
	}
	if _, err := client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	poll.UntilErr(t, ksTimeout, "one daemon pod, on stub-node-0", func() (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=legacy"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		return len(pods) == 1, fmt.Errorf("%d pods", len(pods))
	})
	pod := pods[0]
	if pod.Spec.NodeName != "stub-node-0" {
		t.Errorf("pod %s: spec.nodeName = %q, want stub-node-0 set by the controller", pod.Name, pod.Spec.NodeName)
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		t.Errorf("pod %s has a node affinity %+v; the v1.12 mode pins no affinity", pod.Name, a.NodeAffinity)
	}
	poll.UntilErr(t, ksTimeout, "a FailedPlacement event for stub-node-1", func() (bool, error) {
		events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedPlacement"})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, "stub-node-1") {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d FailedPlacement events, none for stub-node-1", len(events.Items))
	})
}

// TestUpMemoryBudgetFollowsNodes: the budget of `up --nodes 0` starts flat and grows by
// --memory-budget-per-node for every Node registered, by whatever client, as the collector's
// debug log shows.
func TestUpMemoryBudgetFollowsNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the miniplane binary")
	}
	if gcbudget.EnvOverrides() {
		t.Skip("GOGC or GOMEMLIMIT is set: up would not tune its collector")
	}
	bin := ksBuild(t, t.TempDir())
	client, out := startUp(t, bin, nil, "--nodes", "0", "--log-level", "debug", "--memory-budget-per-node", "300Mi")
	budget := func(bytes int64) {
		t.Helper()
		want := fmt.Sprintf("budgetBytes=%d", bytes)
		poll.UntilErr(t, ksTimeout, "the collector to be tuned to "+want, func() (bool, error) {
			return strings.Contains(out.String(), want), fmt.Errorf("no %q in the log", want)
		})
	}
	budget(208 << 20) // no Node yet: the flat budget
	for i, name := range []string{"budget-node-a", "budget-node-b"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		budget(int64(i+1) * 300 << 20)
	}
}
