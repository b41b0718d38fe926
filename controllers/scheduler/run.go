package scheduler

import (
	"context"
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

// Options carries what a caller of Run injects; all fields are optional.
type Options struct {
	// Clock drives backoff and retries; default the real clock. Leader election always uses
	// the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Identity is the leader-election candidate name; default hostname_<uuid>.
	Identity string
	// HealthBound, when set, receives the health endpoint's address once it listens (useful
	// with port 0).
	HealthBound func(net.Addr)
}

// Run is `miniplane scheduler`: it builds clients from restConfig, serves /healthz, /readyz
// and /metrics on cfg.HealthListen, and schedules pods — only while it holds the
// kube-system/kube-scheduler Lease when cfg.LeaderElection.LeaderElect is on. It returns
// when ctx is cancelled.
func Run(ctx context.Context, cfg configs.Scheduler, restConfig *rest.Config, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "scheduler")
	client, err := component.NewClient(restConfig, UserAgent, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	if err != nil {
		return err
	}
	// Events and the lease get their own rate limits, so neither delays bindings nor is
	// delayed by them.
	eventClient, err := component.NewClient(restConfig, UserAgent, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	if err != nil {
		return err
	}
	health := component.NewHealth()
	metrics := NewMetrics(health.Registry)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	if cfg.HealthListen != "" {
		go func() {
			if err := health.Serve(ctx, cfg.HealthListen, logger, opts.HealthBound); err != nil {
				errc <- err
				cancel()
			}
		}()
	}

	lead := func(ctx context.Context) {
		// A fresh informer factory per term: a new leader starts from a fresh list.
		factory := informers.NewSharedInformerFactory(client, 0)
		s, err := New(Config{
			Client:         client,
			EventClient:    eventClient,
			Informers:      factory,
			SchedulerName:  cfg.SchedulerName,
			Workers:        cfg.Workers,
			InitialBackoff: cfg.PodInitialBackoff,
			MaxBackoff:     cfg.PodMaxBackoff,
			FlushInterval:  cfg.UnschedulableFlushInterval,
			Clock:          opts.Clock,
			Logger:         logger,
			Metrics:        metrics,
		})
		if err != nil {
			select {
			case errc <- err:
			default:
			}
			cancel()
			return
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		_ = s.Run(ctx)
	}

	if err := component.LeadOrElect(ctx, cfg.LeaderElection, restConfig, UserAgent+"-leader-election", cfg.KubeAPIQPS, cfg.KubeAPIBurst,
		opts.Identity, health, logger, lead); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}
