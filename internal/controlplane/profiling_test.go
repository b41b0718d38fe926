package controlplane

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/miniplane/miniplane/configs"
)

// TestProfilesNameComponents: every part of the control plane runs under a profiler label
// of its name, inherited by the goroutines it starts, so a profile of `up` can be split by
// component. The goroutine profile shows the labels of goroutines that live as long as the
// process: each part's loops, watches and workers. The workers are checked by function,
// since a part that starts another's goroutines must keep its own label afterwards.
func TestProfilesNameComponents(t *testing.T) {
	cm, sched, stub := configs.DefaultControllerManager(), configs.DefaultScheduler(), configs.DefaultKubeletStub()
	cm.HealthListen, sched.HealthListen = "", ""
	stub.Nodes = 2
	start(t, Config{DataDir: t.TempDir(), APIServer: apiConfig(t.TempDir()), ControllerManager: &cm, Scheduler: &sched,
		KubeletStub: &stub})
	want := map[string]string{ // a function some goroutine runs → the component it must be counted as
		"go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).run":                        "etcd",
		"github.com/miniplane/miniplane/apiserver.(*cacher).run":                        "apiserver",
		"github.com/miniplane/miniplane/controllers/daemonset.(*Controller).runWorker":  "controller-manager",
		"github.com/miniplane/miniplane/controllers/scheduler.(*Scheduler).processNext": "scheduler",
		"github.com/miniplane/miniplane/kubeletstub.(*podController).worker":            "kubeletstub",
		"k8s.io/client-go/tools/cache.(*controller).processLoop":                        "informers",
	}
	var problems []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var profile bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&profile, 1); err != nil {
			t.Fatal(err)
		}
		problems = problems[:0]
		for fn, component := range want {
			if p := checkLabel(profile.String(), fn, component); p != "" {
				problems = append(problems, p)
			}
		}
		if len(problems) == 0 {
			return
		}
	}
	t.Fatalf("goroutines not labelled as their component:\n%s", strings.Join(problems, "\n"))
}

// checkLabel reports what is wrong with the goroutines running fn in a goroutine profile
// (debug=1: blocks of goroutines separated by blank lines, each with its labels and stack):
// none found, or none of them labelled as component. (Informer loops are also started by
// the controller-manager for informers of its own, so one labelled block is what is asked.)
func checkLabel(profile, fn, component string) string {
	var seen []string
	for _, block := range strings.Split(profile, "\n\n") {
		if !strings.Contains(block, "\t"+fn+"+") {
			continue
		}
		if strings.Contains(block, `"component":"`+component+`"`) {
			return ""
		}
		labels := "no labels"
		if _, rest, ok := strings.Cut(block, "# labels: "); ok {
			labels, _, _ = strings.Cut(rest, "\n")
		}
		seen = append(seen, labels)
	}
	if len(seen) == 0 {
		return fn + ": no goroutine runs it"
	}
	return fmt.Sprintf("%s: not labelled %s (%s)", fn, component, strings.Join(seen, "; "))
}
