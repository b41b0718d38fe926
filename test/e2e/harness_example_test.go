package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// readmeExample returns the Go example of the README's section on testing your own
// controller: the first ```go block after that heading.
func readmeExample(t *testing.T, root string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Testing your own controller against miniplane\n")
	if !ok {
		t.Fatal(`README.md has no section "Testing your own controller against miniplane"`)
	}
	_, code, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal("the README section has no ```go block")
	}
	code, _, ok = strings.Cut(code, "```\n")
	if !ok || !strings.Contains(code, `"github.com/miniplane/miniplane/test/testenv"`) {
		t.Fatal("the README example does not import github.com/miniplane/miniplane/test/testenv")
	}
	return code
}

// TestHarnessExampleInSeparateModule builds and runs the README's harness example as another
// project would: in a module of its own that requires miniplane, replaced by this checkout.
func TestHarnessExampleInSeparateModule(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a second module")
	}
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/mycontroller\n\ngo 1.26\n\nrequire github.com/miniplane/miniplane v0.0.0\n\nreplace github.com/miniplane/miniplane => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"go.mod":          []byte(goMod),
		"go.sum":          sum, // the same dependency graph as miniplane's, so no download
		"agent_test.go":   []byte(readmeExample(t, root)),
		"mycontroller.go": []byte("// Package mycontroller stands for a project that tests its controller with miniplane.\npackage mycontroller\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// -mod=mod lets go record the requirements it finds through the replaced module.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("test", "-count=1", "-v", "-run", "TestAgentRunsOnEveryNode", "./...")
	if !strings.Contains(out, "--- PASS: TestAgentRunsOnEveryNode") {
		t.Fatalf("the example did not pass:\n%s", out)
	}
}
