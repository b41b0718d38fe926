package controlplane

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/credentials"
	"github.com/miniplane/miniplane/internal/poll"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// apiConfig is an API server on a free port whose files live under dir.
func apiConfig(dir string) configs.APIServer {
	c := configs.DefaultAPIServer()
	c.Listen = "127.0.0.1:0"
	c.CertDir = filepath.Join(dir, "pki")
	c.TokenFile = filepath.Join(dir, "tokens.csv")
	c.EmbeddedEtcdDir = filepath.Join(dir, "etcd")
	return c
}

func start(t *testing.T, cfg Config) *ControlPlane {
	t.Helper()
	cfg.UnsafeNoFsync, cfg.Logger, cfg.EtcdLogLevel = true, quiet, "fatal"
	cp, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(cp.Stop)
	return cp
}

// TestHonoursEveryPath: the certificates, the token file and etcd's data go where the API
// server's configuration says, even outside the data dir (up used to replace them).
func TestHonoursEveryPath(t *testing.T) {
	dataDir, elsewhere := t.TempDir(), t.TempDir()
	api := apiConfig(elsewhere)
	cp := start(t, Config{DataDir: dataDir, APIServer: api})
	for _, path := range []string{
		filepath.Join(elsewhere, "pki", "ca.crt"),
		filepath.Join(elsewhere, "tokens.csv"),
		filepath.Join(elsewhere, "etcd", "member"),
		filepath.Join(dataDir, "kubeconfig"),
	} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "pki")); err == nil {
		t.Error("certificates were written into the data dir as well")
	}
	client, err := cp.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("admin client: %v", err)
	}
}

// TestExternalEtcd: a control plane configured with etcd servers uses them instead of
// starting a member of its own, and sees what another API server stored there.
func TestExternalEtcd(t *testing.T) {
	first := start(t, Config{DataDir: t.TempDir(), APIServer: apiConfig(t.TempDir())})
	client, err := first.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, namespace("shared"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	api := apiConfig(dir)
	api.EtcdServers = first.Storage.Endpoints
	second := start(t, Config{DataDir: t.TempDir(), APIServer: api})
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
		t.Error("an embedded member was started despite etcd-servers")
	}
	client2, err := second.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client2.CoreV1().Namespaces().Get(ctx, "shared", metav1.GetOptions{}); err != nil {
		t.Fatalf("the second API server does not see the first one's namespace: %v", err)
	}
}

// TestStubHealthListener: the stub fleet's health listener is served when configured.
func TestStubHealthListener(t *testing.T) {
	stub := configs.DefaultKubeletStub()
	stub.Nodes = 2
	stub.HealthListen = "127.0.0.1:0"
	cp := start(t, Config{DataDir: t.TempDir(), APIServer: apiConfig(t.TempDir()), KubeletStub: &stub})
	if !cp.Fleet.Ready() {
		t.Fatal("Start returned before the stub nodes registered")
	}
	poll.UntilErr(t, 10*time.Second, "the stub's /readyz", func() (bool, error) {
		resp, err := http.Get("http://" + cp.FleetHealthAddr.String() + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if got := cp.Token(credentials.StubIdentity(stub).Name); got == "" {
		t.Error("no token for the fleet's identity")
	}
}

// TestRefusesWhatItCannotHonour: a component kubeconfig (up makes the credentials) and an
// invalid section are errors, not silently replaced.
func TestRefusesWhatItCannotHonour(t *testing.T) {
	cm := configs.DefaultControllerManager()
	cm.Kubeconfig = "/somewhere/kubeconfig"
	sched := configs.DefaultScheduler()
	sched.Workers = 0
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no data dir", Config{APIServer: apiConfig(t.TempDir())}, "DataDir"},
		{"component kubeconfig", Config{DataDir: t.TempDir(), APIServer: apiConfig(t.TempDir()), ControllerManager: &cm}, "own credentials"},
		{"invalid section", Config{DataDir: t.TempDir(), APIServer: apiConfig(t.TempDir()), Scheduler: &sched}, "workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Start(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v, want an error about %s", err, tc.want)
			}
		})
	}
}

// TestFromUp: up's configuration, resolved, becomes the assembly's without losing a field.
func TestFromUp(t *testing.T) {
	up := configs.DefaultUp()
	up.DataDir = "/data"
	up.Nodes = 0
	up.ControllerManager.FeatureGates = configs.FeatureGates{configs.FeatureScheduleDaemonSetPods: false}
	up.Resolve()
	cfg := FromUp(up, configs.Logging{Level: "debug"})
	switch {
	case cfg.APIServer.CertDir != "/data/pki" || cfg.APIServer.TokenFile != "/data/tokens.csv" || cfg.APIServer.EmbeddedEtcdDir != "/data/etcd":
		t.Errorf("paths = %+v", cfg.APIServer)
	case cfg.KubeletStub != nil:
		t.Error("nodes 0 still runs stub nodes")
	case cfg.ControllerManager.FeatureEnabled(configs.FeatureScheduleDaemonSetPods):
		t.Error("feature gate lost")
	case cfg.EtcdLogLevel != "info":
		t.Errorf("etcd log level at debug = %q, want info", cfg.EtcdLogLevel)
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
