package compose

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

const (
	// totalNodes is what docker-compose.yml runs: node-a, node-b, node-c and fleet-1-0 …
	// fleet-1-99.
	totalNodes = 103
	// fleetNodes is the size of one kubelet-fleet replica.
	fleetNodes = 100
	// healthyWithin is the promise: every service healthy within a minute of `up`.
	healthyWithin = time.Minute
	testNamespace = "compose-test"
	dsName        = "fault-agent"
	// unreachableTaint is the node lifecycle controller's taint for a node that stopped
	// heartbeating (Ready=Unknown).
	unreachableTaint = "node.kubernetes.io/unreachable"
)

// controllerManagers are the replicas of docker-compose.yml; their hostnames are the service
// names, and client-go leader election names a candidate <hostname>_<uuid>.
var controllerManagers = []string{"controller-manager-1", "controller-manager-2"}

// TestCompose brings the compose deployment up and takes it through the faults,
// asserting each time on what the API returns.
func TestCompose(t *testing.T) {
	if os.Getenv("MINIPLANE_COMPOSE_TEST") != "1" {
		t.Skip("set MINIPLANE_COMPOSE_TEST=1 to run the docker compose fault test (needs a Docker engine and docker-compose)")
	}
	// Stop a few minutes before `go test -timeout` would kill the binary, so that a stuck
	// step fails normally and the teardown still runs.
	deadline := time.Now().Add(25 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-3 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	testStart := time.Now()
	s := newStack(t)
	timings := map[string]time.Duration{}
	defer func() {
		for _, k := range slices.Sorted(maps.Keys(timings)) {
			t.Logf("timing: %-40s %s", k, timings[k].Round(100*time.Millisecond))
		}
		t.Logf("timing: %-40s %s", "whole test before teardown", time.Since(testStart).Round(time.Second))
	}()

	step := func(name string, f func(t *testing.T)) {
		start := time.Now()
		ok := t.Run(name, f)
		timings[name] = time.Since(start)
		if !ok {
			t.FailNow()
		}
	}
	var client *kubernetes.Clientset
	services := []string{}

	step("build image", func(t *testing.T) { s.buildImage(ctx, t) })
	step("up", func(t *testing.T) {
		services = s.services(ctx, t)
		start := time.Now()
		s.mustCompose(ctx, t, 5*time.Minute, "up", "-d")
		took := s.waitHealthy(ctx, t, 3*time.Minute, services...)
		elapsed := time.Since(start)
		timings["up: all services healthy"] = elapsed
		t.Logf("%d services healthy %s after `up -d` started (health wait %s)", len(services), elapsed.Round(100*time.Millisecond), took.Round(100*time.Millisecond))
		if elapsed > healthyWithin {
			t.Errorf("services took %s to become healthy, want at most %s", elapsed.Round(time.Second), healthyWithin)
		}
		checkHostKubeconfig(t, s)
		client = s.client(t)
		waitNodesReady(ctx, t, client, totalNodes)
		if kubectl, err := exec.LookPath("kubectl"); err == nil {
			out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", s.kubeconfig(), "get", "nodes", "-o", "name").CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl get nodes with the host kubeconfig: %v: %s", err, out)
			}
			if n := len(strings.Fields(string(out))); n != totalNodes {
				t.Errorf("kubectl get nodes lists %d nodes, want %d", n, totalNodes)
			}
		}
	})
	step("daemonset on every node", func(t *testing.T) {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.AppsV1().DaemonSets(testNamespace).Create(ctx, testDaemonSet(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitDaemonSetRolledOut(ctx, t, client, "registry.example/fault-agent:1", 3*time.Minute)
	})
	step("least privilege", func(t *testing.T) { leastPrivilege(ctx, t, s, client) })
	step("etcd member stopped", func(t *testing.T) { etcdMemberDown(ctx, t, s, client) })
	step("controller-manager leader killed", func(t *testing.T) { controllerManagerFailover(ctx, t, s, client, timings) })
	step("kubelet stopped", func(t *testing.T) { kubeletDown(ctx, t, s, client, timings) })
	step("down and up keeps every object", func(t *testing.T) {
		before := snapshot(ctx, t, client)
		s.mustCompose(ctx, t, 3*time.Minute, "down", "-t", "10")
		cs, err := s.containers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 0 {
			t.Fatalf("containers left after down: %v", cs)
		}
		start := time.Now()
		s.mustCompose(ctx, t, 5*time.Minute, "up", "-d")
		s.waitHealthy(ctx, t, 3*time.Minute, services...)
		timings["down/up: all services healthy again"] = time.Since(start)
		client = s.client(t)
		after := snapshot(ctx, t, client)
		var missing []string
		for key, uid := range before {
			switch got, ok := after[key]; {
			case !ok:
				missing = append(missing, key+" (gone)")
			case got != uid:
				missing = append(missing, fmt.Sprintf("%s (uid %s, was %s: recreated)", key, got, uid))
			}
		}
		slices.Sort(missing)
		if len(missing) > 0 {
			t.Fatalf("%d of %d objects did not survive down/up: %s", len(missing), len(before), strings.Join(missing, "; "))
		}
		t.Logf("all %d objects (namespaces, nodes, leases, daemonsets, controllerrevisions, pods) survived down/up with their UIDs", len(before))
		waitDaemonSetRolledOut(ctx, t, client, "registry.example/fault-agent:2", 2*time.Minute)
	})
	step("scale the fleet", func(t *testing.T) { scaleFleet(ctx, t, s, client, timings) })
}

// scaleFleet runs a second kubelet-fleet replica with nothing set by hand: its nodes must
// have names and InternalIPs of their own, every Node a pod CIDR block of its own, and the
// daemon pods on the new nodes IPs no other pod has.
func scaleFleet(ctx context.Context, t *testing.T, s *stack, client kubernetes.Interface, timings map[string]time.Duration) {
	start := time.Now()
	s.mustCompose(ctx, t, 3*time.Minute, "up", "-d", "--no-recreate", "--scale", "kubelet-fleet=2")
	want := totalNodes + fleetNodes
	waitNodesReady(ctx, t, client, want)
	// A node is Ready as soon as it registers; its pod CIDR follows from the controller-manager.
	var nodes *corev1.NodeList
	poll(ctx, t, time.Minute, "a pod CIDR on every node", func(ctx context.Context) (bool, string) {
		var err error
		if nodes, err = client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			return false, err.Error()
		}
		without := 0
		for _, n := range nodes.Items {
			if n.Spec.PodCIDR == "" {
				without++
			}
		}
		return without == 0, fmt.Sprintf("%d of %d nodes without a pod CIDR", without, len(nodes.Items))
	})
	cidrs := map[string]string{}
	internalIPs := map[string]string{}
	perReplica := map[string]int{}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			// Host-network pods take this address as their pod IP.
			if other, dup := internalIPs[a.Address]; dup {
				t.Errorf("nodes %s and %s share InternalIP %s", other, n.Name, a.Address)
			}
			internalIPs[a.Address] = n.Name
		}
		if rest, ok := strings.CutPrefix(n.Name, "fleet-"); ok {
			replica, _, _ := strings.Cut(rest, "-")
			perReplica[replica]++
		}
		if n.Spec.PodCIDR == "" {
			t.Errorf("node %s has no pod CIDR", n.Name)
			continue
		}
		if other, dup := cidrs[n.Spec.PodCIDR]; dup {
			t.Errorf("nodes %s and %s share pod CIDR %s", other, n.Name, n.Spec.PodCIDR)
		}
		cidrs[n.Spec.PodCIDR] = n.Name
	}
	if perReplica["1"] != fleetNodes || perReplica["2"] != fleetNodes || len(perReplica) != 2 {
		t.Errorf("fleet nodes per replica %v, want %d for each of replicas 1 and 2", perReplica, fleetNodes)
	}
	waitDaemonSetOn(ctx, t, client, "registry.example/fault-agent:2", want, 3*time.Minute)
	pods, err := client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + dsName})
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, p := range pods.Items {
		if other, dup := ips[p.Status.PodIP]; dup {
			t.Errorf("pods %s and %s share IP %s", other, p.Name, p.Status.PodIP)
		}
		ips[p.Status.PodIP] = p.Name
	}
	timings["scale: second fleet rolled out"] = time.Since(start)
	t.Logf("kubelet-fleet=2: %d nodes with distinct names, InternalIPs (%d) and pod CIDRs, %d daemon pods with distinct IPs, after %s",
		len(nodes.Items), len(internalIPs), len(ips), time.Since(start).Round(100*time.Millisecond))
}

// checkHostKubeconfig checks that the admin kubeconfig the root containers wrote into the
// host folder belongs to the user running the test (so it can be read and removed).
func checkHostKubeconfig(t *testing.T, s *stack) {
	t.Helper()
	for _, p := range []string{s.state, s.kubeconfig()} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
			t.Errorf("%s is owned by uid %d, want the host user %d", p, st.Uid, os.Getuid())
		}
	}
	if _, err := os.ReadFile(s.kubeconfig()); err != nil {
		t.Errorf("host user cannot read the admin kubeconfig: %v", err)
	}
}

func testDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": dsName}
	maxUnavailable := intstr.FromString("50%")
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: dsName, Namespace: testNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// Tolerate every taint: node-b (dedicated=infra:NoSchedule) and node-c
					// (nvidia.com/gpu:NoExecute) must get a pod too.
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name:  "agent",
						Image: "registry.example/fault-agent:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
						}},
					}},
				},
			},
		},
	}
}

// poll calls cond every second until it reports done, and fails the test with cond's last
// status when timeout passes. cond returns a status line describing what it saw.
func poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		done, status := cond(ctx)
		if done {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after %s: %s", what, timeout, status)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v: %s", what, ctx.Err(), status)
		case <-time.After(time.Second):
		}
	}
}

func waitNodesReady(ctx context.Context, t *testing.T, c kubernetes.Interface, want int) {
	t.Helper()
	poll(ctx, t, 2*time.Minute, "nodes Ready", func(ctx context.Context) (bool, string) {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range nodes.Items {
			if nodeReady(&nodes.Items[i]) == corev1.ConditionTrue {
				ready++
			}
		}
		return len(nodes.Items) == want && ready == want, fmt.Sprintf("%d nodes, %d Ready, want %d", len(nodes.Items), ready, want)
	})
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitDaemonSetRolledOut waits until the DaemonSet's status reports every node updated and
// available, and the pods confirm it: exactly one running, ready pod with image on each of
// the totalNodes nodes.
func waitDaemonSetRolledOut(ctx context.Context, t *testing.T, c kubernetes.Interface, image string, timeout time.Duration) {
	t.Helper()
	waitDaemonSetOn(ctx, t, c, image, totalNodes, timeout)
}

// waitDaemonSetOn is waitDaemonSetRolledOut over a stack of nodes nodes.
func waitDaemonSetOn(ctx context.Context, t *testing.T, c kubernetes.Interface, image string, totalNodes int, timeout time.Duration) {
	t.Helper()
	took := poll(ctx, t, timeout, "DaemonSet rolled out with "+image, func(ctx context.Context) (bool, string) {
		ds, err := c.AppsV1().DaemonSets(testNamespace).Get(ctx, dsName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := ds.Status
		nodes := int32(totalNodes)
		status := fmt.Sprintf("generation %d observed %d, desired %d current %d updated %d ready %d available %d",
			ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.CurrentNumberScheduled,
			st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable)
		if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled != nodes ||
			st.UpdatedNumberScheduled != nodes || st.NumberReady != nodes || st.NumberAvailable != nodes {
			return false, status
		}
		pods, err := c.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + dsName})
		if err != nil {
			return false, err.Error()
		}
		perNode := map[string]int{}
		var bad []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				bad = append(bad, p.Name+" terminating")
				continue
			}
			perNode[p.Spec.NodeName]++
			if p.Spec.Containers[0].Image != image || p.Status.Phase != corev1.PodRunning || !podReady(p) {
				bad = append(bad, fmt.Sprintf("%s on %s: %s %s ready=%v", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image, p.Status.Phase, podReady(p)))
			}
		}
		for node, n := range perNode {
			if n != 1 || node == "" {
				bad = append(bad, fmt.Sprintf("node %q has %d pods", node, n))
			}
		}
		if len(perNode) != totalNodes || len(bad) > 0 {
			if len(bad) > 5 {
				bad = append(bad[:5], fmt.Sprintf("… %d more", len(bad)-5))
			}
			return false, fmt.Sprintf("%s; pods on %d nodes; %s", status, len(perNode), strings.Join(bad, "; "))
		}
		return true, status
	})
	t.Logf("DaemonSet %s: one running, ready pod with %s on each of the %d nodes after %s", dsName, image, totalNodes, took.Round(100*time.Millisecond))
}

// etcdMemberDown stops one of the three etcd members and shows that the API still accepts
// writes (a quorum of two remains), then brings the member back.
func etcdMemberDown(ctx context.Context, t *testing.T, s *stack, c kubernetes.Interface) {
	const member = "etcd-2"
	s.mustCompose(ctx, t, 2*time.Minute, "stop", "-t", "10", member)
	cs, err := s.containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cst := range cs {
		if cst.Service == member && cst.Status != "exited" {
			t.Fatalf("%s is %s after stop", member, cst.Status)
		}
	}
	// Each write is retried for a while: the first request may go to the dead member before
	// the etcd client moves to a live one; what matters is that writes succeed without it.
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "written-without-" + member, Namespace: testNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr("compose-test")},
	}
	var failures []string
	took := poll(ctx, t, 30*time.Second, "create a Lease with "+member+" stopped", func(ctx context.Context) (bool, string) {
		_, err := c.CoordinationV1().Leases(testNamespace).Create(ctx, lease, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			failures = append(failures, err.Error())
			return false, err.Error()
		}
		return true, ""
	})
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"compose-test/written-without":%q}}}`, member)
	poll(ctx, t, 30*time.Second, "patch the DaemonSet with "+member+" stopped", func(ctx context.Context) (bool, string) {
		_, err := c.AppsV1().DaemonSets(testNamespace).Patch(ctx, dsName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			failures = append(failures, err.Error())
			return false, err.Error()
		}
		return true, ""
	})
	got, err := c.CoordinationV1().Leases(testNamespace).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read back the Lease written without %s: %v", member, err)
	}
	if got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != "compose-test" {
		t.Errorf("Lease %s holder = %v, want compose-test", lease.Name, got.Spec.HolderIdentity)
	}
	ds, err := c.AppsV1().DaemonSets(testNamespace).Get(ctx, dsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Annotations["compose-test/written-without"] != member {
		t.Errorf("DaemonSet annotation = %q, want %q", ds.Annotations["compose-test/written-without"], member)
	}
	t.Logf("with %s stopped: Lease created in %s, DaemonSet patched, both read back; %d failed attempts %v",
		member, took.Round(10*time.Millisecond), len(failures), failures)

	s.mustCompose(ctx, t, 2*time.Minute, "start", member)
	s.waitHealthy(ctx, t, 2*time.Minute, member)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := c.CoordinationV1().Leases(testNamespace).Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr("compose-test-after-" + member + "-rejoined")
		_, err = c.CoordinationV1().Leases(testNamespace).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("write after %s rejoined: %v", member, err)
	}
}

// controllerManagerFailover kills the controller-manager that holds the Lease, shows the
// other replica acquires it, and that a rolling update then completes under the new leader.
func controllerManagerFailover(ctx context.Context, t *testing.T, s *stack, c kubernetes.Interface, timings map[string]time.Duration) {
	leaseClient := c.CoordinationV1().Leases("kube-system")
	var holder, leader string
	poll(ctx, t, time.Minute, "a controller-manager leads", func(ctx context.Context) (bool, string) {
		l, err := leaseClient.Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		leader = serviceOf(holder)
		return leader != "", fmt.Sprintf("holder %q is none of %v", holder, controllerManagers)
	})
	other := controllerManagers[0]
	if leader == other {
		other = controllerManagers[1]
	}
	t.Logf("Lease kube-system/kube-controller-manager is held by %q: killing %s", holder, leader)
	s.mustCompose(ctx, t, time.Minute, "kill", leader)
	took := poll(ctx, t, 90*time.Second, other+" takes the Lease over", func(ctx context.Context) (bool, string) {
		l, err := leaseClient.Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		return serviceOf(h) == other, fmt.Sprintf("holder %q, transitions %v", h, deref(l.Spec.LeaseTransitions))
	})
	timings["controller-manager takeover"] = took
	t.Logf("%s holds the Lease %s after %s was killed", other, took.Round(100*time.Millisecond), leader)

	// A rolling update under the new leader.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := c.AppsV1().DaemonSets(testNamespace).Get(ctx, dsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.Containers[0].Image = "registry.example/fault-agent:2"
		_, err = c.AppsV1().DaemonSets(testNamespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitDaemonSetRolledOut(ctx, t, c, "registry.example/fault-agent:2", 4*time.Minute)
	timings["rolling update under the new leader"] = time.Since(start)

	// Back to two replicas for the rest of the test.
	s.mustCompose(ctx, t, time.Minute, "start", leader)
	s.waitHealthy(ctx, t, 2*time.Minute, leader)
}

// serviceOf maps a leader-election identity (<hostname>_<uuid>) to its compose service.
func serviceOf(identity string) string {
	for _, svc := range controllerManagers {
		if identity == svc || strings.HasPrefix(identity, svc+"_") {
			return svc
		}
	}
	return ""
}

// kubeletDown stops a single-node stub kubelet and shows its node turns NotReady (Ready
// Unknown) and is tainted unreachable, then restarts it and shows the node recovers.
func kubeletDown(ctx context.Context, t *testing.T, s *stack, c kubernetes.Interface, timings map[string]time.Duration) {
	const service, node = "kubelet-b", "node-b"
	s.mustCompose(ctx, t, time.Minute, "stop", "-t", "10", service)
	var taints []corev1.Taint
	took := poll(ctx, t, 2*time.Minute, node+" NotReady and tainted", func(ctx context.Context) (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		taints = n.Spec.Taints
		ready := nodeReady(n)
		return ready != corev1.ConditionTrue && hasTaint(n, unreachableTaint), fmt.Sprintf("Ready=%s taints=%v", ready, n.Spec.Taints)
	})
	timings["kubelet stopped → node NotReady+tainted"] = took
	t.Logf("%s NotReady with taints %v %s after %s stopped", node, taints, took.Round(100*time.Millisecond), service)

	s.mustCompose(ctx, t, time.Minute, "start", service)
	s.waitHealthy(ctx, t, 2*time.Minute, service)
	took = poll(ctx, t, 2*time.Minute, node+" Ready and untainted again", func(ctx context.Context) (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := nodeReady(n)
		return ready == corev1.ConditionTrue && !hasTaint(n, unreachableTaint), fmt.Sprintf("Ready=%s taints=%v", ready, n.Spec.Taints)
	})
	t.Logf("%s Ready again %s after %s restarted", node, took.Round(100*time.Millisecond), service)
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// snapshot maps every object the test cares about to its UID: "kind/namespace/name" → uid.
func snapshot(ctx context.Context, t *testing.T, c kubernetes.Interface) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	add := func(kind string, m metav1.ObjectMeta) { out[kind+"/"+m.Namespace+"/"+m.Name] = m.UID }
	poll(ctx, t, time.Minute, "list every object", func(ctx context.Context) (bool, string) {
		clear(out)
		nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range nss.Items {
			add("namespace", o.ObjectMeta)
		}
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range nodes.Items {
			add("node", o.ObjectMeta)
		}
		pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range pods.Items {
			add("pod", o.ObjectMeta)
		}
		dss, err := c.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range dss.Items {
			add("daemonset", o.ObjectMeta)
		}
		crs, err := c.AppsV1().ControllerRevisions("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range crs.Items {
			add("controllerrevision", o.ObjectMeta)
		}
		leases, err := c.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range leases.Items {
			add("lease", o.ObjectMeta)
		}
		return true, ""
	})
	counts := map[string]int{}
	for k := range out {
		counts[strings.SplitN(k, "/", 2)[0]]++
	}
	t.Logf("snapshot: %v", counts)
	if counts["node"] != totalNodes || counts["pod"] < totalNodes || counts["controllerrevision"] < 2 {
		t.Fatalf("snapshot is missing objects: %v", counts)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
