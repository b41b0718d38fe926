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
	// start is when the node admitted the pod, to the clock's precision (the API keeps whole
	// seconds of it as startTime); delays and probe timing count from it.
	start time.Time
	ip    string
	// failAfter is the configured fail-after decided for this pod at admission (0: never);
	// the fail-after annotation, when present, applies on top of it to every pod.
	failAfter time.Duration
	// sandboxAt is when the pod's sandbox was created (zero: not yet, or at start); its
	// containers run the start delay after it. It is start unless the pod had to wait for
	// its runtime handler (waitedForSandbox).
	sandboxAt        time.Time
	waitedForSandbox bool
	// sandboxEvent and sandboxEventAt are the message and time of the last
	// FailedCreatePodSandBox event recorded for the pod.
	sandboxEvent   string
	sandboxEventAt time.Time
	stopped        bool
	written        *corev1.PodStatus
	// ephemeral is when the node first saw each of the pod's ephemeral containers, which
	// run from then on (ephemeralStatuses).
	ephemeral map[string]time.Time
}

// ephemeralSince is when the ephemeral container name started to run: when the node first
// saw it, or, for a container an earlier run of the stub started, the time its status gives.
func (rec *podRecord) ephemeralSince(pod *corev1.Pod, name string, now time.Time) time.Time {
	if t, ok := rec.ephemeral[name]; ok {
		return t
	}
	t := now
	if cs := findContainerStatus(pod.Status.EphemeralContainerStatuses, name); cs != nil {
		switch {
		case cs.State.Running != nil:
			t = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			t = cs.State.Terminated.StartedAt.Time
		}
	}
	if rec.ephemeral == nil {
		rec.ephemeral = map[string]time.Time{}
	}
	rec.ephemeral[name] = t
	return t
}

// sandboxEventDue reports whether a failed sandbox creation with message is recorded now,
// and notes it if so. A kubelet records FailedCreatePodSandBox at every failed sync, whether
// the pod's status changes or not: the status of a pod without a sandbox says only
// ContainerCreating, so the event is what tells a missing handler from a RuntimeClass the
// kubelet had not seen yet. The stub also syncs a waiting pod when its own status write comes
// back, which a kubelet does not, so the same message is recorded at most once per retry.
func (rec *podRecord) sandboxEventDue(message string, now time.Time) bool {
	if message == rec.sandboxEvent && now.Sub(rec.sandboxEventAt) < sandboxRetryInterval {
		return false
	}
	rec.sandboxEvent, rec.sandboxEventAt = message, now
	return true
}

func ts(t time.Time) metav1.Time { return metav1.NewTime(t).Rfc3339Copy() }

// podTimeline is when a started pod's containers run, turn ready, and fail or complete.
type podTimeline struct {
	start, running, ready time.Time
	// fails is false when no fault fails the pod.
	fails  bool
	failAt time.Time
	// completes is false when the pod's containers run until it is deleted: it is
	// restarted on exit, or complete-after is not set, or it fails first.
	completes  bool
	completeAt time.Time
}

func timeline(rec *podRecord, restart corev1.RestartPolicy, startDelay time.Duration, f faults) podTimeline {
	tl := podTimeline{start: rec.start}
	sandbox := rec.sandboxAt
	if sandbox.IsZero() {
		sandbox = rec.start
	}
	tl.running = sandbox.Add(startDelay)
	tl.ready = tl.running.Add(f.readyDelay)
	switch {
	case f.failFromAnnotation:
		tl.fails, tl.failAt = true, tl.running.Add(f.failAfter)
	case rec.failAfter > 0:
		tl.fails, tl.failAt = true, tl.running.Add(rec.failAfter)
	}
	if f.completeAfter > 0 && restart != corev1.RestartPolicyAlways && restart != "" {
		tl.completeAt = tl.running.Add(f.completeAfter)
		tl.completes = !tl.fails || tl.completeAt.Before(tl.failAt)
		tl.fails = tl.fails && !tl.completes
	}
	return tl
}

// statusInput is what an admitted pod's status is computed from, besides the pod itself.
type statusInput struct {
	hostIP string
	rec    *podRecord
	tl     podTimeline
	pulls  pullPolicy
	probes [numProbeKinds]probeEpisode
	now    time.Time
}

// waker keeps the soonest instant after now at which a status changes by itself.
type waker struct {
	now, next time.Time
}

func (w *waker) at(t time.Time) {
	if t.After(w.now) && (w.next.IsZero() || t.Before(w.next)) {
		w.next = t
	}
}

func (w *waker) after() time.Duration {
	if w.next.IsZero() {
		return 0
	}
	return w.next.Sub(w.now)
}

// startedStatus is the status of an admitted pod at now, and how long until it next changes
// (0 when it will not change by itself).
func startedStatus(pod *corev1.Pod, in statusInput) (corev1.PodStatus, time.Duration) {
	tl, now := in.tl, in.now
	s := baseStatus(pod, in.hostIP, in.rec)
	start := ts(tl.start)
	w := waker{now: now}
	setPodCondition(&s, corev1.PodScheduled, corev1.ConditionTrue, "", start)
	if now.Before(tl.running) {
		// The sandbox is not ready: nothing has started yet.
		sandboxNotReady(&s, pod, start)
		w.at(tl.running)
		return s, w.after()
	}
	setPodCondition(&s, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", ts(tl.running))
	p := planContainers(pod, in, &w)
	s.EphemeralContainerStatuses = ephemeralStatuses(pod, in, &w)
	allStarted := p.initialized && !p.waiting
	if tl.fails && allStarted && !now.Before(tl.failAt) {
		s.Message = fmt.Sprintf("The stub failed the pod's containers %s after they started (fault injection)", tl.failAt.Sub(tl.running))
		ended(&s, pod, tl, corev1.PodFailed, "PodFailed", tl.failAt, 1, "Error")
		return s, 0
	}
	if tl.completes && allStarted && !now.Before(tl.completeAt) {
		// As a kubelet ends a pod that is not restarted once its containers have exited
		// 0, sidecars included.
		ended(&s, pod, tl, corev1.PodSucceeded, "PodCompleted", tl.completeAt, 0, "Completed")
		return s, 0
	}
	s.Phase = corev1.PodPending
	if allStarted {
		s.Phase = corev1.PodRunning
		if tl.fails {
			w.at(tl.failAt)
		}
		if tl.completes {
			w.at(tl.completeAt)
		}
	}
	if p.initialized {
		setPodCondition(&s, corev1.PodInitialized, corev1.ConditionTrue, "", ts(p.initializedAt))
	} else {
		setInitialized(&s, p.incompleteInit, start)
	}
	if p.ready {
		setPodCondition(&s, corev1.PodReady, corev1.ConditionTrue, "", ts(p.readySince))
		setPodCondition(&s, corev1.ContainersReady, corev1.ConditionTrue, "", ts(p.readySince))
	} else {
		at := start
		if !p.unreadySince.IsZero() {
			at = ts(p.unreadySince)
		}
		notReady(&s, p.unready, "ContainersNotReady", at)
	}
	s.InitContainerStatuses, s.ContainerStatuses = p.init, p.main
	return s, w.after()
}

// ended fills in a pod whose containers all exited at the same moment with the same code:
// phase Failed or Succeeded, not ready, init containers done.
// notReadyReason is the reason of the Ready condition: PodFailed or PodCompleted.
func ended(s *corev1.PodStatus, pod *corev1.Pod, tl podTimeline, phase corev1.PodPhase, notReadyReason string, at time.Time, exitCode int32, reason string) {
	s.Phase = phase
	notReady(s, containerNames(pod.Spec.Containers), notReadyReason, ts(at))
	exited := func(corev1.Container) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: reason, StartedAt: ts(tl.running), FinishedAt: ts(at),
		}}
	}
	s.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, true, initDone(tl, exited), nil)
	s.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, false, exited, nil)
	s.EphemeralContainerStatuses = ephemeralEnded(s.EphemeralContainerStatuses, exitCode, reason, ts(at))
}

// ephemeralStatuses is the status of each of the pod's ephemeral containers: running from
// the moment the node first saw it (an ephemeral container starts once the pod's sandbox is
// up, whatever its other containers do), or waiting while its image cannot be pulled. As a
// kubelet reports them they are never ready, never restarted, and say nothing of `started`:
// they have no probes.
func ephemeralStatuses(pod *corev1.Pod, in statusInput, w *waker) []corev1.ContainerStatus {
	containers := ephemeralAsContainers(pod)
	if len(containers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		since := in.rec.ephemeralSince(pod, c.Name, in.now)
		img := parseImage(c.Image)
		if st, ok := pullBlocked(img, in, since, w); ok {
			out = append(out, corev1.ContainerStatus{Name: c.Name, State: corev1.ContainerState{Waiting: st}, Image: c.Image})
			continue
		}
		out = append(out, corev1.ContainerStatus{
			Name:        c.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ts(since)}},
			Image:       img.ref,
			ImageID:     img.id(),
			ContainerID: containerID(pod, c),
		})
	}
	return out
}

// ephemeralEnded stops the running ephemeral containers among statuses at at, as the pod's
// other containers stopped; one that never started stays waiting.
func ephemeralEnded(statuses []corev1.ContainerStatus, exitCode int32, reason string, at metav1.Time) []corev1.ContainerStatus {
	for i := range statuses {
		if r := statuses[i].State.Running; r != nil {
			statuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Reason: reason, StartedAt: r.StartedAt, FinishedAt: at, ContainerID: statuses[i].ContainerID,
			}}
		}
	}
	return statuses
}

// ephemeralAsContainers is the pod's ephemeral containers as containers: the fields they
// share are the same type.
func ephemeralAsContainers(pod *corev1.Pod) []corev1.Container {
	if len(pod.Spec.EphemeralContainers) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		out[i] = corev1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
	}
	return out
}

// noSandboxStatus is the status of an admitted pod whose sandbox cannot be created: Pending,
// its containers waiting in ContainerCreating, and no pod IP, since no sandbox has one.
func noSandboxStatus(pod *corev1.Pod, hostIP string, rec *podRecord) corev1.PodStatus {
	s := baseStatus(pod, hostIP, rec)
	s.PodIP, s.PodIPs = "", nil
	start := ts(rec.start)
	setPodCondition(&s, corev1.PodScheduled, corev1.ConditionTrue, "", start)
	sandboxNotReady(&s, pod, start)
	return s
}

// sandboxNotReady fills in a pending pod whose containers wait for their sandbox.
func sandboxNotReady(s *corev1.PodStatus, pod *corev1.Pod, start metav1.Time) {
	s.Phase = corev1.PodPending
	setPodCondition(s, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", start)
	setInitialized(s, containerNames(pod.Spec.InitContainers), start)
	notReady(s, containerNames(pod.Spec.Containers), "ContainersNotReady", start)
	s.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, true, func(corev1.Container) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	}, nil)
	s.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, false, func(corev1.Container) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	}, nil)
}

// containerPlan is the state of a started pod's containers at one instant.
type containerPlan struct {
	init, main []corev1.ContainerStatus
	// initialized: every init container completed (sidecars started), at initializedAt;
	// otherwise incompleteInit names those that did not.
	initialized    bool
	initializedAt  time.Time
	incompleteInit []string
	// waiting: a main container has not started (its image cannot be pulled).
	waiting bool
	// ready: every main container and sidecar is ready, since readySince; otherwise unready
	// names the main containers that are not, unready since unreadySince (zero: never ready).
	ready        bool
	readySince   time.Time
	unready      []string
	unreadySince time.Time
}

// planContainers runs the pod's containers the way a kubelet does once the sandbox is up:
// init containers one after the other (a regular one completes at once, a sidecar keeps
// running and the next one waits until it has started), then every main container; a
// container whose image cannot be pulled waits, and so does everything after it in the
// init sequence.
func planContainers(pod *corev1.Pod, in statusInput, w *waker) containerPlan {
	var p containerPlan
	if len(pod.Spec.InitContainers) > 0 {
		p.init = make([]corev1.ContainerStatus, 0, len(pod.Spec.InitContainers))
	}
	p.main = make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	t := in.tl.running
	blocked := false
	allReady := true
	// account records one container's readiness in the pod's.
	account := func(name string, ready bool, since time.Time, main bool) {
		switch {
		case ready:
			p.readySince = latest(p.readySince, since)
		default:
			allReady = false
			if main {
				p.unready = append(p.unready, name)
			}
			if !since.IsZero() && (p.unreadySince.IsZero() || since.Before(p.unreadySince)) {
				p.unreadySince = since
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if blocked {
			p.init = append(p.init, waitingStatus(pod, c, &corev1.ContainerStateWaiting{Reason: "PodInitializing"}))
			p.incompleteInit = append(p.incompleteInit, c.Name)
			continue
		}
		img := parseImage(c.Image)
		if st, ok := pullBlocked(img, in, t, w); ok {
			p.init = append(p.init, waitingStatus(pod, c, st))
			p.incompleteInit = append(p.incompleteInit, c.Name)
			blocked = true
			continue
		}
		if isSidecar(c) {
			cs, started, startedAt, ready, since := runningStatus(pod, c, img, in, t, w)
			p.init = append(p.init, cs)
			account(c.Name, ready, since, false)
			if !started {
				p.incompleteInit = append(p.incompleteInit, c.Name)
				blocked = true
				continue
			}
			t = latest(t, startedAt)
			continue
		}
		at := ts(t)
		p.init = append(p.init, corev1.ContainerStatus{
			Name:         c.Name,
			State:        corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: at, FinishedAt: at, ContainerID: containerID(pod, c)}},
			Ready:        true,
			Started:      ptrTo(false),
			Image:        img.ref,
			ImageID:      img.id(),
			ContainerID:  containerID(pod, c),
			RestartCount: restartCount(pod, c.Name),
		})
	}
	p.initialized, p.initializedAt = !blocked, t
	for _, c := range pod.Spec.Containers {
		if blocked {
			p.main = append(p.main, waitingStatus(pod, c, &corev1.ContainerStateWaiting{Reason: "PodInitializing"}))
			account(c.Name, false, time.Time{}, true)
			continue
		}
		img := parseImage(c.Image)
		if st, ok := pullBlocked(img, in, t, w); ok {
			p.main = append(p.main, waitingStatus(pod, c, st))
			p.waiting = true
			account(c.Name, false, time.Time{}, true)
			continue
		}
		cs, _, _, ready, since := runningStatus(pod, c, img, in, t, w)
		p.main = append(p.main, cs)
		account(c.Name, ready, since, true)
	}
	p.ready = p.initialized && allReady
	return p
}

// pullBlocked returns the waiting state of a container whose image cannot be pulled, the
// pull having begun at since.
func pullBlocked(img image, in statusInput, since time.Time, w *waker) (*corev1.ContainerStateWaiting, bool) {
	why := ""
	if img.invalid == nil {
		if why = in.pulls.failure(img); why == "" {
			return nil, false
		}
	}
	st, next := pullWaiting(img, why, since, in.now)
	w.at(next)
	return st, true
}

// runningStatus is the status of a container running since running, with its probes: whether
// it has started (startup probe) and when, and whether it is ready and since when.
func runningStatus(pod *corev1.Pod, c corev1.Container, img image, in statusInput, running time.Time, w *waker) (cs corev1.ContainerStatus, started bool, at time.Time, ready bool, since time.Time) {
	at, ok := startedAt(&c, running, in.probes[probeStartup])
	started = ok && !in.now.Before(at)
	if ok && !started {
		w.at(at)
	}
	if started {
		readyAt := at
		if c.ReadinessProbe != nil {
			readyAt = timingOf(c.ReadinessProbe).firstSuccess(running, at)
		}
		var next time.Time
		ready, since, next = readiness(c.ReadinessProbe, latest(readyAt, in.tl.ready), in.probes[probeReadiness], in.now)
		w.at(next)
	}
	cs = corev1.ContainerStatus{
		Name:         c.Name,
		State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ts(running)}},
		Ready:        ready,
		Started:      ptrTo(started),
		Image:        img.ref,
		ImageID:      img.id(),
		ContainerID:  containerID(pod, c),
		RestartCount: restartCount(pod, c.Name),
	}
	return cs, started, at, ready, since
}

// waitingStatus is the status of a container that has not started: no ID, the image as the
// pod spec names it.
func waitingStatus(pod *corev1.Pod, c corev1.Container, st *corev1.ContainerStateWaiting) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name:         c.Name,
		State:        corev1.ContainerState{Waiting: st},
		Started:      ptrTo(false),
		Image:        c.Image,
		RestartCount: restartCount(pod, c.Name),
	}
}

func containerID(pod *corev1.Pod, c corev1.Container) string {
	return fmt.Sprintf("stub://%s/%s", pod.UID, c.Name)
}

// restartCount keeps the count the pod's status has for the container: the stub never
// restarts one, but does not reset a count either.
func restartCount(pod *corev1.Pod, name string) int32 {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if cs.Name == name {
				return cs.RestartCount
			}
		}
	}
	return 0
}

func ptrTo[T any](v T) *T { return &v }

func containerNames(cs []corev1.Container) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return names
}

// setInitialized sets Initialized: True when there is nothing left to initialize, else False
// naming the init containers that have not completed, as the kubelet does.
func setInitialized(s *corev1.PodStatus, incomplete []string, at metav1.Time) {
	if len(incomplete) == 0 {
		setPodCondition(s, corev1.PodInitialized, corev1.ConditionTrue, "", at)
		return
	}
	setPodConditionMessage(s, corev1.PodInitialized, corev1.ConditionFalse, "ContainersNotInitialized",
		fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " ")), at)
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
	notReady(&s, nil, "PodCompleted", finished)
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
	s.EphemeralContainerStatuses = ephemeralEnded(s.EphemeralContainerStatuses, 0, "Completed", finished)
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
	start := ts(rec.start)
	s.StartTime = &start
	return s
}

// notReady sets Ready and ContainersReady to False with the kubelet's message naming the
// containers that are not ready (none for a completed pod).
func notReady(s *corev1.PodStatus, unready []string, reason string, at metav1.Time) {
	msg := ""
	if reason != "PodCompleted" {
		msg = fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
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
			Name:         c.Name,
			State:        st,
			Image:        c.Image,
			Started:      &started,
			RestartCount: restartCount(pod, c.Name),
		}
		switch {
		case st.Running != nil && ready != nil:
			cs.Ready = *ready
		case init && st.Terminated != nil && st.Terminated.ExitCode == 0:
			cs.Ready = true
		}
		if st.Waiting == nil {
			if img := parseImage(c.Image); img.invalid == nil {
				cs.Image, cs.ImageID = img.ref, img.id()
			}
			cs.ContainerID = containerID(pod, c)
		}
		out = append(out, cs)
	}
	return out
}
