// Package imports checks the layering rules of ARCHITECTURE.md and STYLE.md: only the API
// server (and the binary and harness that wire it) reach the store; controllers, the
// scheduler and the stub kubelets are API clients that do not import each other; configs
// is a leaf.
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
	{from: "controllers/daemonset", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement"}},
	{from: "controllers/garbagecollector", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement"}},
	{from: "controllers/nodelifecycle", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement"}},
	{from: "controllers/scheduler", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}, allowed: []string{"controllers/placement", "controllers/internal"}},
	{from: "controllers/manager", banned: []string{"store", "apiserver", "kubeletstub"}},
	// Shared plumbing of the controller processes: clients, health endpoints, election.
	{from: "controllers/internal", banned: []string{"store", "apiserver", "controllers", "kubeletstub"}},
	// The kubelet stub admits pods with the same placement checks the scheduler uses, as a
	// real kubelet runs the scheduler's predicates on admission.
	{from: "kubeletstub", banned: []string{"store", "apiserver", "controllers"}, allowed: []string{"controllers/placement"}},
}

func TestLayering(t *testing.T) {
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
