package kubeletstub

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Probes. A stub container has nothing to probe, so every probe succeeds as soon as its
// timing allows, unless the node annotation AnnotationFailProbes makes one kind fail. What
// the kubelet's timing gives a test is kept: a startup probe holds `started` (and with it
// readiness) back until initialDelaySeconds + (successThreshold-1)·periodSeconds after the
// container started; a readiness probe holds `ready` back until its own initialDelaySeconds
// has passed (and successThreshold probes, periodSeconds apart, succeeded), counted from the
// container's start and never before the startup probe passed. When readiness starts to fail
// on a ready container it turns unready failureThreshold periods later; when it recovers it
// is ready again successThreshold periods later. Liveness probes never fail, so containers
// are never restarted. Everything is computed from the pod's start and the instants the
// stub saw a probe fault begin and end, so probes cost no goroutine and no timer but the
// pod's next wake-up.

// The API's defaults of a probe's fields (a stored pod has them; a pod built by hand may not).
const (
	defaultProbePeriod  = 10 * time.Second
	defaultProbeSuccess = 1
	defaultProbeFailure = 3
)

// probeKind is a kind of probe that AnnotationFailProbes can make fail.
type probeKind int

const (
	probeReadiness probeKind = iota
	probeStartup
	numProbeKinds
)

var probeKindNames = [numProbeKinds]string{"readiness", "startup"}

// parseProbeKinds parses "readiness,startup"; unknown names are reported by
// annotationProblems and ignored.
func parseProbeKinds(v string) (kinds [numProbeKinds]bool, unknown []string) {
	for _, item := range strings.Split(v, ",") {
		item = strings.ToLower(strings.TrimSpace(item))
		if item == "" {
			continue
		}
		found := false
		for k, name := range probeKindNames {
			if item == name {
				kinds[k], found = true, true
			}
		}
		if !found {
			unknown = append(unknown, item)
		}
	}
	return kinds, unknown
}

// probeEpisode is the last time a probe fault was in force on a node: from since (zero:
// never) until cleared (zero: still in force).
type probeEpisode struct {
	since, cleared time.Time
}

func (e probeEpisode) active() bool { return !e.since.IsZero() && e.cleared.IsZero() }

// observe updates the episode with whether the fault is in force at now.
func (e *probeEpisode) observe(inForce bool, now time.Time) {
	switch {
	case inForce && !e.active():
		*e = probeEpisode{since: now}
	case !inForce && e.active():
		e.cleared = now
	}
}

type probeTiming struct {
	initialDelay, period time.Duration
	success, failure     int
}

func timingOf(p *corev1.Probe) probeTiming {
	t := probeTiming{
		initialDelay: time.Duration(p.InitialDelaySeconds) * time.Second,
		period:       time.Duration(p.PeriodSeconds) * time.Second,
		success:      int(p.SuccessThreshold),
		failure:      int(p.FailureThreshold),
	}
	if t.period <= 0 {
		t.period = defaultProbePeriod
	}
	if t.success <= 0 {
		t.success = defaultProbeSuccess
	}
	if t.failure <= 0 {
		t.failure = defaultProbeFailure
	}
	return t
}

// firstSuccess is when a probe of a container running since running first reports success,
// if it never failed: after its initial delay and successThreshold probes, and not before
// notBefore (the startup probe's success, for readiness).
func (t probeTiming) firstSuccess(running, notBefore time.Time) time.Time {
	at := running.Add(t.initialDelay)
	if at.Before(notBefore) {
		at = notBefore
	}
	return at.Add(time.Duration(t.success-1) * t.period)
}

// startedAt is when a container running since running counts as started: at once without a
// startup probe, else when the probe succeeds. A startup fault in force since before then
// holds it back until the fault ends (ok false while it lasts).
func startedAt(c *corev1.Container, running time.Time, ep probeEpisode) (time.Time, bool) {
	if c.StartupProbe == nil {
		return running, true
	}
	t := timingOf(c.StartupProbe)
	at := t.firstSuccess(running, time.Time{})
	if ep.since.IsZero() || at.Before(ep.since) || (!ep.cleared.IsZero() && !at.Before(ep.cleared)) {
		return at, true // the fault did not overlap the probing
	}
	if ep.active() {
		return time.Time{}, false
	}
	return latest(at, ep.cleared.Add(time.Duration(t.success)*t.period)), true
}

// readiness is a container's readiness at now: whether it is ready, since when it has been
// in that state (zero: since the container started, never ready yet), and the next instant
// it changes (zero: never by itself). readyAt is when it turns ready if its probe never
// fails; ep is the node's readiness-fault episode.
func readiness(p *corev1.Probe, readyAt time.Time, ep probeEpisode, now time.Time) (ready bool, since, next time.Time) {
	plain := func(at time.Time) (bool, time.Time, time.Time) {
		if now.Before(at) {
			return false, time.Time{}, at
		}
		return true, at, time.Time{}
	}
	if p == nil || ep.since.IsZero() || (!ep.cleared.IsZero() && !readyAt.Before(ep.cleared)) {
		return plain(readyAt)
	}
	t := timingOf(p)
	recovered := time.Time{}
	if !ep.cleared.IsZero() {
		recovered = ep.cleared.Add(time.Duration(t.success) * t.period)
	}
	if readyAt.After(ep.since) {
		// It was not ready yet when the probes began to fail: ready once they recover.
		if recovered.IsZero() {
			return false, time.Time{}, time.Time{}
		}
		return plain(latest(readyAt, recovered))
	}
	lost := ep.since.Add(time.Duration(t.failure) * t.period)
	if !ep.cleared.IsZero() && !ep.cleared.After(lost) {
		return plain(readyAt) // recovered before failureThreshold failures
	}
	switch {
	case now.Before(lost):
		return true, readyAt, lost
	case recovered.IsZero():
		return false, lost, time.Time{}
	case now.Before(recovered):
		return false, lost, recovered
	default:
		return true, recovered, time.Time{}
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
