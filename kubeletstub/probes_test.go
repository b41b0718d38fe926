package kubeletstub

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func sec(n int) time.Duration { return time.Duration(n) * time.Second }

// TestReadiness: a readiness probe that starts failing turns a ready container unready after
// failureThreshold periods, and ready again successThreshold periods after it recovers.
func TestReadiness(t *testing.T) {
	probe := &corev1.Probe{PeriodSeconds: 3, SuccessThreshold: 2, FailureThreshold: 2}
	at := func(d int) time.Time { return t0.Add(sec(d)) }
	readyAt := at(10)
	tests := []struct {
		name  string
		probe *corev1.Probe
		ep    probeEpisode
		now   int
		ready bool
		since time.Time
		next  time.Time
	}{
		{name: "before readyAt", probe: probe, now: 5, next: at(10)},
		{name: "after readyAt", probe: probe, now: 10, ready: true, since: at(10)},
		{name: "no probe ignores the fault", ep: probeEpisode{since: at(0)}, now: 20, ready: true, since: at(10)},
		{name: "failing since before ready: never ready", probe: probe, ep: probeEpisode{since: at(5)}, now: 60},
		{name: "failing after ready: ready for failureThreshold periods", probe: probe, ep: probeEpisode{since: at(20)}, now: 25, ready: true, since: at(10), next: at(26)},
		{name: "then unready", probe: probe, ep: probeEpisode{since: at(20)}, now: 26, since: at(26)},
		{name: "recovered: unready until successThreshold periods later", probe: probe, ep: probeEpisode{since: at(20), cleared: at(40)}, now: 45, since: at(26), next: at(46)},
		{name: "recovered: ready again", probe: probe, ep: probeEpisode{since: at(20), cleared: at(40)}, now: 46, ready: true, since: at(46)},
		{name: "cleared before failureThreshold: stayed ready", probe: probe, ep: probeEpisode{since: at(20), cleared: at(24)}, now: 30, ready: true, since: at(10)},
		{name: "failing before ready, recovered", probe: probe, ep: probeEpisode{since: at(0), cleared: at(30)}, now: 35, next: at(36)},
		{name: "episode over before readyAt", probe: probe, ep: probeEpisode{since: at(0), cleared: at(5)}, now: 10, ready: true, since: at(10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, since, next := readiness(tt.probe, readyAt, tt.ep, at(tt.now))
			if ready != tt.ready || !since.Equal(tt.since) || !next.Equal(tt.next) {
				t.Errorf("readiness = %v since %v next %v; want %v since %v next %v", ready, since, next, tt.ready, tt.since, tt.next)
			}
		})
	}
}

func TestStartedAt(t *testing.T) {
	startup := &corev1.Container{StartupProbe: &corev1.Probe{InitialDelaySeconds: 5, PeriodSeconds: 2, SuccessThreshold: 1}}
	tests := []struct {
		name string
		c    *corev1.Container
		ep   probeEpisode
		want time.Time
		ok   bool
	}{
		{"no startup probe", &corev1.Container{}, probeEpisode{}, t0, true},
		{"after the initial delay", startup, probeEpisode{}, t0.Add(sec(5)), true},
		{"fault in force", startup, probeEpisode{since: t0}, time.Time{}, false},
		{"fault after the probe passed", startup, probeEpisode{since: t0.Add(sec(6))}, t0.Add(sec(5)), true},
		{"fault cleared: one period later", startup, probeEpisode{since: t0, cleared: t0.Add(sec(30))}, t0.Add(sec(32)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := startedAt(tt.c, t0, tt.ep)
			if ok != tt.ok || !got.Equal(tt.want) {
				t.Errorf("startedAt = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseProbeKinds(t *testing.T) {
	kinds, unknown := parseProbeKinds(" Readiness, startup ,liveness")
	if !kinds[probeReadiness] || !kinds[probeStartup] || len(unknown) != 1 || unknown[0] != "liveness" {
		t.Errorf("parseProbeKinds = %v, unknown %v", kinds, unknown)
	}
}
