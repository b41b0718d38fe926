package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/manager"
	"github.com/miniplane/miniplane/controllers/scheduler"
	"github.com/miniplane/miniplane/kubeletstub"
	"github.com/miniplane/miniplane/test/testenv"
)

// cpRun starts fn in the background and, when the test ends, cancels it and waits for it.
func cpRun(t *testing.T, what string, fn func(ctx context.Context) error) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", what, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop", what)
		}
	})
	return cancel
}

func cpTestLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(cpTestWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type cpTestWriter struct{ t *testing.T }

func (w cpTestWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func cpStartScheduler(t *testing.T, env *testenv.Env) {
	t.Helper()
	cfg := configs.DefaultScheduler()
	cfg.HealthListen = ""
	cfg.PodInitialBackoff = 100 * time.Millisecond
	cfg.PodMaxBackoff = time.Second
	cpRun(t, "scheduler", func(ctx context.Context) error {
		return scheduler.Run(ctx, cfg, scheduler.RunOptions{RestConfig: env.ConfigFor(testenv.SchedulerUser), Logger: cpTestLogger(t)})
	})
}

func cpManagerConfig(controllers ...string) configs.ControllerManager {
	cfg := configs.DefaultControllerManager()
	cfg.Controllers = controllers
	cfg.HealthListen = ""
	cfg.NodeLifecycle.MonitorPeriod = 200 * time.Millisecond
	cfg.NodeLifecycle.GracePeriod = 3 * time.Second
	return cfg
}

func cpStartStubs(t *testing.T, env *testenv.Env, nodes int) {
	t.Helper()
	cfg := configs.DefaultKubeletStub()
	cfg.Nodes = nodes
	cfg.NodePrefix = "node"
	// Not every test here runs node IPAM: the nodes bring their own pod CIDR blocks.
	cfg.PodCIDR = "10.128.0.0/9"
	cfg.HeartbeatInterval = 300 * time.Millisecond
	cfg.LeaseRenewInterval = 300 * time.Millisecond
	fleet, err := kubeletstub.New(cfg, kubeletstub.Options{RestConfig: env.AdminConfig, Logger: cpTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cpRun(t, "kubeletstub", fleet.Run)
	cpEventually(t, 30*time.Second, "stub nodes to be ready", func() (bool, error) { return fleet.Ready(), nil })
}

// cpEventually polls cond until it holds or the timeout passes.
func cpEventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpAdminClient is a client for the admin user that speaks JSON, as kubectl does: generated
// clients prefer protobuf, which the in-process components use, so these tests keep the JSON
// path covered too.
func cpAdminClient(t *testing.T, env *testenv.Env) kubernetes.Interface {
	t.Helper()
	rc := rest.CopyConfig(env.AdminConfig)
	rc.ContentType = "application/json"
	rc.AcceptContentTypes = "application/json"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cpNewPod(name string, cpu string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	return p
}

func TestSchedulerBindsPodThatThenRuns(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	client := cpAdminClient(t, env)
	cpStartStubs(t, env, 3)
	cpStartScheduler(t, env)
	ctx := context.Background()
	if _, err := client.CoreV1().Pods("default").Create(ctx, cpNewPod("web", "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cpEventually(t, 30*time.Second, "the pod to be bound and running", func() (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning, err
	})
	// The scheduler records its event asynchronously, possibly after the kubelet ran the pod.
	cpEventually(t, 30*time.Second, "the Scheduled event", func() (bool, error) {
		events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web").String()})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "Scheduled" && e.Source.Component == "default-scheduler" && strings.HasPrefix(e.Message, "Successfully assigned default/web to node-") {
				return true, nil
			}
		}
		return false, nil
	})
}

func TestUnschedulablePodReportsWhy(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	client := cpAdminClient(t, env)
	cpStartStubs(t, env, 3)
	cpStartScheduler(t, env)
	ctx := context.Background()
	if _, err := client.CoreV1().Pods("default").Create(ctx, cpNewPod("huge", "1000"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "0/3 nodes are available: 3 Insufficient cpu."
	cpEventually(t, 30*time.Second, "a FailedScheduling event", func() (bool, error) {
		events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "huge" && e.Reason == "FailedScheduling" && e.Type == corev1.EventTypeWarning && e.Message == want {
				return true, nil
			}
		}
		return false, nil
	})
	// The scheduler records the event before it writes the condition, as kube-scheduler
	// does, and the event may be posted first: wait for the condition too.
	var (
		p    *corev1.Pod
		cond *corev1.PodCondition
	)
	cpEventually(t, 30*time.Second, "the pod's PodScheduled condition", func() (bool, error) {
		got, err := client.CoreV1().Pods("default").Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p, cond = got, nil
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodScheduled {
				cond = &p.Status.Conditions[i]
			}
		}
		return cond != nil, nil
	})
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending || cond == nil ||
		cond.Status != corev1.ConditionFalse || cond.Reason != "Unschedulable" || cond.Message != want {
		t.Fatalf("pod nodeName=%q phase=%s PodScheduled=%+v", p.Spec.NodeName, p.Status.Phase, cond)
	}
}

// A DaemonSet-like owner with dependents that nothing else acts on (the DaemonSet
// controller is not running), deleted with each propagation policy.
func TestGarbageCollectorPropagationPolicies(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	client := cpAdminClient(t, env)
	cpRun(t, "controller-manager", func(ctx context.Context) error {
		return manager.Run(ctx, cpManagerConfig(configs.ControllerGarbageCollector), manager.RunOptions{RestConfig: env.ConfigFor(testenv.ControllerManagerUser), Logger: cpTestLogger(t)})
	})
	ctx := context.Background()
	c := client
	setup := func(t *testing.T, name string) (*appsv1.DaemonSet, []string) {
		t.Helper()
		labels := map[string]string{"app": name}
		ds, err := c.AppsV1().DaemonSets("default").Create(ctx, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		yes := true
		var pods []string
		for i := range 3 {
			p := cpNewPod(fmt.Sprintf("%s-%d", name, i), "")
			p.Labels = labels
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
				Controller: &yes, BlockOwnerDeletion: &yes}}
			if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p.Name)
		}
		return ds, pods
	}
	podGone := func(name string) bool {
		_, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	dsGone := func(name string) bool {
		_, err := c.AppsV1().DaemonSets("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	del := func(t *testing.T, name string, policy metav1.DeletionPropagation) {
		t.Helper()
		if err := c.AppsV1().DaemonSets("default").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("background", func(t *testing.T) {
		_, pods := setup(t, "bg")
		del(t, "bg", metav1.DeletePropagationBackground)
		cpEventually(t, 20*time.Second, "dependents to be deleted", func() (bool, error) {
			for _, p := range pods {
				if !podGone(p) {
					return false, nil
				}
			}
			return true, nil
		})
	})
	t.Run("foreground", func(t *testing.T) {
		_, pods := setup(t, "fg")
		// Watch the owner so that its disappearance can be ordered against the pods'.
		del(t, "fg", metav1.DeletePropagationForeground)
		var ownerSeenWithDependentsGone bool
		cpEventually(t, 20*time.Second, "the owner to be deleted", func() (bool, error) {
			allGone := true
			for _, p := range pods {
				allGone = allGone && podGone(p)
			}
			gone := dsGone("fg")
			if gone && !allGone {
				return false, fmt.Errorf("owner deleted before its dependents")
			}
			if !gone && allGone {
				ownerSeenWithDependentsGone = true
			}
			return gone, nil
		})
		for _, p := range pods {
			if !podGone(p) {
				t.Fatalf("pod %s outlived its foreground-deleted owner", p)
			}
		}
		t.Logf("owner observed waiting after its dependents were gone: %v", ownerSeenWithDependentsGone)
	})
	t.Run("orphan", func(t *testing.T) {
		ds, pods := setup(t, "orphan")
		del(t, "orphan", metav1.DeletePropagationOrphan)
		cpEventually(t, 20*time.Second, "the owner to be deleted", func() (bool, error) { return dsGone("orphan"), nil })
		for _, name := range pods {
			p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("orphaned pod %s: %v", name, err)
			}
			for _, ref := range p.OwnerReferences {
				if ref.UID == ds.UID {
					t.Fatalf("pod %s still references its deleted owner", name)
				}
			}
		}
	})
}

func cpNodeTaints(n *corev1.Node) map[string]bool {
	out := map[string]bool{}
	for _, t := range n.Spec.Taints {
		out[t.Key+":"+string(t.Effect)] = true
	}
	return out
}

func TestSilentNodeIsTaintedUntilHeartbeatsResume(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	client := cpAdminClient(t, env)
	cpStartStubs(t, env, 2)
	cpRun(t, "controller-manager", func(ctx context.Context) error {
		return manager.Run(ctx, cpManagerConfig(configs.ControllerNodeLifecycle), manager.RunOptions{RestConfig: env.ConfigFor(testenv.ControllerManagerUser), Logger: cpTestLogger(t)})
	})
	ctx := context.Background()
	nodes := client.CoreV1().Nodes()
	setAnnotation := func(value *string) {
		t.Helper()
		n, err := nodes.Get(ctx, "node-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		if value == nil {
			delete(n.Annotations, kubeletstub.AnnotationStopHeartbeats)
		} else {
			n.Annotations[kubeletstub.AnnotationStopHeartbeats] = *value
		}
		if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := "true"
	setAnnotation(&stop)
	start := time.Now()
	// Grace period 3s, monitor period 200ms: allow for heartbeats already in flight.
	cpEventually(t, 10*time.Second, "node-0 to be Unknown and tainted unreachable", func() (bool, error) {
		n, err := nodes.Get(ctx, "node-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready := ""
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = string(c.Status)
			}
		}
		taints := cpNodeTaints(n)
		return ready == "Unknown" && taints["node.kubernetes.io/unreachable:NoSchedule"] && taints["node.kubernetes.io/unreachable:NoExecute"], nil
	})
	t.Logf("node-0 tainted %v after its heartbeats stopped (grace period 3s)", time.Since(start).Round(100*time.Millisecond))
	if taints := cpNodeTaints(cpMustNode(t, client, "node-1")); len(taints) != 0 {
		t.Fatalf("healthy node-1 tainted: %v", taints)
	}
	setAnnotation(nil)
	cpEventually(t, 15*time.Second, "node-0's taints to go", func() (bool, error) {
		n, err := nodes.Get(ctx, "node-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		taints := cpNodeTaints(n)
		return !taints["node.kubernetes.io/unreachable:NoSchedule"] && !taints["node.kubernetes.io/unreachable:NoExecute"], nil
	})
}

func cpMustNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cpProxy forwards TCP connections to target until cut, which closes the listener and every
// open connection: to the process behind it, the API server has vanished, as when it is
// killed or partitioned.
type cpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func cpNewProxy(t *testing.T, target string) *cpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cpProxy{ln: ln}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(p.Cut)
	return p
}

func (p *cpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// cpLeaderGauge reads leader_election_master_status from a health endpoint.
func cpLeaderGauge(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") {
			f := strings.Fields(line)
			return f[len(f)-1], nil
		}
	}
	return "", fmt.Errorf("no leader gauge")
}

// Two controller-managers against one API server: exactly one holds the Lease and acts;
// when the leader loses the API server, the other takes over within the lease duration,
// and the old leader stops acting.
func TestControllerManagerLeaderElectionHandsOver(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	client := cpAdminClient(t, env)
	ctx := context.Background()
	cfg := cpManagerConfig(configs.ControllerGarbageCollector)
	cfg.HealthListen = "127.0.0.1:0"
	cfg.LeaderElection.LeaderElect = true
	cfg.LeaderElection.LeaseDuration = 4 * time.Second
	cfg.LeaderElection.RenewDeadline = 3 * time.Second
	cfg.LeaderElection.RetryPeriod = 500 * time.Millisecond

	type instance struct {
		identity string
		proxy    *cpProxy
		addr     chan string
	}
	apiHost := strings.TrimPrefix(env.URL, "https://")
	start := func(identity string) *instance {
		in := &instance{identity: identity, proxy: cpNewProxy(t, apiHost), addr: make(chan string, 1)}
		rc := rest.CopyConfig(env.ConfigFor(testenv.ControllerManagerUser))
		rc.Host = "https://" + in.proxy.ln.Addr().String()
		rc.Timeout = 2 * time.Second
		cpRun(t, "controller-manager "+identity, func(ctx context.Context) error {
			return manager.Run(ctx, cfg, manager.RunOptions{RestConfig: rc, Logger: cpTestLogger(t).With("identity", identity), Identity: identity,
				HealthBound: func(a net.Addr) { in.addr <- a.String() }})
		})
		return in
	}
	a, b := start("cm-a"), start("cm-b")
	addrs := map[string]string{"cm-a": <-a.addr, "cm-b": <-b.addr}
	instances := map[string]*instance{"cm-a": a, "cm-b": b}

	holder := func() (string, error) {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return "", err
		}
		return *l.Spec.HolderIdentity, nil
	}
	var leader string
	cpEventually(t, 20*time.Second, "a leader", func() (bool, error) {
		h, err := holder()
		leader = h
		return h != "", err
	})
	follower := "cm-b"
	if leader == "cm-b" {
		follower = "cm-a"
	} else if leader != "cm-a" {
		t.Fatalf("lease held by %q", leader)
	}
	cpEventually(t, 10*time.Second, "the gauges to show one leader", func() (bool, error) {
		l, err1 := cpLeaderGauge(addrs[leader])
		f, err2 := cpLeaderGauge(addrs[follower])
		if err1 != nil {
			return false, err1
		}
		return l == "1" && (f == "0" || err2 != nil), nil
	})

	// The leader acts: the garbage collector deletes a dependent of a missing owner.
	collect := func(name string) {
		t.Helper()
		p := cpNewPod(name, "")
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "gone", UID: "00000000-0000-0000-0000-00000000dead", BlockOwnerDeletion: &yes}}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cpEventually(t, 20*time.Second, "the dangling pod "+name+" to be collected", func() (bool, error) {
			_, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	collect("dangling-1")

	// The leader loses the API server (as if killed): the follower takes over within the
	// lease duration (plus a retry period to notice).
	cut := time.Now()
	instances[leader].proxy.Cut()
	cpEventually(t, cfg.LeaderElection.LeaseDuration+cfg.LeaderElection.RenewDeadline+2*time.Second, "the follower to take the lease", func() (bool, error) {
		h, err := holder()
		return h == follower, err
	})
	t.Logf("%s took over %v after %s lost the API server (lease duration %v)", follower, time.Since(cut).Round(100*time.Millisecond), leader, cfg.LeaderElection.LeaseDuration)
	cpEventually(t, cfg.LeaderElection.RenewDeadline+2*time.Second, "the old leader to stop acting", func() (bool, error) {
		g, err := cpLeaderGauge(addrs[leader])
		return g == "0", err
	})
	collect("dangling-2")
}

// Daemon pods pinned by node affinity need one node checked each and are bound by several
// workers at once: the rate must be hundreds per second or better.
func TestSchedulerBindsPinnedPodsQuickly(t *testing.T) {
	if testing.Short() {
		t.Skip("throughput test")
	}
	const n = 1000
	env := testenv.New(t, testenv.Config{})
	client := cpAdminClient(t, env)
	ctx := context.Background()
	create := func(what string, fn func(i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		sem := make(chan struct{}, 32)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := fn(i); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("creating %s: %v", what, err)
		}
	}
	create("nodes", func(i int) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n-%04d", i)},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110"),
			}, Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110"),
			}}}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// Status is not taken on create by a real API server; write it through /status.
		created.Status = node.Status
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	create("pods", func(i int) error {
		p := cpNewPod(fmt.Sprintf("ds-%04d", i), "10m")
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{fmt.Sprintf("n-%04d", i)}}},
			}}},
		}}
		_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	start := time.Now()
	cpStartScheduler(t, env)
	cpEventually(t, 60*time.Second, "every pod to be bound", func() (bool, error) {
		time.Sleep(250 * time.Millisecond) // listing 1000 pods is not free: poll gently
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if want := "n-" + strings.TrimPrefix(p.Name, "ds-"); p.Spec.NodeName != want {
				if p.Spec.NodeName != "" {
					return false, fmt.Errorf("pod %s bound to %s, want %s", p.Name, p.Spec.NodeName, want)
				}
				return false, nil
			}
		}
		return len(pods.Items) == n, nil
	})
	elapsed := time.Since(start)
	t.Logf("bound %d pinned pods in %v (%.0f pods/s, including informer sync)", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
}

// The whole loop: the DaemonSet controller creates pinned pods, the scheduler binds them,
// the stub kubelets cpRun them, and a foreground delete removes the pods before the DaemonSet.
func TestDaemonSetPodsAreScheduledAndCollected(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	client := cpAdminClient(t, env)
	cpStartStubs(t, env, 3)
	cpStartScheduler(t, env)
	cpRun(t, "controller-manager", func(ctx context.Context) error {
		return manager.Run(ctx, cpManagerConfig("*"), manager.RunOptions{RestConfig: env.ConfigFor(testenv.ControllerManagerUser), Logger: cpTestLogger(t)})
	})
	ctx := context.Background()
	labels := map[string]string{"app": "agent"}
	if _, err := client.AppsV1().DaemonSets("default").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	listPods := func() ([]corev1.Pod, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			return nil, err
		}
		return pods.Items, nil
	}
	cpEventually(t, 60*time.Second, "a running daemon pod on each node", func() (bool, error) {
		pods, err := listPods()
		if err != nil {
			return false, err
		}
		nodes := map[string]bool{}
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(nodes) == 3 && len(pods) == 3, nil
	})
	policy := metav1.DeletePropagationForeground
	if err := client.AppsV1().DaemonSets("default").Delete(ctx, "agent", metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
	cpEventually(t, 60*time.Second, "the DaemonSet to go after its pods", func() (bool, error) {
		pods, err := listPods()
		if err != nil {
			return false, err
		}
		_, err = client.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		gone := apierrors.IsNotFound(err)
		if gone && len(pods) > 0 {
			return false, fmt.Errorf("DaemonSet deleted while %d pods remain", len(pods))
		}
		return gone, nil
	})
}
