package apiserver

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tooManyRequestsMessage is kube-apiserver's answer when its in-flight limit is reached.
const tooManyRequestsMessage = "Too many requests, please try again later."

// inflightLimiter bounds how many requests the server handles at once, separately for
// non-mutating (get, list) and mutating ones, as kube-apiserver's max-in-flight filter
// does. A request beyond the limit is answered 429 at once, without reading its body:
// the server never queues work it cannot do, so memory stays bounded however many
// clients come, and clients back off for the second Retry-After asks (client-go does).
type inflightLimiter struct {
	// readOnly and mutating hold one token per request in flight; nil means no limit.
	readOnly, mutating chan struct{}
	// exempt reports a user who is served even beyond the limit.
	exempt func(*requestState) bool
}

func newInflightLimiter(readOnlyLimit, mutatingLimit int, exempt func(*requestState) bool) *inflightLimiter {
	l := &inflightLimiter{exempt: exempt}
	if readOnlyLimit > 0 {
		l.readOnly = make(chan struct{}, readOnlyLimit)
	}
	if mutatingLimit > 0 {
		l.mutating = make(chan struct{}, mutatingLimit)
	}
	return l
}

// collectors are the limiter's metrics, named as kube-apiserver's.
func (l *inflightLimiter) collectors() []prometheus.Collector {
	gauge := func(kind string, ch chan struct{}) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "apiserver_current_inflight_requests",
			Help:        "Requests being served, by kind (readOnly or mutating); long-running requests are not counted.",
			ConstLabels: prometheus.Labels{"request_kind": kind},
		}, func() float64 { return float64(len(ch)) })
	}
	return []prometheus.Collector{gauge("readOnly", l.readOnly), gauge("mutating", l.mutating)}
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
		tokens := l.readOnly
		if isMutating(r.Method) {
			tokens = l.mutating
		}
		if tokens == nil {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case tokens <- struct{}{}:
			defer func() { <-tokens }()
			next.ServeHTTP(w, r)
		default:
			if l.exempt(stateFrom(r.Context())) {
				next.ServeHTTP(w, r)
				return
			}
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
