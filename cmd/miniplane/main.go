// Command miniplane is a standalone, etcd-backed mini Kubernetes control plane that runs the
// DaemonSet controller for real. Each component is a subcommand; `miniplane up` runs them
// all in one process. This package only wires configuration to components.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/miniplane/miniplane/internal/gcbudget"
)

func main() {
	// Every command starts with the lazy collector, which trades memory for CPU; the
	// long-running ones then tune it to their memory budget (--memory-budget). GOGC and
	// GOMEMLIMIT, when set, win.
	if !gcbudget.EnvOverrides() {
		debug.SetGCPercent(gcbudget.MaxPercent)
	}
	// A cancelled context is the only shutdown signal components see.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
