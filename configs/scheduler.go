package configs

import "time"

// DefaultSchedulerName is the spec.schedulerName the miniplane scheduler serves (pods with an
// empty schedulerName are defaulted to it by the API server, and are served too).
const DefaultSchedulerName = "default-scheduler"

// Scheduler configures `miniplane scheduler` (and its part of `miniplane up`).
type Scheduler struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig" flag:"kubeconfig" help:"kubeconfig of the scheduler's API credentials"`
	// SchedulerName is the spec.schedulerName served; default "default-scheduler".
	// Flag --scheduler-name.
	SchedulerName string `mapstructure:"scheduler-name" flag:"scheduler-name" help:"spec.schedulerName served"`

	// LeaderElection makes replicas elect one active instance through the Lease
	// kube-system/kube-scheduler.
	LeaderElection LeaderElection `mapstructure:"leader-election"`

	// HealthListen is the plain-HTTP address of /healthz, /readyz and /metrics; default
	// 127.0.0.1:10259 (kube-scheduler's port); "" disables it. Flag --health-listen.
	HealthListen string `mapstructure:"health-listen" flag:"health-listen" help:"serve /healthz, /readyz and /metrics on HOST:PORT (port 0 picks one; \"\" disables)"`
	// Profiling adds Go's runtime profiles under /debug/pprof/ to the health listener.
	// That listener has no authentication, so profiling is off by default (the Kubernetes
	// components serve it on by default, but behind an authenticated port). It needs
	// HealthListen. Flag --profiling.
	Profiling bool `mapstructure:"profiling" flag:"profiling" help:"also serve Go profiles under /debug/pprof/ on the health listener, which has no authentication: anyone who reaches it can read them (off by default)"`
	// KubeAPIQPS and KubeAPIBurst rate-limit the API client; defaults 5000 and 10000 so that
	// thousands of daemon pods bind within seconds (a binding and an event per pod). Flags
	// --kube-api-qps, --kube-api-burst.
	KubeAPIQPS   float32 `mapstructure:"kube-api-qps" flag:"kube-api-qps" help:"queries per second of the API client"`
	KubeAPIBurst int     `mapstructure:"kube-api-burst" flag:"kube-api-burst" help:"burst of the API client"`

	// Workers is the number of pods scheduled and bound concurrently; default 16.
	// Flag --workers.
	Workers int `mapstructure:"workers" flag:"workers" help:"pods scheduled and bound concurrently"`
	// PodInitialBackoff is the first retry delay of an unschedulable pod; it doubles up to
	// PodMaxBackoff. Defaults 1s and 10s, as kube-scheduler. Flags --pod-initial-backoff,
	// --pod-max-backoff.
	PodInitialBackoff time.Duration `mapstructure:"pod-initial-backoff" flag:"pod-initial-backoff" help:"first retry delay of an unschedulable pod"`
	PodMaxBackoff     time.Duration `mapstructure:"pod-max-backoff" flag:"pod-max-backoff" help:"longest retry delay of an unschedulable pod"`
	// UnschedulableFlushInterval retries every unschedulable pod at least this often even
	// without a node or pod change; default 5m (kube-scheduler's
	// podMaxInUnschedulablePodsDuration).
	UnschedulableFlushInterval time.Duration `mapstructure:"unschedulable-flush-interval" flag:"unschedulable-flush-interval" help:"retry unschedulable pods at least this often"`
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
		return invalid("scheduler-name", "must not be empty")
	case c.KubeAPIQPS <= 0:
		return invalid("kube-api-qps", "must be positive")
	case c.KubeAPIBurst < 1:
		return invalid("kube-api-burst", "must be at least 1")
	case c.Workers < 1:
		return invalid("workers", "must be at least 1")
	case c.PodInitialBackoff <= 0:
		return invalid("pod-initial-backoff", "must be positive")
	case c.PodMaxBackoff < c.PodInitialBackoff:
		return invalid("pod-max-backoff", "must not be below %s", "pod-initial-backoff")
	case c.UnschedulableFlushInterval <= 0:
		return invalid("unschedulable-flush-interval", "must be positive")
	}
	if err := c.LeaderElection.Validate(); err != nil {
		return within("leader-election", err)
	}
	if err := validateHealthListen(c.HealthListen); err != nil {
		return err
	}
	return validateProfiling(c.Profiling, c.HealthListen)
}

// ValidateStandalone is Validate for `miniplane scheduler`, which needs a kubeconfig to
// reach the API server.
func (c Scheduler) ValidateStandalone() error {
	if c.Kubeconfig == "" {
		return invalid("kubeconfig", "is required")
	}
	return c.Validate()
}
