package component

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// recordingTransport answers every request with an empty list and keeps its
// Authorization header.
type recordingTransport struct{ authorization []string }

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.authorization = append(t.authorization, req.Header.Get("Authorization"))
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"kind":"PodList","apiVersion":"v1","items":[]}`)), Request: req}, nil
}

// A service account's client keeps the connection of the base configuration and replaces
// only the credentials.
func TestServiceAccountConfigKeepsTheTransport(t *testing.T) {
	tokens := fake.NewClientset()
	tokens.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{
			Token: "sa-token", ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}}, nil
	})
	via := &recordingTransport{}
	base := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "controller-manager-token", Transport: via, UserAgent: "test"}
	client, err := kubernetes.NewForConfig(ServiceAccountConfig(tokens, base, "kube-system", "daemon-set-controller"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("list through the base transport: %v", err)
	}
	if len(via.authorization) != 1 || via.authorization[0] != "Bearer sa-token" {
		t.Errorf("requests through the base transport carried %q, want one with the service account's token", via.authorization)
	}
}
