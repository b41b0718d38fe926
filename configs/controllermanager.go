package configs

import (
	"net"
	"slices"
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
	ControllerNodeIPAM         = "nodeipam"
	ControllerRootCAPublisher  = "root-ca-cert-publisher"
	ControllerPodGC            = "podgc"
)

// KnownControllers lists every controller name, in start order.
var KnownControllers = []string{ControllerDaemonSet, ControllerGarbageCollector, ControllerNodeLifecycle, ControllerNodeIPAM,
	ControllerRootCAPublisher, ControllerPodGC}

// ControllerManager configures `miniplane controller-manager` (and its part of `miniplane up`).
type ControllerManager struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig" flag:"kubeconfig" help:"kubeconfig of the controller-manager's API credentials"`
	// Controllers selects the controllers to run, as kube-controller-manager's flag: names,
	// "*" for all, "-name" to drop one; default all of daemonset, garbagecollector,
	// nodelifecycle, nodeipam (which assigns nothing unless allocate-node-cidrs is on),
	// root-ca-cert-publisher and podgc. Flag --controllers.
	Controllers []string `mapstructure:"controllers" flag:"controllers" help:"controllers to run: names, \"*\" for all, \"-name\" to drop one"`
	// FeatureGates switch features on or off, e.g. ScheduleDaemonSetPods: false; default
	// ScheduleDaemonSetPods on. Flag --feature-gates=ScheduleDaemonSetPods=false.
	FeatureGates FeatureGates `mapstructure:"feature-gates" flag:"feature-gates" help:"feature gates, e.g. ScheduleDaemonSetPods=false"`

	// UseServiceAccountCredentials runs each controller as its own ServiceAccount in
	// kube-system (daemon-set-controller, generic-garbage-collector, node-controller), with
	// tokens the controller-manager requests for them, as kubeadm runs
	// kube-controller-manager: each has only its system:controller:<name> role. Off, every
	// controller acts with the controller-manager's own credentials, which then need those
	// roles bound to them. Default true. Flag --use-service-account-credentials.
	UseServiceAccountCredentials bool `mapstructure:"use-service-account-credentials" flag:"use-service-account-credentials" help:"run each controller as its own ServiceAccount in kube-system (its own least-privilege role)"`

	// RootCAFile is the CA bundle root-ca-cert-publisher puts into every namespace's
	// kube-root-ca.crt ConfigMap; default "", the CA the controller-manager's kubeconfig
	// trusts the API server with (as kube-controller-manager without --root-ca-file). Flag
	// --root-ca-file.
	RootCAFile string `mapstructure:"root-ca-file" flag:"root-ca-file" help:"CA bundle published as kube-root-ca.crt in every namespace (default: the kubeconfig's CA)"`

	// LeaderElection makes replicas elect one active instance through a Lease.
	LeaderElection LeaderElection `mapstructure:"leader-election"`

	// HealthListen is the plain-HTTP address of /healthz, /readyz and /metrics; default
	// 127.0.0.1:10257 (kube-controller-manager's port); "" disables it; port 0 picks a free
	// one. Flag --health-listen.
	HealthListen string `mapstructure:"health-listen" flag:"health-listen" help:"serve /healthz, /readyz and /metrics on HOST:PORT (port 0 picks one; \"\" disables)"`
	// Profiling adds Go's runtime profiles under /debug/pprof/ to the health listener.
	// That listener has no authentication, so profiling is off by default (the Kubernetes
	// components serve it on by default, but behind an authenticated port). It needs
	// HealthListen. Flag --profiling.
	Profiling bool `mapstructure:"profiling" flag:"profiling" help:"also serve Go profiles under /debug/pprof/ on the health listener, which has no authentication: anyone who reaches it can read them (off by default)"`
	// KubeAPIQPS and KubeAPIBurst rate-limit each controller's API client (each controller has
	// its own client and user agent); defaults 5000 and 10000. kube-controller-manager's 20/30
	// would make a 1,000-node rollout take 50 s; a rollout needs two requests per node, and
	// the DaemonSet controller's own limits (burst replicas, slow start, failed-pod backoff)
	// are what keep it from hammering the server. Flags --kube-api-qps, --kube-api-burst.
	KubeAPIQPS   float32 `mapstructure:"kube-api-qps" flag:"kube-api-qps" help:"queries per second of each controller's API client"`
	KubeAPIBurst int     `mapstructure:"kube-api-burst" flag:"kube-api-burst" help:"burst of each controller's API client"`

	// DaemonSet configures the DaemonSet controller.
	DaemonSet DaemonSetController `mapstructure:"daemonset"`
	// GarbageCollector configures the garbage collector.
	GarbageCollector GarbageCollectorController `mapstructure:"garbagecollector"`
	// NodeLifecycle configures the node lifecycle controller.
	NodeLifecycle NodeLifecycleController `mapstructure:"nodelifecycle"`
	// NodeIPAM configures the node IPAM controller (pod CIDRs of the Nodes).
	NodeIPAM NodeIPAMController `mapstructure:"nodeipam"`
	// PodGC configures the pod garbage collector.
	PodGC PodGCController `mapstructure:"podgc"`
}

// LeaderElection configures client-go leader election on a coordination.k8s.io Lease.
// The durations are kube-controller-manager's defaults.
type LeaderElection struct {
	// LeaderElect turns election on; default false (a single instance acts at once).
	// Flag --leader-elect.
	LeaderElect bool `mapstructure:"leader-elect" flag:"leader-elect" help:"elect a leader through a Lease before acting, so that several replicas can run"`
	// LeaseDuration is how long followers wait after the last observed renewal before they
	// take over; default 15s. Flag --leader-elect-lease-duration.
	LeaseDuration time.Duration `mapstructure:"lease-duration" flag:"leader-elect-lease-duration" help:"how long followers wait after the last renewal before taking over"`
	// RenewDeadline is how long the leader keeps retrying a renewal before it gives up and
	// stops acting; default 10s. Flag --leader-elect-renew-deadline.
	RenewDeadline time.Duration `mapstructure:"renew-deadline" flag:"leader-elect-renew-deadline" help:"how long the leader retries renewing before it stops acting"`
	// RetryPeriod is the interval between tries to acquire or renew; default 2s.
	// Flag --leader-elect-retry-period.
	RetryPeriod time.Duration `mapstructure:"retry-period" flag:"leader-elect-retry-period" help:"interval between acquire and renew attempts"`
	// ResourceNamespace and ResourceName name the Lease; defaults kube-system and
	// kube-controller-manager (kube-scheduler for the scheduler).
	// Flags --leader-elect-resource-namespace, --leader-elect-resource-name.
	ResourceNamespace string `mapstructure:"resource-namespace" flag:"leader-elect-resource-namespace" help:"namespace of the Lease"`
	ResourceName      string `mapstructure:"resource-name" flag:"leader-elect-resource-name" help:"name of the Lease"`
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
	case c.LeaseDuration <= 0:
		return invalid("lease-duration", "must be positive")
	case c.RenewDeadline <= 0:
		return invalid("renew-deadline", "must be positive")
	case c.RetryPeriod <= 0:
		return invalid("retry-period", "must be positive")
	case c.LeaseDuration <= c.RenewDeadline:
		return invalid("lease-duration", "must be greater than %s", "renew-deadline")
	case float64(c.RenewDeadline) <= 1.2*float64(c.RetryPeriod):
		// client-go refuses this combination: a renewal needs room for at least one retry.
		return invalid("renew-deadline", "must be greater than 1.2 × %s", "retry-period")
	case c.ResourceNamespace == "":
		return invalid("resource-namespace", "must not be empty")
	case c.ResourceName == "":
		return invalid("resource-name", "must not be empty")
	}
	return nil
}

// GarbageCollectorController configures the garbage collector (a section of ControllerManager).
type GarbageCollectorController struct {
	// Workers is the number of concurrent dependents checks (--concurrent-gc-syncs); default 20,
	// as kube-controller-manager.
	Workers int `mapstructure:"workers" flag:"concurrent-gc-syncs" help:"garbage collector workers"`
	// DiscoveryPeriod is how often the collector reads discovery to start watching resources
	// that appeared (custom resources of a new CRD) and stop watching those that went; default
	// 30s, kube-controller-manager's fixed period. A change to a CRD or an APIService also
	// makes it look at once. Flag --gc-discovery-period.
	DiscoveryPeriod time.Duration `mapstructure:"discovery-period" flag:"gc-discovery-period" help:"how often the garbage collector looks for resources that appeared or went"`
	// IgnoredResources are resources the collector neither watches nor collects, as
	// "resource.group" ("events" for the core group); default events and
	// events.events.k8s.io, as kube-controller-manager: events are many, short-lived and
	// owned by nothing.
	IgnoredResources []string `mapstructure:"ignored-resources"`
}

// NodeLifecycleController configures node health monitoring and taint-based eviction
// (a section of ControllerManager). Defaults are kube-controller-manager's.
type NodeLifecycleController struct {
	// MonitorPeriod is how often every node's health is checked; default 5s.
	// Flag --node-monitor-period.
	MonitorPeriod time.Duration `mapstructure:"node-monitor-period" flag:"node-monitor-period" help:"how often node health is checked"`
	// GracePeriod is how long a node may go without renewing its Lease or Ready heartbeat
	// before it is marked Ready=Unknown and tainted unreachable; default 40s.
	// Flag --node-monitor-grace-period.
	GracePeriod time.Duration `mapstructure:"node-monitor-grace-period" flag:"node-monitor-grace-period" help:"how long a node may stop heartbeating before it is marked Unknown and tainted unreachable"`
	// StartupGracePeriod replaces GracePeriod for a node that never posted Ready; default 1m.
	// Flag --node-startup-grace-period.
	StartupGracePeriod time.Duration `mapstructure:"node-startup-grace-period" flag:"node-startup-grace-period" help:"grace period of a node that never posted Ready"`
	// Workers is the number of concurrent node and pod-eviction syncs; default 4.
	Workers int `mapstructure:"workers"`
}

// PodGCController configures the pod garbage collector (a section of ControllerManager).
type PodGCController struct {
	// TerminatedPodGCThreshold is how many terminated (Succeeded or Failed) pods may exist
	// before the oldest are deleted; 0 keeps them all. Default 12500, as
	// kube-controller-manager. Flag --terminated-pod-gc-threshold.
	TerminatedPodGCThreshold int `mapstructure:"terminated-pod-gc-threshold" flag:"terminated-pod-gc-threshold" help:"terminated pods kept before the oldest are deleted (0: keep all)"`
}

// DefaultControllerManager returns the defaults.
func DefaultControllerManager() ControllerManager {
	return ControllerManager{
		Controllers:      append([]string(nil), KnownControllers...),
		FeatureGates:     FeatureGates{FeatureScheduleDaemonSetPods: true},
		LeaderElection:   DefaultLeaderElection("kube-controller-manager"),
		HealthListen:     "127.0.0.1:10257",
		KubeAPIQPS:       5000,
		KubeAPIBurst:     10000,
		DaemonSet:        DefaultDaemonSetController(),
		GarbageCollector: DefaultGarbageCollectorController(),
		NodeLifecycle:    DefaultNodeLifecycleController(),
		NodeIPAM:         DefaultNodeIPAMController(),
		PodGC:            PodGCController{TerminatedPodGCThreshold: 12500},

		// As kubeadm runs kube-controller-manager: the bootstrap policy binds each
		// controller's role to its ServiceAccount.
		UseServiceAccountCredentials: true,
	}
}

// FeatureGates switch features on or off by name.
type FeatureGates map[string]bool

// knownFeatureGates are the gates miniplane understands, in their canonical spelling.
var knownFeatureGates = []string{FeatureScheduleDaemonSetPods}

// CanonicalKey spells a known gate the canonical way, whatever case it was written in, so
// that a gate set in a file, the environment and a flag is one entry (Binding merges map
// keys through it). Unknown gates are kept as written, for Validate to report.
func (FeatureGates) CanonicalKey(name string) string {
	for _, g := range knownFeatureGates {
		if strings.EqualFold(g, name) {
			return g
		}
	}
	return name
}

// FeatureEnabled reports whether the named gate is on (unknown gates are off).
func (c ControllerManager) FeatureEnabled(name string) bool { return c.FeatureGates[name] }

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
		if !slices.Contains(knownFeatureGates, name) {
			return invalidf("feature-gates", "unknown feature gate %q (known: %s)", name, strings.Join(knownFeatureGates, ", "))
		}
	}
	for _, s := range c.Controllers {
		name := strings.TrimPrefix(strings.TrimSpace(s), "-")
		if name == "*" {
			continue
		}
		if !knownController(name) {
			return invalidf("controllers", "unknown controller %q (known: %s)", s, strings.Join(KnownControllers, ", "))
		}
	}
	if err := c.LeaderElection.Validate(); err != nil {
		return within("leader-election", err)
	}
	if err := validateHealthListen(c.HealthListen); err != nil {
		return err
	}
	if err := validateProfiling(c.Profiling, c.HealthListen); err != nil {
		return err
	}
	if c.KubeAPIQPS <= 0 {
		return invalid("kube-api-qps", "must be positive")
	}
	if c.KubeAPIBurst < 1 {
		return invalid("kube-api-burst", "must be at least 1")
	}
	if err := c.DaemonSet.Validate(); err != nil {
		return within("daemonset", err)
	}
	if err := c.GarbageCollector.Validate(); err != nil {
		return within("garbagecollector", err)
	}
	if err := c.NodeLifecycle.Validate(); err != nil {
		return within("nodelifecycle", err)
	}
	if err := c.NodeIPAM.Validate(); err != nil {
		return within("nodeipam", err)
	}
	if c.PodGC.TerminatedPodGCThreshold < 0 {
		return within("podgc", invalid("terminated-pod-gc-threshold", "must not be negative (0 keeps every terminated pod)"))
	}
	return nil
}

// DefaultGarbageCollectorController returns kube-controller-manager's defaults.
func DefaultGarbageCollectorController() GarbageCollectorController {
	return GarbageCollectorController{
		Workers:          20,
		DiscoveryPeriod:  30 * time.Second,
		IgnoredResources: []string{"events", "events.events.k8s.io"},
	}
}

// Validate reports the first problem with c.
func (c GarbageCollectorController) Validate() error {
	if c.Workers < 1 {
		return invalid("workers", "must be at least 1")
	}
	if c.DiscoveryPeriod < time.Second {
		// Each look is a round of discovery requests; more often than every second would
		// load the API server for no gain (CRD changes trigger a look anyway).
		return invalid("discovery-period", "must be at least 1s")
	}
	for _, r := range c.IgnoredResources {
		if r == "" || strings.HasPrefix(r, ".") || strings.ContainsAny(r, "/ ") {
			return invalidf("ignored-resources", "%q is not a resource.group", r)
		}
	}
	return nil
}

// DefaultNodeLifecycleController returns kube-controller-manager's defaults.
func DefaultNodeLifecycleController() NodeLifecycleController {
	return NodeLifecycleController{
		MonitorPeriod:      5 * time.Second,
		GracePeriod:        40 * time.Second,
		StartupGracePeriod: time.Minute,
		Workers:            4,
	}
}

// Validate reports the first problem with c.
func (c NodeLifecycleController) Validate() error {
	switch {
	case c.MonitorPeriod <= 0:
		return invalid("node-monitor-period", "must be positive")
	case c.GracePeriod <= c.MonitorPeriod:
		return invalid("node-monitor-grace-period", "must be greater than %s", "node-monitor-period")
	case c.StartupGracePeriod <= 0:
		return invalid("node-startup-grace-period", "must be positive")
	case c.Workers < 1:
		return invalid("workers", "must be at least 1")
	}
	return nil
}

// ValidateStandalone is Validate for `miniplane controller-manager`, which needs a
// kubeconfig to reach the API server.
func (c ControllerManager) ValidateStandalone() error {
	if c.Kubeconfig == "" {
		return invalid("kubeconfig", "is required")
	}
	return c.Validate()
}

func knownController(name string) bool {
	for _, k := range KnownControllers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// validateProfiling refuses profiling without the health listener that would serve it, so
// that --profiling alone does not look like it did something.
func validateProfiling(profiling bool, healthListen string) error {
	if profiling && healthListen == "" {
		return invalid("profiling", "needs %s: the profiles are served on the health listener", "health-listen")
	}
	return nil
}

// validateHealthListen accepts "" (off) or host:port.
func validateHealthListen(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return invalidf("health-listen", "%v", err)
	}
	return nil
}
