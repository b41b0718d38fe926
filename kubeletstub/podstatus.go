package kubeletstub

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod statuses are pure functions of the pod, the stub's record of it, the faults in force
// and the time, so a sync that runs twice computes the same status and writes nothing the
// second time. Every timestamp is cut to whole seconds because that is what survives a round
// trip through the API; a finer one would never compare equal and would be rewritten forever.

// podRecord is what a node remembers about a pod it has seen: the admission decision (which
// is final, as in the kubelet), when the pod started, its IP, whether a configured fault
// fails it, and the last status written (to skip rewriting it while the cache catches up).
type podRecord struct {
	admitted bool
	rejected *admission
	start    metav1.Time
	ip       string
	// failAfter is the configured fail-after decided for this pod at admission (0: never);
	// the fail-after annotation, when present, applies on top of it to every pod.
	failAfter time.Duration
	stopped   bool
	written   *corev1.PodStatus
}

func ts(t time.Time) metav1.Time { return metav1.NewTime(t).Rfc3339Copy() }

// podTimeline is when a started pod's containers run, turn ready and fail.
type podTimeline struct {
	start, running, ready time.Time
	// fails is false when no fault fails the pod.
	fails  bool
	failAt time.Time
}

func timeline(rec *podRecord, startDelay time.Duration, f faults) podTimeline {
	tl := podTimeline{start: rec.start.Time}
	tl.running = tl.start.Add(startDelay)
	tl.ready = tl.running.Add(f.readyDelay)
	switch {
	case f.failFromAnnotation:
		tl.fails, tl.failAt = true, tl.running.Add(f.failAfter)
	case rec.failAfter > 0:
		tl.fails, tl.failAt = true, tl.running.Add(rec.failAfter)
	}
	return tl
}

// startedStatus is the status of an admitted pod at now, and how long until it next changes
// (0 when it will not change by itself).
func startedStatus(pod *corev1.Pod, hostIP string, rec *podRecord, tl podTimeline, now time.Time) (corev1.PodStatus, time.Duration) {
	s := baseStatus(pod, hostIP, rec)
	start := ts(tl.start)
	setPodCondition(&s, corev1.PodScheduled, corev1.ConditionTrue, "", start)
	setPodCondition(&s, corev1.PodInitialized, corev1.ConditionTrue, "", start)
	var wake time.Duration
	soonest := func(t time.Time) {
		if d := t.Sub(now); d > 0 && (wake == 0 || d < wake) {
			wake = d
		}
	}
	switch {
	case now.Before(tl.running):
		s.Phase = corev1.PodPending
		setPodCondition(&s, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", start)
		notReady(&s, pod, "ContainersNotReady", start)
		s.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, true, func(corev1.Container) corev1.ContainerState {
			return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
		}, nil)
		s.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, false, func(corev1.Container) corev1.ContainerState {
			return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		}, nil)
		soonest(tl.running)
	case tl.fails && !now.Before(tl.failAt):
		s.Phase = corev1.PodFailed
		s.Message = fmt.Sprintf("The stub failed the pod's containers %s after they started (fault injection)", tl.failAt.Sub(tl.running))
		setPodCondition(&s, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", ts(tl.running))
		notReady(&s, pod, "PodFailed", ts(tl.failAt))
		terminated := func(c corev1.Container) corev1.ContainerState {
			return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 1, Reason: "Error", StartedAt: ts(tl.running), FinishedAt: ts(tl.failAt),
			}}
		}
		s.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, true, initDone(tl, terminated), nil)
		s.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, false, terminated, nil)
	default:
		s.Phase = corev1.PodRunning
		setPodCondition(&s, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", ts(tl.running))
		ready := !now.Before(tl.ready)
		if ready {
			setPodCondition(&s, corev1.PodReady, corev1.ConditionTrue, "", ts(tl.ready))
			setPodCondition(&s, corev1.ContainersReady, corev1.ConditionTrue, "", ts(tl.ready))
		} else {
			notReady(&s, pod, "ContainersNotReady", start)
			soonest(tl.ready)
		}
		running := func(c corev1.Container) corev1.ContainerState {
			return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ts(tl.running)}}
		}
		s.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, true, initDone(tl, running), &ready)
		s.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, false, running, &ready)
		if tl.fails {
			soonest(tl.failAt)
		}
	}
	return s, wake
}

// initDone gives regular init containers a completed state and sidecars (restartable init
// containers) the state of the main containers.
func initDone(tl podTimeline, main func(corev1.Container) corev1.ContainerState) func(corev1.Container) corev1.ContainerState {
	return func(c corev1.Container) corev1.ContainerState {
		if isSidecar(c) {
			return main(c)
		}
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: ts(tl.start), FinishedAt: ts(tl.running),
		}}
	}
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// rejectedStatus is the status of a pod admission refused: phase Failed with the reason and
// message, no containers started.
func rejectedStatus(pod *corev1.Pod, a *admission) corev1.PodStatus {
	s := corev1.PodStatus{
		Phase:      corev1.PodFailed,
		Reason:     a.reason,
		Message:    a.message,
		Conditions: pod.Status.Conditions,
		QOSClass:   pod.Status.QOSClass,
	}
	return *s.DeepCopy()
}

// stoppedStatus is the status of a deleted pod whose containers the stub has stopped: every
// container terminated with exit code 0, phase Succeeded, not ready.
func stoppedStatus(pod *corev1.Pod, now time.Time) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.Phase = corev1.PodSucceeded
	finished := ts(now)
	notReady(&s, pod, "PodCompleted", finished)
	stop := func(prev []corev1.ContainerStatus) func(corev1.Container) corev1.ContainerState {
		return func(c corev1.Container) corev1.ContainerState {
			t := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: finished}
			for _, cs := range prev {
				if cs.Name != c.Name {
					continue
				}
				switch {
				case cs.State.Terminated != nil:
					return cs.State
				case cs.State.Running != nil:
					t.StartedAt = cs.State.Running.StartedAt
				}
			}
			return corev1.ContainerState{Terminated: t}
		}
	}
	notReadyFlag := false
	s.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, true, stop(pod.Status.InitContainerStatuses), &notReadyFlag)
	s.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, false, stop(pod.Status.ContainerStatuses), &notReadyFlag)
	return s
}

// baseStatus starts an admitted pod's status from what the API has, resetting the fields
// the stub owns.
func baseStatus(pod *corev1.Pod, hostIP string, rec *podRecord) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.Reason, s.Message = "", ""
	s.HostIP = hostIP
	s.HostIPs = []corev1.HostIP{{IP: hostIP}}
	s.PodIP = rec.ip
	s.PodIPs = []corev1.PodIP{{IP: rec.ip}}
	start := rec.start
	s.StartTime = &start
	return s
}

// notReady sets Ready and ContainersReady to False with the kubelet's message.
func notReady(s *corev1.PodStatus, pod *corev1.Pod, reason string, at metav1.Time) {
	names := make([]string, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	msg := fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	if reason == "PodCompleted" {
		msg = ""
	}
	setPodConditionMessage(s, corev1.PodReady, corev1.ConditionFalse, reason, msg, at)
	setPodConditionMessage(s, corev1.ContainersReady, corev1.ConditionFalse, reason, msg, at)
}

func setPodCondition(s *corev1.PodStatus, typ corev1.PodConditionType, status corev1.ConditionStatus, reason string, at metav1.Time) {
	setPodConditionMessage(s, typ, status, reason, "", at)
}

// setPodConditionMessage replaces the condition of type typ (keeping its place in the list) or
// appends it. A PodScheduled condition written by the scheduler is left as it is.
func setPodConditionMessage(s *corev1.PodStatus, typ corev1.PodConditionType, status corev1.ConditionStatus, reason, message string, at metav1.Time) {
	c := corev1.PodCondition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: at}
	for i := range s.Conditions {
		if s.Conditions[i].Type != typ {
			continue
		}
		if typ == corev1.PodScheduled && s.Conditions[i].Status == corev1.ConditionTrue {
			return
		}
		if s.Conditions[i].Status == status && !s.Conditions[i].LastTransitionTime.IsZero() {
			// No transition: keep its time, e.g. when a ready-delay annotation changes
			// after the pod turned Ready.
			c.LastTransitionTime = s.Conditions[i].LastTransitionTime
		}
		s.Conditions[i] = c
		return
	}
	s.Conditions = append(s.Conditions, c)
}

// containerStatuses builds one status per container in spec order. ready, when not nil,
// is the readiness of running containers (completed init containers count as ready).
func containerStatuses(pod *corev1.Pod, containers []corev1.Container, init bool, state func(corev1.Container) corev1.ContainerState, ready *bool) []corev1.ContainerStatus {
	if len(containers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		st := state(c)
		started := st.Running != nil
		cs := corev1.ContainerStatus{
			Name:        c.Name,
			State:       st,
			Image:       c.Image,
			ImageID:     c.Image,
			ContainerID: fmt.Sprintf("stub://%s/%s", pod.UID, c.Name),
			Started:     &started,
		}
		switch {
		case st.Running != nil && ready != nil:
			cs.Ready = *ready
		case init && st.Terminated != nil && st.Terminated.ExitCode == 0:
			cs.Ready = true
		}
		if st.Waiting != nil {
			cs.ContainerID = ""
		}
		out = append(out, cs)
	}
	return out
}
