package compose

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// leastPrivilege checks RBAC in the compose stack: the controllers act as their own
// ServiceAccounts (the leader made them), the components are no administrators, and a
// ServiceAccount token reads what its Role grants and nothing else.
func leastPrivilege(ctx context.Context, t *testing.T, s *stack, c kubernetes.Interface) {
	// The leader requests a controller's token (making its ServiceAccount) with the
	// controller's first write: the DaemonSet controller has written the rollout's pods.
	if _, err := c.CoreV1().ServiceAccounts(metav1.NamespaceSystem).Get(ctx, "daemon-set-controller", metav1.GetOptions{}); err != nil {
		t.Errorf("the DaemonSet controller's ServiceAccount: %v", err)
	}
	// The components' kubeconfigs: not in system:masters, so not allowed to read secrets.
	for _, component := range []string{"controller-manager", "scheduler"} {
		cfg, err := clientcmd.BuildConfigFromFlags("", s.state+"/kubeconfigs/"+component+".kubeconfig")
		if err != nil {
			t.Fatal(err)
		}
		// The components dial https://apiserver:6443 inside the network; from the host,
		// apiserver-1's published port (its certificate names 127.0.0.1).
		cfg.Host = "https://127.0.0.1:" + strconv.Itoa(s.port)
		cc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		who, err := cc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s whoami: %v", component, err)
		}
		if slices.Contains(who.Status.UserInfo.Groups, "system:masters") {
			t.Errorf("%s is in system:masters: %+v", component, who.Status.UserInfo)
		}
		if err := cc.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
			t.Errorf("%s deletes a node: %v, want 403", component, err)
		}
	}

	const ns = "rbac-test"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken, cfg.Timeout = tr.Status.Token, 30*time.Second
	reader, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 30*time.Second, "the reader's binding to take effect", func(ctx context.Context) (bool, string) {
		_, err := reader.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil, errString(err)
	})
	if _, err := reader.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reader lists secrets: %v, want 403", err)
	}
	if _, err := reader.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reader lists pods in another namespace: %v, want 403", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
