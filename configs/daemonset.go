package configs

import "time"

// DaemonSetController configures the DaemonSet controller (a section of ControllerManager).
// The defaults are kube-controller-manager's; docs/daemonset-controller.md explains each.
type DaemonSetController struct {
	// Workers is the number of concurrent syncs (--concurrent-daemonset-syncs); default 2.
	Workers int `mapstructure:"workers" flag:"concurrent-daemonset-syncs" help:"DaemonSets synced concurrently"`
	// BurstReplicas caps creates and, separately, deletes issued per sync; default 250.
	BurstReplicas int `mapstructure:"burst-replicas"`
	// ExpectationsTimeout is how long unobserved creates/deletes block a sync; default 5m.
	ExpectationsTimeout time.Duration `mapstructure:"expectations-timeout"`
	// FailedPodBackoffInitial is the first delay before a failed daemon pod is replaced;
	// it doubles up to FailedPodBackoffMax. Defaults 1s and 15m.
	FailedPodBackoffInitial time.Duration `mapstructure:"failed-pod-backoff-initial"`
	FailedPodBackoffMax     time.Duration `mapstructure:"failed-pod-backoff-max"`
	// BackoffGCInterval is how often stale backoff entries are dropped; default 1m.
	BackoffGCInterval time.Duration `mapstructure:"backoff-gc-interval"`
}

// DefaultDaemonSetController returns kube-controller-manager's defaults.
func DefaultDaemonSetController() DaemonSetController {
	return DaemonSetController{
		Workers:                 2,
		BurstReplicas:           250,
		ExpectationsTimeout:     5 * time.Minute,
		FailedPodBackoffInitial: time.Second,
		FailedPodBackoffMax:     15 * time.Minute,
		BackoffGCInterval:       time.Minute,
	}
}

// Validate reports the first problem with c.
func (c DaemonSetController) Validate() error {
	switch {
	case c.Workers < 1:
		return invalid("workers", "must be at least 1")
	case c.BurstReplicas < 1:
		return invalid("burst-replicas", "must be at least 1")
	case c.ExpectationsTimeout <= 0:
		return invalid("expectations-timeout", "must be positive")
	case c.FailedPodBackoffInitial <= 0:
		return invalid("failed-pod-backoff-initial", "must be positive")
	case c.FailedPodBackoffMax < c.FailedPodBackoffInitial:
		return invalid("failed-pod-backoff-max", "must not be below %s", "failed-pod-backoff-initial")
	case c.BackoffGCInterval <= 0:
		return invalid("backoff-gc-interval", "must be positive")
	}
	return nil
}
