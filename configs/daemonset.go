package configs

import (
	"errors"
	"time"
)

// DaemonSetController configures the DaemonSet controller (a section of ControllerManager).
// The defaults are kube-controller-manager's; see daemonset-behavior.md (c).
type DaemonSetController struct {
	// Workers is the number of concurrent syncs (--concurrent-daemonset-syncs); default 2.
	Workers int `mapstructure:"workers"`
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
		return errors.New("daemonset::workers must be at least 1")
	case c.BurstReplicas < 1:
		return errors.New("daemonset::burst-replicas must be at least 1")
	case c.ExpectationsTimeout <= 0:
		return errors.New("daemonset::expectations-timeout must be positive")
	case c.FailedPodBackoffInitial <= 0 || c.FailedPodBackoffMax < c.FailedPodBackoffInitial:
		return errors.New("daemonset::failed-pod-backoff-initial must be positive and not above failed-pod-backoff-max")
	case c.BackoffGCInterval <= 0:
		return errors.New("daemonset::backoff-gc-interval must be positive")
	}
	return nil
}
