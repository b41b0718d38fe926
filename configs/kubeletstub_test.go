package configs

import (
	"strings"
	"testing"
	"time"
)

func TestStubWorkerCounts(t *testing.T) {
	tests := []struct {
		name                    string
		nodes                   int
		nodeName                string
		podWorkers, beatWorkers int
		wantPods, wantBeats     int
	}{
		{name: "one named node gets the minimum", nodeName: "edge-1", wantPods: 8, wantBeats: 16},
		{name: "a small fleet gets the minimum", nodes: 100, wantPods: 8, wantBeats: 16},
		{name: "1,000 nodes", nodes: 1000, wantPods: 31, wantBeats: 16},
		{name: "5,000 nodes", nodes: 5000, wantPods: 64, wantBeats: 39},
		{name: "10,000 nodes reach both maxima", nodes: 10000, wantPods: 64, wantBeats: 64},
		{name: "configured counts win at any size", nodes: 10000, podWorkers: 2, beatWorkers: 3, wantPods: 2, wantBeats: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultKubeletStub()
			c.Nodes, c.NodeName, c.PodWorkers, c.HeartbeatWorkers = tt.nodes, tt.nodeName, tt.podWorkers, tt.beatWorkers
			if got := c.PodWorkerCount(); got != tt.wantPods {
				t.Errorf("PodWorkerCount = %d, want %d", got, tt.wantPods)
			}
			if got := c.HeartbeatWorkerCount(); got != tt.wantBeats {
				t.Errorf("HeartbeatWorkerCount = %d, want %d", got, tt.wantBeats)
			}
		})
	}
}

func TestStubWorkerCountsMustNotBeNegative(t *testing.T) {
	for _, key := range []string{"pod-workers", "heartbeat-workers"} {
		c := DefaultKubeletStub()
		if key == "pod-workers" {
			c.PodWorkers = -1
		} else {
			c.HeartbeatWorkers = -1
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s -1: Validate = %v, want an error naming it", key, err)
		}
	}
	if err := DefaultKubeletStub().Validate(); err != nil {
		t.Errorf("defaults (both 0, sized to the fleet): %v", err)
	}
}

func TestReplicaInternalIPCIDR(t *testing.T) {
	tests := []struct {
		name    string
		cidr    string
		nodes   int
		replica int
		want    string // empty: an error naming internal-ip-cidr
	}{
		{name: "replica 1 starts where the range does", cidr: "172.21.0.0/16", nodes: 100, replica: 1, want: "172.21.0.0/25"},
		{name: "replica 2 takes the next block", cidr: "172.21.0.0/16", nodes: 100, replica: 2, want: "172.21.0.128/25"},
		{name: "126 nodes and a broadcast fit in 128", cidr: "10.0.0.0/16", nodes: 126, replica: 3, want: "10.0.1.0/25"},
		{name: "127 nodes need 256", cidr: "10.0.0.0/16", nodes: 127, replica: 3, want: "10.0.2.0/24"},
		{name: "2,500 nodes take a /20", cidr: "172.21.0.0/16", nodes: 2500, replica: 16, want: "172.21.240.0/20"},
		{name: "the range runs out of blocks", cidr: "172.21.0.0/16", nodes: 2500, replica: 17},
		{name: "the range is smaller than one fleet", cidr: "172.21.0.0/24", nodes: 300, replica: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultKubeletStub()
			c.InternalIPCIDR, c.Nodes = tt.cidr, tt.nodes
			got, err := c.ReplicaInternalIPCIDR(tt.replica)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "internal-ip-cidr") {
					t.Fatalf("ReplicaInternalIPCIDR(%d) = %q, %v; want an error naming internal-ip-cidr", tt.replica, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ReplicaInternalIPCIDR(%d) = %q, %v; want %q", tt.replica, got, err, tt.want)
			}
			c.InternalIPCIDR = got
			if err := c.Validate(); err != nil {
				t.Errorf("the block does not validate for %d nodes: %v", tt.nodes, err)
			}
		})
	}
}

func TestStubDelaysMustNotBeNegative(t *testing.T) {
	for key, set := range map[string]func(*StubNodeTemplate){
		"start-delay":    func(t *StubNodeTemplate) { t.StartDelay = -time.Second },
		"ready-delay":    func(t *StubNodeTemplate) { t.ReadyDelay = -time.Second },
		"complete-after": func(t *StubNodeTemplate) { t.CompleteAfter = -time.Second },
	} {
		c := DefaultKubeletStub()
		set(&c.Template)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s -1s: Validate = %v, want an error naming it", key, err)
		}
	}
	c := DefaultKubeletStub()
	c.Template.CompleteAfter = 3 * time.Second
	c.Overrides = []StubNodeOverride{{Name: "n-1", StubNodeTemplate: StubNodeTemplate{CompleteAfter: time.Minute}}}
	if err := c.Validate(); err != nil {
		t.Fatalf("complete-after 3s: %v", err)
	}
	if got := c.Template.merge(c.Overrides[0].StubNodeTemplate).CompleteAfter; got != time.Minute {
		t.Errorf("an override's complete-after = %v, want 1m", got)
	}
}
