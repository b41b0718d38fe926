package kubeletstub

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Heartbeat results counted by miniplane_kubeletstub_heartbeats_total.
const (
	resultWritten   = "written"
	resultUnchanged = "unchanged"
	resultSkipped   = "skipped"
	resultError     = "error"
)

// metrics are the fleet's Prometheus collectors. Several fleets may share one registerer:
// collectors already registered are re-used, so the counts add up.
type metrics struct {
	nodes         *prometheus.GaugeVec
	heartbeats    *prometheus.CounterVec
	admissions    *prometheus.CounterVec
	podWrites     *prometheus.CounterVec
	podSyncs      prometheus.Counter
	podSyncErrors prometheus.Counter
	eventsDropped *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "miniplane_kubeletstub_nodes",
			Help: "Stub nodes by progress: configured, registered, ready (first status and lease sent).",
		}, []string{"state"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "miniplane_kubeletstub_heartbeats_total",
			Help: "Node status checks and lease renewals by kind (status, lease) and result (written, unchanged, skipped, error).",
		}, []string{"kind", "result"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "miniplane_kubeletstub_pod_admissions_total",
			Help: "Pod admission decisions by result (admitted, rejected) and rejection reason.",
		}, []string{"result", "reason"}),
		podWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "miniplane_kubeletstub_pod_writes_total",
			Help: "Pod status updates and deletions sent, by operation (status, delete).",
		}, []string{"op"}),
		podSyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "miniplane_kubeletstub_pod_syncs_total",
			Help: "Pod syncs run (each reads one pod from the cache and writes only if needed).",
		}),
		podSyncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "miniplane_kubeletstub_pod_sync_errors_total",
			Help: "Pod syncs that failed and were retried.",
		}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "miniplane_kubeletstub_events_dropped_total",
			Help: "Normal events not recorded because the fleet's event-qps budget was spent, by kind: container (Pulling, Pulled, Created, Started, Killing) or node (Starting, NodeHas…, NodeReady, NodeSchedulable…).",
		}, []string{"kind"}),
	}
	var err error
	if m.nodes, err = register(reg, m.nodes); err != nil {
		return nil, err
	}
	if m.heartbeats, err = register(reg, m.heartbeats); err != nil {
		return nil, err
	}
	if m.admissions, err = register(reg, m.admissions); err != nil {
		return nil, err
	}
	if m.podWrites, err = register(reg, m.podWrites); err != nil {
		return nil, err
	}
	if m.podSyncs, err = register(reg, m.podSyncs); err != nil {
		return nil, err
	}
	if m.podSyncErrors, err = register(reg, m.podSyncErrors); err != nil {
		return nil, err
	}
	if m.eventsDropped, err = register(reg, m.eventsDropped); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the equal collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *metrics) heartbeat(kind beatKind, result string) {
	m.heartbeats.WithLabelValues(kind.String(), result).Inc()
}
