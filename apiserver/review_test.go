package apiserver_test

import (
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/miniplane/miniplane/test/testenv"
)

// TestSelfReviews: `kubectl auth whoami` and `kubectl auth can-i` work: the review APIs
// report the caller and what the authorizer decides for it.
func TestSelfReviews(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	viewer, err := kubernetes.NewForConfig(env.ConfigFor(testenv.ViewerUser))
	check(t, err)

	who, err := viewer.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	check(t, err)
	// As kube-apiserver, every authenticated user is also in system:authenticated.
	if who.Status.UserInfo.Username != testenv.ViewerUser || !slices.Equal(who.Status.UserInfo.Groups, []string{testenv.ViewerGroup, "system:authenticated"}) {
		t.Fatalf("whoami = %+v", who.Status.UserInfo)
	}

	tests := []struct {
		name   string
		client kubernetes.Interface
		attrs  authorizationv1.ResourceAttributes
		want   bool
	}{
		{"admin creates pods", env.Client, authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"}, true},
		{"viewer lists DaemonSets", viewer, authorizationv1.ResourceAttributes{Verb: "list", Group: "apps", Resource: "daemonsets"}, true},
		{"viewer may not delete pods", viewer, authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: "default", Name: "x"}, false},
	}
	for _, tt := range tests {
		r, err := tt.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &tt.attrs}}, metav1.CreateOptions{})
		check(t, err)
		if r.Status.Allowed != tt.want {
			t.Errorf("%s: allowed = %v (%s), want %v", tt.name, r.Status.Allowed, r.Status.Reason, tt.want)
		}
	}
	r, err := viewer.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}, metav1.CreateOptions{})
	check(t, err)
	if !r.Status.Allowed {
		t.Errorf("viewer may read /metrics, review says %+v", r.Status)
	}
}
