package configs

import (
	"errors"
	"time"
)

// DefaultSchedulerName is the spec.schedulerName the miniplane scheduler serves (pods with an
// empty schedulerName are defaulted to it by the API server, and are served too).
const DefaultSchedulerName = "default-scheduler"

// Scheduler configures `miniplane scheduler` (and its part of `miniplane up`).
type Scheduler struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig"`
	// SchedulerName is the spec.schedulerName served; default "default-scheduler".
	// Flag --scheduler-name.
	SchedulerName string `mapstructure:"scheduler-name"`

	// LeaderElection makes replicas elect one active instance through the Lease
	// kube-system/kube-scheduler.
	LeaderElection LeaderElection `mapstructure:"leader-election"`

	// HealthListen is the plain-HTTP address of /healthz, /readyz and /metrics; default
	// 127.0.0.1:10259 (kube-scheduler's port); "" disables it. Flag --health-listen.
	HealthListen string `mapstructure:"health-listen"`
	// KubeAPIQPS and KubeAPIBurst rate-limit the API client; defaults 5000 and 10000 so that
	// thousands of daemon pods bind within seconds (a binding and an event per pod). Flags
	// --kube-api-qps, --kube-api-burst.
	KubeAPIQPS   float32 `mapstructure:"kube-api-qps"`
	KubeAPIBurst int     `mapstructure:"kube-api-burst"`

	// Workers is the number of pods scheduled and bound concurrently; default 16.
	// Flag --workers.
	Workers int `mapstructure:"workers"`
	// PodInitialBackoff is the first retry delay of an unschedulable pod; it doubles up to
	// PodMaxBackoff. Defaults 1s and 10s, as kube-scheduler. Flags --pod-initial-backoff,
	// --pod-max-backoff.
	PodInitialBackoff time.Duration `mapstructure:"pod-initial-backoff"`
	PodMaxBackoff     time.Duration `mapstructure:"pod-max-backoff"`
	// UnschedulableFlushInterval retries every unschedulable pod at least this often even
	// without a node or pod change; default 5m (kube-scheduler's
	// podMaxInUnschedulablePodsDuration).
	UnschedulableFlushInterval time.Duration `mapstructure:"unschedulable-flush-interval"`
}

// DefaultScheduler returns the defaults.
func DefaultScheduler() Scheduler {
	return Scheduler{
		SchedulerName:              DefaultSchedulerName,
		LeaderElection:             DefaultLeaderElection("kube-scheduler"),
		HealthListen:               "127.0.0.1:10259",
		KubeAPIQPS:                 5000,
		KubeAPIBurst:               10000,
		Workers:                    16,
		PodInitialBackoff:          time.Second,
		PodMaxBackoff:              10 * time.Second,
		UnschedulableFlushInterval: 5 * time.Minute,
	}
}

// Validate reports the first problem with c.
func (c Scheduler) Validate() error {
	switch {
	case c.SchedulerName == "":
		return errors.New("--scheduler-name must not be empty")
	case c.KubeAPIQPS <= 0 || c.KubeAPIBurst < 1:
		return errors.New("--kube-api-qps and --kube-api-burst must be positive")
	case c.Workers < 1:
		return errors.New("--workers must be at least 1")
	case c.PodInitialBackoff <= 0 || c.PodMaxBackoff < c.PodInitialBackoff:
		return errors.New("--pod-initial-backoff must be positive and not above --pod-max-backoff")
	case c.UnschedulableFlushInterval <= 0:
		return errors.New("--unschedulable-flush-interval must be positive")
	}
	if err := c.LeaderElection.Validate(); err != nil {
		return err
	}
	return validateHealthListen(c.HealthListen)
}
