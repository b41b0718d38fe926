package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

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
		if err := runTerm(ctx, cfg, deps); err != nil {
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
// informer factory, so that a new leader starts from a fresh list. It returns when ctx is
// cancelled, or at once with an error when the scheduler cannot be built.
func runTerm(ctx context.Context, cfg configs.Scheduler, deps Options) error {
	deps.Informers = component.NewInformerFactory(deps.Client, 0)
	s, err := New(cfg, deps)
	if err != nil {
		return err
	}
	deps.Informers.Start(ctx.Done())
	defer deps.Informers.Shutdown()
	// Run fails only when the term ends before the caches synced: that ends the term, not
	// the scheduler.
	_ = s.Run(ctx)
	return nil
}
