package apiserver

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus series, named as kube-apiserver names them so
// existing dashboards read them.
type metrics struct {
	registry    *prometheus.Registry
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	watchEvents *prometheus.CounterVec
	// cacheReadWait is how long reads at a resourceVersion waited for the watch cache.
	cacheReadWait *prometheus.HistogramVec
	registeredRes *registry
}

func newMetrics(reg *registry) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total",
			Help: "Requests by verb, API group, resource, subresource and HTTP code.",
		}, []string{"verb", "group", "resource", "subresource", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_request_duration_seconds",
			Help:    "Request latency by verb, API group and resource (watches excluded: they last minutes).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"verb", "group", "resource", "subresource"}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_watch_events_total",
			Help: "Watch events sent to clients, by API group and resource.",
		}, []string{"group", "resource"}),
		cacheReadWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_watch_cache_read_wait_seconds",
			Help:    "Time reads (watches, lists and gets at a resourceVersion, consistent lists) waited for the watch cache to reach their revision; reads it had reached are not counted.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3},
		}, []string{"group", "resource"}),
		registeredRes: reg,
	}
	watchers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "apiserver_registered_watchers",
		Help: "Watches currently open, over all resources.",
	}, func() float64 {
		n := 0
		for _, r := range reg.all {
			if r.cache != nil {
				n += r.cache.watcherCount()
			}
		}
		return float64(n)
	})
	m.registry.MustRegister(m.requests, m.latency, m.watchEvents, m.cacheReadWait, watchers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range reg.all {
		res := r
		m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "apiserver_watch_cache_resource_version",
			Help:        "The etcd revision each resource's watch cache has reached.",
			ConstLabels: prometheus.Labels{"group": res.group, "resource": res.name},
		}, func() float64 {
			if res.cache == nil {
				return 0
			}
			return float64(res.cache.currentRV())
		}))
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// statusRecorder remembers the response code and passes flushes through for watches.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		st := stateFrom(r.Context())
		verb, resource := st.verb, st.resource
		// The group tells apart resources of one name (events in core and events.k8s.io).
		group := ""
		if st.info != nil {
			group = st.info.res.group
		}
		if verb == "" {
			verb = strings.ToUpper(lowerVerb(r.Method))
		} else {
			verb = strings.ToUpper(verb)
		}
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		m.requests.WithLabelValues(verb, group, resource, st.subresource, strconv.Itoa(code)).Inc()
		if verb != "WATCH" {
			m.latency.WithLabelValues(verb, group, resource, st.subresource).Observe(time.Since(start).Seconds())
		}
	})
}
