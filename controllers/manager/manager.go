package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/daemonset"
	"github.com/miniplane/miniplane/controllers/garbagecollector"
	"github.com/miniplane/miniplane/controllers/internal/component"
	"github.com/miniplane/miniplane/controllers/nodeipam"
	"github.com/miniplane/miniplane/controllers/nodelifecycle"
	"github.com/miniplane/miniplane/controllers/podgc"
	"github.com/miniplane/miniplane/controllers/rootcapublisher"
)

// User agents of the manager's clients, as kube-controller-manager names its controllers.
const (
	userAgentInformers      = "shared-informers"
	userAgentDaemonSet      = "daemon-set-controller"
	userAgentLeaderElection = "leader-election"
)

// controllerServiceAccounts name the ServiceAccount in kube-system each controller acts
// as with --use-service-account-credentials, by the controller's user agent: upstream's
// names, which the API server's bootstrap policy binds to the roles
// system:controller:<name>.
var controllerServiceAccounts = map[string]string{
	userAgentDaemonSet:         "daemon-set-controller",
	garbagecollector.UserAgent: "generic-garbage-collector",
	nodelifecycle.UserAgent:    "node-controller",
	// As in kube-controller-manager, node IPAM acts with the node controller's credentials.
	nodeipam.UserAgent:        "node-controller",
	rootcapublisher.UserAgent: "root-ca-cert-publisher",
	podgc.UserAgent:           "pod-garbage-collector",
}

// ControllerServiceAccounts are the ServiceAccounts in kube-system the controllers act
// as, for checks that the bootstrap policy binds a role to each.
func ControllerServiceAccounts() []string {
	var out []string
	for _, sa := range controllerServiceAccounts {
		out = append(out, sa)
	}
	slices.Sort(out)
	return slices.Compact(out) // node IPAM and node lifecycle act as one, as upstream's do
}

// RunOptions are Run's dependencies. RestConfig is required.
type RunOptions struct {
	// RestConfig is the controller-manager's API credentials; Run builds one client per
	// controller from it.
	RestConfig *rest.Config
	// Clock drives every controller's timing; nil means the real clock. Leader election
	// always uses the real clock (client-go has no injection point).
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Identity is the leader-election candidate name; "" means hostname_<uuid>.
	Identity string
	// HealthBound, when set, receives the health endpoint's address once it listens (useful
	// with port 0).
	HealthBound func(net.Addr)
	// Informers, when set, is the factory the controllers take their shared informers from
	// instead of one of their own: `miniplane up` shares one cache of every resource among
	// its components (make it with NewInformerFactory; its owner starts and stops it).
	// Not with leader election, whose every term starts from a fresh factory.
	Informers informers.SharedInformerFactory
}

// NewInformerFactory returns the informer factory the controller-manager configured by cfg
// would make, listing and watching with opts.RestConfig, for RunOptions.Informers.
func NewInformerFactory(cfg configs.ControllerManager, restConfig *rest.Config) (informers.SharedInformerFactory, error) {
	client, err := component.NewClient(restConfig, userAgentInformers, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	if err != nil {
		return nil, err
	}
	return component.NewInformerFactory(client, 0), nil
}

// controller is a started controller's run loop.
type controller struct {
	name string
	run  func(context.Context)
	// synced, when set, reports whether the controller's own informers (those outside the
	// shared factory) have synced; readiness waits for it.
	synced func() bool
}

// Run is `miniplane controller-manager`. It serves /healthz, /readyz and /metrics on
// cfg.HealthListen and runs the controllers cfg selects — while it holds the lease when
// cfg.LeaderElection.LeaderElect is on — until ctx is cancelled. Every leadership term
// starts from a fresh informer factory, so a replica that regains the lease acts on a fresh
// view, never on its standby-era cache.
func Run(ctx context.Context, cfg configs.ControllerManager, opts RunOptions) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("controller-manager: %w", err)
	}
	if opts.RestConfig == nil {
		return errors.New("controller-manager: RunOptions.RestConfig is required")
	}
	if opts.Informers != nil && cfg.LeaderElection.LeaderElect {
		return errors.New("controller-manager: RunOptions.Informers cannot be shared with leader election on")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "controller-manager")
	electionClient, err := component.NewClient(opts.RestConfig, userAgentLeaderElection, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	if err != nil {
		return err
	}

	health := component.NewHealth()
	health.Profiling = cfg.Profiling
	var synced atomic.Bool // the current term's informers have synced
	var leading atomic.Bool
	// Without election this instance leads from the start: not ready until it has synced.
	leading.Store(!cfg.LeaderElection.LeaderElect)
	health.AddReadiness(component.Check{Name: "controllers", Check: func(*http.Request) error {
		if leading.Load() && !synced.Load() {
			return errors.New("controllers are starting")
		}
		return nil
	}})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var serveErr error
	var serveWG sync.WaitGroup
	if cfg.HealthListen != "" {
		serveWG.Go(func() {
			if err := health.Serve(ctx, cfg.HealthListen, logger, opts.HealthBound); err != nil {
				serveErr = err
				cancel()
			}
		})
	}

	var leadErr error
	lead := func(ctx context.Context) {
		leading.Store(true)
		defer leading.Store(false)
		defer synced.Store(false)
		if err := runControllers(ctx, cfg, opts, logger, health.NewTermRegistry(), &synced); err != nil {
			// A configuration or client error: retrying would fail the same way.
			leadErr = err
			cancel()
		}
	}
	election := component.Election{Client: electionClient, Identity: opts.Identity, Health: health, Logger: logger}
	if err := component.LeadOrElect(ctx, cfg.LeaderElection, election, lead); err != nil {
		return err
	}
	cancel()
	serveWG.Wait()
	return errors.Join(leadErr, serveErr)
}

// runControllers builds the selected controllers on a fresh informer factory, starts them
// and returns when ctx is cancelled and they have stopped.
func runControllers(ctx context.Context, cfg configs.ControllerManager, opts RunOptions,
	logger *slog.Logger, reg prometheus.Registerer, synced *atomic.Bool) error {
	own := func(userAgent string) (kubernetes.Interface, error) {
		return component.NewClient(opts.RestConfig, userAgent, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	}
	// The shared informers list and watch with the controller-manager's own identity;
	// each controller writes as its own ServiceAccount when so configured.
	informerClient, err := own(userAgentInformers)
	if err != nil {
		return err
	}
	// newConfig is the client configuration of one controller: its own ServiceAccount's
	// tokens when so configured, as kube-controller-manager's --use-service-account-credentials.
	newConfig := func(userAgent string) (*rest.Config, error) {
		base, err := component.ClientConfig(opts.RestConfig, userAgent, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
		if err != nil || !cfg.UseServiceAccountCredentials {
			return base, err
		}
		sa, ok := controllerServiceAccounts[userAgent]
		if !ok {
			return nil, fmt.Errorf("no service account for %s", userAgent)
		}
		return component.ServiceAccountConfig(informerClient, base, metav1.NamespaceSystem, sa), nil
	}
	newClient := func(userAgent string) (kubernetes.Interface, error) {
		rc, err := newConfig(userAgent)
		if err != nil {
			return nil, err
		}
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("client %s: %w", userAgent, err)
		}
		return client, nil
	}
	factory := opts.Informers
	if factory == nil {
		factory = component.NewInformerFactory(informerClient, 0)
		defer factory.Shutdown()
	}

	var controllers []controller
	for _, name := range configs.KnownControllers {
		if !cfg.ControllerEnabled(name) {
			continue
		}
		c, err := newController(name, cfg, factory, clients{newClient, newConfig}, opts, logger.With("controller", name), reg)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		controllers = append(controllers, c)
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	var ownSynced []cache.InformerSynced
	for _, c := range controllers {
		logger.Info("starting controller", "controller", c.name)
		wg.Go(func() { c.run(ctx) })
		if c.synced != nil {
			ownSynced = append(ownSynced, c.synced)
		}
	}
	wg.Go(func() {
		for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return
			}
		}
		if !cache.WaitForCacheSync(ctx.Done(), ownSynced...) {
			return
		}
		synced.Store(true)
	})
	wg.Wait()
	return nil
}

// newController builds one controller by name, from its section of cfg, with its own client.
// clients make each controller's API clients, by user agent.
type clients struct {
	newClient func(userAgent string) (kubernetes.Interface, error)
	newConfig func(userAgent string) (*rest.Config, error)
}

func newController(name string, cfg configs.ControllerManager, factory informers.SharedInformerFactory,
	cl clients, opts RunOptions, logger *slog.Logger, reg prometheus.Registerer) (controller, error) {
	newClient := cl.newClient
	clk := opts.Clock
	switch name {
	case configs.ControllerDaemonSet:
		client, err := newClient(userAgentDaemonSet)
		if err != nil {
			return controller{}, err
		}
		c, err := daemonset.New(cfg.DaemonSet, daemonset.Options{
			Client:                client,
			Informers:             factory,
			ScheduleDaemonSetPods: cfg.FeatureEnabled(configs.FeatureScheduleDaemonSetPods),
			Clock:                 clk,
			Logger:                logger,
		})
		if err != nil {
			return controller{}, err
		}
		return controller{name: name, run: c.Run}, nil
	case configs.ControllerGarbageCollector:
		restConfig, err := cl.newConfig(garbagecollector.UserAgent)
		if err != nil {
			return controller{}, err
		}
		metadataClient, err := metadata.NewForConfig(restConfig)
		if err != nil {
			return controller{}, fmt.Errorf("metadata client: %w", err)
		}
		discoveryClient, err := discovery.NewDiscoveryClientForConfig(restConfig)
		if err != nil {
			return controller{}, fmt.Errorf("discovery client: %w", err)
		}
		gc, err := garbagecollector.New(cfg.GarbageCollector, garbagecollector.Options{
			Metadata:   metadataClient,
			Discovery:  discoveryClient,
			Shared:     sharedWithGC(cfg, factory),
			Clock:      clk,
			Logger:     logger,
			Registerer: reg,
		})
		if err != nil {
			return controller{}, err
		}
		return controller{name: name, run: func(ctx context.Context) { _ = gc.Run(ctx) }, synced: gc.HasSynced}, nil
	case configs.ControllerNodeLifecycle:
		client, err := newClient(nodelifecycle.UserAgent)
		if err != nil {
			return controller{}, err
		}
		c, err := nodelifecycle.New(cfg.NodeLifecycle, nodelifecycle.Options{
			Client:     client,
			Informers:  factory,
			Clock:      clk,
			Logger:     logger,
			Registerer: reg,
		})
		if err != nil {
			return controller{}, err
		}
		return controller{name: name, run: func(ctx context.Context) { _ = c.Run(ctx) }}, nil
	case configs.ControllerNodeIPAM:
		if !cfg.NodeIPAM.AllocateNodeCIDRs {
			// Enabled but idle, as kube-controller-manager's without --allocate-node-cidrs.
			return controller{name: name, run: func(context.Context) {}}, nil
		}
		client, err := newClient(nodeipam.UserAgent)
		if err != nil {
			return controller{}, err
		}
		c, err := nodeipam.New(cfg.NodeIPAM, nodeipam.Options{Client: client, Informers: factory, Clock: clk, Logger: logger})
		if err != nil {
			return controller{}, err
		}
		return controller{name: name, run: func(ctx context.Context) { _ = c.Run(ctx) }}, nil
	case configs.ControllerRootCAPublisher:
		rootCA, err := rootCABundle(cfg.RootCAFile, opts.RestConfig)
		if err != nil {
			return controller{}, err
		}
		if len(rootCA) == 0 {
			// Nothing to publish: a kubeconfig that trusts the system's CAs names none.
			logger.Warn("no root CA to publish: set root-ca-file")
			return controller{name: name, run: func(context.Context) {}}, nil
		}
		client, err := newClient(rootcapublisher.UserAgent)
		if err != nil {
			return controller{}, err
		}
		p, err := rootcapublisher.New(rootcapublisher.Options{Client: client, Informers: factory, RootCA: rootCA, Clock: clk, Logger: logger})
		if err != nil {
			return controller{}, err
		}
		return controller{name: name, run: p.Run}, nil
	case configs.ControllerPodGC:
		client, err := newClient(podgc.UserAgent)
		if err != nil {
			return controller{}, err
		}
		gc, err := podgc.New(cfg.PodGC, podgc.Options{Client: client, Informers: factory, Clock: clk, Logger: logger})
		if err != nil {
			return controller{}, err
		}
		return controller{name: name, run: gc.Run}, nil
	}
	return controller{}, fmt.Errorf("unknown controller %q", name)
}

// typedInformersOf lists, by controller, the resources whose typed informers that controller
// takes from the shared factory.
var typedInformersOf = map[string][]schema.GroupVersionResource{
	configs.ControllerDaemonSet: {
		appsv1.SchemeGroupVersion.WithResource("daemonsets"),
		appsv1.SchemeGroupVersion.WithResource("controllerrevisions"),
		corev1.SchemeGroupVersion.WithResource("pods"),
		corev1.SchemeGroupVersion.WithResource("nodes"),
	},
	configs.ControllerNodeIPAM: {
		corev1.SchemeGroupVersion.WithResource("nodes"),
	},
	configs.ControllerNodeLifecycle: {
		corev1.SchemeGroupVersion.WithResource("nodes"),
		corev1.SchemeGroupVersion.WithResource("pods"),
		coordinationv1.SchemeGroupVersion.WithResource("leases"),
	},
	configs.ControllerRootCAPublisher: {
		corev1.SchemeGroupVersion.WithResource("namespaces"),
		corev1.SchemeGroupVersion.WithResource("configmaps"),
	},
	configs.ControllerPodGC: {
		corev1.SchemeGroupVersion.WithResource("pods"),
		corev1.SchemeGroupVersion.WithResource("nodes"),
	},
}

// rootCABundle is what root-ca-cert-publisher publishes: the file when one is configured,
// else the CA the controller-manager itself trusts the API server with.
func rootCABundle(file string, rc *rest.Config) ([]byte, error) {
	switch {
	case file != "":
	case len(rc.CAData) > 0:
		return rc.CAData, nil
	case rc.CAFile != "":
		file = rc.CAFile
	default:
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("root CA: %w", err)
	}
	return data, nil
}

// sharedWithGC returns the typed informers the enabled controllers take from factory, for
// the garbage collector to watch those resources through instead of caching their objects
// (thousands of pods, nodes and Leases in a large fleet) a second time as metadata. Only
// resources some enabled controller uses are listed: asking the factory for any other
// would create a typed informer just for the collector, which costs more than its own
// metadata-only one. Were typedInformersOf to fall behind a controller, the cost would be
// memory (an object cached twice), never a wrong decision.
func sharedWithGC(cfg configs.ControllerManager, factory informers.SharedInformerFactory) map[schema.GroupVersionResource]cache.SharedIndexInformer {
	shared := map[schema.GroupVersionResource]cache.SharedIndexInformer{}
	for name, gvrs := range typedInformersOf {
		if !cfg.ControllerEnabled(name) {
			continue
		}
		for _, gvr := range gvrs {
			if inf, err := factory.ForResource(gvr); err == nil {
				shared[gvr] = inf.Informer()
			}
		}
	}
	return shared
}
