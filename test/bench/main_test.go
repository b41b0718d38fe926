package bench

import (
	"context"
	"os"
	"testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/gcbudget"
)

// TestMain runs the benchmarks with the garbage collector `miniplane up` runs with (see
// cmd/miniplane), tuned to its default memory budget, so that the in-process figures are
// those of `miniplane up`. GOGC and GOMEMLIMIT, when set, win.
func TestMain(m *testing.M) {
	if !gcbudget.EnvOverrides() {
		ctx, cancel := context.WithCancel(context.Background())
		go gcbudget.Run(ctx, uint64(configs.DefaultUp().MemoryBudgetBytes()), gcbudget.Options{})
		code := m.Run()
		cancel()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
