package kubeletstub

import (
	"fmt"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
)

// Container events. A kubelet reports each container it starts with Normal events on the
// pod (Pulling and Pulled, or Pulled alone when the image is on the node already; then
// Created and Started) and each container it stops with Killing; `kubectl describe pod`
// shows them under the scheduler's Scheduled. The stub records the same reasons and
// messages, with the container in the event's fieldPath, when a status it writes first
// gives a container an ID (README.md, "Stub kubelets and fault injection").
// They count against the fleet's event budget (eventRecorder), a pod's all together.

// containerEvent is one event about one container of a pod. Its reason and message are
// only built when the budget lets it be recorded: at scale most are not.
type containerEvent struct {
	kind eventKind
	// init and ephemeral say the container is an init container or an ephemeral one (its
	// fieldPath).
	init, ephemeral bool
	// name is the container's name, image its image as the pod's spec gives it.
	name, image string
}

type eventKind uint8

const (
	eventPulling eventKind = iota
	eventPulled
	eventAlreadyPresent
	eventCreated
	eventStarted
	eventKilling
)

// reasonAndMessage are the kubelet's reason and message for e.
func (e containerEvent) reasonAndMessage() (string, string) {
	switch e.kind {
	case eventPulling:
		return "Pulling", fmt.Sprintf("Pulling image %q", imageWithTag(e.image))
	case eventPulled:
		// The stub pulls at once and stores no layers, hence 0s and 0 bytes.
		return "Pulled", fmt.Sprintf("Successfully pulled image %q in 0s (0s including waiting). Image size: 0 bytes.", imageWithTag(e.image))
	case eventAlreadyPresent:
		return "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", imageWithTag(e.image))
	case eventCreated:
		return "Created", "Container created"
	case eventStarted:
		return "Started", "Container started"
	default:
		return "Killing", "Stopping container " + e.name
	}
}

func (e containerEvent) fieldPath() string {
	switch {
	case e.init:
		return "spec.initContainers{" + e.name + "}"
	case e.ephemeral:
		return "spec.ephemeralContainers{" + e.name + "}"
	}
	return "spec.containers{" + e.name + "}"
}

// recordContainerEvents records evs on pod if the fleet's budget has room for all of them.
func (c *podController) recordContainerEvents(n *stubNode, pod *corev1.Pod, evs []containerEvent, now time.Time) {
	if !c.events.allow(now, eventsOfContainers, len(evs)) {
		return
	}
	for _, e := range evs {
		ref := &corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: e.fieldPath(),
		}
		reason, message := e.reasonAndMessage()
		c.events.event(n, ref, corev1.EventTypeNormal, reason, message)
	}
}

// startEvents returns the events of the containers that want, the status just written over
// old, starts: those that have an ID in want and had none in old. Init containers come
// first, each in the order of the pod's spec. An image a container starts from is on the
// node from then on.
func (n *stubNode) startEvents(pod *corev1.Pod, old, want *corev1.PodStatus) []containerEvent {
	var evs []containerEvent
	for _, group := range []struct {
		init, ephemeral bool
		containers      []corev1.Container
		old, want       []corev1.ContainerStatus
	}{
		{true, false, pod.Spec.InitContainers, old.InitContainerStatuses, want.InitContainerStatuses},
		{false, false, pod.Spec.Containers, old.ContainerStatuses, want.ContainerStatuses},
		{false, true, ephemeralAsContainers(pod), old.EphemeralContainerStatuses, want.EphemeralContainerStatuses},
	} {
		for i := range group.containers {
			ctr := &group.containers[i]
			now := findContainerStatus(group.want, ctr.Name)
			if now == nil || now.ContainerID == "" {
				continue
			}
			if before := findContainerStatus(group.old, ctr.Name); before != nil && before.ContainerID != "" {
				continue
			}
			e := containerEvent{init: group.init, ephemeral: group.ephemeral, name: ctr.Name, image: ctr.Image}
			n.mu.Lock()
			present := n.addImage(now.Image)
			n.mu.Unlock()
			policy := ctr.ImagePullPolicy
			if policy == "" {
				policy = defaultPullPolicy(ctr.Image)
			}
			if policy == corev1.PullNever || (policy == corev1.PullIfNotPresent && present) {
				evs = append(evs, e.as(eventAlreadyPresent))
			} else {
				evs = append(evs, e.as(eventPulling), e.as(eventPulled))
			}
			evs = append(evs, e.as(eventCreated), e.as(eventStarted))
		}
	}
	return evs
}

func (e containerEvent) as(kind eventKind) containerEvent {
	e.kind = kind
	return e
}

// addImage notes that the runtime has the image ref and says whether it had it before.
// Callers hold n.mu.
func (n *stubNode) addImage(ref string) (had bool) {
	if n.images == nil {
		n.images = map[string]bool{}
	}
	had = n.images[ref]
	n.images[ref] = true
	return had
}

// keepImages marks the images of the containers that started in status as on the node: a
// restarted kubelet finds in its runtime what it pulled before. Callers hold n.mu.
func (n *stubNode) keepImages(status *corev1.PodStatus) {
	for _, statuses := range [][]corev1.ContainerStatus{status.InitContainerStatuses, status.ContainerStatuses, status.EphemeralContainerStatuses} {
		for _, cs := range statuses {
			if cs.ContainerID != "" {
				n.addImage(cs.Image)
			}
		}
	}
}

// stopEvents are the Killing events of the containers running in status.
func stopEvents(status *corev1.PodStatus) []containerEvent {
	var evs []containerEvent
	for _, cs := range status.ContainerStatuses {
		if cs.State.Running != nil {
			evs = append(evs, containerEvent{kind: eventKilling, name: cs.Name})
		}
	}
	for _, cs := range status.InitContainerStatuses {
		if cs.State.Running != nil {
			evs = append(evs, containerEvent{kind: eventKilling, init: true, name: cs.Name})
		}
	}
	for _, cs := range status.EphemeralContainerStatuses {
		if cs.State.Running != nil {
			evs = append(evs, containerEvent{kind: eventKilling, ephemeral: true, name: cs.Name})
		}
	}
	return evs
}

// imageWithTag is the image as the kubelet names it in its events: as the spec gives it,
// with ":latest" added when it has neither tag nor digest.
func imageWithTag(spec string) string {
	named, err := reference.ParseNormalizedNamed(spec)
	if err == nil && reference.IsNameOnly(named) {
		return spec + ":latest"
	}
	return spec
}

// defaultPullPolicy is the API server's default for a container that sets none: Always
// for the tag latest or no tag, IfNotPresent otherwise.
func defaultPullPolicy(spec string) corev1.PullPolicy {
	named, err := reference.ParseNormalizedNamed(spec)
	if err != nil {
		return corev1.PullIfNotPresent
	}
	if _, digested := named.(reference.Digested); digested {
		return corev1.PullIfNotPresent
	}
	if t, tagged := named.(reference.Tagged); !tagged || t.Tag() == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}
