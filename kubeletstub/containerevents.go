package kubeletstub

import (
	"fmt"
	"time"

	"github.com/distribution/reference"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"

	"github.com/miniplane/miniplane/configs"
)

// Container events. A kubelet reports each container it starts with Normal events on the
// pod (Pulling and Pulled, or Pulled alone when the image is on the node already; then
// Created and Started) and each container it stops with Killing; `kubectl describe pod`
// shows them under the scheduler's Scheduled. The stub records the same reasons and
// messages, with the container in the event's fieldPath, when a status it writes first
// gives a container an ID (README.md, "Stub kubelets and fault injection").
//
// A fleet stands for many kubelets in one process, so a bound that is per node on a real
// kubelet (event-qps, event-burst) is fleet-wide here; without it a 5,000-node rollout
// would write four Events per pod besides the pod's own writes. A pod's events are taken
// from the budget together, so a pod shows all of them or none.

// The kubelet's event reasons for containers.
const (
	reasonPulling = "Pulling"
	reasonPulled  = "Pulled"
	reasonCreated = "Created"
	reasonStarted = "Started"
	reasonKilling = "Killing"
)

// newEventBudget returns the fleet's bound on container events, nil when there is none.
func newEventBudget(cfg configs.KubeletStub) *rate.Limiter {
	if cfg.EventQPS <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(cfg.EventQPS), cfg.EventBurst)
}

// containerEvent is one event about one container of a pod.
type containerEvent struct {
	fieldPath, reason, message string
}

// recordContainerEvents records evs on pod if the fleet's budget has room for all of them.
func (c *podController) recordContainerEvents(n *stubNode, pod *corev1.Pod, evs []containerEvent, now time.Time) {
	if len(evs) == 0 || c.newRecorder == nil {
		return
	}
	if c.eventBudget != nil && !c.eventBudget.AllowN(now, len(evs)) {
		c.metrics.eventsDropped.Add(float64(len(evs)))
		return
	}
	for _, e := range evs {
		ref := &corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: e.fieldPath,
		}
		c.event(n, ref, corev1.EventTypeNormal, e.reason, e.message)
	}
}

// startEvents returns the events of the containers that want, the status just written over
// old, starts: those that have an ID in want and had none in old. Init containers come
// first, each in the order of the pod's spec. An image a container starts from is on the
// node from then on.
func (c *podController) startEvents(n *stubNode, pod *corev1.Pod, old, want *corev1.PodStatus) []containerEvent {
	var evs []containerEvent
	for _, group := range []struct {
		path       string
		containers []corev1.Container
		old, want  []corev1.ContainerStatus
	}{
		{"spec.initContainers", pod.Spec.InitContainers, old.InitContainerStatuses, want.InitContainerStatuses},
		{"spec.containers", pod.Spec.Containers, old.ContainerStatuses, want.ContainerStatuses},
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
			path := group.path + "{" + ctr.Name + "}"
			evs = append(evs, n.pullEvents(path, ctr, now.Image)...)
			evs = append(evs,
				containerEvent{path, reasonCreated, "Container created"},
				containerEvent{path, reasonStarted, "Container started"})
		}
	}
	return evs
}

// pullEvents are the image manager's events for starting ctr, whose image the runtime knows
// as ref: Pulled "already present" when the pull policy lets the node use the copy it has,
// else Pulling and Pulled. The stub pulls at once and stores no layers, hence 0s and 0 bytes.
func (n *stubNode) pullEvents(path string, ctr *corev1.Container, ref string) []containerEvent {
	img := imageWithTag(ctr.Image)
	n.mu.Lock()
	present := n.images[ref]
	if !present {
		if n.images == nil {
			n.images = map[string]bool{}
		}
		n.images[ref] = true
	}
	n.mu.Unlock()
	policy := ctr.ImagePullPolicy
	if policy == "" {
		policy = defaultPullPolicy(ctr.Image)
	}
	if policy == corev1.PullNever || (policy == corev1.PullIfNotPresent && present) {
		return []containerEvent{{path, reasonPulled, fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", img)}}
	}
	return []containerEvent{
		{path, reasonPulling, fmt.Sprintf("Pulling image %q", img)},
		{path, reasonPulled, fmt.Sprintf("Successfully pulled image %q in 0s (0s including waiting). Image size: 0 bytes.", img)},
	}
}

// keepImages marks the images of the containers that started in status as on the node: a
// restarted kubelet finds in its runtime what it pulled before. Callers hold n.mu.
func (n *stubNode) keepImages(status *corev1.PodStatus) {
	for _, statuses := range [][]corev1.ContainerStatus{status.InitContainerStatuses, status.ContainerStatuses} {
		for _, cs := range statuses {
			if cs.ContainerID == "" {
				continue
			}
			if n.images == nil {
				n.images = map[string]bool{}
			}
			n.images[cs.Image] = true
		}
	}
}

// stopEvents are the Killing events of the containers running in status.
func stopEvents(pod *corev1.Pod, status *corev1.PodStatus) []containerEvent {
	var evs []containerEvent
	for _, group := range []struct {
		path     string
		statuses []corev1.ContainerStatus
	}{
		{"spec.containers", status.ContainerStatuses},
		{"spec.initContainers", status.InitContainerStatuses},
	} {
		for _, cs := range group.statuses {
			if cs.State.Running != nil {
				evs = append(evs, containerEvent{group.path + "{" + cs.Name + "}", reasonKilling, "Stopping container " + cs.Name})
			}
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
