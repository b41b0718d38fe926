package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the scheduler's Prometheus metrics.
type Metrics struct {
	attempts     *prometheus.CounterVec
	bindDuration prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scheduler_schedule_attempts_total",
			Help: "Scheduling attempts by result: scheduled, unschedulable or error.",
		}, []string{"result"}),
		bindDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "scheduler_scheduling_attempt_duration_seconds",
			Help:    "Time from taking a pod off the queue to its binding being accepted.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.attempts, m.bindDuration)
	}
	return m
}
