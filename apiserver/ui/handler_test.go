package ui

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
)

// fakeAPI stands for the API server's handler: it knows two tokens, answers
// SelfSubjectReviews and records every other request.
type fakeAPI struct {
	got []*http.Request
	// bodies of the recorded requests
	bodies []string
}

var fakeUsers = map[string]string{"admin-token": "admin", "viewer-token": "viewer"}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, ok := fakeUsers[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Status","code":401}`)
		return
	}
	if r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","status":{"userInfo":{"username":"`+user+`","groups":["g"]}}}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.got = append(f.got, r)
	f.bodies = append(f.bodies, string(body))
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"kind":"NodeList","user":"`+user+`"}`)
}

const host = "127.0.0.1:6443"

type fixture struct {
	t     *testing.T
	h     *Handler
	api   *fakeAPI
	clock *testingclock.FakeClock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	api := &fakeAPI{}
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h, err := New(Options{Config: configs.DefaultUI(), API: api, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, h: h, api: api, clock: clk}
}

// req is one request to the view; cookie, csrf and origin are sent when not empty.
type req struct {
	method, path, body   string
	cookie, csrf, origin string
	header               map[string]string
	plainHTTP            bool
}

func (f *fixture) do(r req) *httptest.ResponseRecorder {
	f.t.Helper()
	if r.method == "" {
		r.method = http.MethodGet
	}
	hr := httptest.NewRequest(r.method, "https://"+host+r.path, strings.NewReader(r.body))
	if r.plainHTTP {
		hr.TLS = nil
	} else {
		hr.TLS = &tls.ConnectionState{}
	}
	if r.cookie != "" {
		hr.AddCookie(&http.Cookie{Name: CookieName, Value: r.cookie})
	}
	if r.csrf != "" {
		hr.Header.Set(CSRFHeader, r.csrf)
	}
	if r.origin != "" {
		hr.Header.Set("Origin", r.origin)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.h.Mount(http.NotFoundHandler()).ServeHTTP(w, hr)
	return w
}

// signIn redeems a fresh link for token and returns the cookie and the CSRF token.
func (f *fixture) signIn(token string) (cookie, csrf string) {
	f.t.Helper()
	w := f.do(req{path: f.h.SignInLink(token)})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != Prefix {
		f.t.Fatalf("sign-in link: %d to %q", w.Code, w.Header().Get("Location"))
	}
	cookie = sessionCookie(f.t, w).Value
	var info sessionInfo
	w = f.do(req{path: sessionPath, cookie: cookie})
	if w.Code != http.StatusOK {
		f.t.Fatalf("session: %d %s", w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &info); err != nil || info.CSRFToken == "" {
		f.t.Fatalf("session: %s (%v)", w.Body, err)
	}
	return cookie, info.CSRFToken
}

func sessionCookie(t *testing.T, w *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name == CookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", CookieName, w.Header()["Set-Cookie"])
	return nil
}

func TestPageAndStatic(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name     string
		r        req
		code     int
		contains string
	}{
		{"the page", req{path: "/ui/"}, http.StatusOK, `<script type="module" src="/ui/static/js/app.js">`},
		{"a script", req{path: "/ui/static/js/model.js"}, http.StatusOK, "export function shouldRun"},
		{"without the slash", req{path: "/ui"}, http.StatusMovedPermanently, ""},
		{"unknown path", req{path: "/ui/nothing"}, http.StatusNotFound, `"reason":"NotFound"`},
		{"plain HTTP", req{path: "/ui/", plainHTTP: true}, http.StatusNotFound, "HTTPS port only"},
		{"POST to the page", req{method: http.MethodPost, path: "/ui/"}, http.StatusMethodNotAllowed, ""},
		{"not the view", req{path: "/api/v1/nodes"}, http.StatusNotFound, "404 page not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := f.do(tt.r)
			if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.contains) {
				t.Fatalf("%d %q, want %d containing %q", w.Code, w.Body.String(), tt.code, tt.contains)
			}
			if tt.r.path != "/api/v1/nodes" && !tt.r.plainHTTP && !strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'none'") {
				t.Fatalf("no CSP: %v", w.Header())
			}
		})
	}
	if len(f.api.got) != 0 {
		t.Fatalf("the API was called: %v", f.api.got)
	}
}

func TestSignInLink(t *testing.T) {
	f := newFixture(t)
	link := f.h.SignInLink("admin-token")
	w := f.do(req{path: link})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != Prefix {
		t.Fatalf("first use: %d to %q", w.Code, w.Header().Get("Location"))
	}
	c := sessionCookie(t, w)
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" ||
		c.MaxAge != int(configs.DefaultUI().SessionTTL/time.Second) {
		t.Fatalf("cookie %+v: want HttpOnly, Secure, SameSite=Strict, Path=/, no Domain, Max-Age of the session", c)
	}
	tests := []struct {
		name string
		path string
		step time.Duration
	}{
		{"used twice", link, 0},
		{"never issued", SignInPath + "?link=made-up", 0},
		{"no link", SignInPath, 0},
		{"expired", f.h.SignInLink("admin-token"), configs.DefaultUI().SignInLinkTTL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.clock.Step(tt.step)
			w := f.do(req{path: tt.path})
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != Prefix+"?signin=expired" || len(w.Result().Cookies()) != 0 {
				t.Fatalf("%d to %q with cookies %v, want 303 to ?signin=expired without a cookie", w.Code, w.Header().Get("Location"), w.Result().Cookies())
			}
		})
	}
	// A link for a token the API server refuses signs nobody in.
	w = f.do(req{path: f.h.SignInLink("revoked")})
	if w.Header().Get("Location") != Prefix+"?signin=denied" || len(w.Result().Cookies()) != 0 {
		t.Fatalf("link for a refused token: %d to %q", w.Code, w.Header().Get("Location"))
	}
}

func TestSignInForm(t *testing.T) {
	origin := "https://" + host
	form := url.Values{"token": {"viewer-token"}}.Encode()
	tests := []struct {
		name     string
		r        req
		code     int
		location string
	}{
		{"same origin", req{origin: origin, body: form}, http.StatusSeeOther, Prefix},
		{"Sec-Fetch-Site same-origin", req{header: map[string]string{"Sec-Fetch-Site": "same-origin"}, body: form}, http.StatusSeeOther, Prefix},
		{"another origin", req{origin: "https://evil.example", body: form}, http.StatusForbidden, ""},
		{"cross-site", req{header: map[string]string{"Sec-Fetch-Site": "cross-site"}, body: form}, http.StatusForbidden, ""},
		{"no origin at all", req{body: form}, http.StatusForbidden, ""},
		{"null origin, same-origin fetch", req{origin: "null", header: map[string]string{"Sec-Fetch-Site": "same-origin"}, body: form}, http.StatusSeeOther, Prefix},
		{"null origin from elsewhere", req{origin: "null", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, body: form}, http.StatusForbidden, ""},
		{"null origin alone", req{origin: "null", body: form}, http.StatusForbidden, ""},
		{"plain-HTTP origin", req{origin: "http://" + host, body: form}, http.StatusForbidden, ""},
		{"wrong token", req{origin: origin, body: "token=nope"}, http.StatusSeeOther, Prefix + "?signin=denied"},
		{"empty token", req{origin: origin, body: "token="}, http.StatusSeeOther, Prefix + "?signin=denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.r.method, tt.r.path = http.MethodPost, SignInPath
			if tt.r.header == nil {
				tt.r.header = map[string]string{}
			}
			tt.r.header["Content-Type"] = "application/x-www-form-urlencoded"
			w := f.do(tt.r)
			if w.Code != tt.code || w.Header().Get("Location") != tt.location {
				t.Fatalf("%d to %q (%s), want %d to %q", w.Code, w.Header().Get("Location"), w.Body, tt.code, tt.location)
			}
			if tt.location == Prefix {
				w := f.do(req{path: sessionPath, cookie: sessionCookie(t, w).Value})
				if !strings.Contains(w.Body.String(), `"user":"viewer"`) {
					t.Fatalf("session after sign-in: %s", w.Body)
				}
			} else if len(w.Result().Cookies()) != 0 {
				t.Fatalf("cookie set on a refused sign-in: %v", w.Result().Cookies())
			}
		})
	}
}

func TestProxy(t *testing.T) {
	f := newFixture(t)
	cookie, csrf := f.signIn("viewer-token")
	origin := "https://" + host
	tests := []struct {
		name string
		r    req
		code int
		// path is what the API handler must see; "" when it must not be called.
		path string
	}{
		{"no cookie", req{path: "/ui/proxy/api/v1/nodes", csrf: csrf}, http.StatusUnauthorized, ""},
		{"unknown cookie", req{path: "/ui/proxy/api/v1/nodes", cookie: "forged", csrf: csrf}, http.StatusUnauthorized, ""},
		{"no CSRF token", req{path: "/ui/proxy/api/v1/nodes", cookie: cookie}, http.StatusForbidden, ""},
		{"wrong CSRF token", req{path: "/ui/proxy/api/v1/nodes", cookie: cookie, csrf: csrf + "x"}, http.StatusForbidden, ""},
		{"a read", req{path: "/ui/proxy/api/v1/nodes?watch=true&labelSelector=a%3Db", cookie: cookie, csrf: csrf}, http.StatusOK, "/api/v1/nodes"},
		{"a group", req{path: "/ui/proxy/apis/apps/v1/daemonsets", cookie: cookie, csrf: csrf}, http.StatusOK, "/apis/apps/v1/daemonsets"},
		{"a write from the page", req{method: http.MethodPatch, path: "/ui/proxy/api/v1/nodes/n1", body: `{"spec":{}}`, cookie: cookie, csrf: csrf, origin: origin}, http.StatusOK, "/api/v1/nodes/n1"},
		{"a write from elsewhere", req{method: http.MethodPatch, path: "/ui/proxy/api/v1/nodes/n1", body: `{}`, cookie: cookie, csrf: csrf, origin: "https://evil.example"}, http.StatusForbidden, ""},
		{"a write without origin", req{method: http.MethodDelete, path: "/ui/proxy/api/v1/nodes/n1", cookie: cookie, csrf: csrf}, http.StatusForbidden, ""},
		{"outside the resource API", req{path: "/ui/proxy/debug/pprof/", cookie: cookie, csrf: csrf}, http.StatusNotFound, ""},
		{"metrics", req{path: "/ui/proxy/metrics", cookie: cookie, csrf: csrf}, http.StatusNotFound, ""},
		{"dot-dot", req{path: "/ui/proxy/api/../debug/pprof/", cookie: cookie, csrf: csrf}, http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.api.got)
			w := f.do(tt.r)
			if w.Code != tt.code {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tt.code)
			}
			if tt.path == "" {
				if len(f.api.got) != before {
					t.Fatalf("the API was called: %s", f.api.got[len(f.api.got)-1].URL)
				}
				return
			}
			got := f.api.got[len(f.api.got)-1]
			if got.URL.Path != tt.path || got.Header.Get("Authorization") != "Bearer viewer-token" {
				t.Fatalf("API saw %s with Authorization %q, want %s as the viewer", got.URL, got.Header.Get("Authorization"), tt.path)
			}
			if u, _ := url.Parse(tt.r.path); got.URL.RawQuery != u.RawQuery {
				t.Fatalf("query %q, want %q", got.URL.RawQuery, u.RawQuery)
			}
			if got.Header.Get("Cookie") != "" || got.Header.Get(CSRFHeader) != "" {
				t.Fatalf("the cookie or CSRF token reached the API: %v", got.Header)
			}
			if tt.r.body != "" && f.api.bodies[len(f.api.bodies)-1] != tt.r.body {
				t.Fatalf("body %q, want %q", f.api.bodies[len(f.api.bodies)-1], tt.r.body)
			}
		})
	}
}

// TestProxyIdentity: the page cannot choose whom it acts as; the session's token replaces
// whatever credentials or impersonation headers the request brings.
func TestProxyIdentity(t *testing.T) {
	f := newFixture(t)
	cookie, csrf := f.signIn("viewer-token")
	w := f.do(req{path: "/ui/proxy/api/v1/nodes", cookie: cookie, csrf: csrf, header: map[string]string{
		"Authorization": "Bearer admin-token", "Impersonate-User": "admin", "Impersonate-Group": "system:masters",
	}})
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"user":"viewer"`) {
		t.Fatalf("%d %s, want the call made as the viewer", w.Code, w.Body)
	}
	got := f.api.got[len(f.api.got)-1]
	if got.Header.Get("Impersonate-User") != "" || got.Header.Get("Impersonate-Group") != "" {
		t.Fatalf("impersonation headers reached the API: %v", got.Header)
	}
}

func TestSessionEnds(t *testing.T) {
	f := newFixture(t)
	cookie, csrf := f.signIn("admin-token")
	origin := "https://" + host
	// Signing out needs the CSRF token and the page's origin.
	for _, r := range []req{
		{method: http.MethodPost, path: signOutPath, cookie: cookie, origin: origin},
		{method: http.MethodPost, path: signOutPath, cookie: cookie, csrf: csrf, origin: "https://evil.example"},
	} {
		if w := f.do(r); w.Code != http.StatusForbidden {
			t.Fatalf("sign-out %+v: %d, want 403", r, w.Code)
		}
	}
	if w := f.do(req{method: http.MethodPost, path: signOutPath, cookie: cookie, csrf: csrf, origin: origin}); w.Code != http.StatusNoContent || sessionCookie(t, w).MaxAge >= 0 {
		t.Fatalf("sign-out: %d %v, want 204 clearing the cookie", w.Code, w.Header())
	}
	if w := f.do(req{path: sessionPath, cookie: cookie}); w.Code != http.StatusUnauthorized {
		t.Fatalf("session after sign-out: %d", w.Code)
	}
	// A session lasts SessionTTL.
	cookie, csrf = f.signIn("admin-token")
	f.clock.Step(configs.DefaultUI().SessionTTL - time.Second)
	if w := f.do(req{path: "/ui/proxy/api/v1/nodes", cookie: cookie, csrf: csrf}); w.Code != http.StatusOK {
		t.Fatalf("just before the session ends: %d", w.Code)
	}
	f.clock.Step(time.Second)
	if w := f.do(req{path: "/ui/proxy/api/v1/nodes", cookie: cookie, csrf: csrf}); w.Code != http.StatusUnauthorized {
		t.Fatalf("after the session ended: %d", w.Code)
	}
}

func TestLinksAreBounded(t *testing.T) {
	f := newFixture(t)
	first := f.h.SignInLink("admin-token")
	for range maxLinks {
		f.clock.Step(time.Millisecond)
		f.h.SignInLink("admin-token")
	}
	if w := f.do(req{path: first}); w.Header().Get("Location") != Prefix+"?signin=expired" {
		t.Fatalf("the oldest of %d links still works: %d to %q", maxLinks+1, w.Code, w.Header().Get("Location"))
	}
	f.h.sessions.mu.Lock()
	n := len(f.h.sessions.links)
	f.h.sessions.mu.Unlock()
	if n != maxLinks {
		t.Fatalf("%d links kept, want %d", n, maxLinks)
	}
}
