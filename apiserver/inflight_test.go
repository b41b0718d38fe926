package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	// admitted has the parameter n of each held request as its handler starts.
	admitted chan string
	limiter  *inflightLimiter
}

func newLimiterTest(t *testing.T, readOnly, mutating int, queueWait time.Duration) *limiterTest {
	lt := &limiterTest{t: t, entered: make(chan struct{}, 100), release: make(chan struct{}), admitted: make(chan string, 100)}
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") == "true" {
			lt.admitted <- r.URL.Query().Get("n")
			lt.entered <- struct{}{}
			<-lt.release
		}
		w.WriteHeader(http.StatusOK)
	})
	l := newInflightLimiter(readOnly, mutating, queueWait, func(st *requestState) bool {
		return st.user != nil && st.user.InGroup("system:masters")
	})
	withUser := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := &requestState{user: &auth.User{Name: r.Header.Get("X-Test-User")}}
		if st.user.Name == "admin" {
			st.user.Groups = []string{"system:masters"}
		}
		l.wrap(hold).ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	})
	lt.limiter = l
	lt.srv = httptest.NewServer(withUser)
	t.Cleanup(lt.srv.Close)
	t.Cleanup(lt.releaseAll)
	return lt
}

// releaseOne ends one held request.
func (lt *limiterTest) releaseOne() { lt.release <- struct{}{} }

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

// doCtx sends one request with ctx and returns its status code, or 0 when it failed.
func (lt *limiterTest) doCtx(ctx context.Context, method, path, user string) int {
	req, err := http.NewRequestWithContext(ctx, method, lt.srv.URL+path, nil)
	if err != nil {
		lt.t.Fatal(err)
	}
	req.Header.Set("X-Test-User", user)
	resp, err := lt.srv.Client().Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
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

// TestInflightLimiter: with no queue, beyond the limit of its kind a request gets 429 with Retry-After: 1
// and a TooManyRequests Status; the two kinds are limited apart; long-running requests,
// probes and administrators are not limited; a freed slot serves the next request.
func TestInflightLimiter(t *testing.T) {
	lt := newLimiterTest(t, 2, 1, 0)
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
	lt := newLimiterTest(t, 0, 1, 0)
	lt.hold(50, "GET", "/api/v1/pods?hold=true")
	if resp, _ := lt.do("GET", "/api/v1/pods", "someone"); resp.StatusCode != http.StatusOK {
		t.Errorf("a list with 50 in flight and no read limit: %d, want 200", resp.StatusCode)
	}
	lt.hold(1, "POST", "/api/v1/namespaces/default/pods?hold=true")
	if resp, _ := lt.do("POST", "/api/v1/namespaces/default/pods", "someone"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a write beyond its limit of 1: %d, want 429", resp.StatusCode)
	}
}

// TestInflightQueue: a request beyond the limit waits for a slot and is served when one is
// freed, first come, first served; when as many wait as the limit serves, the next one is
// refused at once; administrators do not wait; a request that waits longer than the queue
// wait, or whose client goes away, is refused and leaves the queue.
func TestInflightQueue(t *testing.T) {
	lt := newLimiterTest(t, 1, 2, time.Minute)
	lt.hold(2, "PUT", "/api/v1/namespaces/default/pods/p?hold=true")
	for range 2 {
		<-lt.admitted
	}
	codes := make(chan int, 2)
	for n := range 2 {
		go func() {
			req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/v1/namespaces/default/pods?hold=true&n=%d", lt.srv.URL, n), nil)
			code := 0
			if resp, err := lt.srv.Client().Do(req); err == nil {
				resp.Body.Close()
				code = resp.StatusCode
			}
			codes <- code
		}()
		// One at a time, so that the order they queued in is known.
		waitFor(t, "a write to queue", func() bool { return len(lt.limiter.mutating.queued) == n+1 })
	}

	// The queue is full: refused at once, not after the minute a queued request may wait.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := lt.doCtx(ctx, "POST", "/api/v1/namespaces/default/pods", "someone"); code != http.StatusTooManyRequests {
		t.Errorf("a write with the slots and the queue full: %d, want 429", code)
	}
	if code := lt.doCtx(ctx, "POST", "/api/v1/namespaces/default/pods", "admin"); code != http.StatusOK {
		t.Errorf("an administrator's write with the slots and the queue full: %d, want 200", code)
	}
	select {
	case n := <-lt.admitted:
		t.Fatalf("queued write %s admitted while every slot is held", n)
	default:
	}

	// Each freed slot goes to the write that has waited longest.
	for want, free := range []func(){lt.releaseOne, lt.releaseAll} {
		free()
		select {
		case n := <-lt.admitted:
			if n != fmt.Sprint(want) {
				t.Errorf("freed slot %d went to queued write %s, want %d", want, n, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no queued write admitted after slot %d was freed", want)
		}
	}
	for range 2 {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("a queued write got %d, want 200", code)
		}
	}
	if n := len(lt.limiter.mutating.queued); n != 0 {
		t.Errorf("%d requests still queued", n)
	}
}

// TestInflightQueueGivesUp: a queued request is refused with the usual 429 when the queue
// wait is over, and leaves the queue when its client goes away.
func TestInflightQueueGivesUp(t *testing.T) {
	const wait = 100 * time.Millisecond
	lt := newLimiterTest(t, 1, 1, wait)
	lt.hold(1, "GET", "/api/v1/pods?hold=true")
	start := time.Now()
	resp, body := lt.do("GET", "/api/v1/pods", "someone")
	if took := time.Since(start); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || took < wait {
		t.Errorf("a list queued behind a held one: %d, Retry-After %q, after %v; want 429 and 1 after at least %v", resp.StatusCode, resp.Header.Get("Retry-After"), took, wait)
	}
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil || status.Reason != metav1.StatusReasonTooManyRequests {
		t.Errorf("429 body %q: %v", body, err)
	}

	lt = newLimiterTest(t, 1, 1, time.Hour)
	lt.hold(1, "GET", "/api/v1/pods?hold=true")
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan int)
	go func() { gone <- lt.doCtx(ctx, "GET", "/api/v1/pods", "someone") }()
	waitFor(t, "a list to queue", func() bool { return len(lt.limiter.readOnly.queued) == 1 })
	cancel()
	<-gone
	waitFor(t, "a list whose client went away to leave the queue", func() bool { return len(lt.limiter.readOnly.queued) == 0 })
}
