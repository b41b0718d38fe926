package nodelifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/worker"
	"github.com/miniplane/miniplane/internal/poll"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type testEnv struct {
	c        *Controller
	client   *fake.Clientset
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
}

func newTestController(t *testing.T, objs ...runtime.Object) *testEnv {
	t.Helper()
	client := fake.NewClientset(objs...)
	clk := testingclock.NewFakeClock(t0)
	factory := informers.NewSharedInformerFactory(client, 0)
	recorder := record.NewFakeRecorder(100)
	c, err := New(configs.DefaultNodeLifecycleController(), Options{Client: client, Informers: factory, Clock: clk,
		Recorder: recorder, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		c.nodeQueue.ShutDown()
		c.podQueue.ShutDown()
		factory.Shutdown()
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		t.Fatal("caches did not sync")
	}
	return &testEnv{c: c, client: client, clock: clk, recorder: recorder}
}

func readyNode(name string, heartbeat time.Time) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(heartbeat)},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(heartbeat)},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(heartbeat)},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(heartbeat)},
		}},
	}
}

func nodeLease(name string, renew time.Time) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: name},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &rt},
	}
}

// waitTimeout bounds every wait for the informers to deliver a write.
const waitTimeout = 5 * time.Second

func (e *testEnv) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// syncNode waits until the informer shows the API's current node, then syncs it.
func (e *testEnv) syncNode(t *testing.T, name string) {
	t.Helper()
	want := e.node(t, name)
	poll.Until(t, waitTimeout, "the node informer", func() bool {
		got, err := e.c.nodeLister.Get(name)
		return err == nil && got.ResourceVersion == want.ResourceVersion &&
			len(got.Spec.Taints) == len(want.Spec.Taints) && len(got.Status.Conditions) == len(want.Status.Conditions) &&
			readyStatus(got) == readyStatus(want) && readyHeartbeat(got).Equal(readyHeartbeat(want))
	})
	if err := e.c.syncNode(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	if c := findCondition(n.Status.Conditions, corev1.NodeReady); c != nil {
		return c.Status
	}
	return ""
}

func readyHeartbeat(n *corev1.Node) time.Time {
	if c := findCondition(n.Status.Conditions, corev1.NodeReady); c != nil {
		return c.LastHeartbeatTime.Time
	}
	return time.Time{}
}

// heartbeat posts Ready=True with a fresh heartbeat time, as a kubelet does.
func (e *testEnv) heartbeat(t *testing.T, name string) {
	t.Helper()
	n := e.node(t, name)
	now := metav1.NewTime(e.clock.Now())
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		c.LastHeartbeatTime = now
		if c.Status == corev1.ConditionUnknown {
			c.LastTransitionTime = now
			c.Status = corev1.ConditionFalse
			if c.Type == corev1.NodeReady {
				c.Status = corev1.ConditionTrue
			}
		}
	}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) renewLease(t *testing.T, name string) {
	t.Helper()
	l, err := e.client.CoordinationV1().Leases(NodeLeaseNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt := metav1.NewMicroTime(e.clock.Now())
	l.Spec.RenewTime = &rt
	if _, err := e.client.CoordinationV1().Leases(NodeLeaseNamespace).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the lease informer", func() bool {
		got, err := e.c.leaseLister.Leases(NodeLeaseNamespace).Get(name)
		return err == nil && got.Spec.RenewTime.Time.Equal(rt.Time)
	})
}

func taintSet(n *corev1.Node) map[string]bool {
	out := map[string]bool{}
	for _, t := range n.Spec.Taints {
		out[t.Key+":"+string(t.Effect)] = true
	}
	return out
}

func TestSilentNodeBecomesUnknownAndUnreachableThenRecovers(t *testing.T) {
	env := newTestController(t, readyNode("n1", t0), nodeLease("n1", t0))
	env.syncNode(t, "n1")
	if got := taintSet(env.node(t, "n1")); len(got) != 0 {
		t.Fatalf("healthy node tainted: %v", got)
	}

	env.clock.Step(40 * time.Second) // exactly the grace period: not yet
	env.syncNode(t, "n1")
	if s := readyStatus(env.node(t, "n1")); s != corev1.ConditionTrue {
		t.Fatalf("Ready = %s at the grace period, want True", s)
	}

	env.clock.Step(time.Second)
	env.syncNode(t, "n1")
	n := env.node(t, "n1")
	for _, ct := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		c := findCondition(n.Status.Conditions, ct)
		if c == nil || c.Status != corev1.ConditionUnknown || c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status." {
			t.Fatalf("%s condition = %+v", ct, c)
		}
	}
	if hb := readyHeartbeat(n); !hb.Equal(t0) {
		t.Fatalf("Ready heartbeat rewritten to %v; it must keep the kubelet's last one", hb)
	}
	env.syncNode(t, "n1")
	n = env.node(t, "n1")
	want := map[string]bool{"node.kubernetes.io/unreachable:NoSchedule": true, "node.kubernetes.io/unreachable:NoExecute": true}
	if got := taintSet(n); len(got) != 2 || !got["node.kubernetes.io/unreachable:NoSchedule"] || !got["node.kubernetes.io/unreachable:NoExecute"] {
		t.Fatalf("taints = %v, want %v", got, want)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoExecute && (taint.TimeAdded == nil || !taint.TimeAdded.Time.Equal(env.clock.Now())) {
			t.Fatalf("NoExecute taint timeAdded = %v", taint.TimeAdded)
		}
	}

	// Heartbeats resume: the taints go.
	env.clock.Step(time.Second)
	env.heartbeat(t, "n1")
	env.syncNode(t, "n1")
	if got := taintSet(env.node(t, "n1")); len(got) != 0 {
		t.Fatalf("taints after recovery = %v", got)
	}
}

func TestLeaseRenewalAloneKeepsNodeHealthy(t *testing.T) {
	env := newTestController(t, readyNode("n1", t0), nodeLease("n1", t0))
	env.syncNode(t, "n1")
	for range 3 {
		env.clock.Step(30 * time.Second)
		env.renewLease(t, "n1")
		env.syncNode(t, "n1")
	}
	if s := readyStatus(env.node(t, "n1")); s != corev1.ConditionTrue {
		t.Fatalf("Ready = %s after 90s of lease renewals without status updates", s)
	}
	env.clock.Step(41 * time.Second)
	env.syncNode(t, "n1")
	if s := readyStatus(env.node(t, "n1")); s != corev1.ConditionUnknown {
		t.Fatalf("Ready = %s after the lease stopped, want Unknown", s)
	}
}

func TestNodeThatNeverPostedStatusGetsStartupGrace(t *testing.T) {
	env := newTestController(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	env.syncNode(t, "n1")
	env.clock.Step(41 * time.Second)
	env.syncNode(t, "n1")
	if s := readyStatus(env.node(t, "n1")); s != "" {
		t.Fatalf("Ready = %s within the startup grace period", s)
	}
	env.clock.Step(20 * time.Second)
	env.syncNode(t, "n1")
	c := findCondition(env.node(t, "n1").Status.Conditions, corev1.NodeReady)
	if c == nil || c.Status != corev1.ConditionUnknown || c.Reason != "NodeStatusNeverUpdated" || c.Message != "Kubelet never posted node status." {
		t.Fatalf("Ready condition = %+v", c)
	}
}

func TestTaintsFollowConditions(t *testing.T) {
	user := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	added := metav1.NewTime(t0.Add(-time.Hour))
	tests := []struct {
		name   string
		mutate func(*corev1.Node)
		want   []string
	}{
		{name: "healthy", mutate: func(*corev1.Node) {}, want: nil},
		{name: "not ready", mutate: setCondition(corev1.NodeReady, corev1.ConditionFalse),
			want: []string{"node.kubernetes.io/not-ready:NoSchedule", "node.kubernetes.io/not-ready:NoExecute"}},
		{name: "memory pressure", mutate: setCondition(corev1.NodeMemoryPressure, corev1.ConditionTrue),
			want: []string{"node.kubernetes.io/memory-pressure:NoSchedule"}},
		{name: "disk and pid pressure", mutate: func(n *corev1.Node) {
			setCondition(corev1.NodeDiskPressure, corev1.ConditionTrue)(n)
			setCondition(corev1.NodePIDPressure, corev1.ConditionTrue)(n)
		}, want: []string{"node.kubernetes.io/disk-pressure:NoSchedule", "node.kubernetes.io/pid-pressure:NoSchedule"}},
		{name: "network unavailable", mutate: setCondition(corev1.NodeNetworkUnavailable, corev1.ConditionTrue),
			want: []string{"node.kubernetes.io/network-unavailable:NoSchedule"}},
		{name: "cordoned", mutate: func(n *corev1.Node) { n.Spec.Unschedulable = true },
			want: []string{"node.kubernetes.io/unschedulable:NoSchedule"}},
		{name: "recovered node loses stale taints, keeps user taints", mutate: func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{user,
				{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added},
				{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}}
		}, want: []string{"dedicated:NoSchedule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := readyNode("n1", t0)
			tt.mutate(n)
			taints, _ := reconcileTaints(n.Spec.Taints, desiredTaints(n), metav1.NewTime(t0))
			var got []string
			for _, taint := range taints {
				got = append(got, taint.Key+":"+string(taint.Effect))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("taints = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("taints = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestReconcileTaintsKeepsTimeAdded(t *testing.T) {
	added := metav1.NewTime(t0.Add(-time.Hour))
	n := readyNode("n1", t0)
	setCondition(corev1.NodeReady, corev1.ConditionUnknown)(n)
	n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added}}
	taints, changed := reconcileTaints(n.Spec.Taints, desiredTaints(n), metav1.NewTime(t0))
	if !changed || len(taints) != 2 {
		t.Fatalf("taints = %v, changed %v", taints, changed)
	}
	if !taints[0].TimeAdded.Equal(&added) {
		t.Fatalf("existing NoExecute taint timeAdded changed to %v", taints[0].TimeAdded)
	}
	if _, changed := reconcileTaints(taints, desiredTaints(n), metav1.NewTime(t0)); changed {
		t.Fatal("reconciling twice changed the taints again")
	}
}

func setCondition(ct corev1.NodeConditionType, s corev1.ConditionStatus) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if c := findCondition(n.Status.Conditions, ct); c != nil {
			c.Status = s
			return
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: ct, Status: s})
	}
}

func int64p(v int64) *int64 { return &v }

func evictablePod(name string, tolerations ...corev1.Toleration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: "n1", Tolerations: tolerations},
	}
}

func TestTaintBasedEviction(t *testing.T) {
	unreachable := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	for300 := unreachable
	for300.TolerationSeconds = int64p(300)
	negative := unreachable
	negative.TolerationSeconds = int64p(-5)
	noScheduleOnly := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

	node := readyNode("n1", t0)
	now := metav1.NewTime(t0)
	node.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now}}
	env := newTestController(t, node,
		evictablePod("intolerant"),
		evictablePod("noschedule-only", noScheduleOnly),
		evictablePod("for-300s", for300),
		evictablePod("negative", negative),
		evictablePod("daemon", unreachable))
	ctx := context.Background()
	sync := func(name string) {
		t.Helper()
		if err := env.c.syncPod(ctx, "default/"+name); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := env.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, name := range []string{"intolerant", "noschedule-only", "for-300s", "negative", "daemon"} {
		sync(name)
	}
	for name, want := range map[string]bool{"intolerant": false, "noschedule-only": false, "negative": false, "for-300s": true, "daemon": true} {
		if exists(name) != want {
			t.Fatalf("pod %s exists = %v, want %v", name, !want, want)
		}
	}
	// Before its DELETE, an evicted pod is marked as the taint manager marks it.
	var marked []string
	for _, a := range env.client.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok && p.GetSubresource() == "status" &&
			strings.Contains(string(p.GetPatch()), `"reason":"DeletionByTaintManager"`) &&
			strings.Contains(string(p.GetPatch()), `"type":"DisruptionTarget"`) {
			marked = append(marked, p.GetName())
		}
	}
	if slices.Sort(marked); !slices.Equal(marked, []string{"intolerant", "negative", "noschedule-only"}) {
		t.Errorf("pods marked DisruptionTarget before their eviction: %v", marked)
	}

	env.clock.Step(299 * time.Second)
	sync("for-300s")
	if !exists("for-300s") {
		t.Fatal("pod evicted before its tolerationSeconds ran out")
	}
	env.clock.Step(time.Second)
	sync("for-300s")
	if exists("for-300s") {
		t.Fatal("pod not evicted after its tolerationSeconds")
	}
	env.clock.Step(time.Hour)
	sync("daemon")
	if !exists("daemon") {
		t.Fatal("pod tolerating the taint forever was evicted")
	}
}

func TestEvictionCancelledWhenTaintGoes(t *testing.T) {
	tol := corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: int64p(60)}
	node := readyNode("n1", t0)
	node.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}
	env := newTestController(t, node, evictablePod("p", tol))
	ctx := context.Background()
	if err := env.c.syncPod(ctx, "default/p"); err != nil {
		t.Fatal(err)
	}
	env.clock.Step(30 * time.Second)
	n := env.node(t, "n1")
	n.Spec.Taints = nil
	if _, err := env.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the node informer", func() bool {
		got, err := env.c.nodeLister.Get("n1")
		return err == nil && len(got.Spec.Taints) == 0
	})
	if err := env.c.syncPod(ctx, "default/p"); err != nil {
		t.Fatal(err)
	}
	// The taint comes back later: the clock starts again from zero.
	n = env.node(t, "n1")
	n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}
	if _, err := env.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the node informer", func() bool {
		got, err := env.c.nodeLister.Get("n1")
		return err == nil && len(got.Spec.Taints) == 1
	})
	env.clock.Step(31 * time.Second)
	if err := env.c.syncPod(ctx, "default/p"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod evicted on the old clock: %v", err)
	}
}

func TestTolerationTime(t *testing.T) {
	taints := []corev1.Taint{
		{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute},
	}
	exists := func(key string, secs *int64) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs}
	}
	tests := []struct {
		name        string
		tolerations []corev1.Toleration
		d           time.Duration
		forever, ok bool
	}{
		{name: "none", ok: false},
		{name: "one of two tolerated", tolerations: []corev1.Toleration{exists(corev1.TaintNodeUnreachable, nil)}, ok: false},
		{name: "both forever", tolerations: []corev1.Toleration{exists(corev1.TaintNodeUnreachable, nil), exists(corev1.TaintNodeNotReady, nil)}, forever: true, ok: true},
		{name: "shortest wins", tolerations: []corev1.Toleration{exists(corev1.TaintNodeUnreachable, int64p(300)), exists(corev1.TaintNodeNotReady, int64p(60))}, d: time.Minute, ok: true},
		{name: "wildcard", tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, TolerationSeconds: int64p(10)}}, d: 10 * time.Second, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, forever, ok := tolerationTime(&corev1.Pod{Spec: corev1.PodSpec{Tolerations: tt.tolerations}}, taints)
			if d != tt.d || forever != tt.forever || ok != tt.ok {
				t.Fatalf("tolerationTime = %v, %v, %v; want %v, %v, %v", d, forever, ok, tt.d, tt.forever, tt.ok)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	valid := configs.DefaultNodeLifecycleController()
	with := func(mutate func(*configs.NodeLifecycleController)) configs.NodeLifecycleController {
		cfg := valid
		mutate(&cfg)
		return cfg
	}
	tests := []struct {
		name    string
		cfg     configs.NodeLifecycleController
		opts    Options
		wantErr string
	}{
		{name: "defaults", cfg: valid, opts: Options{Client: client, Informers: factory}},
		{name: "zero config", opts: Options{Client: client, Informers: factory}, wantErr: "node-monitor-period"},
		{name: "grace not above monitor period", cfg: with(func(c *configs.NodeLifecycleController) { c.GracePeriod = c.MonitorPeriod }),
			opts: Options{Client: client, Informers: factory}, wantErr: "node-monitor-grace-period"},
		{name: "no startup grace", cfg: with(func(c *configs.NodeLifecycleController) { c.StartupGracePeriod = 0 }),
			opts: Options{Client: client, Informers: factory}, wantErr: "node-startup-grace-period"},
		{name: "no workers", cfg: with(func(c *configs.NodeLifecycleController) { c.Workers = 0 }),
			opts: Options{Client: client, Informers: factory}, wantErr: "workers"},
		{name: "no client", cfg: valid, opts: Options{Informers: factory}, wantErr: "Client"},
		{name: "no informers", cfg: valid, opts: Options{Client: client}, wantErr: "Informers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg, tt.opts)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New = %v, want an error about %s", err, tt.wantErr)
			}
			if c != nil && c.broadcaster != nil {
				c.broadcaster.Shutdown()
			}
		})
	}
}

// A failed sync is retried and logged at a level the default (Info) handler shows, with its
// retry count: a stuck controller must be visible.
func TestFailedSyncIsLoggedAboveDebug(t *testing.T) {
	tests := []struct {
		kind string
		key  string
	}{
		{kind: "node", key: "n1"},
		{kind: "pod", key: "default/p"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			var logs bytes.Buffer
			env := newTestController(t)
			env.c.logger = slog.New(slog.NewTextHandler(&logs, nil))
			q := env.c.nodeQueue
			if tt.kind == "pod" {
				q = env.c.podQueue
			}
			q.Add(tt.key)
			worker.ProcessNext(context.Background(), q, func(context.Context, string) error {
				return errors.New("api unavailable")
			}, env.c.syncFailed(tt.kind))
			if n := q.NumRequeues(tt.key); n != 1 {
				t.Errorf("requeues = %d, want 1", n)
			}
			for _, want := range []string{"level=WARN", `msg="sync failed; retrying"`, tt.kind + "=" + tt.key, "retries=1", `err="api unavailable"`} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log %q lacks %s", logs.String(), want)
				}
			}
		})
	}
}

// recorded drains the events recorded so far.
func (e *testEnv) recorded() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// TestRegisteredAndRemovingNode: the controller announces each node it starts watching
// once, and its removal once, within its bound.
func TestRegisteredAndRemovingNode(t *testing.T) {
	objs := []runtime.Object{}
	for i := range nodeEventBurst + 5 {
		objs = append(objs, readyNode(fmt.Sprintf("n%d", i), t0))
	}
	e := newTestController(t, objs...)
	e.syncNode(t, "n0")
	e.syncNode(t, "n0")
	if got, want := e.recorded(), []string{"Normal RegisteredNode Node n0 event: Registered Node n0 in Controller"}; !slices.Equal(got, want) {
		t.Errorf("events after two syncs of n0: %q, want %q", got, want)
	}

	if err := e.client.CoreV1().Nodes().Delete(context.Background(), "n0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the informer drops n0", func() bool {
		_, err := e.c.nodeLister.Get("n0")
		return apierrors.IsNotFound(err)
	})
	// The delete handler and a sync may both see it gone: one of them records it.
	if err := e.c.syncNode(context.Background(), "n0"); err != nil {
		t.Fatal(err)
	}
	var removing []string
	want := []string{"Normal RemovingNode Node n0 event: Removing Node n0 from Controller"}
	poll.Until(t, waitTimeout, "RemovingNode", func() bool {
		removing = append(removing, e.recorded()...)
		return len(removing) >= len(want)
	})
	if err := e.c.syncNode(context.Background(), "n0"); err != nil {
		t.Fatal(err)
	}
	if removing = append(removing, e.recorded()...); !slices.Equal(removing, want) {
		t.Errorf("events after n0's deletion: %q, want %q", removing, want)
	}

	// The clock stands still: the burst, less the two events above, is all there is.
	for i := 1; i < nodeEventBurst+5; i++ {
		e.syncNode(t, fmt.Sprintf("n%d", i))
	}
	if got := len(e.recorded()); got != nodeEventBurst-2 {
		t.Errorf("%d RegisteredNode events for %d nodes, want the bound's %d", got, nodeEventBurst+4, nodeEventBurst-2)
	}
}
