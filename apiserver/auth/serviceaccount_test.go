package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

const testIssuer = "https://kubernetes.default.svc.cluster.local"

var (
	testRSAKey = mustRSA()
	testECKey  = mustEC()
)

func mustRSA() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

func mustEC() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

var testT0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func testRequest() IssueRequest {
	return IssueRequest{
		Namespace: "team", ServiceAccount: ObjectRef{Name: "reader", UID: "sa-uid"},
		Pod: &ObjectRef{Name: "p", UID: "pod-uid"}, Audiences: []string{testIssuer}, ID: "jti-1",
		IssuedAt: testT0, Expiry: testT0.Add(time.Hour),
	}
}

func TestTokenRoundTrip(t *testing.T) {
	for _, key := range []crypto.Signer{testRSAKey, testECKey} {
		issuer, err := NewTokenIssuer(testIssuer, key)
		if err != nil {
			t.Fatal(err)
		}
		token, err := issuer.Issue(testRequest())
		if err != nil {
			t.Fatal(err)
		}
		now := testT0.Add(time.Minute)
		v, err := NewTokenVerifier(testIssuer, []string{testIssuer, "other"}, []crypto.PublicKey{key.Public()}, func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		c, err := v.Verify(token)
		if err != nil {
			t.Fatalf("%s: %v", issuer.Algorithms(), err)
		}
		u := c.User()
		if u.Name != "system:serviceaccount:team:reader" || u.UID != "sa-uid" || c.Pod.UID != "pod-uid" || c.ID != "jti-1" ||
			!u.InGroup("system:serviceaccounts") || !u.InGroup("system:serviceaccounts:team") ||
			u.Extra["authentication.kubernetes.io/pod-name"][0] != "p" {
			t.Fatalf("claims %+v, user %+v", c, u)
		}
		// The JWKS names the key by the ID the header carries.
		set := issuer.JWKS()
		data, _ := json.Marshal(set)
		var parsed jose.JSONWebKeySet
		if err := json.Unmarshal(data, &parsed); err != nil || len(parsed.Keys) != 1 || parsed.Keys[0].Use != "sig" {
			t.Fatalf("JWKS %s: %v", data, err)
		}
		tok, _ := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
		if tok.Headers[0].KeyID != parsed.Keys[0].KeyID || parsed.Keys[0].Algorithm != issuer.Algorithms()[0] {
			t.Fatalf("kid %q, JWKS %s", tok.Headers[0].KeyID, data)
		}
	}
}

func TestTokenRejections(t *testing.T) {
	issuer, err := NewTokenIssuer(testIssuer, testRSAKey)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewTokenIssuer(testIssuer, testECKey)
	elsewhere, _ := NewTokenIssuer("https://elsewhere.example", testRSAKey)
	issue := func(iss *TokenIssuer, change func(*IssueRequest)) string {
		req := testRequest()
		if change != nil {
			change(&req)
		}
		tok, err := iss.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := issue(issuer, nil)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), `"reader"`, `"admin"`, 1)
	tests := []struct {
		name  string
		token string
		at    time.Duration // after testT0
		want  error
	}{
		{"valid", good, time.Minute, nil},
		{"expired", good, time.Hour + 2*time.Minute, ErrInvalidToken},
		{"within the minute's leeway", good, time.Hour + 30*time.Second, nil},
		{"used before issued", good, -2 * time.Minute, ErrInvalidToken},
		{"other audience", issue(issuer, func(r *IssueRequest) { r.Audiences = []string{"vault"} }), time.Minute, ErrInvalidToken},
		{"unknown key", issue(other, nil), time.Minute, ErrInvalidToken},
		{"other issuer", issue(elsewhere, nil), time.Minute, ErrNotServiceAccountToken},
		{"payload changed", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2], time.Minute, ErrInvalidToken},
		{"signature dropped", parts[0] + "." + parts[1] + ".", time.Minute, ErrInvalidToken},
		{"alg none", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"x"}`)) + "." + parts[1] + ".", time.Minute, ErrInvalidToken},
		{"a static token", NewToken(), time.Minute, ErrNotServiceAccountToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := testT0.Add(tt.at)
			v, err := NewTokenVerifier(testIssuer, []string{testIssuer}, []crypto.PublicKey{testRSAKey.Public()}, func() time.Time { return now })
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(tt.token)
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestVerifiedTokensExpire: a remembered token is still checked against the clock.
func TestVerifiedTokensExpire(t *testing.T) {
	issuer, _ := NewTokenIssuer(testIssuer, testRSAKey)
	req := testRequest()
	req.Expiry = testT0.Add(10 * time.Minute)
	token, _ := issuer.Issue(req)
	now := testT0
	v, _ := NewTokenVerifier(testIssuer, []string{testIssuer}, []crypto.PublicKey{testRSAKey.Public()}, func() time.Time { return now })
	if _, err := v.Verify(token); err != nil {
		t.Fatal(err)
	}
	now = now.Add(12 * time.Minute)
	if _, err := v.Verify(token); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify after expiry = %v, want invalid", err)
	}
}

// FuzzVerifyToken: whatever the bearer token, the verifier neither panics nor accepts
// anything but a token the issuer signed, and then with the claims it signed. The seeds run
// in every `go test`; `go test -fuzz FuzzVerifyToken ./apiserver/auth` explores further.
func FuzzVerifyToken(f *testing.F) {
	issuer, err := NewTokenIssuer(testIssuer, testECKey)
	if err != nil {
		f.Fatal(err)
	}
	good, err := issuer.Issue(testRequest())
	if err != nil {
		f.Fatal(err)
	}
	parts := strings.Split(good, ".")
	for _, seed := range []string{
		good,
		"", ".", "..", "eyJ..", "eyJhbGciOiJub25lIn0..", parts[0] + "." + parts[1] + ".",
		parts[0] + ".." + parts[2], "eyJ" + strings.Repeat("A", 500) + ".x.y",
		good + "x", strings.ToUpper(good), parts[1] + "." + parts[0] + "." + parts[2],
		NewToken(),
	} {
		f.Add(seed)
	}
	now := testT0.Add(time.Minute)
	v, err := NewTokenVerifier(testIssuer, []string{testIssuer}, []crypto.PublicKey{testECKey.Public()}, func() time.Time { return now })
	if err != nil {
		f.Fatal(err)
	}
	want, err := v.Verify(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(token)
		if err != nil {
			if c != nil {
				t.Fatal("claims returned with an error")
			}
			return
		}
		// Only the signed claims verify (base64 may spell one signature several ways).
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("token %q verified with claims %+v, want only %+v", token, c, want)
		}
	})
}

// BenchmarkVerifyToken measures what a request with a ServiceAccount token costs the
// verifier: the first time (signature and claims), and again within the remembered window.
func BenchmarkVerifyToken(b *testing.B) {
	issuer, err := NewTokenIssuer(testIssuer, testRSAKey)
	if err != nil {
		b.Fatal(err)
	}
	token, err := issuer.Issue(testRequest())
	if err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return testT0.Add(time.Minute) }
	v, err := NewTokenVerifier(testIssuer, []string{testIssuer}, []crypto.PublicKey{testRSAKey.Public()}, now)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("signature", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := v.verifySignature(token); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := v.Verify(token); err != nil {
				b.Fatal(err)
			}
		}
	})
}
