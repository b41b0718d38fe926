package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/manager"
	"github.com/miniplane/miniplane/controllers/scheduler"
	"github.com/miniplane/miniplane/kubeletstub"
	"github.com/miniplane/miniplane/store"
)

// Identities the all-in-one creates tokens for.
const (
	AdminUser             = "admin"
	ViewerUser            = "viewer"
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
	// ViewerGroup is the read-only group of the default authorizer configuration.
	ViewerGroup = "miniplane:viewers"
)

// Config describes the control plane to start.
type Config struct {
	// DataDir holds etcd data, certificates, tokens.csv and kubeconfig. Required.
	DataDir string
	// Listen is the API server's address; default 127.0.0.1:0 (a free port).
	Listen string
	// APIServer overrides the API server's configuration; Listen, CertDir and TokenFile
	// are set from the fields above. Zero value: defaults.
	APIServer *configs.APIServer
	// UnsafeNoFsync makes etcd skip fsync: for tests only.
	UnsafeNoFsync bool
	// ControllerManager, when set, runs the controller-manager in-process with this
	// configuration (its kubeconfig and health listener are ignored: it gets a token and
	// no listener of its own).
	ControllerManager *configs.ControllerManager
	// Scheduler, when set, runs the scheduler in-process likewise.
	Scheduler *configs.Scheduler
	// KubeletStub, when set and KubeletStub.Nodes > 0 (or NodeName set), runs a fleet of stub
	// nodes in-process with one fleet credential.
	KubeletStub *configs.KubeletStub
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

	tokens map[string]string // user name → token
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// Components stop before the API server, so they do not spend their last moments
	// failing requests against a server that is already gone.
	componentsCancel context.CancelFunc
	components       sync.WaitGroup
	etcd             *store.EmbeddedEtcd
	client           *clientv3.Client
	once             sync.Once
}

// Start starts the control plane and returns once the API server answers.
func Start(ctx context.Context, cfg Config) (env *Env, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("testenv: DataDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	env = &Env{DataDir: cfg.DataDir, cancel: cancel, KubeconfigPath: filepath.Join(cfg.DataDir, "kubeconfig")}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()

	tokenFile := filepath.Join(cfg.DataDir, "tokens.csv")
	identities := defaultIdentities()
	if cfg.KubeletStub != nil {
		identities = append(identities, StubIdentity(*cfg.KubeletStub))
	}
	if env.tokens, err = EnsureTokens(tokenFile, identities); err != nil {
		return nil, err
	}

	etcdCfg := configs.DefaultEtcd()
	etcdCfg.Name = "miniplane"
	etcdCfg.DataDir = filepath.Join(cfg.DataDir, "etcd")
	etcdCfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	etcdCfg.ListenPeerURLs = []string{"http://127.0.0.1:0"}
	etcdCfg.UnsafeNoFsync = cfg.UnsafeNoFsync
	// etcd logs its own orderly shutdown as errors; only fatal problems are worth showing.
	if env.etcd, err = store.StartEmbeddedEtcd(etcdCfg, "fatal"); err != nil {
		return nil, err
	}
	if env.client, err = store.NewClient(ctx, store.ClientConfig{Endpoints: env.etcd.ClientURLs()}); err != nil {
		return nil, err
	}
	st := store.NewEtcdStore(env.client, store.NewProtobufCodec(clientscheme.Scheme), log)

	apiCfg := configs.DefaultAPIServer()
	if cfg.APIServer != nil {
		apiCfg = *cfg.APIServer
	}
	apiCfg.Listen = cfg.Listen
	apiCfg.CertDir = filepath.Join(cfg.DataDir, "pki")
	apiCfg.TokenFile = tokenFile
	env.wg.Add(1)
	go func() {
		defer env.wg.Done()
		st.RunCompactor(ctx, apiCfg.CompactionInterval)
	}()
	srv, err := apiserver.New(apiserver.Options{Config: apiCfg, Store: st, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	env.APIServer = srv
	env.wg.Add(1)
	go func() {
		defer env.wg.Done()
		if err := srv.Wait(); err != nil {
			log.Error("api server stopped", "err", err)
		}
	}()
	env.CAPEM = srv.CAPEM()
	env.URL = "https://" + clientAddress(srv.Addr())
	env.AdminConfig = env.ConfigFor(AdminUser)
	if env.Client, err = kubernetes.NewForConfig(env.AdminConfig); err != nil {
		return nil, err
	}
	if err := pki.WriteKubeconfig(env.KubeconfigPath, env.URL, env.CAPEM, AdminUser, env.tokens[AdminUser]); err != nil {
		return nil, err
	}
	if err := env.startComponents(ctx, cfg, log); err != nil {
		return nil, err
	}
	return env, nil
}

// startComponents runs the configured controller-manager, scheduler and stub fleet, each
// as an API client with its own identity, and waits until the stub nodes have registered.
func (e *Env) startComponents(ctx context.Context, cfg Config, log *slog.Logger) error {
	ctx, e.componentsCancel = context.WithCancel(ctx)
	if cfg.ControllerManager != nil {
		cm := *cfg.ControllerManager
		cm.HealthListen = ""
		cm.LeaderElection.LeaderElect = false
		e.goRun("controller-manager", log, func() error {
			return manager.Run(ctx, cm, e.ConfigFor(ControllerManagerUser), manager.Options{Logger: log})
		})
	}
	if cfg.Scheduler != nil {
		sc := *cfg.Scheduler
		sc.HealthListen = ""
		sc.LeaderElection.LeaderElect = false
		e.goRun("scheduler", log, func() error {
			return scheduler.Run(ctx, sc, e.ConfigFor(SchedulerUser), scheduler.Options{Logger: log})
		})
	}
	if cfg.KubeletStub != nil && len(cfg.KubeletStub.NodeNames()) > 0 {
		stub := *cfg.KubeletStub
		stub.HealthListen = ""
		fleet, err := kubeletstub.New(stub, e.ConfigFor(StubIdentity(stub).Name), kubeletstub.Options{Logger: log})
		if err != nil {
			return err
		}
		e.Fleet = fleet
		e.goRun("kubeletstub", log, func() error { return fleet.Run(ctx) })
		deadline := time.Now().Add(waitTimeout)
		for !fleet.Ready() {
			if time.Now().After(deadline) {
				return fmt.Errorf("stub nodes did not register within %s", waitTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// goRun runs a component until the environment stops, logging how it ended.
func (e *Env) goRun(name string, log *slog.Logger, run func() error) {
	e.components.Add(1)
	go func() {
		defer e.components.Done()
		if err := run(); err != nil {
			log.Error("component stopped", "component", name, "err", err)
		}
	}()
}

// StubIdentity is the one credential a fleet of stub nodes shares: a node identity that
// may act as every node of the fleet (or, for a single node, as that node).
func StubIdentity(cfg configs.KubeletStub) auth.User {
	if cfg.NodeName != "" {
		return auth.User{Name: auth.NodeUserPrefix + cfg.NodeName, UID: "node-" + cfg.NodeName, Groups: []string{auth.NodesGroup}}
	}
	return auth.User{Name: auth.FleetUserPrefix + cfg.NodePrefix, UID: "fleet-" + cfg.NodePrefix, Groups: []string{auth.NodesGroup}}
}

// clientAddress turns a listen address into one a client can dial: a wildcard host
// becomes loopback.
func clientAddress(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// ConfigFor returns a client configuration that authenticates as user (one of the
// identities in the token file). Client-side rate limits are lifted: in-process
// components must not be throttled by client-go's defaults of 5 QPS.
func (e *Env) ConfigFor(user string) *rest.Config {
	return &rest.Config{
		Host:            e.URL,
		BearerToken:     e.tokens[user],
		TLSClientConfig: rest.TLSClientConfig{CAData: e.CAPEM},
		QPS:             5000,
		Burst:           10000,
		UserAgent:       "miniplane/" + user,
	}
}

// EtcdEndpoints returns the embedded etcd's client URLs, for tools that measure the store
// itself (benchmarks compare the API's write rate with etcd's raw one). Components must go
// through the API server.
func (e *Env) EtcdEndpoints() []string { return e.etcd.ClientURLs() }

// Token returns the bearer token of user.
func (e *Env) Token(user string) string { return e.tokens[user] }

// Stop stops every component and etcd, and waits for them.
func (e *Env) Stop() {
	e.once.Do(func() {
		if e.componentsCancel != nil {
			e.componentsCancel()
			e.components.Wait()
		}
		e.cancel()
		e.wg.Wait()
		if e.client != nil {
			_ = e.client.Close()
		}
		if e.etcd != nil {
			e.etcd.Close()
		}
	})
}

// defaultIdentities are the users the all-in-one needs.
func defaultIdentities() []auth.User {
	return []auth.User{
		{Name: AdminUser, UID: "admin", Groups: []string{auth.AdminGroup}},
		{Name: ViewerUser, UID: "viewer", Groups: []string{ViewerGroup}},
		{Name: ControllerManagerUser, UID: "kube-controller-manager", Groups: []string{auth.AdminGroup}},
		{Name: SchedulerUser, UID: "kube-scheduler", Groups: []string{auth.AdminGroup}},
	}
}

// EnsureTokens makes sure the token file holds a token for each user, keeping tokens that
// already exist (so kubeconfigs written earlier stay valid), and returns user → token.
func EnsureTokens(path string, users []auth.User) (map[string]string, error) {
	var entries []auth.TokenEntry
	if f, err := os.Open(path); err == nil {
		entries, err = auth.ParseTokens(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	tokens := map[string]string{}
	for _, e := range entries {
		tokens[e.User.Name] = e.Token
	}
	changed := false
	for _, u := range users {
		if _, ok := tokens[u.Name]; ok {
			continue
		}
		t := auth.NewToken()
		entries = append(entries, auth.TokenEntry{Token: t, User: u})
		tokens[u.Name] = t
		changed = true
	}
	if changed {
		if err := auth.WriteTokenFile(path, entries); err != nil {
			return nil, err
		}
	}
	return tokens, nil
}

// waitTimeout is how long helpers wait for components to become ready.
const waitTimeout = 2 * time.Minute

// Everything returns a configuration that runs every component at its defaults with a
// fleet of nodes stub nodes named stub-node-0 … stub-node-(nodes-1).
func Everything(nodes int) Config {
	cm, sched, stub := configs.DefaultControllerManager(), configs.DefaultScheduler(), configs.DefaultKubeletStub()
	stub.Nodes = nodes
	return Config{ControllerManager: &cm, Scheduler: &sched, KubeletStub: &stub}
}
