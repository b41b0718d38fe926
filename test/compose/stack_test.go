package compose

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestMain tears down the stacks of an interrupted run: `go test` stops the test binary with
// SIGINT or SIGTERM, which would skip t.Cleanup and leave containers running.
func TestMain(m *testing.M) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "compose test: %v: removing the stacks this run created\n", s)
		runTeardowns()
		os.Exit(2)
	}()
	os.Exit(m.Run())
}

var (
	teardownMu sync.Mutex
	teardowns  []func()
)

func addTeardown(f func()) {
	teardownMu.Lock()
	defer teardownMu.Unlock()
	teardowns = append(teardowns, f)
}

func runTeardowns() {
	teardownMu.Lock()
	fs := slices.Clone(teardowns)
	teardownMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// stack is one compose deployment of the test: its own project name, host folder, host port
// and image tag, so that concurrent runs and a user's `make compose-up` never collide.
type stack struct {
	t       *testing.T
	root    string   // repository root: docker-compose.yml and the Makefile
	project string   // compose project name; every container, network and volume is labelled with it
	work    string   // temporary folder: build output and the state folder
	state   string   // MINIPLANE_COMPOSE_DIR: certificates, tokens, kubeconfigs
	port    int      // host port of apiserver-1 on 127.0.0.1
	image   string   // image tag built for this run
	compose []string // the compose command: docker-compose, or docker compose
	env     []string
}

// newStack prepares a stack and registers its teardown; nothing runs yet.
func newStack(t *testing.T) *stack {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "docker-compose.yml")); err != nil {
		t.Fatalf("docker-compose.yml not found at the repository root: %v", err)
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("docker info failed (is the Docker engine running?): %v: %s", err, out)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	id := hex.EncodeToString(suffix)
	work, err := os.MkdirTemp("", "miniplane-compose-"+id+"-")
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{
		t:       t,
		root:    root,
		project: "miniplanetest" + id,
		work:    work,
		state:   filepath.Join(work, "state"),
		port:    freePort(t),
		image:   "miniplane:compose-test-" + id,
		compose: composeCommand(t),
	}
	if err := os.MkdirAll(s.state, 0o700); err != nil {
		t.Fatal(err)
	}
	s.env = []string{
		"MINIPLANE_IMAGE=" + s.image,
		"MINIPLANE_COMPOSE_DIR=" + s.state,
		"MINIPLANE_COMPOSE_PORT=" + strconv.Itoa(s.port),
		"MINIPLANE_UID=" + strconv.Itoa(os.Getuid()),
		"MINIPLANE_GID=" + strconv.Itoa(os.Getgid()),
	}
	t.Logf("compose project %s, image %s, state %s, API on 127.0.0.1:%d, command %q",
		s.project, s.image, s.state, s.port, strings.Join(s.compose, " "))
	var once sync.Once
	teardown := func() { once.Do(s.teardown) }
	addTeardown(teardown)
	t.Cleanup(teardown)
	// Registered after the teardown, so it runs first: logs are only there before `down`.
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpDiagnostics()
		}
	})
	return s
}

func composeCommand(t *testing.T) []string {
	if c := strings.Fields(os.Getenv("MINIPLANE_COMPOSE")); len(c) > 0 {
		return c
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	if err := exec.Command("docker", "compose", "version").Run(); err == nil {
		return []string{"docker", "compose"}
	}
	t.Fatal("neither docker-compose nor the docker compose plugin is installed")
	return nil
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// run runs a command with the stack's environment and returns its combined output.
func (s *stack) run(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), s.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// composeRun runs a compose subcommand scoped to the stack's project.
func (s *stack) composeRun(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	full := append(slices.Clone(s.compose[1:]), "-f", filepath.Join(s.root, "docker-compose.yml"), "-p", s.project)
	return s.run(ctx, timeout, s.compose[0], append(full, args...)...)
}

// mustCompose runs a compose subcommand and fails t if it fails.
func (s *stack) mustCompose(ctx context.Context, t *testing.T, timeout time.Duration, args ...string) {
	t.Helper()
	if _, err := s.composeRun(ctx, timeout, args...); err != nil {
		t.Fatal(err)
	}
}

// buildImage builds the binary and the image the way users do, with `make image`, into the
// run's own folders and tag.
func (s *stack) buildImage(ctx context.Context, t *testing.T) {
	t.Helper()
	_, err := s.run(ctx, 10*time.Minute, "make", "-C", s.root, "image",
		"IMAGE="+s.image, "BIN_DIR="+filepath.Join(s.work, "bin"), "IMAGE_CONTEXT="+filepath.Join(s.work, "image"))
	if err != nil {
		t.Fatal(err)
	}
}

// services lists the services of docker-compose.yml.
func (s *stack) services(ctx context.Context, t *testing.T) []string {
	t.Helper()
	out, err := s.composeRun(ctx, time.Minute, "config", "--services")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)
}

// oneShot services run to completion; the others must run and be healthy.
var oneShot = map[string]bool{"certs": true}

type containerState struct {
	ID, Service, Status, Health string
	ExitCode                    int
}

func (c containerState) String() string {
	return fmt.Sprintf("%s(%s/%s/exit %d)", c.Service, c.Status, c.Health, c.ExitCode)
}

// containers lists every container of the project, running or not.
func (s *stack) containers(ctx context.Context) ([]containerState, error) {
	out, err := s.run(ctx, time.Minute, "docker", "ps", "-aq", "--filter", "label=com.docker.compose.project="+s.project)
	if err != nil {
		return nil, err
	}
	ids := strings.Fields(out)
	if len(ids) == 0 {
		return nil, nil
	}
	out, err = s.run(ctx, time.Minute, "docker", append([]string{"inspect"}, ids...)...)
	if err != nil {
		return nil, err
	}
	// Decoded from JSON: a container without a health check has no State.Health at all.
	var inspected []struct {
		ID     string `json:"Id"`
		Config struct {
			Labels map[string]string
		}
		State struct {
			Status   string
			ExitCode int
			Health   *struct{ Status string }
		}
	}
	if err := json.Unmarshal([]byte(out), &inspected); err != nil {
		return nil, fmt.Errorf("docker inspect: %w", err)
	}
	var cs []containerState
	for _, c := range inspected {
		health := "none"
		if c.State.Health != nil {
			health = c.State.Health.Status
		}
		cs = append(cs, containerState{ID: c.ID, Service: c.Config.Labels["com.docker.compose.service"],
			Status: c.State.Status, Health: health, ExitCode: c.State.ExitCode})
	}
	return cs, nil
}

// waitHealthy waits until every named service is healthy (one-shot services: exited 0) and
// returns how long that took. A container that exits or turns unhealthy fails at once.
func (s *stack) waitHealthy(ctx context.Context, t *testing.T, timeout time.Duration, services ...string) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	deadline := time.Now().Add(timeout)
	for {
		cs, err := s.containers(ctx)
		if err != nil {
			last = err.Error()
		} else {
			byService := map[string]containerState{}
			for _, c := range cs {
				byService[c.Service] = c
			}
			var pending, failed []string
			for _, svc := range services {
				c, ok := byService[svc]
				switch {
				case !ok:
					pending = append(pending, svc+"(no container)")
				case oneShot[svc] && c.Status == "exited" && c.ExitCode == 0:
				case oneShot[svc] && (c.Status == "running" || c.Status == "created"):
					pending = append(pending, c.String())
				case !oneShot[svc] && c.Status == "running" && c.Health == "healthy":
				case !oneShot[svc] && c.Status == "running" && c.Health == "starting":
					pending = append(pending, c.String())
				default:
					failed = append(failed, c.String())
				}
			}
			if len(failed) > 0 {
				t.Fatalf("services failed: %s", strings.Join(failed, ", "))
			}
			if len(pending) == 0 {
				return time.Since(start)
			}
			last = "waiting for " + strings.Join(pending, ", ")
		}
		if time.Now().After(deadline) {
			t.Fatalf("services not healthy after %s: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("services not healthy: %v: %s", ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

// client returns a client-go clientset built from the admin kubeconfig the certs service
// wrote into the host folder: the same file the README tells users to export.
func (s *stack) client(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst, cfg.Timeout = 100, 200, 30*time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *stack) kubeconfig() string { return filepath.Join(s.state, "kubeconfig") }

// dumpDiagnostics logs the containers and their last log lines, for a failed run.
func (s *stack) dumpDiagnostics() {
	ctx := context.Background()
	if out, err := s.composeRun(ctx, time.Minute, "ps"); err == nil {
		s.t.Logf("compose ps:\n%s", out)
	}
	if out, err := s.composeRun(ctx, 2*time.Minute, "logs", "--no-color", "--tail=40"); err == nil {
		s.t.Logf("compose logs (last 40 lines per service):\n%s", out)
	}
}

// teardown removes what the run created: the project's containers, network and volumes, the
// image tag, and the temporary folder; then it checks that nothing of the project is left.
func (s *stack) teardown() {
	ctx := context.Background()
	if _, err := s.composeRun(ctx, 3*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
		// Compose stops at the first resource it cannot remove (the network, usually, with
		// volumes after it): remove the rest one by one; leftovers below says what stayed.
		s.t.Logf("teardown: %v", err)
		s.removeLeftovers(ctx)
	}
	// Only the tag this run built; layers shared with other tags stay.
	if out, err := s.run(ctx, time.Minute, "docker", "image", "ls", "-q", s.image); err == nil && strings.TrimSpace(out) != "" {
		if _, err := s.run(ctx, time.Minute, "docker", "rmi", s.image); err != nil {
			s.t.Errorf("teardown: %v", err)
		}
	}
	if err := os.RemoveAll(s.work); err != nil {
		s.t.Errorf("teardown: remove %s: %v", s.work, err)
	}
	left := s.leftovers(ctx)
	var stuck []string
	left = slices.DeleteFunc(left, func(l string) bool {
		name, ok := strings.CutPrefix(l, "network ")
		if ok && s.emptyNetwork(ctx, name) {
			stuck = append(stuck, name)
			return true
		}
		return false
	})
	if len(stuck) > 0 {
		// A daemon bug (moby/moby#42119): after its containers are gone the daemon may
		// still count endpoints on a network and refuse to remove it until it restarts.
		// Nothing of the project is attached to it; the test cannot do more.
		s.t.Logf("teardown: WARNING: the Docker daemon refuses to remove network %s although no container is attached (\"has active endpoints\", moby/moby#42119; a daemon restart removes it)",
			strings.Join(stuck, ", "))
	}
	if len(left) > 0 {
		s.t.Errorf("teardown left behind: %s", strings.Join(left, ", "))
	} else if len(stuck) == 0 {
		s.t.Logf("teardown: no container, network, volume or image of project %s is left", s.project)
	}
}

// removeLeftovers removes the project's containers, then its networks and volumes, one by
// one, trying again for a while: the daemon releases a removed container's endpoints a
// moment after it reports the container gone.
func (s *stack) removeLeftovers(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := s.leftovers(ctx)
		var failed bool
		for _, kind := range []string{"container", "network", "volume"} {
			for _, l := range left {
				name, ok := strings.CutPrefix(l, kind+" ")
				if !ok {
					continue
				}
				rm := []string{kind, "rm", name}
				if kind == "container" {
					rm = []string{"rm", "-f", "-v", name}
				}
				if _, err := s.run(ctx, time.Minute, "docker", rm...); err != nil {
					failed = true
				}
			}
		}
		if !failed || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Second)
	}
}

// emptyNetwork reports whether the named network exists with no container attached.
func (s *stack) emptyNetwork(ctx context.Context, name string) bool {
	out, err := s.run(ctx, time.Minute, "docker", "network", "inspect", "--format", "{{len .Containers}}", name)
	return err == nil && strings.TrimSpace(out) == "0"
}

// leftovers lists the containers, networks and volumes of the project, found by compose's
// label and by its name prefix, and the image tag.
func (s *stack) leftovers(ctx context.Context) []string {
	var left []string
	label := "label=com.docker.compose.project=" + s.project
	for _, q := range [][]string{
		{"ps", "-a", "--format", "container {{.Names}}", "--filter", label},
		{"ps", "-a", "--format", "container {{.Names}}", "--filter", "name=" + s.project},
		{"network", "ls", "--format", "network {{.Name}}", "--filter", label},
		{"network", "ls", "--format", "network {{.Name}}", "--filter", "name=" + s.project},
		{"volume", "ls", "--format", "volume {{.Name}}", "--filter", label},
		{"volume", "ls", "--format", "volume {{.Name}}", "--filter", "name=" + s.project},
		{"image", "ls", "--format", "image {{.Repository}}:{{.Tag}}", s.image},
	} {
		out, err := s.run(ctx, time.Minute, "docker", q...)
		if err != nil {
			left = append(left, err.Error())
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l != "" && !slices.Contains(left, l) {
				left = append(left, l)
			}
		}
	}
	return left
}
