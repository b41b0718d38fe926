package bench

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestMain runs the benchmarks with the garbage-collector setting `miniplane` itself uses
// (see cmd/miniplane/main.go), so their figures are those of `miniplane up`.
func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	os.Exit(m.Run())
}
