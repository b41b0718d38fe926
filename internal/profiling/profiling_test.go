package profiling

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// gzipMagic starts every profile in pprof's protobuf format.
var gzipMagic = []byte{0x1f, 0x8b}

// TestHandler: every endpoint answers with what its tool expects: the index lists the
// profiles, the profiles are gzipped protobuf, the trace is a Go execution trace, cmdline
// is this process's command line, symbol answers lookups.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	tests := []struct {
		path   string
		expect func(body []byte) bool
	}{
		{"/debug/pprof/", func(b []byte) bool {
			return bytes.Contains(b, []byte("goroutine")) && bytes.Contains(b, []byte("heap")) && bytes.Contains(b, []byte("allocs"))
		}},
		{"/debug/pprof/heap", func(b []byte) bool { return bytes.HasPrefix(b, gzipMagic) }},
		{"/debug/pprof/allocs", func(b []byte) bool { return bytes.HasPrefix(b, gzipMagic) }},
		{"/debug/pprof/goroutine", func(b []byte) bool { return bytes.HasPrefix(b, gzipMagic) }},
		{"/debug/pprof/goroutine?debug=1", func(b []byte) bool { return bytes.HasPrefix(b, []byte("goroutine profile:")) }},
		{"/debug/pprof/profile?seconds=1", func(b []byte) bool { return bytes.HasPrefix(b, gzipMagic) }},
		{"/debug/pprof/trace?seconds=1", func(b []byte) bool { return bytes.HasPrefix(b, []byte("go 1.")) }},
		{"/debug/pprof/cmdline", func(b []byte) bool { return strings.HasPrefix(string(b), os.Args[0]) }},
		{"/debug/pprof/symbol", func(b []byte) bool { return bytes.HasPrefix(b, []byte("num_symbols:")) }},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || !tc.expect(body) {
				t.Errorf("%d, body starting %q", resp.StatusCode, body[:min(len(body), 64)])
			}
		})
	}
	resp, err := http.Get(srv.URL + "/debug/pprof/no-such-profile")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown profile: %d, want 404", resp.StatusCode)
	}
}
