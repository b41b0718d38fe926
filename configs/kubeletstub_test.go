package configs

import (
	"strings"
	"testing"
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
