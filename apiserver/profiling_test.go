package apiserver_test

import (
	"bytes"
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
