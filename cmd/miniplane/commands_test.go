package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsValidateWhatTheUserSet runs each subcommand with an option set on the command
// line and checks that validation judged that value, not the default: every case's flag is
// valid by default and invalid as given (or, for certs, the reverse), so checking a copy of
// the configuration taken before loading would fail each case.
func TestCommandsValidateWhatTheUserSet(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "any.kubeconfig") // never read: validation fails first
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" means the command succeeds
	}{
		{"certs with --dir writes credentials", []string{"certs", "--dir", filepath.Join(dir, "certs"), "--nodes", "n1"}, ""},
		{"certs without --dir", []string{"certs"}, "--dir: is required"},
		{"etcd", []string{"etcd", "--data-dir", filepath.Join(dir, "etcd"), "--name", ""}, "--name: must not be empty"},
		{"apiserver", []string{"apiserver", "--token-file", filepath.Join(dir, "tokens.csv"), "--listen", "no-port"}, "--listen"},
		{"controller-manager", []string{"controller-manager", "--kubeconfig", kubeconfig, "--concurrent-daemonset-syncs", "0"}, "--concurrent-daemonset-syncs"},
		{"scheduler", []string{"scheduler", "--kubeconfig", kubeconfig, "--workers", "0"}, "--workers: must be at least 1"},
		{"kubeletstub", []string{"kubeletstub", "--kubeconfig", kubeconfig, "--nodes", "0"}, "--nodes: must be at least 1"},
		{"kubeletstub memory budget", []string{"kubeletstub", "--kubeconfig", kubeconfig, "--memory-budget", "lots"}, `--memory-budget: "lots" is not a quantity`},
		{"apiserver memory budget", []string{"apiserver", "--token-file", filepath.Join(dir, "tokens.csv"), "--memory-budget", "-1Gi"}, "--memory-budget: must not be negative"},
		{"up memory budget", []string{"up", "--data-dir", filepath.Join(dir, "up"), "--memory-budget", "1x"}, "--memory-budget"},
		{"probe", []string{"probe", "--timeout", "0s", "https://127.0.0.1:1/healthz"}, "--timeout: must be positive"},
		{"up", []string{"up", "--data-dir", filepath.Join(dir, "up"), "--nodes", "-1"}, "--nodes: must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Cancelled up front, so a command that wrongly passed validation stops at once
			// instead of serving.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			root := newRootCommand()
			root.SetArgs(tc.args)
			root.SetOut(&strings.Builder{})
			err := root.ExecuteContext(ctx)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("miniplane %s: %v", strings.Join(tc.args, " "), err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("miniplane %s: error %v, want one containing %q", strings.Join(tc.args, " "), err, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "certs", "kubeconfigs", "nodes", "n1.kubeconfig")); err != nil {
		t.Errorf("certs --dir wrote no node kubeconfig: %v", err)
	}
}
