package testenv

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/controlplane"
	"github.com/miniplane/miniplane/internal/credentials"
	"github.com/miniplane/miniplane/kubeletstub"
)

// Identities the control plane creates tokens for.
const (
	AdminUser             = credentials.AdminUser
	ViewerUser            = credentials.ViewerUser
	ControllerManagerUser = credentials.ControllerManagerUser
	SchedulerUser         = credentials.SchedulerUser
	// ViewerGroup is the group the bootstrap policy binds to the ClusterRole miniplane:viewer.
	ViewerGroup = credentials.ViewerGroup
)

// Config describes the control plane to start.
type Config struct {
	// DataDir holds etcd data, certificates, tokens.csv and kubeconfig. Required by Start;
	// New uses a temporary directory when it is empty.
	DataDir string
	// Listen is the API server's address; default 127.0.0.1:0 (a free port).
	Listen string
	// APIServer overrides the API server's configuration; Listen, CertDir, TokenFile and
	// EmbeddedEtcdDir are set from the fields above. Zero value: defaults.
	APIServer *configs.APIServer
	// UnsafeNoFsync makes etcd skip fsync: for tests only.
	UnsafeNoFsync bool
	// ControllerManager, when set, runs the controller-manager in-process with this
	// configuration. Its kubeconfig, health listener (and so profiling) and leader election
	// are turned off: it gets a token, and tests running side by side must not share ports
	// or a Lease.
	ControllerManager *configs.ControllerManager
	// Scheduler, when set, runs the scheduler in-process likewise.
	Scheduler *configs.Scheduler
	// KubeletStub, when set and KubeletStub.Nodes > 0 (or NodeName set), runs a fleet of stub
	// nodes in-process with one fleet credential.
	KubeletStub *configs.KubeletStub
	// EtcdLogLevel is the embedded etcd's zap level; default "fatal", since etcd logs its own
	// orderly shutdown as errors.
	EtcdLogLevel string
	// Logger receives every component's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Env is a running control plane.
type Env struct {
	// AdminConfig is a client configuration with the admin token.
	AdminConfig *rest.Config
	// Client is a clientset built from AdminConfig.
	Client kubernetes.Interface
	// KubeconfigPath is the admin kubeconfig written into the data dir.
	KubeconfigPath string
	// URL is the API server's https URL.
	URL string
	// CAPEM is the CA certificate clients trust.
	CAPEM []byte
	// DataDir is the data directory.
	DataDir string
	// APIServer is the running server.
	APIServer *apiserver.Server
	// Fleet is the in-process stub nodes, if any.
	Fleet *kubeletstub.Fleet

	cp *controlplane.ControlPlane
}

// Start starts the control plane and returns once the API server answers and the stub
// nodes, if any, have registered. Stop it with Stop.
func Start(ctx context.Context, cfg Config) (*Env, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("testenv: DataDir is required")
	}
	cp, err := controlplane.Start(ctx, cfg.controlPlane())
	if err != nil {
		return nil, err
	}
	env := &Env{
		KubeconfigPath: cp.KubeconfigPath,
		URL:            cp.URL,
		CAPEM:          cp.CAPEM,
		DataDir:        cfg.DataDir,
		APIServer:      cp.APIServer,
		Fleet:          cp.Fleet,
		cp:             cp,
	}
	env.AdminConfig = env.ConfigFor(AdminUser)
	if env.Client, err = kubernetes.NewForConfig(env.AdminConfig); err != nil {
		cp.Stop()
		return nil, err
	}
	return env, nil
}

// controlPlane is the assembly's configuration for cfg: files under DataDir, a free port,
// and components without listeners or elections of their own.
func (cfg Config) controlPlane() controlplane.Config {
	api := configs.DefaultAPIServer()
	if cfg.APIServer != nil {
		api = *cfg.APIServer
	}
	api.Listen = cfg.Listen
	if api.Listen == "" {
		api.Listen = "127.0.0.1:0"
	}
	api.CertDir = filepath.Join(cfg.DataDir, "pki")
	api.TokenFile = filepath.Join(cfg.DataDir, "tokens.csv")
	api.EmbeddedEtcdDir = filepath.Join(cfg.DataDir, "etcd")
	out := controlplane.Config{
		DataDir:       cfg.DataDir,
		APIServer:     api,
		UnsafeNoFsync: cfg.UnsafeNoFsync,
		EtcdLogLevel:  cfg.EtcdLogLevel,
		Logger:        cfg.Logger,
	}
	if out.EtcdLogLevel == "" {
		out.EtcdLogLevel = "fatal"
	}
	if cfg.ControllerManager != nil {
		cm := *cfg.ControllerManager
		cm.Kubeconfig, cm.HealthListen, cm.Profiling, cm.LeaderElection.LeaderElect = "", "", false, false
		out.ControllerManager = &cm
	}
	if cfg.Scheduler != nil {
		sc := *cfg.Scheduler
		sc.Kubeconfig, sc.HealthListen, sc.Profiling, sc.LeaderElection.LeaderElect = "", "", false, false
		out.Scheduler = &sc
	}
	if cfg.KubeletStub != nil {
		stub := *cfg.KubeletStub
		stub.Kubeconfig, stub.HealthListen, stub.Profiling = "", "", false
		out.KubeletStub = &stub
	}
	return out
}

// StubIdentity is the one credential a fleet of stub nodes shares: a node identity that
// may act as every node of the fleet (or, for a single node, as that node).
func StubIdentity(cfg configs.KubeletStub) auth.User { return credentials.StubIdentity(cfg) }

// EnsureTokens makes sure the token file holds a token for each user, keeping tokens that
// already exist (so kubeconfigs written earlier stay valid), and returns user → token.
func EnsureTokens(path string, users []auth.User) (map[string]string, error) {
	return credentials.EnsureTokens(path, users)
}

// ConfigFor returns a client configuration that authenticates as user (one of the
// identities in the token file). Client-side rate limits are lifted: in-process
// components must not be throttled by client-go's defaults of 5 QPS.
func (e *Env) ConfigFor(user string) *rest.Config { return e.cp.ConfigFor(user) }

// EtcdEndpoints returns etcd's client URLs, for tools that measure the store itself
// (benchmarks compare the API's write rate with etcd's raw one). Components must go through
// the API server.
func (e *Env) EtcdEndpoints() []string { return e.cp.Storage.Endpoints }

// Token returns the bearer token of user.
func (e *Env) Token(user string) string { return e.cp.Token(user) }

// Stop stops every component, the API server and etcd, and waits for them.
func (e *Env) Stop() { e.cp.Stop() }

// Everything returns a configuration that runs every component at its defaults with a
// fleet of nodes stub nodes named stub-node-0 … stub-node-(nodes-1).
func Everything(nodes int) Config {
	cm, sched, stub := configs.DefaultControllerManager(), configs.DefaultScheduler(), configs.DefaultKubeletStub()
	stub.Nodes = nodes
	return Config{ControllerManager: &cm, Scheduler: &sched, KubeletStub: &stub}
}
