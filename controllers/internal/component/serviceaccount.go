package component

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// serviceAccountTokenLifetime is how long each token a component requests for a
// ServiceAccount lives; it is replaced when serviceAccountTokenRefresh of that is over, or
// at once when the server answers 401 (the ServiceAccount was recreated).
const (
	serviceAccountTokenLifetime = time.Hour
	serviceAccountTokenRefresh  = 0.8
	// tokenRequestTimeout bounds one TokenRequest, which the token source makes without a
	// caller's context (oauth2.TokenSource has none).
	tokenRequestTimeout = 30 * time.Second
)

// ServiceAccountConfig returns a copy of base that authenticates as the ServiceAccount
// namespace/name instead of base's own credentials, as kube-controller-manager's
// --use-service-account-credentials does: its tokens are requested with client
// (TokenRequest, base's identity) when a request needs one, and replaced before they
// expire; the ServiceAccount is created when it is missing. Nothing is requested before
// the first request, so an unreachable server fails requests (which their callers retry),
// not the construction.
func ServiceAccountConfig(client kubernetes.Interface, base *rest.Config, namespace, name string) *rest.Config {
	ts := &serviceAccountTokens{client: client, namespace: namespace, name: name}
	cfg := rest.AnonymousClientConfig(base)
	cfg.UserAgent, cfg.QPS, cfg.Burst = base.UserAgent, base.QPS, base.Burst
	// The connection is not a credential: a base configuration with a transport of its
	// own (an embedding program's, a test's) keeps it, whichever identity a controller
	// acts as; AnonymousClientConfig drops it.
	cfg.Transport = base.Transport
	cfg.WrapTransport = transport.ResettableTokenSourceWrapTransport(transport.NewCachedTokenSource(ts))
	return cfg
}

// serviceAccountTokens requests tokens of one ServiceAccount.
type serviceAccountTokens struct {
	client          kubernetes.Interface
	namespace, name string
}

// Token implements oauth2.TokenSource. The token's Expiry is when it should be replaced,
// before it really expires.
func (t *serviceAccountTokens) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tokenRequestTimeout)
	defer cancel()
	seconds := int64(serviceAccountTokenLifetime / time.Second)
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	sas := t.client.CoreV1().ServiceAccounts(t.namespace)
	start := time.Now()
	tr, err := sas.CreateToken(ctx, t.name, request, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: t.namespace, Name: t.name}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			tr, err = sas.CreateToken(ctx, t.name, request, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("token of service account %s/%s: %w", t.namespace, t.name, err)
	}
	lifetime := tr.Status.ExpirationTimestamp.Sub(start)
	return &oauth2.Token{
		AccessToken: tr.Status.Token,
		TokenType:   "Bearer",
		Expiry:      start.Add(time.Duration(float64(lifetime) * serviceAccountTokenRefresh)),
	}, nil
}
