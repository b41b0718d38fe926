package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// ServiceAccount tokens are JWTs in the shape kube-apiserver issues for TokenRequest: the
// registered claims (iss, sub, aud, exp, iat, nbf, jti) and a private "kubernetes.io"
// claim naming the namespace, the ServiceAccount and, for bound tokens, the pod, secret
// or node the token lives only as long as. Signing and parsing are go-jose's; this file
// only decides what a valid token is.

// ObjectRef names one object a token is about, by name and UID.
type ObjectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// kubernetesClaims is the private claim, keyed "kubernetes.io".
type kubernetesClaims struct {
	Namespace      string           `json:"namespace"`
	ServiceAccount ObjectRef        `json:"serviceaccount"`
	Pod            *ObjectRef       `json:"pod,omitempty"`
	Secret         *ObjectRef       `json:"secret,omitempty"`
	Node           *ObjectRef       `json:"node,omitempty"`
	WarnAfter      *jwt.NumericDate `json:"warnafter,omitempty"`
}

type privateClaims struct {
	Kubernetes *kubernetesClaims `json:"kubernetes.io,omitempty"`
}

// TokenClaims are what a ServiceAccount token says, once its signature, issuer, audience
// and lifetime have been checked.
type TokenClaims struct {
	Namespace      string
	ServiceAccount ObjectRef
	// Pod, Secret and Node are set for a token bound to that object.
	Pod, Secret, Node *ObjectRef
	// ID is the token's jti, its credential ID.
	ID        string
	Audiences []string
	IssuedAt  time.Time
	Expiry    time.Time
}

// UserName is the user the token authenticates as: system:serviceaccount:<ns>:<name>.
func (c *TokenClaims) UserName() string {
	return serviceaccount.MakeUsername(c.Namespace, c.ServiceAccount.Name)
}

// User is the identity the token authenticates as, as kube-apiserver makes it: the
// ServiceAccount's name and UID, its groups, and what a bound token is bound to in Extra.
func (c *TokenClaims) User() *User {
	u := &User{
		Name:   c.UserName(),
		UID:    c.ServiceAccount.UID,
		Groups: serviceaccount.MakeGroupNames(c.Namespace),
		Extra:  map[string][]string{},
	}
	if c.Pod != nil {
		u.Extra[serviceaccount.PodNameKey] = []string{c.Pod.Name}
		u.Extra[serviceaccount.PodUIDKey] = []string{c.Pod.UID}
	}
	if c.Node != nil {
		u.Extra[serviceaccount.NodeNameKey] = []string{c.Node.Name}
		u.Extra[serviceaccount.NodeUIDKey] = []string{c.Node.UID}
	}
	if c.ID != "" {
		u.Extra[user.CredentialIDKey] = []string{"JTI=" + c.ID}
	}
	return u
}

// signingKey is a private key with what a JWT header says about it.
type signingKey struct {
	key crypto.Signer
	alg jose.SignatureAlgorithm
	kid string
}

func newSigningKey(key crypto.Signer) (signingKey, error) {
	alg, err := algorithmFor(key.Public())
	if err != nil {
		return signingKey{}, err
	}
	kid, err := KeyID(key.Public())
	if err != nil {
		return signingKey{}, err
	}
	return signingKey{key: key, alg: alg, kid: kid}, nil
}

// algorithmFor is the JWS algorithm of a public key: RS256 for RSA, ES256/384/512 for the
// NIST curves, as kube-apiserver chooses.
func algorithmFor(pub crypto.PublicKey) (jose.SignatureAlgorithm, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return jose.RS256, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		case elliptic.P521():
			return jose.ES512, nil
		}
	}
	return "", fmt.Errorf("unsupported service account key type %T: want RSA or ECDSA", pub)
}

// KeyID is the key ID kube-apiserver gives a public key: the unpadded base64url SHA-256
// of its DER (PKIX) encoding, so that every API server with the same key names it alike.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// TokenIssuer signs ServiceAccount tokens.
type TokenIssuer struct {
	issuer string
	key    signingKey
	signer jose.Signer
}

// NewTokenIssuer returns an issuer that signs with key as issuer (the iss claim).
func NewTokenIssuer(issuer string, key crypto.Signer) (*TokenIssuer, error) {
	sk, err := newSigningKey(key)
	if err != nil {
		return nil, err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: sk.alg, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", sk.kid))
	if err != nil {
		return nil, err
	}
	return &TokenIssuer{issuer: issuer, key: sk, signer: signer}, nil
}

// IssueRequest is what a new token is for.
type IssueRequest struct {
	Namespace      string
	ServiceAccount ObjectRef
	Pod            *ObjectRef
	Secret         *ObjectRef
	Node           *ObjectRef
	Audiences      []string
	ID             string
	IssuedAt       time.Time
	Expiry         time.Time
}

// Issue signs a token for req.
func (i *TokenIssuer) Issue(req IssueRequest) (string, error) {
	if req.Namespace == "" || req.ServiceAccount.Name == "" || req.ServiceAccount.UID == "" {
		return "", errors.New("a token needs a namespace and a ServiceAccount name and UID")
	}
	public := jwt.Claims{
		Issuer:    i.issuer,
		Subject:   serviceaccount.MakeUsername(req.Namespace, req.ServiceAccount.Name),
		Audience:  jwt.Audience(req.Audiences),
		IssuedAt:  jwt.NewNumericDate(req.IssuedAt),
		NotBefore: jwt.NewNumericDate(req.IssuedAt),
		Expiry:    jwt.NewNumericDate(req.Expiry),
		ID:        req.ID,
	}
	private := privateClaims{Kubernetes: &kubernetesClaims{
		Namespace: req.Namespace, ServiceAccount: req.ServiceAccount,
		Pod: req.Pod, Secret: req.Secret, Node: req.Node,
	}}
	return jwt.Signed(i.signer).Claims(public).Claims(private).Serialize()
}

// JWKS is the public key set a verifier of this issuer's tokens needs, as
// /openid/v1/jwks serves it.
func (i *TokenIssuer) JWKS() jose.JSONWebKeySet {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
		Key: i.key.key.Public(), KeyID: i.key.kid, Algorithm: string(i.key.alg), Use: "sig",
	}}}
}

// Algorithms are the JWS algorithms of the issuer's keys.
func (i *TokenIssuer) Algorithms() []string { return []string{string(i.key.alg)} }

// Issuer is the iss claim the issuer writes.
func (i *TokenIssuer) Issuer() string { return i.issuer }

// Verification errors. They never say more than that a token is not valid to the
// caller, who answers 401; they are for logs and TokenReview.
var (
	ErrNotServiceAccountToken = errors.New("not a service account token")
	ErrInvalidToken           = errors.New("invalid service account token")
)

// verifiedTTL bounds how long a token whose signature has been checked is remembered: a
// token is re-verified at most this often, while its lifetime is checked on every use.
const verifiedTTL = 10 * time.Second

// verifiedCacheSize bounds the memory of remembered tokens.
const verifiedCacheSize = 4096

// TokenVerifier checks ServiceAccount tokens: signature by a known key, issuer, audience,
// lifetime and claim shape. Whether the ServiceAccount (and a bound object) still exists
// with the UID the token names is the caller's to check, since it knows the store.
type TokenVerifier struct {
	issuer    string
	audiences []string
	keys      map[string]crypto.PublicKey // by kid
	algs      []jose.SignatureAlgorithm
	now       func() time.Time

	mu       sync.Mutex
	verified map[[32]byte]verifiedToken
}

type verifiedToken struct {
	claims *TokenClaims
	until  time.Time
}

// NewTokenVerifier returns a verifier of the tokens that issuer signed with one of keys
// for any of audiences. now is the clock lifetimes are checked against.
func NewTokenVerifier(issuer string, audiences []string, keys []crypto.PublicKey, now func() time.Time) (*TokenVerifier, error) {
	v := &TokenVerifier{issuer: issuer, audiences: audiences, keys: map[string]crypto.PublicKey{}, now: now,
		verified: map[[32]byte]verifiedToken{}}
	for _, k := range keys {
		alg, err := algorithmFor(k)
		if err != nil {
			return nil, err
		}
		kid, err := KeyID(k)
		if err != nil {
			return nil, err
		}
		v.keys[kid] = k
		if !slices.Contains(v.algs, alg) {
			v.algs = append(v.algs, alg)
		}
	}
	if len(v.keys) == 0 {
		return nil, errors.New("a token verifier needs at least one key")
	}
	return v, nil
}

// LooksLikeJWT reports whether a bearer token has the shape of a compact JWS (three
// base64url parts), which a static token never has.
func LooksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2 && strings.HasPrefix(token, "eyJ")
}

// Verify checks token for the verifier's audiences.
func (v *TokenVerifier) Verify(token string) (*TokenClaims, error) {
	return v.VerifyFor(token, v.audiences)
}

// VerifyFor checks token for the given audiences (a TokenReview may name others than the
// API server's own); the claims' Audiences are those of the token that were asked for.
func (v *TokenVerifier) VerifyFor(token string, audiences []string) (*TokenClaims, error) {
	if !LooksLikeJWT(token) {
		return nil, ErrNotServiceAccountToken
	}
	now := v.now()
	sum := sha256.Sum256([]byte(token))
	claims := v.remembered(sum, now)
	if claims == nil {
		var err error
		if claims, err = v.verifySignature(token); err != nil {
			return nil, err
		}
		v.remember(sum, claims, now)
	}
	// Lifetime, with a minute's leeway for clocks that disagree, as upstream.
	if now.After(claims.Expiry.Add(jwt.DefaultLeeway)) {
		return nil, fmt.Errorf("%w: token has expired", ErrInvalidToken)
	}
	if now.Add(jwt.DefaultLeeway).Before(claims.IssuedAt) {
		return nil, fmt.Errorf("%w: token used before it was issued", ErrInvalidToken)
	}
	var matched []string
	for _, a := range claims.Audiences {
		if slices.Contains(audiences, a) {
			matched = append(matched, a)
		}
	}
	if len(matched) == 0 {
		return nil, fmt.Errorf("%w: token audiences %q are not among %q", ErrInvalidToken, claims.Audiences, audiences)
	}
	out := *claims
	out.Audiences = matched
	return &out, nil
}

// verifySignature parses token, checks its signature, issuer and claim shape, and returns
// what it says.
func (v *TokenVerifier) verifySignature(token string) (*TokenClaims, error) {
	tok, err := jwt.ParseSigned(token, v.algs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if len(tok.Headers) != 1 {
		return nil, fmt.Errorf("%w: want one signature", ErrInvalidToken)
	}
	key, ok := v.keys[tok.Headers[0].KeyID]
	if !ok {
		return nil, fmt.Errorf("%w: signed by an unknown key", ErrInvalidToken)
	}
	var public jwt.Claims
	var private privateClaims
	if err := tok.Claims(key, &public, &private); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if public.Issuer != v.issuer {
		return nil, ErrNotServiceAccountToken // another issuer's JWT
	}
	k := private.Kubernetes
	if k == nil || k.Namespace == "" || k.ServiceAccount.Name == "" || k.ServiceAccount.UID == "" {
		return nil, fmt.Errorf("%w: no ServiceAccount claim", ErrInvalidToken)
	}
	if public.Subject != serviceaccount.MakeUsername(k.Namespace, k.ServiceAccount.Name) {
		return nil, fmt.Errorf("%w: subject does not name the ServiceAccount", ErrInvalidToken)
	}
	if public.Expiry == nil || public.IssuedAt == nil {
		return nil, fmt.Errorf("%w: a token must say when it was issued and when it expires", ErrInvalidToken)
	}
	if public.NotBefore != nil && v.now().Add(jwt.DefaultLeeway).Before(public.NotBefore.Time()) {
		return nil, fmt.Errorf("%w: token not valid yet", ErrInvalidToken)
	}
	return &TokenClaims{
		Namespace: k.Namespace, ServiceAccount: k.ServiceAccount,
		Pod: k.Pod, Secret: k.Secret, Node: k.Node,
		ID: public.ID, Audiences: public.Audience,
		IssuedAt: public.IssuedAt.Time(), Expiry: public.Expiry.Time(),
	}, nil
}

func (v *TokenVerifier) remembered(sum [32]byte, now time.Time) *TokenClaims {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.verified[sum]
	if !ok || now.After(e.until) {
		return nil
	}
	return e.claims
}

func (v *TokenVerifier) remember(sum [32]byte, c *TokenClaims, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.verified) >= verifiedCacheSize {
		for k, e := range v.verified {
			if now.After(e.until) || len(v.verified) >= verifiedCacheSize {
				delete(v.verified, k)
			}
		}
	}
	v.verified[sum] = verifiedToken{claims: c, until: now.Add(verifiedTTL)}
}
