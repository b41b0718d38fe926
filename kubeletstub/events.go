package kubeletstub

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/miniplane/miniplane/configs"
)

// eventRecorder records the fleet's events, each node's through a recorder of its own
// (source kubelet, host the node). A fleet stands for many kubelets in one process, so a
// bound that is per node on a real kubelet (event-qps, event-burst) is fleet-wide here:
// without it a 5,000-node fleet would write five Events per node as it starts and four
// per pod in a rollout, besides the writes that matter. Warnings are never held back.
type eventRecorder struct {
	// newRecorder returns a node's recorder; nil records nothing (record-events off).
	newRecorder func(node string) record.EventRecorder
	// budget is the fleet's bound on Normal events; nil: none.
	budget *rate.Limiter
	// dropped counts the Normal events the budget left out, by kind (container, node).
	dropped *prometheus.CounterVec
}

// Kinds of Normal events, as miniplane_kubeletstub_events_dropped_total labels them.
const (
	eventsOfContainers = "container"
	eventsOfNodes      = "node"
)

// newEventBudget returns the fleet's bound on Normal events, nil when there is none.
func newEventBudget(cfg configs.KubeletStub) *rate.Limiter {
	if cfg.EventQPS <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(cfg.EventQPS), cfg.EventBurst)
}

// enabled says whether the fleet records events at all.
func (r *eventRecorder) enabled() bool { return r != nil && r.newRecorder != nil }

// allow takes count Normal events of one kind from the budget, all or none: what a reader
// sees of one pod's start or one node's start is then whole. What it refuses is counted.
func (r *eventRecorder) allow(now time.Time, kind string, count int) bool {
	if !r.enabled() || count == 0 {
		return false
	}
	if r.budget != nil && !r.budget.AllowN(now, count) {
		r.dropped.WithLabelValues(kind).Add(float64(count))
		return false
	}
	return true
}

// event records one event on obj from node n's kubelet, outside the budget.
func (r *eventRecorder) event(n *stubNode, obj runtime.Object, eventType, reason, message string) {
	if !r.enabled() {
		return
	}
	n.mu.Lock()
	if n.recorder == nil {
		n.recorder = r.newRecorder(n.name)
	}
	rec := n.recorder
	n.mu.Unlock()
	rec.Event(obj, eventType, reason, message)
}
