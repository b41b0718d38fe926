package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miniplane/miniplane/test/testenv"
)

// TestKubectlSeesImagePullFailures: on stub nodes, as on a real node, `kubectl get pods`
// shows a pod whose image does not exist as ErrImagePull or ImagePullBackOff (Init:… for an
// init container) and Pending, `kubectl describe` shows the kubelet's Failed event, a pod
// with a readiness probe turns Ready only after its initial delay, and `kubectl exec` says
// that the stub node runs no containers.
func TestKubectlSeesImagePullFailures(t *testing.T) {
	home := t.TempDir()
	env := testenv.New(t, testenv.Everything(2))
	pods := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"missing"},"spec":{"containers":[{"name":"c","image":"foo:non-existent"}]}}
		{"apiVersion":"v1","kind":"Pod","metadata":{"name":"init-missing"},"spec":{
			"initContainers":[{"name":"setup","image":"registry.invalid/setup:1"}],
			"containers":[{"name":"c","image":"registry.example/app:1"}]}}
		{"apiVersion":"v1","kind":"Pod","metadata":{"name":"probed"},"spec":{"containers":[{"name":"c","image":"registry.example/app:1",
			"readinessProbe":{"exec":{"command":["true"]},"initialDelaySeconds":3,"periodSeconds":1}}]}}`
	created := time.Now()
	dsKubectlStdin(t, env, home, pods, "apply", "-f", "-")
	row := func(out, name string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == name {
				return strings.Join(f[1:3], " ")
			}
		}
		return ""
	}
	var probedReadyAt time.Time
	dsEventually(t, 30*time.Second, "kubectl get pods shows the pull failures and the probed pod Ready", func() (string, bool) {
		out := dsKubectl(t, env, home, "get", "pods")
		if row(out, "probed") == "1/1 Running" && probedReadyAt.IsZero() {
			probedReadyAt = time.Now()
		}
		return out, regexp.MustCompile(`^0/1 (ErrImagePull|ImagePullBackOff)$`).MatchString(row(out, "missing")) &&
			regexp.MustCompile(`^0/1 Init:(ErrImagePull|ImagePullBackOff)$`).MatchString(row(out, "init-missing")) &&
			!probedReadyAt.IsZero()
	})
	if d := probedReadyAt.Sub(created); d < 3*time.Second {
		t.Errorf("the probed pod was Ready %s after it was created, before its 3s initial delay", d)
	}
	out := dsKubectl(t, env, home, "describe", "pod", "missing")
	for _, want := range []string{"Failed to pull image \"foo:non-existent\"", `":non-existent" in image-pull-failures`} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl describe pod missing lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^Status:\s+Pending$`).MatchString(out) {
		t.Errorf("kubectl describe pod missing: not Pending:\n%s", out)
	}
	if out, err := ipKubectlTry(t, env, home, "exec", "probed", "--", "true"); err == nil || !strings.Contains(out, "which runs no containers") {
		t.Errorf("kubectl exec: %v\n%s", err, out)
	}
}

// ipKubectlTry runs kubectl against env and returns its combined output and error.
func ipKubectlTry(t *testing.T, env *testenv.Env, home string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + env.KubeconfigPath, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
