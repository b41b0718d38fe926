package component

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/miniplane/miniplane/configs"
)

// Election holds the dependencies of RunElected and LeadOrElect; the Lease and the timings
// come from configs.LeaderElection.
type Election struct {
	// Client creates and renews the Lease; required. It should be the election's own client
	// (its own user agent and rate limit), so that a busy component cannot starve renewals.
	Client kubernetes.Interface
	// Identity is this candidate's holderIdentity; "" means hostname_<random uuid>.
	Identity string
	// Health, when set, gets a leader-election liveness check and a leader gauge.
	Health *Health
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultIdentity returns hostname_uuid, as kube-controller-manager names its candidates.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "miniplane"
	}
	return host + "_" + string(uuid.NewUUID())
}

// RunElected campaigns for the Lease and runs lead while this candidate holds it. When the
// lease is lost, lead's context is cancelled and, once lead has returned, the candidate
// campaigns again, so a replica that lost the lease (an API outage, a long pause) becomes a
// standby instead of a second leader. RunElected returns when ctx is cancelled; the lease is
// released only after lead has returned, so a successor never overlaps with this one.
//
// Leader election runs on the real clock: client-go's elector has no clock injection.
func RunElected(ctx context.Context, cfg configs.LeaderElection, e Election, lead func(context.Context)) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	if e.Client == nil {
		return errors.New("leader election: Election.Client is required")
	}
	if e.Identity == "" {
		e.Identity = DefaultIdentity()
	}
	logger := e.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("lease", cfg.ResourceNamespace+"/"+cfg.ResourceName, "identity", e.Identity)

	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.ResourceNamespace, cfg.ResourceName,
		e.Client.CoreV1(), e.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: e.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	watchdog := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	var gauge prometheus.Gauge
	if e.Health != nil {
		e.Health.AddLiveness(Check{Name: "leaderElection", Check: watchdog.Check})
		g := prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "leader_election_master_status",
			Help:        "1 while this instance holds the lease, 0 otherwise.",
			ConstLabels: prometheus.Labels{"name": cfg.ResourceName},
		})
		if err := e.Health.Registry.Register(g); err == nil {
			gauge = g
		}
	}
	setLeader := func(v float64) {
		if gauge != nil {
			gauge.Set(v)
		}
	}

	for ctx.Err() == nil {
		if err := campaign(ctx, cfg, e.Identity, lock, watchdog, setLeader, logger, lead); err != nil {
			return err
		}
		if ctx.Err() == nil {
			logger.Warn("lost leadership; campaigning again")
		}
	}
	setLeader(0)
	return nil
}

// campaign runs one elector until ctx is cancelled or the lease is lost, and returns only
// after lead (if it started) has returned and the lease has been released.
func campaign(ctx context.Context, cfg configs.LeaderElection, identity string, lock resourcelock.Interface,
	watchdog *leaderelection.HealthzAdaptor, setLeader func(float64), logger *slog.Logger, lead func(context.Context)) error {
	// electionCtx outlives ctx until lead has returned: cancelling it releases the lease.
	electionCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	var (
		mu           sync.Mutex
		shuttingDown bool
		leading      sync.WaitGroup
	)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Name:            cfg.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leCtx context.Context) {
				// The elector calls this in its own goroutine; registering under mu means
				// the shutdown below either waits for it or it never starts lead.
				mu.Lock()
				if shuttingDown {
					mu.Unlock()
					return
				}
				leading.Add(1)
				mu.Unlock()
				defer leading.Done()
				logger.Info("acquired leadership")
				setLeader(1)
				runCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				stop := context.AfterFunc(leCtx, cancel) // lease lost → stop acting
				defer stop()
				lead(runCtx)
			},
			OnStoppedLeading: func() { setLeader(0) },
			OnNewLeader: func(leader string) {
				if leader != identity {
					logger.Info("observed leader", "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		elector.Run(electionCtx)
	}()
	select {
	case <-ctx.Done(): // lead's context derives from ctx, so lead is stopping already
	case <-done: // the lease was lost; lead's context was cancelled with it
	}
	mu.Lock()
	shuttingDown = true
	mu.Unlock()
	leading.Wait()
	stopElection()
	<-done
	return nil
}

// LeadOrElect runs lead at once when cfg.LeaderElect is off, and otherwise only while this
// instance holds the Lease cfg names (through RunElected, which e.Client must serve).
func LeadOrElect(ctx context.Context, cfg configs.LeaderElection, e Election, lead func(context.Context)) error {
	if !cfg.LeaderElect {
		lead(ctx)
		return nil
	}
	return RunElected(ctx, cfg, e, lead)
}
