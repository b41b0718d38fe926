package kubeletstub

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"

	"github.com/miniplane/miniplane/configs"
)

// Image pulls. A stub node "pulls" every image at once, except those an image-pull-failures
// entry names (configs.KubeletStub.ImagePullFailures, and the node annotation
// AnnotationImagePullFailures). Their containers wait the way a kubelet's do when the
// registry answers "not found": ErrImagePull right after each attempt, ImagePullBackOff
// until the next one, attempts spaced by the kubelet's image back-off. The schedule is a
// pure function of the instant the pull began, so it costs no state and no timer but the
// pod's next wake-up.

// The kubelet's image pull back-off (its backOffPeriod and MaxContainerBackOff).
const (
	imagePullBackoffInitial = 10 * time.Second
	imagePullBackoffMax     = 5 * time.Minute
	// imagePullErrorShown is how long a failed attempt shows as ErrImagePull before the
	// container turns to ImagePullBackOff: a kubelet keeps the pull error until its next
	// sync of the pod, a few seconds later.
	imagePullErrorShown = 5 * time.Second
)

// Waiting reasons of the kubelet's image manager.
const (
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
	reasonInvalidImageName = "InvalidImageName"
)

// imagePattern is one parsed image-pull-failures entry.
type imagePattern struct {
	raw string
	// Exactly one of these is set (all for "*").
	all          bool
	tag          string
	domainSuffix string
	registry     string
	// repo (a normalized name such as docker.io/library/busybox) matches every tag of it,
	// or only tag repoTag when that is set.
	repo, repoTag string
}

// parseImagePatterns parses image-pull-failures entries (a configuration list, or the
// comma-separated value of the node annotation).
func parseImagePatterns(entries []string) ([]imagePattern, error) {
	out := make([]imagePattern, 0, len(entries))
	for _, e := range entries {
		if err := configs.ValidateImagePattern(e); err != nil {
			return nil, err
		}
		p := imagePattern{raw: e}
		switch {
		case e == "*":
			p.all = true
		case strings.HasPrefix(e, ":"):
			p.tag = e[1:]
		case strings.HasPrefix(e, "."):
			p.domainSuffix = strings.ToLower(e)
		case strings.HasSuffix(e, "/"):
			p.registry = strings.ToLower(strings.TrimSuffix(e, "/"))
		default:
			named, err := reference.ParseNormalizedNamed(e)
			if err != nil {
				return nil, fmt.Errorf("entry %q is not an image reference: %w", e, err)
			}
			p.repo = named.Name()
			if t, ok := named.(reference.Tagged); ok {
				p.repoTag = t.Tag()
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// parseImageAnnotation parses the value of AnnotationImagePullFailures.
func parseImageAnnotation(v string) ([]imagePattern, error) {
	var entries []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			entries = append(entries, e)
		}
	}
	return parseImagePatterns(entries)
}

// image is a container image as the stub's runtime understands it.
type image struct {
	spec string
	// invalid is set when spec is not an image reference; nothing else is then.
	invalid error
	// ref is the normalized reference (docker.io/library/busybox:latest) the runtime reports
	// as the container's image; host its registry host without port.
	ref, repo, host, domain, tag string
}

func parseImage(spec string) image {
	img := image{spec: spec}
	named, err := reference.ParseNormalizedNamed(spec)
	if err != nil {
		img.invalid = err
		return img
	}
	named = reference.TagNameOnly(named)
	img.ref, img.repo = named.String(), named.Name()
	img.domain = strings.ToLower(reference.Domain(named))
	img.host = img.domain
	if i := strings.LastIndexByte(img.host, ':'); i >= 0 && !strings.Contains(img.host[i:], "]") {
		img.host = img.host[:i]
	}
	if t, ok := named.(reference.Tagged); ok {
		img.tag = t.Tag()
	}
	return img
}

// id is the image ID the stub reports for a pulled image: repository@sha256 of the reference,
// in the shape of a container runtime's, so that two tags of one repository differ.
func (img image) id() string {
	sum := sha256.Sum256([]byte(img.ref))
	return img.repo + "@sha256:" + hex.EncodeToString(sum[:])
}

func (p imagePattern) matches(img image) bool {
	switch {
	case p.all:
		return true
	case p.tag != "":
		return img.tag == p.tag
	case p.domainSuffix != "":
		return strings.HasSuffix(img.host, p.domainSuffix)
	case p.registry != "":
		return img.domain == p.registry || img.host == p.registry
	default:
		return img.repo == p.repo && (p.repoTag == "" || img.tag == p.repoTag)
	}
}

// pullPolicy decides which images fail to pull on one node: the fleet's list and the node's
// annotation.
type pullPolicy struct {
	cluster []imagePattern
	node    []imagePattern
}

// failure returns why img cannot be pulled, or "" when it can.
func (pp pullPolicy) failure(img image) string {
	for _, p := range pp.node {
		if p.matches(img) {
			return fmt.Sprintf("%q matches %q in the node annotation %s", img.ref, p.raw, AnnotationImagePullFailures)
		}
	}
	for _, p := range pp.cluster {
		if p.matches(img) {
			return fmt.Sprintf("%q matches %q in image-pull-failures of the stub configuration", img.ref, p.raw)
		}
	}
	return ""
}

// pullWaiting is the waiting state at now of a container whose image cannot be pulled
// (why says so) and whose first pull began at since, and when that state next changes.
func pullWaiting(img image, why string, since, now time.Time) (*corev1.ContainerStateWaiting, time.Time) {
	if img.invalid != nil {
		return &corev1.ContainerStateWaiting{
			Reason:  reasonInvalidImageName,
			Message: fmt.Sprintf("Failed to apply default image tag %q: couldn't parse image name %q: %v", img.spec, img.spec, img.invalid),
		}, time.Time{}
	}
	pullErr := fmt.Sprintf("Failed to pull image %q: rpc error: code = NotFound desc = miniplane stub node: %s", img.spec, why)
	attempt, next := pullAttempt(since, now)
	if now.Before(attempt.Add(imagePullErrorShown)) {
		return &corev1.ContainerStateWaiting{Reason: reasonErrImagePull, Message: pullErr}, attempt.Add(imagePullErrorShown)
	}
	return &corev1.ContainerStateWaiting{
		Reason:  reasonImagePullBackOff,
		Message: fmt.Sprintf("Back-off pulling image %q: %s: %s", img.spec, reasonErrImagePull, pullErr),
	}, next
}

// pullAttempt returns the last pull attempt at or before now of a pull that began at since,
// and the next one: attempts follow each other after 10s, 20s, 40s … up to 5 minutes.
func pullAttempt(since, now time.Time) (last, next time.Time) {
	last, backoff := since, imagePullBackoffInitial
	for backoff < imagePullBackoffMax {
		if now.Before(last.Add(backoff)) {
			return last, last.Add(backoff)
		}
		last, backoff = last.Add(backoff), min(2*backoff, imagePullBackoffMax)
	}
	// At the cap the attempts are evenly spaced: skip the whole periods at once.
	if n := now.Sub(last) / imagePullBackoffMax; n > 0 {
		last = last.Add(n * imagePullBackoffMax)
	}
	return last, last.Add(imagePullBackoffMax)
}

// pullEvents records the kubelet's events for the containers that want, the status just
// written over old, puts in a pull-failure state: Failed for a failed attempt, BackOff when
// the back-off begins, InspectFailed for a name that is no image reference.
func (c *podController) pullEvents(n *stubNode, pod *corev1.Pod, old, want *corev1.PodStatus) {
	if !c.events.enabled() {
		return
	}
	for _, l := range [][2][]corev1.ContainerStatus{
		{old.InitContainerStatuses, want.InitContainerStatuses},
		{old.ContainerStatuses, want.ContainerStatuses},
		{old.EphemeralContainerStatuses, want.EphemeralContainerStatuses},
	} {
		for _, cs := range l[1] {
			w := cs.State.Waiting
			if w == nil || (w.Reason != reasonErrImagePull && w.Reason != reasonImagePullBackOff && w.Reason != reasonInvalidImageName) {
				continue
			}
			if prev := findContainerStatus(l[0], cs.Name); prev != nil && prev.State.Waiting != nil && prev.State.Waiting.Reason == w.Reason {
				continue
			}
			switch w.Reason {
			case reasonErrImagePull:
				c.events.event(n, pod, corev1.EventTypeWarning, "Failed", w.Message)
			case reasonImagePullBackOff:
				c.events.event(n, pod, corev1.EventTypeNormal, "BackOff", fmt.Sprintf("Back-off pulling image %q", cs.Image))
			default:
				c.events.event(n, pod, corev1.EventTypeWarning, "InspectFailed", w.Message)
			}
		}
	}
}

func findContainerStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}
