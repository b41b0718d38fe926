package apiserver

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tooManyRequestsMessage is kube-apiserver's answer when its in-flight limit is reached.
const tooManyRequestsMessage = "Too many requests, please try again later."

// inflightLimiter bounds how many requests the server handles at once, separately for
// non-mutating (get, list) and mutating ones, as kube-apiserver's max-in-flight filter
// does. A request that finds every slot of its kind taken waits in a short queue, as
// kube-apiserver's priority and fairness queues it: a burst a little over the limit (a
// controller's 250 creates while the kubelets report) is served a few milliseconds later
// instead of costing each client the second of Retry-After. The queue holds at most as
// many requests as the limit and each waits at most the queue wait; beyond either the
// answer is 429 at once, without reading the body, so memory stays bounded however many
// clients come.
type inflightLimiter struct {
	// readOnly and mutating are the slots of each kind; nil means no limit.
	readOnly, mutating *slots
	// exempt reports a user who is served even beyond the limit.
	exempt func(*requestState) bool
}

// slots are the tokens of one kind of request and the queue in front of them.
type slots struct {
	// held has one token per request in flight.
	held chan struct{}
	// queued has one token per request waiting for a slot; nil when requests do not wait.
	queued chan struct{}
	// wait is the longest a queued request waits before it is answered 429.
	wait time.Duration
}

func newSlots(limit int, wait time.Duration) *slots {
	if limit <= 0 {
		return nil
	}
	s := &slots{held: make(chan struct{}, limit), wait: wait}
	if wait > 0 {
		s.queued = make(chan struct{}, limit)
	}
	return s
}

// take takes a free slot if there is one.
func (s *slots) take() bool {
	select {
	case s.held <- struct{}{}:
		return true
	default:
		return false
	}
}

// await waits in the queue for a slot, if there is room in the queue. Senders blocked on
// a channel are woken in the order they came, so the queue is first come, first served.
// It reports false when the request is to be refused.
func (s *slots) await(ctx context.Context) bool {
	if s.queued == nil {
		return false
	}
	select {
	case s.queued <- struct{}{}:
	default:
		return false
	}
	defer func() { <-s.queued }()
	timer := time.NewTimer(s.wait)
	defer timer.Stop()
	select {
	case s.held <- struct{}{}:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

func (s *slots) release() { <-s.held }

func newInflightLimiter(readOnlyLimit, mutatingLimit int, queueWait time.Duration, exempt func(*requestState) bool) *inflightLimiter {
	return &inflightLimiter{readOnly: newSlots(readOnlyLimit, queueWait), mutating: newSlots(mutatingLimit, queueWait), exempt: exempt}
}

// collectors are the limiter's metrics, named as kube-apiserver's.
func (l *inflightLimiter) collectors() []prometheus.Collector {
	var cs []prometheus.Collector
	for _, k := range []struct {
		kind string
		s    *slots
	}{{"readOnly", l.readOnly}, {"mutating", l.mutating}} {
		held, queued := func() float64 { return 0 }, func() float64 { return 0 }
		if k.s != nil {
			held = func() float64 { return float64(len(k.s.held)) }
			queued = func() float64 { return float64(len(k.s.queued)) }
		}
		labels := prometheus.Labels{"request_kind": k.kind}
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "apiserver_current_inflight_requests",
				Help:        "Requests being served, by kind (readOnly or mutating); long-running requests are not counted.",
				ConstLabels: labels,
			}, held),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "apiserver_current_inqueue_requests",
				Help:        "Requests waiting for a slot, by kind (readOnly or mutating).",
				ConstLabels: labels,
			}, queued))
	}
	return cs
}

// wrap limits next. It must run after authentication: kube-apiserver lets members of
// system:masters through even beyond the limit, so that an administrator can always act
// on an overloaded server, and here the administrators are the configured admin groups.
func (l *inflightLimiter) wrap(next http.Handler) http.Handler {
	if l.readOnly == nil && l.mutating == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isLongRunning(r) || probePaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		s := l.readOnly
		if isMutating(r.Method) {
			s = l.mutating
		}
		switch {
		case s == nil:
			next.ServeHTTP(w, r)
		case s.take():
			defer s.release()
			next.ServeHTTP(w, r)
		case l.exempt(stateFrom(r.Context())):
			next.ServeHTTP(w, r)
		case s.await(r.Context()):
			defer s.release()
			next.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			writeStatus(w, &metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
				Message: tooManyRequestsMessage, Details: &metav1.StatusDetails{RetryAfterSeconds: 1}})
		}
	})
}

// probePaths are not limited: a liveness probe answered 429 would restart a server that
// is only busy. kube-apiserver's priority and fairness exempts them likewise.
var probePaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true}

// isMutating reports methods that change state; kube-apiserver's non-mutating verbs are
// get, list and watch, which are GETs.
func isMutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// isLongRunning reports requests that last as long as the client wants: watches (by the
// watch parameter or the legacy /watch/ path) and pod logs. They would hold a token for
// minutes; kube-apiserver's long-running check likewise skips watch and the log
// subresource, followed or not.
func isLongRunning(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
		return true
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api" && parts[2] == "watch",
		len(parts) > 3 && parts[0] == "apis" && parts[3] == "watch":
		return true
	}
	n := len(parts)
	return n >= 5 && parts[n-1] == "log" && parts[n-3] == "pods"
}
