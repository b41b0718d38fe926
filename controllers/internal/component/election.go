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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/miniplane/miniplane/configs"
)

// Election configures RunElected.
type Election struct {
	// Client creates and renews the Lease (its own client, so that a busy controller cannot
	// starve renewals).
	Client kubernetes.Interface
	// Namespace and Name name the Lease, e.g. kube-system/kube-controller-manager.
	Namespace, Name string
	// Identity is this candidate's holderIdentity; default hostname_<random uuid>.
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod are client-go's election timings.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Health, when set, gets a leader-election liveness check and a leader gauge.
	Health *Health
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
func RunElected(ctx context.Context, e Election, lead func(context.Context)) error {
	if e.Client == nil {
		return errors.New("leader election: nil client")
	}
	if e.Namespace == "" || e.Name == "" {
		return errors.New("leader election: lease namespace and name are required")
	}
	if e.Identity == "" {
		e.Identity = DefaultIdentity()
	}
	logger := e.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("lease", e.Namespace+"/"+e.Name, "identity", e.Identity)

	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, e.Namespace, e.Name,
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
			ConstLabels: prometheus.Labels{"name": e.Name},
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
		if err := campaign(ctx, e, lock, watchdog, setLeader, logger, lead); err != nil {
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
func campaign(ctx context.Context, e Election, lock resourcelock.Interface, watchdog *leaderelection.HealthzAdaptor,
	setLeader func(float64), logger *slog.Logger, lead func(context.Context)) error {
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
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Name:            e.Name,
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
			OnNewLeader: func(identity string) {
				if identity != e.Identity {
					logger.Info("observed leader", "leader", identity)
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
// instance holds the Lease cfg names (through RunElected). The election gets its own client,
// user agent userAgent, so renewals are never queued behind the component's own requests.
func LeadOrElect(ctx context.Context, cfg configs.LeaderElection, restConfig *rest.Config, userAgent string,
	qps float32, burst int, identity string, health *Health, logger *slog.Logger, lead func(context.Context)) error {
	if !cfg.LeaderElect {
		lead(ctx)
		return nil
	}
	client, err := NewClient(restConfig, userAgent, qps, burst)
	if err != nil {
		return err
	}
	return RunElected(ctx, Election{
		Client:        client,
		Namespace:     cfg.ResourceNamespace,
		Name:          cfg.ResourceName,
		Identity:      identity,
		LeaseDuration: cfg.LeaseDuration,
		RenewDeadline: cfg.RenewDeadline,
		RetryPeriod:   cfg.RetryPeriod,
		Health:        health,
		Logger:        logger,
	}, lead)
}
