package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/miniplane/miniplane/test/testenv"
)

// TestKubectlSeesSchedulingFailures: a pod that fits on no node stays Pending, and
// `kubectl describe pod` shows the scheduler's FailedScheduling event saying why per node.
func TestKubectlSeesSchedulingFailures(t *testing.T) {
	home := t.TempDir()
	env := testenv.New(t, testenv.Everything(3))
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"too-big"},"spec":{"containers":[
		{"name":"c","image":"busybox","resources":{"requests":{"cpu":"100"}}}]}}`
	dsKubectlStdin(t, env, home, pod, "apply", "-f", "-")
	dsEventually(t, 30*time.Second, "FailedScheduling in kubectl describe", func() (string, bool) {
		out := dsKubectl(t, env, home, "describe", "pod", "too-big")
		return out, strings.Contains(out, "FailedScheduling") &&
			strings.Contains(out, "0/3 nodes are available: 3 Insufficient cpu.") &&
			regexp.MustCompile(`(?m)^Status:\s+Pending$`).MatchString(out)
	})
}

// TestKubectlDeleteCascades: `kubectl delete` with each --cascade mode does what kubectl
// users expect of the garbage collector: background removes the pods after the DaemonSet,
// orphan keeps them without the ownerReference, foreground removes them before it.
func TestKubectlDeleteCascades(t *testing.T) {
	home := t.TempDir()
	env := testenv.New(t, testenv.Everything(2))
	c := env.Client
	ctx := context.Background()
	nodes := dsNodeNames(2)
	for _, mode := range []string{"background", "orphan", "foreground"} {
		t.Run(mode, func(t *testing.T) {
			name := "cascade-" + mode
			ds := dsCreate(t, c, dsNewDaemonSet(name))
			pods := dsWaitOnePodPerNode(t, c, name, nodes)

			// Record when the DaemonSet and its pods disappear. A deleted object carries the
			// etcd revision of its deletion, which orders deletions across both watches.
			var mu sync.Mutex
			deletedAt := map[string]int64{}
			watchCtx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer func() {
				stop()
				wg.Wait()
			}()
			record := func(w watch.Interface, err error) {
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					defer w.Stop()
					for {
						select {
						case <-watchCtx.Done():
							return
						case ev, ok := <-w.ResultChan():
							if !ok {
								return
							}
							if ev.Type != watch.Deleted {
								continue
							}
							mu.Lock()
							switch o := ev.Object.(type) {
							case *appsv1.DaemonSet:
								deletedAt["ds"] = dsRV(o.ResourceVersion)
							case *corev1.Pod:
								deletedAt["pod/"+o.Name] = dsRV(o.ResourceVersion)
							}
							mu.Unlock()
						}
					}
				})
			}
			record(c.AppsV1().DaemonSets("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: ds.ResourceVersion}))
			record(c.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + name}))

			dsKubectl(t, env, home, "delete", "daemonset", name, "--cascade="+mode)
			if _, err := c.AppsV1().DaemonSets("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("DaemonSet still there after kubectl delete returned: %v", err)
			}
			switch mode {
			case "orphan":
				for _, p := range pods {
					got, err := c.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
					if err != nil {
						t.Fatalf("orphaned pod %s: %v", p.Name, err)
					}
					if len(got.OwnerReferences) != 0 {
						t.Fatalf("orphaned pod %s keeps ownerReferences %v", p.Name, got.OwnerReferences)
					}
				}
				// Nobody owns them now, so nobody deletes them: clean up for the next mode.
				dsKubectl(t, env, home, "delete", "pods", "-l", "app="+name, "--grace-period=0", "--force")
			default:
				dsEventually(t, 30*time.Second, "the pods to be deleted", func() (string, bool) {
					left := dsListPods(t, c, name)
					return fmt.Sprintf("%d pods left", len(left)), len(left) == 0
				})
				dsEventually(t, 10*time.Second, "the deletions to be watched", func() (string, bool) {
					mu.Lock()
					defer mu.Unlock()
					return fmt.Sprint(deletedAt), len(deletedAt) == len(pods)+1
				})
				mu.Lock()
				defer mu.Unlock()
				for obj, rv := range deletedAt {
					if obj == "ds" {
						continue
					}
					if mode == "foreground" && rv > deletedAt["ds"] {
						t.Fatalf("foreground deletion removed the DaemonSet before %s: %v", obj, deletedAt)
					}
					if mode == "background" && rv < deletedAt["ds"] {
						t.Fatalf("background deletion removed %s before the DaemonSet: %v", obj, deletedAt)
					}
				}
			}
		})
	}
}

// dsRV parses a resourceVersion (an etcd revision in miniplane).
func dsRV(rv string) int64 {
	var n int64
	fmt.Sscan(rv, &n)
	return n
}

// dsKubectlStdin runs kubectl with stdin, like dsKubectl.
func dsKubectlStdin(t *testing.T, env *testenv.Env, home, stdin string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + env.KubeconfigPath, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
