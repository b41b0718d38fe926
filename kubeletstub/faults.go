package kubeletstub

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/miniplane/miniplane/configs"
)

// Node annotations that inject faults at run time (`kubectl annotate node …`). They are read
// on every decision, so adding or removing one takes effect without a restart. An annotation
// wins over the same behaviour set in the configuration.
const (
	// AnnotationRejectPods rejects every new pod on the node (phase Failed) with the
	// annotation's value as the reason ("Rejected" when empty), until it is removed. Pods
	// already admitted keep running.
	AnnotationRejectPods = "stub.miniplane.io/reject-pods"
	// AnnotationFailAfter (a Go duration, e.g. "30s") fails every running pod on the node
	// that long after its containers started: phase Failed, containers terminated with exit
	// code 1. Pods already older than that fail at once.
	AnnotationFailAfter = "stub.miniplane.io/fail-after"
	// AnnotationReadyDelay (a Go duration) is how long running pods wait before their Ready
	// condition turns True; it applies to pods that are not Ready yet.
	AnnotationReadyDelay = "stub.miniplane.io/ready-delay"
	// AnnotationCompleteAfter (a Go duration) ends the containers of the node's pods that
	// are not restarted (restartPolicy Never or OnFailure) that long after they started,
	// with exit code 0, so the pods Succeed; pods already older than that complete at once.
	AnnotationCompleteAfter = "stub.miniplane.io/complete-after"
	// AnnotationConditions ("MemoryPressure=True,DiskPressure=True") makes the node report
	// these condition statuses instead of the healthy ones; any of Ready, MemoryPressure,
	// DiskPressure, PIDPressure and NetworkUnavailable may be set to True, False or Unknown.
	AnnotationConditions = "stub.miniplane.io/conditions"
	// AnnotationStopHeartbeats ("true") stops the node's status updates and Lease renewals,
	// so the node lifecycle controller sees it go unreachable; removing it (or "false")
	// resumes them at once.
	AnnotationStopHeartbeats = "stub.miniplane.io/stop-heartbeats"
	// AnnotationImagePullFailures (":TAG,.DOMAIN,REGISTRY/,*,IMAGE", the entries of
	// configs.KubeletStub.ImagePullFailures) names images the node cannot pull, on top of
	// the configured ones: their containers wait in ErrImagePull and ImagePullBackOff.
	AnnotationImagePullFailures = "stub.miniplane.io/image-pull-failures"
	// AnnotationFailProbes ("readiness", "startup" or both, comma-separated) makes those
	// probes fail on the node's containers that have them: readiness turns ready containers
	// unready after failureThreshold periods and keeps others unready; a failing startup
	// probe keeps containers not started (and unready). Removing it lets them recover.
	AnnotationFailProbes = "stub.miniplane.io/fail-probes"
	// AnnotationRuntimeHandlers ("kata,runsc") adds container runtime handlers to the node's
	// configured ones (StubNodeTemplate.RuntimeHandlers), as installing a runtime does: pods
	// waiting for one of them start, and the node reports them in status.runtimeHandlers.
	AnnotationRuntimeHandlers = "stub.miniplane.io/runtime-handlers"
)

// faultAnnotations are the annotations whose change re-syncs a node's pods.
var faultAnnotations = []string{AnnotationRejectPods, AnnotationFailAfter, AnnotationReadyDelay, AnnotationCompleteAfter, AnnotationConditions,
	AnnotationStopHeartbeats, AnnotationImagePullFailures, AnnotationFailProbes, AnnotationRuntimeHandlers}

// DefaultRejectReason is the reason of AnnotationRejectPods when its value is empty.
const DefaultRejectReason = "Rejected"

// faults are the behaviours in force on one node at one moment: the node's configured faults
// with its annotations on top.
type faults struct {
	// rejectReason, when not empty, rejects the share rejectRate of new pods.
	rejectReason string
	rejectRate   float64
	// rejectSource explains the rejection in the pod's message.
	rejectSource string
	// failAfter fails running pods that long after they started: all of them when
	// failFromAnnotation, else the share failRate, decided once per pod at admission.
	failAfter          time.Duration
	failRate           float64
	failFromAnnotation bool
	readyDelay         time.Duration
	// completeAfter ends pods that are not restarted that long after they started (0:
	// never).
	completeAfter time.Duration
	// conditions overrides the status of node conditions.
	conditions     map[corev1.NodeConditionType]corev1.ConditionStatus
	stopHeartbeats bool
	// pullFailures are the node annotation's image patterns (the fleet's are added to them).
	pullFailures []imagePattern
	// failProbes lists the probe kinds that fail.
	failProbes [numProbeKinds]bool
	// runtimeHandlers are the node's named runtime handlers: the configured ones, then the
	// annotation's; the default handler "" is always there besides them.
	runtimeHandlers []string
}

// currentFaults combines the node's configured template with the annotations of its Node
// object (which may be nil before the node is observed). Malformed annotations are ignored
// here; annotationProblems reports them.
func currentFaults(tmpl *configs.StubNodeTemplate, annotations map[string]string) faults {
	cf := tmpl.Faults
	f := faults{
		rejectReason:  cf.RejectPods,
		rejectRate:    cf.RejectRate,
		rejectSource:  "faults.reject-pods in the stub configuration",
		failAfter:     cf.FailAfter,
		failRate:      cf.FailRate,
		readyDelay:    tmpl.ReadyDelay,
		completeAfter: tmpl.CompleteAfter,
		conditions:    configuredConditions(cf.Conditions),
		// StopHeartbeats in the configuration is overridden by the annotation either way.
		stopHeartbeats:  cf.StopHeartbeats,
		runtimeHandlers: tmpl.RuntimeHandlers,
	}
	if v, ok := annotations[AnnotationRejectPods]; ok {
		f.rejectReason = strings.TrimSpace(v)
		if f.rejectReason == "" {
			f.rejectReason = DefaultRejectReason
		}
		f.rejectRate = 1
		f.rejectSource = "node annotation " + AnnotationRejectPods
	}
	if v, ok := annotations[AnnotationFailAfter]; ok {
		if d, err := parseNonNegativeDuration(v); err == nil {
			f.failAfter, f.failRate, f.failFromAnnotation = d, 1, true
		}
	}
	if v, ok := annotations[AnnotationReadyDelay]; ok {
		if d, err := parseNonNegativeDuration(v); err == nil {
			f.readyDelay = d
		}
	}
	if v, ok := annotations[AnnotationCompleteAfter]; ok {
		if d, err := parseNonNegativeDuration(v); err == nil {
			f.completeAfter = d
		}
	}
	if v, ok := annotations[AnnotationConditions]; ok {
		conds, _ := parseConditions(v)
		f.conditions = conds
	}
	if v, ok := annotations[AnnotationStopHeartbeats]; ok {
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
			f.stopHeartbeats = b
		}
	}
	if v, ok := annotations[AnnotationImagePullFailures]; ok {
		if p, err := parseImageAnnotation(v); err == nil {
			f.pullFailures = p
		}
	}
	if v, ok := annotations[AnnotationFailProbes]; ok {
		f.failProbes, _ = parseProbeKinds(v)
	}
	if v, ok := annotations[AnnotationRuntimeHandlers]; ok {
		if extra, err := parseRuntimeHandlers(v); err == nil {
			f.runtimeHandlers = appendNew(slices.Clone(f.runtimeHandlers), extra...)
		}
	}
	return f
}

// hasRuntimeHandler reports whether the node runs pods of handler ("" is the default one).
func (f *faults) hasRuntimeHandler(handler string) bool {
	return handler == "" || slices.Contains(f.runtimeHandlers, handler)
}

// parseRuntimeHandlers parses the value of AnnotationRuntimeHandlers: handler names (DNS
// labels, as a RuntimeClass's handler), comma-separated.
func parseRuntimeHandlers(v string) ([]string, error) {
	var out []string
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(h); len(errs) > 0 {
			return nil, fmt.Errorf("%q: %s", h, strings.Join(errs, "; "))
		}
		out = append(out, h)
	}
	return out, nil
}

// appendNew appends the elements of add that list does not hold yet.
func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}

// annotationProblems lists the fault annotations of a node that cannot be parsed, so the
// stub can log them once when they change instead of on every decision.
func annotationProblems(annotations map[string]string) []error {
	var errs []error
	for _, key := range []string{AnnotationFailAfter, AnnotationReadyDelay, AnnotationCompleteAfter} {
		if v, ok := annotations[key]; ok {
			if _, err := parseNonNegativeDuration(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", key, err))
			}
		}
	}
	if v, ok := annotations[AnnotationConditions]; ok {
		if _, err := parseConditions(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", AnnotationConditions, err))
		}
	}
	if v, ok := annotations[AnnotationStopHeartbeats]; ok {
		if _, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a boolean", AnnotationStopHeartbeats, v))
		}
	}
	if v, ok := annotations[AnnotationImagePullFailures]; ok {
		if _, err := parseImageAnnotation(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", AnnotationImagePullFailures, err))
		}
	}
	if v, ok := annotations[AnnotationRuntimeHandlers]; ok {
		if _, err := parseRuntimeHandlers(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", AnnotationRuntimeHandlers, err))
		}
	}
	if v, ok := annotations[AnnotationFailProbes]; ok {
		if _, unknown := parseProbeKinds(v); len(unknown) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q: want readiness, startup or both", AnnotationFailProbes, strings.Join(unknown, ",")))
		}
	}
	return errs
}

// faultAnnotationsChanged reports whether any stub.miniplane.io/ annotation differs.
func faultAnnotationsChanged(old, cur map[string]string) bool {
	for _, key := range faultAnnotations {
		ov, ook := old[key]
		cv, cok := cur[key]
		if ook != cok || ov != cv {
			return true
		}
	}
	return false
}

func parseNonNegativeDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", v)
	}
	return d, nil
}

// parseConditions parses "Type=Status,Type=Status". It returns the entries it understood and
// an error naming the first one it did not.
func parseConditions(v string) (map[corev1.NodeConditionType]corev1.ConditionStatus, error) {
	out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	var firstErr error
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, "=")
		typ, okType := configs.StubConditionType(strings.TrimSpace(name))
		status, okStatus := configs.StubConditionStatus(strings.TrimSpace(value))
		if !ok || !okType || !okStatus {
			if firstErr == nil {
				firstErr = fmt.Errorf("%q is not Type=True|False|Unknown with a type among Ready, MemoryPressure, DiskPressure, PIDPressure, NetworkUnavailable", item)
			}
			continue
		}
		out[corev1.NodeConditionType(typ)] = corev1.ConditionStatus(status)
	}
	return out, firstErr
}

// configuredConditions canonicalises the configuration's condition map (viper lower-cases
// its keys); Validate has already rejected unknown names.
func configuredConditions(in map[string]string) map[corev1.NodeConditionType]corev1.ConditionStatus {
	if len(in) == 0 {
		return nil
	}
	out := make(map[corev1.NodeConditionType]corev1.ConditionStatus, len(in))
	for k, v := range in {
		typ, ok1 := configs.StubConditionType(k)
		status, ok2 := configs.StubConditionStatus(v)
		if ok1 && ok2 {
			out[corev1.NodeConditionType(typ)] = corev1.ConditionStatus(status)
		}
	}
	return out
}
