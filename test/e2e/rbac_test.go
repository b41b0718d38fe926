package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/manager"
	"github.com/miniplane/miniplane/kubeletstub"
	"github.com/miniplane/miniplane/test/testenv"
)

// TestControllerServiceAccountsAreBound: every ServiceAccount the controller-manager runs
// a controller as has a role in the bootstrap policy, bound to it.
func TestControllerServiceAccountsAreBound(t *testing.T) {
	sas := manager.ControllerServiceAccounts()
	want := slices.Clone(auth.ControllerServiceAccounts)
	sort.Strings(want)
	if !slices.Equal(sas, want) {
		t.Fatalf("the controller-manager acts as %v, the bootstrap policy binds %v", sas, want)
	}
	roles := map[string]bool{}
	for _, r := range auth.BootstrapClusterRoles() {
		roles[r.Name] = true
	}
	for _, sa := range sas {
		found := false
		for _, b := range auth.BootstrapClusterRoleBindings(nil, nil) {
			if b.RoleRef.Name == auth.ControllerRolePrefix+sa && roles[b.RoleRef.Name] && slices.Contains(b.Subjects,
				rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: metav1.NamespaceSystem, Name: sa}) {
				found = true
			}
		}
		if !found {
			t.Errorf("no bootstrap binding gives %s its role", sa)
		}
	}
}

// TestComponentsRunOnTheirOwnRoles runs everything as `up` does — the controller-manager's
// controllers as their ServiceAccounts, the scheduler and the stub kubelets as themselves,
// none in system:masters — through a DaemonSet's life (rollout, rolling update, cascading
// deletion) and a node going silent, and reads the audit log: each write came from the
// identity whose job it is, and no component was ever refused anything.
func TestComponentsRunOnTheirOwnRoles(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	cfg := testenv.Everything(3)
	api := configs.DefaultAPIServer()
	api.AuditLogPath = auditPath
	cfg.APIServer = &api
	cfg.ControllerManager.NodeLifecycle.MonitorPeriod = 200 * time.Millisecond
	cfg.ControllerManager.NodeLifecycle.GracePeriod = 3 * time.Second
	cfg.KubeletStub.HeartbeatInterval, cfg.KubeletStub.LeaseRenewInterval = 300*time.Millisecond, 300*time.Millisecond
	env := testenv.New(t, cfg)
	ctx := context.Background()
	client := env.Client
	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/agent:1"}}},
			},
		},
	}
	if _, err := client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningOn := func(image string) (int, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			return 0, err
		}
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == image {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(nodes), nil
	}
	cpEventually(t, 60*time.Second, "a running daemon pod on each node", func() (bool, error) {
		n, err := runningOn("registry.example/agent:1")
		return n == 3, err
	})
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"registry.example/agent:2"}]}}}}`)
	if _, err := client.AppsV1().DaemonSets("default").Patch(ctx, "agent", "application/strategic-merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cpEventually(t, 90*time.Second, "the rolling update to reach every node", func() (bool, error) {
		n, err := runningOn("registry.example/agent:2")
		return n == 3, err
	})
	policy := metav1.DeletePropagationForeground
	if err := client.AppsV1().DaemonSets("default").Delete(ctx, "agent", metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
	cpEventually(t, 60*time.Second, "the garbage collector to remove the DaemonSet after its pods", func() (bool, error) {
		_, err := client.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	// A node that stops heartbeating is marked by node lifecycle.
	silent := env.Fleet.NodeNames()[0]
	n, err := client.CoreV1().Nodes().Get(ctx, silent, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[kubeletstub.AnnotationStopHeartbeats] = "true"
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cpEventually(t, 60*time.Second, "the silent node to be tainted unreachable", func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, silent, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeUnreachable {
				return true, nil
			}
		}
		return false, nil
	})

	const (
		dsController = "system:serviceaccount:kube-system:daemon-set-controller"
		gc           = "system:serviceaccount:kube-system:generic-garbage-collector"
		nodeCtl      = "system:serviceaccount:kube-system:node-controller"
		rootCA       = "system:serviceaccount:kube-system:root-ca-cert-publisher"
	)
	fleet := testenv.StubIdentity(*cfg.KubeletStub).Name
	components := []string{testenv.ControllerManagerUser, testenv.SchedulerUser, dsController, gc, nodeCtl, rootCA, fleet}
	did := map[string]map[string]int{} // user → "verb resource[/sub]" → count
	var refused []string
	for _, ev := range readAuditLog(t, auditPath) {
		user := ev.User.Username
		if slices.Contains(ev.User.Groups, auth.AdminGroup) && user != testenv.AdminUser {
			t.Errorf("%s, in %s, wrote %s", user, auth.AdminGroup, ev.RequestURI)
		}
		if !slices.Contains(components, user) || ev.ObjectRef == nil {
			continue
		}
		what := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			what += "/" + ev.ObjectRef.Subresource
		}
		if did[user] == nil {
			did[user] = map[string]int{}
		}
		did[user][what]++
		if ev.ResponseStatus != nil && (ev.ResponseStatus.Code == 403 || ev.ResponseStatus.Code == 401) {
			refused = append(refused, fmt.Sprintf("%s: %s %s: %d %s", user, ev.Verb, ev.RequestURI, ev.ResponseStatus.Code, ev.ResponseStatus.Message))
		}
	}
	if len(refused) > 0 {
		t.Errorf("components were refused:\n%s", strings.Join(refused, "\n"))
	}
	for _, want := range []struct{ user, what string }{
		{dsController, "create pods"},
		{dsController, "create controllerrevisions"},
		{dsController, "update daemonsets/status"},
		{testenv.SchedulerUser, "create pods/binding"},
		{fleet, "create nodes"},
		{fleet, "update leases"},
		{fleet, "update pods/status"},
		{gc, "delete pods"},
		{nodeCtl, "update nodes"},
		{rootCA, "create configmaps"},
		{testenv.ControllerManagerUser, "create serviceaccounts/token"},
	} {
		if did[want.user][want.what] == 0 {
			t.Errorf("%s never did %q; it did %v", want.user, want.what, did[want.user])
		}
	}
	// The controllers' own writes are not the controller-manager's.
	for what := range did[testenv.ControllerManagerUser] {
		if !strings.Contains(what, "serviceaccounts") && !strings.Contains(what, "events") {
			t.Errorf("the controller-manager itself did %q", what)
		}
	}
}

func readAuditLog(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}
