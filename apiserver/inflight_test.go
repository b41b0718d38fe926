package apiserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// TestIsLongRunning: watches (by parameter or legacy path) and pod logs are long-running;
// lists, gets and writes are not.
func TestIsLongRunning(t *testing.T) {
	tests := []struct {
		method, url string
		want        bool
	}{
		{"GET", "/api/v1/pods?watch=true", true},
		{"GET", "/api/v1/namespaces/default/pods?watch=1&resourceVersion=5", true},
		{"GET", "/apis/apps/v1/daemonsets?watch=true", true},
		{"GET", "/api/v1/watch/pods", true},
		{"GET", "/api/v1/watch/namespaces/default/pods/p", true},
		{"GET", "/apis/apps/v1/watch/namespaces/default/daemonsets", true},
		{"GET", "/api/v1/namespaces/default/pods/p/log?follow=true", true},
		{"GET", "/api/v1/namespaces/default/pods/p/log", true},
		{"GET", "/api/v1/pods", false},
		{"GET", "/api/v1/pods?watch=false", false},
		{"GET", "/api/v1/namespaces/default/pods/log", false}, // a pod named log
		{"GET", "/api/v1/namespaces/default/pods/p/status", false},
		{"GET", "/api/v1/namespaces/watch", false}, // a namespace named watch
		{"GET", "/apis/apps/v1", false},
		{"POST", "/api/v1/namespaces/default/pods?watch=true", false},
		{"GET", "/debug/pprof/profile", false},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.url, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.url, nil)
			if got := isLongRunning(r); got != tc.want {
				t.Errorf("isLongRunning = %v, want %v", got, tc.want)
			}
		})
	}
}

// limiterTest serves a limiter around a handler that holds every request until released.
// The header X-Test-User names the requester; "admin" is exempt.
type limiterTest struct {
	t       *testing.T
	srv     *httptest.Server
	entered chan struct{}
	release chan struct{}
}

func newLimiterTest(t *testing.T, readOnly, mutating int) *limiterTest {
	lt := &limiterTest{t: t, entered: make(chan struct{}, 100), release: make(chan struct{})}
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") == "true" {
			lt.entered <- struct{}{}
			<-lt.release
		}
		w.WriteHeader(http.StatusOK)
	})
	l := newInflightLimiter(readOnly, mutating, func(st *requestState) bool {
		return st.user != nil && st.user.InGroup("system:masters")
	})
	withUser := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := &requestState{user: &auth.User{Name: r.Header.Get("X-Test-User")}}
		if st.user.Name == "admin" {
			st.user.Groups = []string{"system:masters"}
		}
		l.wrap(hold).ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	})
	lt.srv = httptest.NewServer(withUser)
	t.Cleanup(lt.srv.Close)
	t.Cleanup(lt.releaseAll)
	return lt
}

func (lt *limiterTest) releaseAll() {
	select {
	case <-lt.release:
	default:
		close(lt.release)
	}
}

// do sends one request and returns its response (body read and closed).
func (lt *limiterTest) do(method, path, user string) (*http.Response, []byte) {
	lt.t.Helper()
	req, err := http.NewRequest(method, lt.srv.URL+path, strings.NewReader(""))
	if err != nil {
		lt.t.Fatal(err)
	}
	req.Header.Set("X-Test-User", user)
	resp, err := lt.srv.Client().Do(req)
	if err != nil {
		lt.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		lt.t.Fatal(err)
	}
	return resp, body
}

// hold starts n held requests and waits until each is being served.
func (lt *limiterTest) hold(n int, method, path string) {
	lt.t.Helper()
	for i := 0; i < n; i++ {
		go func() {
			req, _ := http.NewRequest(method, lt.srv.URL+path, nil)
			req.Header.Set("X-Test-User", "someone")
			if resp, err := lt.srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		<-lt.entered
	}
}

// TestInflightLimiter: beyond the limit of its kind a request gets 429 with Retry-After: 1
// and a TooManyRequests Status; the two kinds are limited apart; long-running requests,
// probes and administrators are not limited; a freed slot serves the next request.
func TestInflightLimiter(t *testing.T) {
	lt := newLimiterTest(t, 2, 1)
	lt.hold(2, "GET", "/api/v1/pods?hold=true")

	resp, body := lt.do("GET", "/api/v1/pods", "someone")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("a third list with two in flight: %d, Retry-After %q; want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil {
		t.Fatalf("429 body %q: %v", body, err)
	}
	if status.Kind != "Status" || status.Code != 429 || status.Reason != metav1.StatusReasonTooManyRequests ||
		status.Message != "Too many requests, please try again later." || status.Details == nil || status.Details.RetryAfterSeconds != 1 {
		t.Errorf("429 status = %+v", status)
	}

	for _, tc := range []struct {
		name, method, path, user string
		want                     int
	}{
		{"a write, limited apart", "POST", "/api/v1/namespaces/default/pods", "someone", 200},
		{"a watch", "GET", "/api/v1/pods?watch=true", "someone", 200},
		{"a legacy watch", "GET", "/api/v1/watch/pods", "someone", 200},
		{"a pod log", "GET", "/api/v1/namespaces/default/pods/p/log", "someone", 200},
		{"a probe", "GET", "/readyz", "", 200},
		{"an administrator", "GET", "/api/v1/pods", "admin", 200},
		{"discovery", "GET", "/apis", "someone", 429},
	} {
		if resp, _ := lt.do(tc.method, tc.path, tc.user); resp.StatusCode != tc.want {
			t.Errorf("%s with the read slots full: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}

	lt.hold(1, "PUT", "/api/v1/namespaces/default/pods/p?hold=true")
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		if resp, _ := lt.do(method, "/api/v1/namespaces/default/pods/p", "someone"); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s with the write slot full: %d, want 429", method, resp.StatusCode)
		}
	}
	if resp, _ := lt.do("DELETE", "/api/v1/namespaces/default/pods/p", "admin"); resp.StatusCode != http.StatusOK {
		t.Errorf("an administrator's delete with the write slot full: %d, want 200", resp.StatusCode)
	}

	lt.releaseAll()
	waitFor(t, "a freed read slot to serve a list", func() bool {
		resp, _ := lt.do("GET", "/api/v1/pods", "someone")
		return resp.StatusCode == http.StatusOK
	})
}

// TestInflightLimiterDisabled: a limit of 0 lets every request of its kind through.
func TestInflightLimiterDisabled(t *testing.T) {
	lt := newLimiterTest(t, 0, 1)
	lt.hold(50, "GET", "/api/v1/pods?hold=true")
	if resp, _ := lt.do("GET", "/api/v1/pods", "someone"); resp.StatusCode != http.StatusOK {
		t.Errorf("a list with 50 in flight and no read limit: %d, want 200", resp.StatusCode)
	}
	lt.hold(1, "POST", "/api/v1/namespaces/default/pods?hold=true")
	if resp, _ := lt.do("POST", "/api/v1/namespaces/default/pods", "someone"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a write beyond its limit of 1: %d, want 429", resp.StatusCode)
	}
}
