package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/kubeletstub"
	"github.com/miniplane/miniplane/test/testenv"
)

// TestFleetsShareAClusterWithoutCollisions runs two fleets with the same prefix and
// credential and no pod-cidr, as two replicas of one compose service do, against one API
// server with node IPAM: their node names and their pod IPs are all distinct.
func TestFleetsShareAClusterWithoutCollisions(t *testing.T) {
	const perFleet = 4
	fleetCfg := func(instance string) configs.KubeletStub {
		cfg := configs.DefaultKubeletStub()
		cfg.Nodes = perFleet
		cfg.NodePrefix = "fleet"
		cfg.NodeInstance = instance
		cfg.HeartbeatInterval = 300 * time.Millisecond
		cfg.LeaseRenewInterval = 300 * time.Millisecond
		return cfg
	}
	a, b := fleetCfg("a"), fleetCfg("b")
	if a.PodCIDR != "" {
		t.Fatalf("default pod-cidr %q: this test is about fleets that have none", a.PodCIDR)
	}

	dir := t.TempDir()
	if _, err := testenv.EnsureTokens(filepath.Join(dir, "tokens.csv"), []auth.User{testenv.StubIdentity(a)}); err != nil {
		t.Fatal(err)
	}
	cm := cpManagerConfig(configs.ControllerDaemonSet, configs.ControllerNodeIPAM)
	env := testenv.New(t, testenv.Config{DataDir: dir, ControllerManager: &cm})
	cpStartScheduler(t, env)
	client := cpAdminClient(t, env)
	stubConfig := env.ConfigFor(testenv.StubIdentity(a).Name)
	for _, cfg := range []configs.KubeletStub{a, b} {
		fleet, err := kubeletstub.New(cfg, kubeletstub.Options{RestConfig: stubConfig, Logger: cpTestLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		cpRun(t, "fleet "+cfg.NodeInstance, fleet.Run)
		cpEventually(t, 30*time.Second, "fleet "+cfg.NodeInstance+" ready", func() (bool, error) { return fleet.Ready(), nil })
	}

	ctx := context.Background()
	cpEventually(t, 30*time.Second, "every node to get a distinct pod CIDR", func() (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		names, cidrs := map[string]bool{}, map[string]string{}
		for _, n := range nodes.Items {
			if !strings.HasPrefix(n.Name, "fleet-a-") && !strings.HasPrefix(n.Name, "fleet-b-") {
				t.Fatalf("unexpected node %s", n.Name)
			}
			names[n.Name] = true
			if n.Spec.PodCIDR == "" {
				return false, nil
			}
			if other, dup := cidrs[n.Spec.PodCIDR]; dup {
				t.Fatalf("nodes %s and %s share pod CIDR %s", other, n.Name, n.Spec.PodCIDR)
			}
			cidrs[n.Spec.PodCIDR] = n.Name
		}
		return len(names) == 2*perFleet, nil
	})

	labels := map[string]string{"app": "spread"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
	if _, err := client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	cpEventually(t, 60*time.Second, "a running daemon pod with an IP on each node", func() (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				running++
			}
		}
		return running == 2*perFleet, nil
	})
	ips := map[string]string{}
	for _, p := range pods {
		if other, dup := ips[p.Status.PodIP]; dup {
			t.Errorf("pods %s and %s share IP %s", other, p.Name, p.Status.PodIP)
		}
		ips[p.Status.PodIP] = p.Name + " on " + p.Spec.NodeName
	}
}
