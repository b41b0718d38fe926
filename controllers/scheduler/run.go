package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/component"
)

// UserAgent identifies the scheduler's API requests.
const UserAgent = "miniplane-scheduler"

// RunOptions are Run's dependencies. RestConfig is required.
type RunOptions struct {
	// RestConfig is the scheduler's API credentials; Run builds its clients from it.
	RestConfig *rest.Config
	// Clock drives backoff and retries; nil means the real clock. Leader election always
	// uses the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Identity is the leader-election candidate name; "" means hostname_<uuid>.
	Identity string
	// HealthBound, when set, receives the health endpoint's address once it listens (useful
	// with port 0).
	HealthBound func(net.Addr)
	// Informers, when set, is the factory the scheduler takes its pod and node informers
	// from instead of one of its own, shared with other components of the process (`miniplane
	// up`); its owner starts and stops it. Not with leader election, whose every term starts
	// from a fresh factory.
	Informers informers.SharedInformerFactory
}

// Run is `miniplane scheduler`: it builds clients from opts.RestConfig, serves /healthz,
// /readyz and /metrics on cfg.HealthListen, and schedules pods — only while it holds the
// kube-system/kube-scheduler Lease when cfg.LeaderElection.LeaderElect is on. It returns
// when ctx is cancelled.
func Run(ctx context.Context, cfg configs.Scheduler, opts RunOptions) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if opts.RestConfig == nil {
		return errors.New("scheduler: RunOptions.RestConfig is required")
	}
	if opts.Informers != nil && cfg.LeaderElection.LeaderElect {
		return errors.New("scheduler: RunOptions.Informers cannot be shared with leader election on")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "scheduler")
	client, err := component.NewClient(opts.RestConfig, UserAgent, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	if err != nil {
		return err
	}
	// Events and the lease get their own clients and rate limits, so neither delays bindings
	// nor is delayed by them.
	eventClient, err := component.NewClient(opts.RestConfig, UserAgent, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	if err != nil {
		return err
	}
	electionClient, err := component.NewClient(opts.RestConfig, UserAgent+"-leader-election", cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	if err != nil {
		return err
	}
	health := component.NewHealth()
	health.Profiling = cfg.Profiling
	election := component.Election{Client: electionClient, Identity: opts.Identity, Health: health, Logger: logger}
	deps := Options{Client: client, EventClient: eventClient, Clock: opts.Clock, Logger: logger,
		Metrics: NewMetrics(health.Registry)}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
		cancel()
	}
	if cfg.HealthListen != "" {
		go func() {
			if err := health.Serve(ctx, cfg.HealthListen, logger, opts.HealthBound); err != nil {
				fail(err)
			}
		}()
	}

	lead := func(ctx context.Context) {
		if err := runTerm(ctx, cfg, deps, opts.Informers); err != nil {
			fail(err)
		}
	}
	if err := component.LeadOrElect(ctx, cfg.LeaderElection, election, lead); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// runTerm schedules for one leadership term (or for good, without election) on a fresh
// informer factory, so that a new leader starts from a fresh list, or on shared when set.
// It returns when ctx is cancelled, or at once with an error when the scheduler cannot be
// built.
func runTerm(ctx context.Context, cfg configs.Scheduler, deps Options, shared informers.SharedInformerFactory) error {
	deps.Informers = shared
	if shared == nil {
		deps.Informers = component.NewInformerFactory(deps.Client, 0)
		defer deps.Informers.Shutdown()
	}
	s, err := New(cfg, deps)
	if err != nil {
		return err
	}
	deps.Informers.Start(ctx.Done())
	// Run fails only when the term ends before the caches synced: that ends the term, not
	// the scheduler.
	_ = s.Run(ctx)
	return nil
}
