package main

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miniplane/miniplane/configs"
)

func TestProbe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/down", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "etcd not ready", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	plain := httptest.NewServer(mux)
	defer plain.Close()
	secure := httptest.NewTLSServer(mux)
	defer secure.Close()

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw})
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(notPEM, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	def := configs.Probe{Timeout: 2 * time.Second}
	tests := []struct {
		name    string
		url     string
		opts    configs.Probe
		wantErr string // "" means the probe succeeds
	}{
		{"2xx answers succeed", plain.URL + "/ok", def, ""},
		{"5xx fails and quotes the reason", plain.URL + "/down", def, "503 Service Unavailable: etcd not ready"},
		{"a redirect is not followed", plain.URL + "/moved", def, "302 Found"},
		{"404 fails", plain.URL + "/missing", def, "404"},
		{"timeout", plain.URL + "/slow", configs.Probe{Timeout: 100 * time.Millisecond}, "deadline exceeded"},
		{"https with the CA", secure.URL + "/ok", configs.Probe{Timeout: 2 * time.Second, CAFile: caFile}, ""},
		{"https with an unknown CA fails", secure.URL + "/ok", def, "certificate"},
		{"https without verification", secure.URL + "/ok", configs.Probe{Timeout: 2 * time.Second, InsecureSkipVerify: true}, ""},
		{"missing CA file", secure.URL + "/ok", configs.Probe{Timeout: 2 * time.Second, CAFile: "/nonexistent/ca.crt"}, "CA file"},
		{"CA file without PEM", secure.URL + "/ok", configs.Probe{Timeout: 2 * time.Second, CAFile: notPEM}, "no PEM certificate"},
		{"refused connection", "http://127.0.0.1:1/healthz", def, "refused"},
		{"other schemes are rejected", "ftp://127.0.0.1/", def, "scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.opts.Timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.opts.Timeout)
				defer cancel()
			}
			status, err := probe(ctx, tc.url, tc.opts)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("probe(%s) = %v, want success", tc.url, err)
			case tc.wantErr == "" && !strings.HasPrefix(status, "2"):
				t.Fatalf("probe(%s) status = %q, want 2xx", tc.url, status)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("probe(%s) = %q, %v; want an error containing %q", tc.url, status, err, tc.wantErr)
			}
		})
	}
}
