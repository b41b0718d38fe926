package apiserver

import (
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// TestRBACSnapshotRebuilds: the RBAC snapshot is rebuilt after a change and only then,
// once for a burst of requests, and never older than the changes seen before a request.
func TestRBACSnapshotRebuilds(t *testing.T) {
	var mu sync.Mutex
	bound := false
	z := &rbacAuthorizer{newPolicy: func() *auth.Policy {
		mu.Lock()
		defer mu.Unlock()
		if !bound {
			return auth.NewPolicy(nil, nil, nil, nil)
		}
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "r"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "u"}}}
		return auth.NewPolicy([]*rbacv1.ClusterRole{role}, nil, []*rbacv1.ClusterRoleBinding{binding}, nil)
	}}
	u := &auth.User{Name: "u"}
	get := auth.Attributes{Verb: "get", Resource: "pods", Namespace: "n", Name: "p"}
	if d, _ := z.Authorize(u, get); d != auth.NoOpinion {
		t.Fatalf("before the binding: %v", d)
	}
	if d, _ := z.Authorize(u, get); d != auth.NoOpinion || z.rebuilds.Load() != 1 {
		t.Fatalf("no change: %v after %d builds, want one", d, z.rebuilds.Load())
	}
	mu.Lock()
	bound = true
	mu.Unlock()
	z.changed()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if d, _ := z.Authorize(u, get); d != auth.Allow {
				t.Errorf("after the change: %v", d)
			}
		})
	}
	wg.Wait()
	if n := z.rebuilds.Load(); n != 2 {
		t.Fatalf("%d builds after one change and 50 requests, want 2 in all", n)
	}
}
