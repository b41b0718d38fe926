package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestControllerRuntimeOperator builds and runs, in a module of its own that requires
// miniplane (replaced by this checkout), an operator written with controller-runtime: a
// manager with a cached client, a reconciler for a custom resource kind whose definition
// the test installs, writes with client.Apply, and ownership the garbage collector follows;
// its admission webhooks, served by controller-runtime's webhook server and called by the
// API server; and the conversion webhook of a kind in two versions, hub and spoke
// (testdata/widgetoperator).
func TestControllerRuntimeOperator(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a second module")
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "testdata", "widgetoperator")
	tests := []string{"TestWidgetOperator", "TestWidgetWebhooks", "TestGizmoConversionWebhook"}
	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", strings.Join(tests, "|"), "./...")
	cmd.Dir = dir
	// -mod=mod: when miniplane gains a dependency, go records its sum here on the way.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in %s: %v\n%s", dir, err, out)
	}
	for _, name := range tests {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Fatalf("go test in %s did not pass %s:\n%s", dir, name, out)
		}
	}
}
