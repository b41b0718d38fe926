package kubeletstub

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/miniplane/miniplane/configs"
)

// TestExampleConfiguration loads configs/kubeletstub.yaml the way the command does, with a
// flag on top, and builds a fleet from it.
func TestExampleConfiguration(t *testing.T) {
	cfg := configs.DefaultKubeletStub()
	flags := pflag.NewFlagSet("kubeletstub", pflag.ContinueOnError)
	b := configs.Bind(flags, &cfg)
	if err := flags.Parse([]string{"--config=../configs/kubeletstub.yaml", "--node-prefix=stub-node"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got := cfg.NodeNames(); strings.Join(got, ",") != "stub-node-0,stub-node-1,stub-node-2,stub-node-3" {
		t.Errorf("NodeNames = %v", got)
	}
	if cfg.LeaseRenewInterval != 10*time.Second || cfg.Template.ReadyDelay != 2*time.Second {
		t.Errorf("renew %s, ready delay %s", cfg.LeaseRenewInterval, cfg.Template.ReadyDelay)
	}
	n1 := cfg.NodeTemplate("stub-node-1")
	if n1.Labels["topology.kubernetes.io/zone"] != "zone-b" || n1.Labels["node-role.kubernetes.io/worker"] != "" ||
		len(n1.Taints) != 1 || n1.Taints[0].Effect != "NoExecute" {
		t.Errorf("stub-node-1 = %+v", n1)
	}
	n2 := cfg.NodeTemplate("stub-node-2").Faults
	if n2.RejectPods != "Rejected" || n2.RejectRate != 0.2 || n2.FailAfter != 30*time.Second || n2.FailRate != 0.1 {
		t.Errorf("stub-node-2 faults = %+v", n2)
	}
	if n0 := cfg.NodeTemplate("stub-node-0").Faults; n0.RejectPods != "" || n0.RejectRate != 1 {
		t.Errorf("stub-node-0 faults = %+v, want none", n0)
	}

	f, err := New(cfg, Options{Client: fake.NewClientset(), Logger: quietLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n3 := f.byName["stub-node-3"]
	if got := n3.allocatable[corev1.ResourceCPU]; got.String() != "1" {
		t.Errorf("stub-node-3 allocatable cpu = %s, want 1", got.String())
	}
	if got := f.byName["stub-node-0"].allocatable[corev1.ResourceCPU]; got.String() != "3900m" {
		t.Errorf("stub-node-0 allocatable cpu = %s, want 3900m", got.String())
	}
	if got := f.byName["stub-node-0"].allocatable[corev1.ResourcePods]; got.Value() != 110 {
		t.Errorf("stub-node-0 allocatable pods = %s, want the capacity's 110", got.String())
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*configs.KubeletStub)
		want   string
	}{
		{"defaults", func(*configs.KubeletStub) {}, ""},
		{"single node", func(c *configs.KubeletStub) { c.NodeName = "worker-1" }, ""},
		{"node name with a fleet", func(c *configs.KubeletStub) { c.NodeName = "w"; c.Nodes = 3 }, "node-name"},
		{"no nodes", func(c *configs.KubeletStub) { c.Nodes = 0 }, "nodes"},
		{"bad node name", func(c *configs.KubeletStub) { c.NodePrefix = "Bad_Prefix" }, "node name"},
		{"instance", func(c *configs.KubeletStub) { c.NodeInstance = "a" }, ""},
		{"instance placeholders", func(c *configs.KubeletStub) { c.NodeInstance = "{replica}-{hostname}" }, ""},
		{"bad instance", func(c *configs.KubeletStub) { c.NodeInstance = "Bad_Instance" }, "node name"},
		{"names beyond a label's 63 characters", func(c *configs.KubeletStub) { c.NodeInstance = strings.Repeat("x", 60) }, "node-instance"},
		{"no pod CIDR (the control plane assigns one)", func(c *configs.KubeletStub) { c.PodCIDR = "" }, ""},
		{"renew not below duration", func(c *configs.KubeletStub) { c.LeaseRenewInterval = 40 * time.Second }, "lease-renew-interval"},
		{"fractional lease duration", func(c *configs.KubeletStub) { c.LeaseDuration = 1500 * time.Millisecond }, "lease-duration"},
		{"report shorter than heartbeat", func(c *configs.KubeletStub) { c.ReportInterval = time.Second }, "report-interval"},
		{"too many nodes for the pod CIDR", func(c *configs.KubeletStub) { c.PodCIDR = "10.0.0.0/22"; c.Nodes = 5 }, "pod-cidr"},
		{"bad taint effect", func(c *configs.KubeletStub) {
			c.Template.Taints = []configs.StubTaint{{Key: "k", Effect: "Sometimes"}}
		}, "effect"},
		{"bad quantity", func(c *configs.KubeletStub) { c.Template.Capacity.CPU = "lots" }, "capacity: cpu"},
		{"more pods than IPs", func(c *configs.KubeletStub) { c.Template.Capacity.Pods = 300 }, "pod IPs"},
		{"rate above one", func(c *configs.KubeletStub) { c.Template.Faults.RejectRate = 1.5 }, "reject-rate"},
		{"unknown condition", func(c *configs.KubeletStub) {
			c.Template.Faults.Conditions = map[string]string{"outofdisk": "True"}
		}, "conditions"},
		{"override without a name", func(c *configs.KubeletStub) {
			c.Overrides = []configs.StubNodeOverride{{}}
		}, "name is required"},
		{"bad override", func(c *configs.KubeletStub) {
			c.Overrides = []configs.StubNodeOverride{{Name: "stub-node-0", StubNodeTemplate: configs.StubNodeTemplate{ReadyDelay: -time.Second}}}
		}, "ready-delay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := configs.DefaultKubeletStub()
			tt.modify(&cfg)
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func TestClientConfig(t *testing.T) {
	tests := []struct {
		name      string
		nodes     int
		cfgQPS    float32
		cfgBurst  int
		given     rest.Config
		wantQPS   float32
		wantBurst int
	}{
		{name: "sized to the fleet", nodes: 5000, wantQPS: 5200, wantBurst: 10400},
		{name: "one node", nodes: 1, wantQPS: 201, wantBurst: 402},
		{name: "the caller's higher limits are kept", nodes: 3, given: rest.Config{QPS: 5000, Burst: 10000}, wantQPS: 5000, wantBurst: 10000},
		{name: "configured limits win", nodes: 5000, cfgQPS: 100, cfgBurst: 150, given: rest.Config{QPS: 5000, Burst: 10000}, wantQPS: 100, wantBurst: 150},
		{name: "negative QPS disables the limiter", nodes: 10, cfgQPS: -1, wantQPS: -1, wantBurst: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := configs.DefaultKubeletStub()
			cfg.Nodes, cfg.ClientQPS, cfg.ClientBurst = tt.nodes, tt.cfgQPS, tt.cfgBurst
			given := tt.given
			given.Host = "https://127.0.0.1:6443"
			given.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
			got := ClientConfig(cfg, &given)
			if got.QPS != tt.wantQPS || got.Burst != tt.wantBurst || got.RateLimiter != nil {
				t.Errorf("QPS %v burst %d limiter %v, want %v %d nil", got.QPS, got.Burst, got.RateLimiter, tt.wantQPS, tt.wantBurst)
			}
			if got.UserAgent != UserAgent || got.Host != given.Host {
				t.Errorf("user agent %q, host %q", got.UserAgent, got.Host)
			}
			if given.QPS != tt.given.QPS || given.RateLimiter == nil {
				t.Errorf("the caller's config was modified")
			}
		})
	}
}
