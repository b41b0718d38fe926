package configs

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// FeatureScheduleDaemonSetPods selects the DaemonSet placement mode: on (the default, current
// Kubernetes) pins daemon pods with node affinity and lets the scheduler bind them; off (the
// v1.12 era's LEGACY-BIND) makes the controller run the predicates and set spec.nodeName.
const FeatureScheduleDaemonSetPods = "ScheduleDaemonSetPods"

// Names of the controllers `miniplane controller-manager` can run (flag --controllers).
const (
	ControllerDaemonSet        = "daemonset"
	ControllerGarbageCollector = "garbagecollector"
	ControllerNodeLifecycle    = "nodelifecycle"
)

// KnownControllers lists every controller name, in start order.
var KnownControllers = []string{ControllerDaemonSet, ControllerGarbageCollector, ControllerNodeLifecycle}

// ControllerManager configures `miniplane controller-manager` (and its part of `miniplane up`).
type ControllerManager struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig"`
	// Controllers selects the controllers to run, as kube-controller-manager's flag: names,
	// "*" for all, "-name" to drop one; default all of daemonset, garbagecollector and
	// nodelifecycle. Flag --controllers.
	Controllers []string `mapstructure:"controllers"`
	// FeatureGates switch features on or off, e.g. ScheduleDaemonSetPods: false.
	// Flag --feature-gates=ScheduleDaemonSetPods=false.
	FeatureGates map[string]bool `mapstructure:"feature-gates"`

	// LeaderElection makes replicas elect one active instance through a Lease.
	LeaderElection LeaderElection `mapstructure:"leader-election"`

	// HealthListen is the plain-HTTP address of /healthz, /readyz and /metrics; default
	// 127.0.0.1:10257 (kube-controller-manager's port); "" disables it; port 0 picks a free
	// one. Flag --health-listen.
	HealthListen string `mapstructure:"health-listen"`
	// KubeAPIQPS and KubeAPIBurst rate-limit each controller's API client (each controller has
	// its own client and user agent); defaults 5000 and 10000. kube-controller-manager's 20/30
	// would make a 1,000-node rollout take 50 s; a rollout needs two requests per node, and
	// the DaemonSet controller's own limits (burst replicas, slow start, failed-pod backoff)
	// are what keep it from hammering the server. Flags --kube-api-qps, --kube-api-burst.
	KubeAPIQPS   float32 `mapstructure:"kube-api-qps"`
	KubeAPIBurst int     `mapstructure:"kube-api-burst"`

	// DaemonSet configures the DaemonSet controller.
	DaemonSet DaemonSetController `mapstructure:"daemonset"`
	// GarbageCollector configures the garbage collector.
	GarbageCollector GarbageCollectorController `mapstructure:"garbagecollector"`
	// NodeLifecycle configures the node lifecycle controller.
	NodeLifecycle NodeLifecycleController `mapstructure:"nodelifecycle"`
}

// LeaderElection configures client-go leader election on a coordination.k8s.io Lease.
// The durations are kube-controller-manager's defaults.
type LeaderElection struct {
	// LeaderElect turns election on; default false (a single instance acts at once).
	// Flag --leader-elect.
	LeaderElect bool `mapstructure:"leader-elect"`
	// LeaseDuration is how long followers wait after the last observed renewal before they
	// take over; default 15s. Flag --leader-elect-lease-duration.
	LeaseDuration time.Duration `mapstructure:"lease-duration"`
	// RenewDeadline is how long the leader keeps retrying a renewal before it gives up and
	// stops acting; default 10s. Flag --leader-elect-renew-deadline.
	RenewDeadline time.Duration `mapstructure:"renew-deadline"`
	// RetryPeriod is the interval between tries to acquire or renew; default 2s.
	// Flag --leader-elect-retry-period.
	RetryPeriod time.Duration `mapstructure:"retry-period"`
	// ResourceNamespace and ResourceName name the Lease; defaults kube-system and
	// kube-controller-manager (kube-scheduler for the scheduler).
	// Flags --leader-elect-resource-namespace, --leader-elect-resource-name.
	ResourceNamespace string `mapstructure:"resource-namespace"`
	ResourceName      string `mapstructure:"resource-name"`
}

// LeaderElectionFlagKeys maps the leader-election flags (kube-controller-manager's names)
// to their configuration keys, for Load.
var LeaderElectionFlagKeys = map[string]string{
	"leader-elect":                    "leader-election::leader-elect",
	"leader-elect-lease-duration":     "leader-election::lease-duration",
	"leader-elect-renew-deadline":     "leader-election::renew-deadline",
	"leader-elect-retry-period":       "leader-election::retry-period",
	"leader-elect-resource-namespace": "leader-election::resource-namespace",
	"leader-elect-resource-name":      "leader-election::resource-name",
}

// DefaultLeaderElection returns kube-controller-manager's election defaults for the Lease
// kube-system/name.
func DefaultLeaderElection(name string) LeaderElection {
	return LeaderElection{
		LeaseDuration:     15 * time.Second,
		RenewDeadline:     10 * time.Second,
		RetryPeriod:       2 * time.Second,
		ResourceNamespace: "kube-system",
		ResourceName:      name,
	}
}

// Validate reports the first problem with c. Durations are checked even when election is off,
// so a typo shows up before someone turns it on.
func (c LeaderElection) Validate() error {
	switch {
	case c.LeaseDuration <= 0 || c.RenewDeadline <= 0 || c.RetryPeriod <= 0:
		return errors.New("leader-election durations must be positive")
	case c.LeaseDuration <= c.RenewDeadline:
		return errors.New("--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline")
	case float64(c.RenewDeadline) <= 1.2*float64(c.RetryPeriod):
		// client-go refuses this combination: a renewal needs room for at least one retry.
		return errors.New("--leader-elect-renew-deadline must be greater than 1.2 × --leader-elect-retry-period")
	case c.ResourceNamespace == "" || c.ResourceName == "":
		return errors.New("--leader-elect-resource-namespace and --leader-elect-resource-name must not be empty")
	}
	return nil
}

// GarbageCollectorController configures the garbage collector (a section of ControllerManager).
type GarbageCollectorController struct {
	// Workers is the number of concurrent dependents checks (--concurrent-gc-syncs); default 20,
	// as kube-controller-manager.
	Workers int `mapstructure:"workers"`
}

// NodeLifecycleController configures node health monitoring and taint-based eviction
// (a section of ControllerManager). Defaults are kube-controller-manager's.
type NodeLifecycleController struct {
	// MonitorPeriod is how often every node's health is checked; default 5s.
	// Flag --node-monitor-period.
	MonitorPeriod time.Duration `mapstructure:"node-monitor-period"`
	// GracePeriod is how long a node may go without renewing its Lease or Ready heartbeat
	// before it is marked Ready=Unknown and tainted unreachable; default 40s.
	// Flag --node-monitor-grace-period.
	GracePeriod time.Duration `mapstructure:"node-monitor-grace-period"`
	// StartupGracePeriod replaces GracePeriod for a node that never posted Ready; default 1m.
	// Flag --node-startup-grace-period.
	StartupGracePeriod time.Duration `mapstructure:"node-startup-grace-period"`
	// Workers is the number of concurrent node and pod-eviction syncs; default 4.
	Workers int `mapstructure:"workers"`
}

// NodeLifecycleFlagKeys maps node lifecycle flags to their configuration keys, for Load.
var NodeLifecycleFlagKeys = map[string]string{
	"node-monitor-period":       "nodelifecycle::node-monitor-period",
	"node-monitor-grace-period": "nodelifecycle::node-monitor-grace-period",
	"node-startup-grace-period": "nodelifecycle::node-startup-grace-period",
}

// DefaultControllerManager returns the defaults.
func DefaultControllerManager() ControllerManager {
	return ControllerManager{
		Controllers:      append([]string(nil), KnownControllers...),
		FeatureGates:     map[string]bool{FeatureScheduleDaemonSetPods: true},
		LeaderElection:   DefaultLeaderElection("kube-controller-manager"),
		HealthListen:     "127.0.0.1:10257",
		KubeAPIQPS:       5000,
		KubeAPIBurst:     10000,
		DaemonSet:        DefaultDaemonSetController(),
		GarbageCollector: GarbageCollectorController{Workers: 20},
		NodeLifecycle: NodeLifecycleController{
			MonitorPeriod:      5 * time.Second,
			GracePeriod:        40 * time.Second,
			StartupGracePeriod: time.Minute,
			Workers:            4,
		},
	}
}

// FeatureEnabled reports whether the named gate is on (unknown gates are off). Names match
// case-insensitively because viper lower-cases map keys read from files and flags.
func (c ControllerManager) FeatureEnabled(name string) bool {
	for k, v := range c.FeatureGates {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return false
}

// ControllerEnabled reports whether the named controller is selected by Controllers:
// an explicit "-name" wins, then "name", then "*".
func (c ControllerManager) ControllerEnabled(name string) bool {
	star := false
	for _, s := range c.Controllers {
		s = strings.TrimSpace(s)
		switch {
		case strings.EqualFold(s, "-"+name):
			return false
		case s == "*":
			star = true
		}
	}
	for _, s := range c.Controllers {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return true
		}
	}
	return star
}

// Validate reports the first problem with c.
func (c ControllerManager) Validate() error {
	for name := range c.FeatureGates {
		if !strings.EqualFold(name, FeatureScheduleDaemonSetPods) {
			return fmt.Errorf("--feature-gates: unknown feature gate %q", name)
		}
	}
	for _, s := range c.Controllers {
		name := strings.TrimPrefix(strings.TrimSpace(s), "-")
		if name == "*" {
			continue
		}
		if !knownController(name) {
			return fmt.Errorf("--controllers: unknown controller %q (known: %s)", s, strings.Join(KnownControllers, ", "))
		}
	}
	if err := c.LeaderElection.Validate(); err != nil {
		return err
	}
	if err := validateHealthListen(c.HealthListen); err != nil {
		return err
	}
	if c.KubeAPIQPS <= 0 || c.KubeAPIBurst < 1 {
		return errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	if err := c.DaemonSet.Validate(); err != nil {
		return err
	}
	if c.GarbageCollector.Workers < 1 {
		return errors.New("garbagecollector::workers must be at least 1")
	}
	nl := c.NodeLifecycle
	switch {
	case nl.MonitorPeriod <= 0:
		return errors.New("--node-monitor-period must be positive")
	case nl.GracePeriod <= nl.MonitorPeriod:
		return errors.New("--node-monitor-grace-period must be greater than --node-monitor-period")
	case nl.StartupGracePeriod <= 0:
		return errors.New("--node-startup-grace-period must be positive")
	case nl.Workers < 1:
		return errors.New("nodelifecycle::workers must be at least 1")
	}
	return nil
}

func knownController(name string) bool {
	for _, k := range KnownControllers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// validateHealthListen accepts "" (off) or host:port.
func validateHealthListen(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--health-listen: %w", err)
	}
	return nil
}
