package configs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestControllerManagerLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(file, []byte(`
controllers: ["*", "-nodelifecycle"]
leader-election:
  lease-duration: 20s
nodelifecycle:
  node-monitor-grace-period: 1m
garbagecollector:
  workers: 3
  ignored-resources: [events, leases.coordination.k8s.io]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MINIPLANE_KUBE_API_QPS", "50")
	cfg := DefaultControllerManager()
	flags := pflag.NewFlagSet("cm", pflag.ContinueOnError)
	b := Bind(flags, &cfg)
	if err := flags.Parse([]string{"--config", file, "--leader-elect", "--node-monitor-grace-period=30s", "--feature-gates=ScheduleDaemonSetPods=false", "--gc-discovery-period=10s"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Load(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"leader-elect from flag", cfg.LeaderElection.LeaderElect},
		{"lease duration from file", cfg.LeaderElection.LeaseDuration == 20*time.Second},
		{"renew deadline default", cfg.LeaderElection.RenewDeadline == 10*time.Second},
		{"flag beats file", cfg.NodeLifecycle.GracePeriod == 30*time.Second},
		{"env qps", cfg.KubeAPIQPS == 50},
		{"gc workers from file", cfg.GarbageCollector.Workers == 3},
		{"gc discovery period from flag", cfg.GarbageCollector.DiscoveryPeriod == 10*time.Second},
		{"gc ignored resources from file", len(cfg.GarbageCollector.IgnoredResources) == 2 && cfg.GarbageCollector.IgnoredResources[1] == "leases.coordination.k8s.io"},
		{"feature gate off", !cfg.FeatureEnabled(FeatureScheduleDaemonSetPods)},
		{"daemonset selected by *", cfg.ControllerEnabled(ControllerDaemonSet)},
		{"nodelifecycle dropped", !cfg.ControllerEnabled(ControllerNodeLifecycle)},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: got %+v", c.name, cfg)
		}
	}
}

func TestControllerManagerValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ControllerManager)
		ok     bool
	}{
		{name: "defaults", mutate: func(*ControllerManager) {}, ok: true},
		{name: "unknown controller", mutate: func(c *ControllerManager) { c.Controllers = []string{"replicaset"} }},
		{name: "lease shorter than renew deadline", mutate: func(c *ControllerManager) { c.LeaderElection.LeaseDuration = 5 * time.Second }},
		{name: "grace not above monitor period", mutate: func(c *ControllerManager) { c.NodeLifecycle.GracePeriod = c.NodeLifecycle.MonitorPeriod }},
		{name: "bad health address", mutate: func(c *ControllerManager) { c.HealthListen = "10257" }},
		{name: "health disabled", mutate: func(c *ControllerManager) { c.HealthListen = "" }, ok: true},
		{name: "gate in another case", mutate: func(c *ControllerManager) { c.FeatureGates = FeatureGates{"scheduledaemonsetpods": false} }},
		{name: "unknown gate", mutate: func(c *ControllerManager) { c.FeatureGates = FeatureGates{"Nope": true} }},
		{name: "gc discovery period below a second", mutate: func(c *ControllerManager) { c.GarbageCollector.DiscoveryPeriod = 100 * time.Millisecond }},
		{name: "gc ignored resource with a version", mutate: func(c *ControllerManager) { c.GarbageCollector.IgnoredResources = []string{"apps/v1"} }},
		{name: "gc ignored resource empty", mutate: func(c *ControllerManager) { c.GarbageCollector.IgnoredResources = []string{""} }},
		{name: "gc ignores nothing", mutate: func(c *ControllerManager) { c.GarbageCollector.IgnoredResources = nil }, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultControllerManager()
			tt.mutate(&c)
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestControllerEnabled(t *testing.T) {
	tests := []struct {
		list []string
		name string
		want bool
	}{
		{[]string{"daemonset"}, "daemonset", true},
		{[]string{"daemonset"}, "nodelifecycle", false},
		{[]string{"*"}, "nodelifecycle", true},
		{[]string{"*", "-garbagecollector"}, "garbagecollector", false},
		{[]string{"garbagecollector", "-garbagecollector"}, "garbagecollector", false},
		{nil, "daemonset", false},
	}
	for _, tt := range tests {
		c := ControllerManager{Controllers: tt.list}
		if got := c.ControllerEnabled(tt.name); got != tt.want {
			t.Errorf("%v: ControllerEnabled(%s) = %v, want %v", tt.list, tt.name, got, tt.want)
		}
	}
}

func TestSchedulerValidate(t *testing.T) {
	if err := DefaultScheduler().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c := DefaultScheduler()
	c.PodMaxBackoff = c.PodInitialBackoff / 2
	if c.Validate() == nil {
		t.Fatal("max backoff below initial accepted")
	}
	if DefaultScheduler().LeaderElection.ResourceName != "kube-scheduler" {
		t.Fatal("scheduler lease name")
	}
}
