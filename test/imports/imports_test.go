// Package imports checks the layering rules of ARCHITECTURE.md and STYLE.md: only the API
// server (and the assembly and binary that wire it) reach the store; controllers, the
// scheduler and the stub kubelets are API clients that do not import each other; configs
// is a leaf; nothing but tests imports test/...; and the binary links no test package.
package imports

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/miniplane/miniplane"

// rule forbids packages under from to depend, directly or not, on packages under any of
// banned, except the allowed ones.
type rule struct {
	from    string
	banned  []string
	allowed []string
}

var rules = []rule{
	{from: "configs", banned: []string{""}},
	{from: "store", banned: []string{"apiserver", "controllers", "kubeletstub", "test"}},
	{from: "apiserver", banned: []string{"controllers", "kubeletstub", "test"}},
	{from: "controllers/placement", banned: []string{""}, allowed: []string{"configs"}},
	{from: "controllers/daemonset", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement", "controllers/internal/worker"}},
	{from: "controllers/garbagecollector", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement", "controllers/internal/worker"}},
	{from: "controllers/nodelifecycle", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement", "controllers/internal/worker", "controllers/internal/podcondition"}},
	{from: "controllers/podgc", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/internal/podcondition"}},
	{from: "controllers/scheduler", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement", "controllers/internal"}},
	{from: "controllers/manager", banned: []string{"store", "apiserver", "kubeletstub"}},
	// Shared plumbing of the controller processes: clients, health endpoints, election; the
	// worker loop every controller runs over its queue (controllers/internal/worker); the
	// pod condition written before a controller deletes a pod (controllers/internal/podcondition).
	{from: "controllers/internal", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}},
	// The kubelet stub admits pods with the same placement checks the scheduler uses, as a
	// real kubelet runs the scheduler's predicates on admission.
	{from: "kubeletstub", banned: []string{"store", "apiserver", "controllers"}, allowed: []string{"controllers/placement"}},
	// Identities and tokens build on the API server's authentication types only.
	{from: "internal/credentials", banned: []string{"store", "controllers", "kubeletstub", "internal/controlplane", "test"}},
	// The in-process assembly wires everything, but is production code: no test package.
	{from: "internal/controlplane", banned: []string{"test"}},
	{from: "cmd", banned: []string{"test"}},
}

// moduleDeps maps each package of the module (relative to it) to its dependencies, direct or
// not, as go list reports them for the non-test build.
func moduleDeps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module) {
			continue
		}
		deps[strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")] = fields[1:]
	}
	return deps
}

func TestLayering(t *testing.T) {
	deps := moduleDeps(t)
	checked := 0
	for pkg, pkgDeps := range deps {
		for _, r := range rules {
			if pkg != r.from && !strings.HasPrefix(pkg, r.from+"/") {
				continue
			}
			checked++
			for _, d := range pkgDeps {
				if !strings.HasPrefix(d, module+"/") {
					continue
				}
				rel := strings.TrimPrefix(d, module+"/")
				if rel == pkg || strings.HasPrefix(rel, r.from+"/") || inAny(rel, r.allowed) {
					continue
				}
				if inAny(rel, r.banned) {
					t.Errorf("%s depends on %s, which %s may not import", pkg, rel, r.from)
				}
			}
		}
	}
	if checked < 3 {
		t.Fatalf("only %d packages matched a rule: the module layout changed?", checked)
	}
}

// inAny reports whether pkg is one of prefixes or below one; "" matches every package.
func inAny(pkg string, prefixes []string) bool {
	for _, p := range prefixes {
		if p == "" || pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// TestOnlyTestsImportTestPackages: test/... holds test suites and the harness other projects
// import into their tests; production code must not depend on them.
func TestOnlyTestsImportTestPackages(t *testing.T) {
	deps := moduleDeps(t)
	checked := 0
	for pkg, pkgDeps := range deps {
		if inAny(pkg, []string{"test"}) {
			continue
		}
		checked++
		for _, d := range pkgDeps {
			if rel, ok := strings.CutPrefix(d, module+"/"); ok && inAny(rel, []string{"test"}) {
				t.Errorf("%s imports %s: only tests may import test/...", pkg, rel)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d production packages found", checked)
	}
}

// TestBinaryLinksNoTestPackage: the shipped binary links neither the standard library's
// testing package nor any of the module's test packages.
func TestBinaryLinksNoTestPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/miniplane").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	linked := strings.Fields(string(out))
	if len(linked) < 100 {
		t.Fatalf("go list -deps listed only %d packages", len(linked))
	}
	for _, pkg := range linked {
		if pkg == "testing" || strings.HasPrefix(pkg, "testing/") || strings.HasPrefix(pkg, module+"/test/") || pkg == module+"/internal/poll" {
			t.Errorf("the miniplane binary links %s", pkg)
		}
	}
}
