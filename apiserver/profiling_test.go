package apiserver_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

// TestProfiling: with --profiling (the default) an administrator reads every profile under
// /debug/pprof/; anyone else gets 403 and a request without a token 401. Without it the
// path does not exist, even for administrators.
func TestProfiling(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	raw := newRawClient(t, env)
	admin, viewer := env.Token(testenv.AdminUser), env.Token(testenv.ViewerUser)
	gzipped := func(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1f, 0x8b}) }
	for _, tc := range []struct {
		path   string
		expect func([]byte) bool
	}{
		{"/debug/pprof/", func(b []byte) bool {
			return bytes.Contains(b, []byte("goroutine")) && bytes.Contains(b, []byte("heap"))
		}},
		{"/debug/pprof/heap", gzipped},
		{"/debug/pprof/allocs", gzipped},
		{"/debug/pprof/goroutine", gzipped},
		{"/debug/pprof/profile?seconds=1", gzipped},
		{"/debug/pprof/trace?seconds=1", func(b []byte) bool { return bytes.HasPrefix(b, []byte("go 1.")) }},
		{"/debug/pprof/cmdline", func(b []byte) bool { return len(b) > 0 }},
		{"/debug/pprof/symbol", func(b []byte) bool { return bytes.HasPrefix(b, []byte("num_symbols:")) }},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if r := raw.do(t, request{method: "GET", path: tc.path, token: admin}); r.code != http.StatusOK || !tc.expect(r.body) {
				t.Errorf("administrator: %d, body starting %q", r.code, r.body[:min(len(r.body), 64)])
			}
			if r := raw.do(t, request{method: "GET", path: tc.path, token: viewer}); r.code != http.StatusForbidden ||
				r.status == nil || r.status.Reason != metav1.StatusReasonForbidden {
				t.Errorf("viewer: %d %s, want 403 Forbidden", r.code, r.body)
			}
			if r := raw.do(t, request{method: "GET", path: tc.path}); r.code != http.StatusUnauthorized ||
				r.status == nil || r.status.Reason != metav1.StatusReasonUnauthorized {
				t.Errorf("no token: %d %s, want 401 Unauthorized", r.code, r.body)
			}
		})
	}
	// A node identity is no administrator either.
	nodeEnv := newNodeEnv(t)
	if r := newRawClient(t, nodeEnv).do(t, request{method: "GET", path: "/debug/pprof/heap", token: nodeEnv.Token(nodeUser)}); r.code != http.StatusForbidden {
		t.Errorf("node identity: %d, want 403", r.code)
	}

	cfg := configs.DefaultAPIServer()
	cfg.Profiling = false
	off := testenv.New(t, testenv.Config{APIServer: &cfg})
	if r := newRawClient(t, off).do(t, request{method: "GET", path: "/debug/pprof/", token: off.Token(testenv.AdminUser)}); r.code != http.StatusNotFound {
		t.Errorf("--profiling=false, administrator: %d, want 404", r.code)
	}
}

// TestProfilesNameRequests: a request's goroutine carries profiler labels naming the
// component, the resource and the verb, so a profile of the server can be split by request
// kind (`go tool pprof -tags`); seen here on a watch, whose goroutine lives long enough to be
// found in the goroutine profile the server itself serves.
func TestProfilesNameRequests(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	w, err := env.Client.CoordinationV1().Leases("profile-labels").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	raw := newRawClient(t, env)
	want := `# labels: {"component":"apiserver", "resource":"leases.coordination.k8s.io", "verb":"watch"}`
	eventually(t, "the watch's goroutine in the goroutine profile", func() (bool, error) {
		r := raw.do(t, request{method: "GET", path: "/debug/pprof/goroutine?debug=1", token: env.Token(testenv.AdminUser)})
		if r.code != http.StatusOK {
			return false, fmt.Errorf("goroutine profile: %d", r.code)
		}
		return bytes.Contains(r.body, []byte(want)), fmt.Errorf("no goroutine labelled %s", want)
	})
}
