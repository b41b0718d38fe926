// Package controlplane assembles a whole miniplane in one process: etcd (embedded, or the
// cluster the API server is configured with), the API server, and, as configured, the
// controller-manager, the scheduler and a fleet of stub kubelets, each talking to the API
// server as an ordinary client with its own identity and token. It is what `miniplane up`
// runs; the importable test harness (test/testenv) is a thin layer over it.
//
// Every configuration field is honoured: a component section's health listener and leader
// election work as they do in the component's own command. Only the in-process components'
// kubeconfigs cannot be given, since their credentials are made here.
package controlplane

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

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/manager"
	"github.com/miniplane/miniplane/controllers/scheduler"
	"github.com/miniplane/miniplane/internal/credentials"
	"github.com/miniplane/miniplane/internal/profiling"
	"github.com/miniplane/miniplane/kubeletstub"
)

// Config describes the control plane to start.
type Config struct {
	// DataDir receives the admin kubeconfig. Required.
	DataDir string
	// APIServer configures the API server and its storage; Listen, CertDir, TokenFile and
	// (without EtcdServers) EmbeddedEtcdDir must be set. The token file receives the tokens
	// of the control plane's identities.
	APIServer configs.APIServer
	// ControllerManager, when set, runs the controller-manager in-process.
	ControllerManager *configs.ControllerManager
	// Scheduler, when set, runs the scheduler in-process.
	Scheduler *configs.Scheduler
	// KubeletStub, when set and naming at least one node, runs stub nodes in-process with
	// one credential for the fleet.
	KubeletStub *configs.KubeletStub
	// EtcdLogLevel is the embedded etcd member's zap level; "" means "error".
	EtcdLogLevel string
	// UnsafeNoFsync makes the embedded etcd skip fsync: for tests only.
	UnsafeNoFsync bool
	// Logger receives every component's logs; nil means slog.Default().
	Logger *slog.Logger
}

// FromUp is the control plane `miniplane up` runs for c, which has been resolved and
// validated.
func FromUp(c configs.Up, logging configs.Logging) Config {
	cfg := Config{
		DataDir:           c.DataDir,
		APIServer:         c.APIServer,
		ControllerManager: &c.ControllerManager,
		Scheduler:         &c.Scheduler,
		EtcdLogLevel:      logging.EtcdLevel(),
	}
	if c.RunsNodes() {
		cfg.KubeletStub = &c.KubeletStub
	}
	return cfg
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// URL is the API server's https URL.
	URL string
	// CAPEM is the CA certificate clients trust.
	CAPEM []byte
	// KubeconfigPath is the admin kubeconfig written into the data dir.
	KubeconfigPath string
	// APIServer is the running server.
	APIServer *apiserver.Server
	// Fleet is the in-process stub nodes, if any.
	Fleet *kubeletstub.Fleet
	// FleetHealthAddr is where the fleet's health listener listens, when one is configured;
	// a configured port 0 is resolved here.
	FleetHealthAddr net.Addr
	// Storage is the API server's etcd.
	Storage *Storage

	tokens map[string]string // user name → token
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// Components stop before the API server, so they do not spend their last moments
	// failing requests against a server that is already gone.
	componentsCancel context.CancelFunc
	components       sync.WaitGroup
	// informers is the factory the in-process components share, if they do.
	informers informers.SharedInformerFactory
	stopOnce  sync.Once
	// failed receives the first error of a component that stopped on its own.
	failed chan error
}

// Start starts the control plane and returns once the API server answers and the stub
// nodes, if any, have registered.
func Start(ctx context.Context, cfg Config) (cp *ControlPlane, err error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	started := &ControlPlane{cancel: cancel, KubeconfigPath: filepath.Join(cfg.DataDir, "kubeconfig"), failed: make(chan error, 1)}
	cp = started
	// Stop what started when a later step fails; `return nil, err` has cleared cp by then.
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	if cp.tokens, err = credentials.EnsureTokens(cfg.APIServer.TokenFile, identities(cfg)); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, cfg, log); err != nil {
		return nil, err
	}
	if err := pki.WriteKubeconfig(cp.KubeconfigPath, cp.URL, cp.CAPEM, credentials.AdminUser, cp.tokens[credentials.AdminUser]); err != nil {
		return nil, err
	}
	if err := cp.startComponents(ctx, cfg, log); err != nil {
		return nil, err
	}
	return cp, nil
}

// validate rejects what the assembly cannot honour.
func validate(cfg Config) error {
	if cfg.DataDir == "" {
		return errors.New("controlplane: DataDir is required")
	}
	if err := cfg.APIServer.Validate(); err != nil {
		return fmt.Errorf("apiserver: %w", err)
	}
	type component struct {
		name, kubeconfig string
		validate         func() error
	}
	var check []component
	if c := cfg.ControllerManager; c != nil {
		check = append(check, component{"controller-manager", c.Kubeconfig, c.Validate})
	}
	if c := cfg.Scheduler; c != nil {
		check = append(check, component{"scheduler", c.Kubeconfig, c.Validate})
	}
	if c := cfg.KubeletStub; c != nil && len(c.NodeNames()) > 0 {
		check = append(check, component{"kubeletstub", c.Kubeconfig, c.Validate})
	}
	for _, c := range check {
		if c.kubeconfig != "" {
			return fmt.Errorf("%s: kubeconfig %s: the in-process components get their own credentials", c.name, c.kubeconfig)
		}
		if err := c.validate(); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// identities are the users the control plane makes tokens for.
func identities(cfg Config) []auth.User {
	users := credentials.ComponentUsers()
	if cfg.KubeletStub != nil && len(cfg.KubeletStub.NodeNames()) > 0 {
		users = append(users, credentials.StubIdentity(*cfg.KubeletStub))
	}
	return users
}

// startAPIServer opens the storage, starts the compactor and the API server.
func (cp *ControlPlane) startAPIServer(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
	// Each part runs under a profiler label of its name (docs/performance.md, "Profiles of one
	// process"), so that a profile of up can be split by component.
	profiling.Component(ctx, "etcd", func(ctx context.Context) {
		cp.Storage, err = OpenStorage(ctx, cfg.APIServer, StorageOptions{
			EtcdLogLevel: cfg.EtcdLogLevel, UnsafeNoFsync: cfg.UnsafeNoFsync, Logger: log,
		})
	})
	if err != nil {
		return err
	}
	cp.goRun(&cp.wg, "compactor", log, func() error {
		cp.Storage.Store.RunCompactor(ctx, cfg.APIServer.CompactionInterval)
		return nil
	})
	srv, err := apiserver.New(apiserver.Options{Config: cfg.APIServer, Store: cp.Storage.Store, Logger: log})
	if err != nil {
		return err
	}
	profiling.Component(ctx, "apiserver", func(ctx context.Context) { err = srv.Start(ctx) })
	if err != nil {
		return err
	}
	cp.APIServer = srv
	cp.goRun(&cp.wg, "apiserver", log, srv.Wait)
	if errc := cp.Storage.Err(); errc != nil {
		cp.goRun(&cp.wg, "etcd", log, func() error {
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
				return nil
			}
		})
	}
	cp.CAPEM = srv.CAPEM()
	cp.URL = "https://" + clientAddress(srv.Addr())
	return nil
}

// startComponents runs the configured controller-manager, scheduler and stub fleet, each
// as an API client with its own identity, and waits until the stub nodes have registered.
func (cp *ControlPlane) startComponents(ctx context.Context, cfg Config, log *slog.Logger) error {
	ctx, cp.componentsCancel = context.WithCancel(ctx)
	shared, err := cp.sharedInformers(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.ControllerManager != nil {
		cm := *cfg.ControllerManager
		cp.goRun(&cp.components, "controller-manager", log, func() error {
			return manager.Run(ctx, cm, manager.RunOptions{RestConfig: cp.ConfigFor(credentials.ControllerManagerUser), Logger: log,
				Informers: shared})
		})
	}
	if cfg.Scheduler != nil {
		sc := *cfg.Scheduler
		cp.goRun(&cp.components, "scheduler", log, func() error {
			return scheduler.Run(ctx, sc, scheduler.RunOptions{RestConfig: cp.ConfigFor(credentials.SchedulerUser), Logger: log,
				Informers: shared})
		})
	}
	if cfg.KubeletStub == nil || len(cfg.KubeletStub.NodeNames()) == 0 {
		return nil
	}
	stub := *cfg.KubeletStub
	reg := prometheus.NewRegistry()
	fleet, err := kubeletstub.New(stub, kubeletstub.Options{RestConfig: cp.fleetConfig(stub), Logger: log, Registerer: reg,
		Informers: shared})
	if err != nil {
		return err
	}
	cp.Fleet = fleet
	if stub.HealthListen != "" {
		if cp.FleetHealthAddr, err = fleet.ServeHealth(ctx, stub.HealthListen, reg, log); err != nil {
			return err
		}
	}
	cp.goRun(&cp.components, "kubeletstub", log, func() error { return fleet.Run(ctx) })
	return waitUntil(ctx, registrationTimeout, fleet.Ready, "stub nodes to register")
}

// sharedInformers returns the informer factory the controller-manager, the scheduler and the
// stub fleet share, or nil when the first two do not both run or either elects a leader
// (each term of a leader starts from a fresh factory of its own). Sharing keeps one cache of
// every Pod and Node in the process instead of one per component, which is what a cache
// costs: at 5,000 nodes the scheduler's copy was an eighth of the heap (docs/performance.md).
// The factory lists and watches as the controller-manager, which may read everything the
// scheduler and the fleet read; each still writes as itself.
func (cp *ControlPlane) sharedInformers(ctx context.Context, cfg Config) (informers.SharedInformerFactory, error) {
	cm, sc := cfg.ControllerManager, cfg.Scheduler
	if cm == nil || sc == nil || cm.LeaderElection.LeaderElect || sc.LeaderElection.LeaderElect {
		return nil, nil
	}
	f, err := manager.NewInformerFactory(*cm, cp.ConfigFor(credentials.ControllerManagerUser))
	if err != nil {
		return nil, err
	}
	cp.informers = f
	return ownedFactory{SharedInformerFactory: f, stop: ctx.Done()}, nil
}

// ownedFactory is a factory the control plane starts and stops: its informers run until
// the components' context ends, whichever component starts them, and a component's
// Shutdown leaves them running for the others.
type ownedFactory struct {
	informers.SharedInformerFactory
	stop <-chan struct{}
}

// Start starts the informers requested so far, until the control plane stops them.
// Its goroutines, which decode every watched object and run every component's handlers,
// carry the profiler label "informers" whichever component starts them first. They are
// started from a goroutine of their own: labelling the caller's would leave it without its
// component's label afterwards (pprof.Do restores the labels of the context it is given).
func (f ownedFactory) Start(<-chan struct{}) {
	started := make(chan struct{})
	go profiling.Component(context.Background(), "informers", func(context.Context) {
		defer close(started)
		f.SharedInformerFactory.Start(f.stop)
	})
	<-started
}

// Shutdown does nothing: ControlPlane.Stop shuts the factory down.
func (f ownedFactory) Shutdown() {}

// registrationTimeout bounds the wait for stub nodes to register; thousands of nodes
// register in seconds, so this only fires when something is broken.
const registrationTimeout = 2 * time.Minute

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool, what string) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// goRun runs a part of the control plane until it returns, logging how it ended and
// reporting an error on Failed.
func (cp *ControlPlane) goRun(wg *sync.WaitGroup, name string, log *slog.Logger, run func() error) {
	wg.Add(1)
	go profiling.Component(context.Background(), name, func(context.Context) {
		defer wg.Done()
		if err := run(); err != nil {
			log.Error("component stopped", "component", name, "err", err)
			select {
			case cp.failed <- fmt.Errorf("%s: %w", name, err):
			default:
			}
		}
	})
}

// Failed receives the error of the first component that stops with one before Stop; a
// control plane that lost a part should be stopped (up exits).
func (cp *ControlPlane) Failed() <-chan error { return cp.failed }

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
func (cp *ControlPlane) ConfigFor(user string) *rest.Config {
	return &rest.Config{
		Host:            cp.URL,
		BearerToken:     cp.tokens[user],
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAPEM},
		QPS:             5000,
		Burst:           10000,
		UserAgent:       "miniplane/" + user,
	}
}

// fleetConfig is the in-process stub fleet's client configuration: ConfigFor its identity,
// on a connection of its own. client-go shares one transport, and so one HTTP/2 connection,
// among all clients with the same TLS settings; without a dialer of its own the fleet's lease
// renewals and pod status updates would share the controllers' connection, whose requests
// the server reads and answers in one loop per connection, up to 250 at a time. In a
// cluster the kubelets and kube-controller-manager are separate clients, and measured at
// 5,000 nodes the controllers' creates wait less this way (docs/performance.md, ninth round).
func (cp *ControlPlane) fleetConfig(stub configs.KubeletStub) *rest.Config {
	rc := cp.ConfigFor(credentials.StubIdentity(stub).Name)
	rc.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return rc
}

// AdminClient returns a clientset with the administrator's identity.
func (cp *ControlPlane) AdminClient() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(cp.ConfigFor(credentials.AdminUser))
}

// Token returns the bearer token of user.
func (cp *ControlPlane) Token(user string) string { return cp.tokens[user] }

// SignInURL returns a fresh link that signs a browser in to the view at /ui/ once, as the
// administrator (docs/ui.md), or "" when the view is off.
func (cp *ControlPlane) SignInURL() string {
	if cp.APIServer == nil || cp.APIServer.UI() == nil {
		return ""
	}
	return cp.URL + cp.APIServer.UI().SignInLink(cp.tokens[credentials.AdminUser])
}

// Stop stops every component, then the API server and etcd, and waits for them.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		if cp.componentsCancel != nil {
			cp.componentsCancel()
			cp.components.Wait()
		}
		if cp.informers != nil {
			cp.informers.Shutdown()
		}
		cp.cancel()
		cp.wg.Wait()
		if cp.Storage != nil {
			cp.Storage.Close()
		}
	})
}
