package apiserver

import (
	"crypto"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
)

// ServiceAccount tokens, as kube-apiserver's TokenRequest API issues them: POST
// serviceaccounts/<name>/token (what `kubectl create token` does) returns a signed JWT
// for the ServiceAccount, valid for an audience and a lifetime, and optionally bound to
// a pod, secret or node; the token dies with the ServiceAccount (its UID is in the token)
// and with the object it is bound to. The key lives in the data directory; the OpenID
// discovery document and the JWKS let others verify the tokens.

// Paths of the service account issuer discovery, as kube-apiserver serves them.
const (
	oidcDiscoveryPath = "/.well-known/openid-configuration"
	jwksPath          = "/openid/v1/jwks"
)

// Token lifetimes of a TokenRequest, as kube-apiserver bounds them.
const (
	defaultTokenExpiration = time.Hour
	minTokenExpiration     = 10 * time.Minute
	maxTokenExpiration     = math.MaxUint32 * time.Second
)

// tokenRequestSubresource is serviceaccounts/<name>/token.
var tokenRequestSubresource = subresource{name: "token", kind: "TokenRequest",
	kindGroupVersion: &authenticationv1.SchemeGroupVersion, verbs: []string{"create"}, serve: (*call).requestToken}

// loadServiceAccountKey loads (or creates) the signing key and builds the token issuer and
// verifier from it.
func (s *Server) loadServiceAccountKey() error {
	path := s.cfg.ServiceAccountKeyPath()
	key, err := pki.EnsureServiceAccountKey(path)
	if err != nil {
		return fmt.Errorf("service account key %s: %w", path, err)
	}
	if s.saIssuer, err = auth.NewTokenIssuer(s.cfg.ServiceAccountIssuer, key); err != nil {
		return fmt.Errorf("service account key %s: %w", path, err)
	}
	s.saVerifier, err = auth.NewTokenVerifier(s.cfg.ServiceAccountIssuer, s.cfg.Audiences(), []crypto.PublicKey{key.Public()}, s.clock.Now)
	return err
}

// requestToken serves POST serviceaccounts/<name>/token.
func (c *call) requestToken() {
	gvk := authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")
	data, err := c.readBody()
	if err != nil {
		c.fail(err)
		return
	}
	tr := &authenticationv1.TokenRequest{}
	if err := c.decodeObject(data, gvk, tr); err != nil {
		c.fail(err)
		return
	}
	if tr.Name != "" && tr.Name != c.info.name {
		c.fail(badRequest("the name of the object (%s) does not match the name on the URL (%s)", tr.Name, c.info.name))
		return
	}
	if _, err := c.dryRun(); err != nil {
		c.fail(err)
		return
	}
	ctx := c.r.Context()
	obj, err := c.s.lookup(ctx, serviceAccountsResource, c.info.namespace, c.info.name)
	if err != nil {
		c.fail(err)
		return
	}
	sa := obj.(*corev1.ServiceAccount)

	lifetime := defaultTokenExpiration
	if tr.Spec.ExpirationSeconds != nil {
		lifetime = time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	}
	p := field.NewPath("spec", "expirationSeconds")
	switch {
	case lifetime < minTokenExpiration:
		c.fail(apierrors.NewInvalid(gvk.GroupKind(), c.info.name, field.ErrorList{field.Invalid(p, lifetime.Seconds(), "may not specify a duration less than 10 minutes")}))
		return
	case lifetime > maxTokenExpiration:
		c.fail(apierrors.NewInvalid(gvk.GroupKind(), c.info.name, field.ErrorList{field.Invalid(p, lifetime.Seconds(), "may not specify a duration larger than 2^32 seconds")}))
		return
	}
	if max := c.s.cfg.ServiceAccountMaxTokenExpiration; max > 0 && lifetime > max {
		lifetime = max
	}
	audiences := tr.Spec.Audiences
	if len(audiences) == 0 {
		audiences = c.s.cfg.Audiences()
	}
	now := c.s.clock.Now().Truncate(time.Second)
	req := auth.IssueRequest{
		Namespace: sa.Namespace, ServiceAccount: auth.ObjectRef{Name: sa.Name, UID: string(sa.UID)},
		Audiences: audiences, ID: string(uuid.NewUUID()), IssuedAt: now, Expiry: now.Add(lifetime),
	}
	if ref := tr.Spec.BoundObjectRef; ref != nil {
		if err := c.bindToken(&req, ref, sa); err != nil {
			c.fail(err)
			return
		}
	}
	token, err := c.s.saIssuer.Issue(req)
	if err != nil {
		c.fail(err)
		return
	}
	seconds := int64(lifetime / time.Second)
	out := &authenticationv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sa.Name, Namespace: sa.Namespace, CreationTimestamp: metav1.NewTime(now)},
		Spec:       authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &seconds, BoundObjectRef: tr.Spec.BoundObjectRef},
		Status:     authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(req.Expiry)},
	}
	answer := *c
	answer.info = &requestInfo{verb: "create", res: &resource{group: gvk.Group, version: gvk.Version, name: "tokenrequests", kind: gvk.Kind}}
	answer.out.kind = outputObject
	answer.respond(http.StatusCreated, out, nil)
}

// bindToken binds req to the object ref names, which must exist (with ref's UID, if
// given); a pod must run as the ServiceAccount, and a pod-bound token names its node too.
func (c *call) bindToken(req *auth.IssueRequest, ref *authenticationv1.BoundObjectReference, sa *corev1.ServiceAccount) error {
	p := field.NewPath("spec", "boundObjectRef")
	gk := authenticationv1.SchemeGroupVersion.WithKind("TokenRequest").GroupKind()
	if ref.APIVersion != "" && ref.APIVersion != "v1" {
		return apierrors.NewInvalid(gk, c.info.name, field.ErrorList{field.NotSupported(p.Child("apiVersion"), ref.APIVersion, []string{"v1"})})
	}
	if ref.Name == "" {
		return apierrors.NewInvalid(gk, c.info.name, field.ErrorList{field.Required(p.Child("name"), "")})
	}
	ctx := c.r.Context()
	lookup := func() (metav1.Object, error) {
		var obj any
		var err error
		switch ref.Kind {
		case "Pod":
			obj, err = c.s.lookup(ctx, podsResource, sa.Namespace, ref.Name)
		case "Secret":
			obj, err = c.s.lookup(ctx, secretsResource, sa.Namespace, ref.Name)
		case "Node":
			obj, err = c.s.lookup(ctx, nodesResource, "", ref.Name)
		default:
			return nil, apierrors.NewInvalid(gk, c.info.name, field.ErrorList{field.NotSupported(p.Child("kind"), ref.Kind, []string{"Pod", "Secret", "Node"})})
		}
		if err != nil {
			return nil, err
		}
		return obj.(metav1.Object), nil
	}
	obj, err := lookup()
	if err != nil {
		return err
	}
	if ref.UID != "" && ref.UID != obj.GetUID() {
		return apierrors.NewConflict(serviceAccountsResource, c.info.name, fmt.Errorf(
			"the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	bound := &auth.ObjectRef{Name: obj.GetName(), UID: string(obj.GetUID())}
	switch ref.Kind {
	case "Pod":
		pod := obj.(*corev1.Pod)
		if pod.Spec.ServiceAccountName != sa.Name {
			return badRequest("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", sa.Name)
		}
		req.Pod = bound
		if pod.Spec.NodeName != "" {
			if n, err := c.s.lookup(ctx, nodesResource, "", pod.Spec.NodeName); err == nil {
				node := n.(*corev1.Node)
				req.Node = &auth.ObjectRef{Name: node.Name, UID: string(node.UID)}
			}
		}
	case "Secret":
		req.Secret = bound
	case "Node":
		req.Node = bound
	}
	return nil
}

// serveOIDCDiscovery serves the OpenID provider configuration of the ServiceAccount
// token issuer.
func (s *Server) serveOIDCDiscovery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                s.saIssuer.Issuer(),
		"jwks_uri":                              s.cfg.JWKSURI(),
		"response_types_supported":              []string{"id_token"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": s.saIssuer.Algorithms(),
	})
}

// serveJWKS serves the public keys that verify ServiceAccount tokens.
func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	data, err := json.Marshal(s.saIssuer.JWKS())
	if err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}
