package apiserver_test

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/test/testenv"
)

const (
	nodeUser  = "system:node:n1"
	fleetUser = "system:node-fleet:fleet"
)

// newNodeEnv starts an env whose token file also holds a kubelet identity for node n1 and
// a fleet identity for the nodes fleet-<n>.
func newNodeEnv(t *testing.T) *testenv.Env {
	dir := t.TempDir()
	_, err := testenv.EnsureTokens(filepath.Join(dir, "tokens.csv"), []auth.User{
		{Name: nodeUser, UID: "node-n1", Groups: []string{auth.NodesGroup}},
		{Name: fleetUser, UID: "fleet", Groups: []string{auth.NodesGroup}},
	})
	check(t, err)
	return testenv.New(t, testenv.Config{DataDir: dir})
}

func clientFor(t *testing.T, env *testenv.Env, user string) kubernetes.Interface {
	if env.Token(user) == "" {
		t.Fatalf("no token for %s", user)
	}
	c, err := kubernetes.NewForConfig(env.ConfigFor(user))
	check(t, err)
	return c
}

// TestNodeAuthorization: a node may change its own Node and Lease and the pods bound to
// it, and nothing of other nodes; it may not touch workloads.
func TestNodeAuthorization(t *testing.T) {
	t.Parallel()
	env := newNodeEnv(t)
	admin := env.Client
	n1 := clientFor(t, env, nodeUser)
	ctx := testCtx(t)

	_, err := admin.CoreV1().Nodes().Create(ctx, node("n2"), metav1.CreateOptions{})
	check(t, err)
	_, err = admin.CoreV1().Pods("default").Create(ctx, podOn("default", "on-n1", "n1"), metav1.CreateOptions{})
	check(t, err)
	_, err = admin.CoreV1().Pods("default").Create(ctx, podOn("default", "on-n2", "n2"), metav1.CreateOptions{})
	check(t, err)
	_, err = admin.CoreV1().Pods("default").Create(ctx, podOn("default", "pending", ""), metav1.CreateOptions{})
	check(t, err)
	_, err = admin.AppsV1().DaemonSets("default").Create(ctx, daemonSet("default", "ds"), metav1.CreateOptions{})
	check(t, err)
	_, err = admin.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease("kube-node-lease", "n2", "n2"), metav1.CreateOptions{})
	check(t, err)

	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s as %s: %v", what, nodeUser, err)
		}
	}
	denied := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s as %s was allowed", what, nodeUser)
		}
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
	}
	strategic := types.StrategicMergePatchType

	// Its own Node: register, update, status, patch.
	own, err := n1.CoreV1().Nodes().Create(ctx, node("n1"), metav1.CreateOptions{})
	allowed("create own Node", err)
	own.Labels["topology.kubernetes.io/zone"] = "z1"
	own, err = n1.CoreV1().Nodes().Update(ctx, own, metav1.UpdateOptions{})
	allowed("update own Node", err)
	own.Status.Conditions[0].Reason = "KubeletReady"
	_, err = n1.CoreV1().Nodes().UpdateStatus(ctx, own, metav1.UpdateOptions{})
	allowed("update own Node status", err)
	_, err = n1.CoreV1().Nodes().Patch(ctx, "n1", strategic, []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Patched"}]}}`), metav1.PatchOptions{}, "status")
	allowed("patch own Node status", err)
	_, err = n1.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	allowed("list nodes", err)
	_, err = n1.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	allowed("get another Node", err)

	// Another node's Node.
	_, err = n1.CoreV1().Nodes().Create(ctx, node("n3"), metav1.CreateOptions{})
	denied("create another Node", err)
	_, err = n1.CoreV1().Nodes().Patch(ctx, "n2", strategic, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	denied("patch another Node", err)
	_, err = n1.CoreV1().Nodes().Patch(ctx, "n2", strategic, []byte(`{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`), metav1.PatchOptions{}, "status")
	denied("patch another Node's status", err)
	denied("delete another Node", n1.CoreV1().Nodes().Delete(ctx, "n2", metav1.DeleteOptions{}))

	// Its own Lease, not another's, and only in kube-node-lease.
	l, err := n1.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease("kube-node-lease", "n1", "n1"), metav1.CreateOptions{})
	allowed("create own Lease", err)
	l.Spec.RenewTime = &metav1.MicroTime{Time: l.CreationTimestamp.Time}
	_, err = n1.CoordinationV1().Leases("kube-node-lease").Update(ctx, l, metav1.UpdateOptions{})
	allowed("renew own Lease", err)
	_, err = n1.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease("kube-node-lease", "n3", "n1"), metav1.CreateOptions{})
	denied("create another node's Lease", err)
	n2Lease, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, "n2", metav1.GetOptions{})
	check(t, err)
	_, err = n1.CoordinationV1().Leases("kube-node-lease").Update(ctx, n2Lease, metav1.UpdateOptions{})
	denied("update another node's Lease", err)
	_, err = n1.CoordinationV1().Leases("default").Create(ctx, lease("default", "n1", "n1"), metav1.CreateOptions{})
	denied("create a Lease outside kube-node-lease", err)

	// Pods bound to it, not others.
	p, err := n1.CoreV1().Pods("default").Get(ctx, "on-n1", metav1.GetOptions{})
	allowed("get a pod", err)
	p.Status.Phase = corev1.PodRunning
	_, err = n1.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	allowed("update the status of its pod", err)
	_, err = n1.CoreV1().Pods("default").Patch(ctx, "on-n1", strategic, []byte(`{"status":{"podIP":"10.0.0.1"}}`), metav1.PatchOptions{}, "status")
	allowed("patch the status of its pod", err)
	_, err = n1.CoreV1().Pods("default").Patch(ctx, "on-n1", strategic, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	denied("patch the metadata of its pod (only status is the kubelet's)", err)
	_, err = n1.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
	denied("update its pod outside status", err)
	_, err = n1.CoreV1().Pods("default").Patch(ctx, "on-n2", strategic, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	denied("patch the status of another node's pod", err)
	_, err = n1.CoreV1().Pods("default").Patch(ctx, "pending", strategic, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	denied("patch the status of an unbound pod", err)
	denied("delete another node's pod", n1.CoreV1().Pods("default").Delete(ctx, "on-n2", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}))
	_, err = n1.CoreV1().Pods("default").Create(ctx, podOn("default", "mine", "n1"), metav1.CreateOptions{})
	denied("create a pod", err)
	denied("bind a pod", n1.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "pending"},
		Target: corev1.ObjectReference{Name: "n1"}}, metav1.CreateOptions{}))
	allowed("delete its pod", n1.CoreV1().Pods("default").Delete(ctx, "on-n1", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}))

	// Workloads: neither read nor write, as upstream's system:node rules.
	_, err = n1.AppsV1().DaemonSets("default").List(ctx, metav1.ListOptions{})
	denied("list DaemonSets", err)
	denied("delete a DaemonSet", n1.AppsV1().DaemonSets("default").Delete(ctx, "ds", metav1.DeleteOptions{}))
	_, err = n1.AppsV1().DaemonSets("default").Create(ctx, daemonSet("default", "mine"), metav1.CreateOptions{})
	denied("create a DaemonSet", err)
	_, err = n1.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, metav1.CreateOptions{})
	denied("create a namespace", err)

	// Events: a kubelet reports them.
	_, err = n1.CoreV1().Events("default").Create(ctx, event("default", "from-n1", p), metav1.CreateOptions{})
	allowed("create an event", err)

	// Nothing denied above changed anything.
	if _, err := admin.CoreV1().Pods("default").Get(ctx, "on-n2", metav1.GetOptions{}); err != nil {
		t.Fatalf("another node's pod: %v", err)
	}
	if _, err := admin.AppsV1().DaemonSets("default").Get(ctx, "ds", metav1.GetOptions{}); err != nil {
		t.Fatalf("DaemonSet: %v", err)
	}
	n2, err := admin.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	check(t, err)
	if n2.Labels["x"] != "" || n2.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Fatalf("another node changed: labels %v conditions %+v", n2.Labels, n2.Status.Conditions)
	}
}

// TestFleetAuthorization: a fleet identity acts as every node named fleet-<n>.
func TestFleetAuthorization(t *testing.T) {
	t.Parallel()
	env := newNodeEnv(t)
	fleet := clientFor(t, env, fleetUser)
	ctx := testCtx(t)
	for _, name := range []string{"fleet-0", "fleet-1"} {
		if _, err := fleet.CoreV1().Nodes().Create(ctx, node(name), metav1.CreateOptions{}); err != nil {
			t.Fatalf("fleet creates %s: %v", name, err)
		}
		if _, err := fleet.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease("kube-node-lease", name, name), metav1.CreateOptions{}); err != nil {
			t.Fatalf("fleet creates the lease of %s: %v", name, err)
		}
		_, err := fleet.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Fleet"}]}}`), metav1.PatchOptions{}, "status")
		check(t, err)
	}
	_, err := env.Client.CoreV1().Pods("default").Create(ctx, podOn("default", "on-fleet-1", "fleet-1"), metav1.CreateOptions{})
	check(t, err)
	_, err = fleet.CoreV1().Pods("default").Patch(ctx, "on-fleet-1", types.StrategicMergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	check(t, err)

	for _, name := range []string{"other", "fleet-x", "fleet-", "fleetish-0", "n1"} {
		_, err := fleet.CoreV1().Nodes().Create(ctx, node(name), metav1.CreateOptions{})
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
		_, err = fleet.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease("kube-node-lease", name, name), metav1.CreateOptions{})
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
	}
	_, err = env.Client.CoreV1().Pods("default").Create(ctx, podOn("default", "on-other", "other"), metav1.CreateOptions{})
	check(t, err)
	_, err = fleet.CoreV1().Pods("default").Patch(ctx, "on-other", types.StrategicMergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	expectStatus(t, err, 403, metav1.StatusReasonForbidden)
}
