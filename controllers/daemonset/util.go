package daemonset

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/dump"
)

// Label and annotation keys clients observe on DaemonSets, pods and ControllerRevisions.
const (
	// RevisionHashLabel carries the template hash on pods and ControllerRevisions.
	RevisionHashLabel = appsv1.DefaultDaemonSetUniqueLabelKey
	// TemplateGenerationLabel carries the DaemonSet's template generation on its pods.
	TemplateGenerationLabel = "pod-template-generation"
	// TemplateGenerationAnnotation is the apps/v1 form of spec.templateGeneration, kept by the API server.
	TemplateGenerationAnnotation = appsv1.DeprecatedTemplateGeneration
)

// Event reasons (docs/daemonset-controller.md#events).
const (
	ReasonSelectingAll       = "SelectingAll"
	ReasonFailedPlacement    = "FailedPlacement"
	ReasonFailedDaemonPod    = "FailedDaemonPod"
	ReasonSucceededDaemonPod = "SucceededDaemonPod"
	ReasonSuccessfulCreate   = "SuccessfulCreate"
	ReasonFailedCreate       = "FailedCreate"
	ReasonSuccessfulDelete   = "SuccessfulDelete"
	ReasonFailedDelete       = "FailedDelete"
)

// systemCriticalPriority is the priority from which a pod counts as critical (scheduling
// API's SystemCriticalPriority, 2 * 10^9).
const systemCriticalPriority = int32(2000000000)

// controllerKind is the kind written into controller references.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// addOrUpdateDaemonPodTolerations adds the tolerations every daemon pod gets
// (docs/daemonset-controller.md#tolerations): daemons must survive node problems and run on
// cordoned or pressured nodes.
func addOrUpdateDaemonPodTolerations(spec *corev1.PodSpec) {
	auto := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if spec.HostNetwork {
		auto = append(auto, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	for i := range auto {
		addOrUpdateToleration(spec, &auto[i])
	}
}

// addOrUpdateToleration replaces every toleration matching t on key, operator, value and
// effect (tolerationSeconds is not compared, so it is dropped), or appends t.
func addOrUpdateToleration(spec *corev1.PodSpec, t *corev1.Toleration) {
	out := make([]corev1.Toleration, 0, len(spec.Tolerations)+1)
	replaced := false
	for i := range spec.Tolerations {
		if t.MatchToleration(&spec.Tolerations[i]) {
			out = append(out, *t)
			replaced = true
			continue
		}
		out = append(out, spec.Tolerations[i])
	}
	if !replaced {
		out = append(out, *t)
	}
	spec.Tolerations = out
}

// replaceNodeNameAffinity pins a pod to nodeName with a required matchFields term
// (docs/daemonset-controller.md#pinning). Existing required terms are replaced, not ANDed: the
// pod must be schedulable exactly on that node; preferred terms, pod (anti)affinity and
// nodeSelector are left alone.
func replaceNodeNameAffinity(affinity *corev1.Affinity, nodeName string) *corev1.Affinity {
	selector := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{
			Key:      metav1.ObjectNameField,
			Operator: corev1.NodeSelectorOpIn,
			Values:   []string{nodeName},
		}},
	}}}
	switch {
	case affinity == nil:
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: selector}}
	case affinity.NodeAffinity == nil:
		affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: selector}
	case affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil:
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = selector
	default:
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = selector.NodeSelectorTerms
	}
	return affinity
}

// newEvalPod is the pod the placement decision evaluates (docs/daemonset-controller.md#placement):
// the template with the DaemonSet's namespace and the automatic tolerations. The caller
// compares spec.nodeName itself.
func newEvalPod(ds *appsv1.DaemonSet) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: *ds.Spec.Template.ObjectMeta.DeepCopy(), Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Namespace = ds.Namespace
	addOrUpdateDaemonPodTolerations(&pod.Spec)
	return pod
}

// isCriticalPod reports whether LEGACY-BIND checks only the essential predicates for the
// pod (docs/daemonset-controller.md#critical-pods). The priority admission plugin may not
// have filled spec.priority on a template, so the two built-in critical priority classes
// count as well. The experimental critical-pod annotation was off by default in the seed
// era and is ignored.
func isCriticalPod(pod *corev1.Pod) bool {
	if pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority {
		return true
	}
	switch pod.Spec.PriorityClassName {
	case "system-node-critical", "system-cluster-critical":
		return true
	}
	return false
}

// isBestEffort reports whether no container of pod requests or limits cpu or memory (the
// only pods the old memory-pressure predicate turned away).
func isBestEffort(pod *corev1.Pod) bool {
	check := func(cs []corev1.Container) bool {
		for _, c := range cs {
			for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if q, ok := rl[name]; ok && !q.IsZero() {
						return false
					}
				}
			}
		}
		return true
	}
	return check(pod.Spec.InitContainers) && check(pod.Spec.Containers)
}

// nodeCondition reports whether node has condition t with status True.
func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyCondition returns the pod's Ready condition, if any.
func readyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// isPodReady: the Ready condition is True; the phase is not considered
// (docs/daemonset-controller.md#availability).
func isPodReady(pod *corev1.Pod) bool {
	c := readyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// isPodAvailable: Ready for more than minReadySeconds at now
// (docs/daemonset-controller.md#availability). A Ready condition without a transition time
// is never available when minReadySeconds > 0.
func isPodAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	c := readyCondition(pod)
	if c == nil || c.Status != corev1.ConditionTrue {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	minReady := time.Duration(minReadySeconds) * time.Second
	return !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Add(minReady).Before(now)
}

// availabilityMargin is how long after the instant a pod's availability is due the
// DaemonSet is looked at again: a pod is available only when it has been Ready for *more*
// than minReadySeconds, so a sync at the very instant would still find it unavailable. The
// deadline and the check read the same clock, so a millisecond is plenty.
const availabilityMargin = time.Millisecond

// nextAvailable returns how long from now until the first of pods that is Ready but not yet
// available turns available by the passing of time alone, and false when none will (no pod
// waits, minReadySeconds is 0, or a Ready condition lacks the transition time that would
// make it available). Pods being deleted are skipped: they will not be counted again.
// (docs/daemonset-controller.md#min-ready-seconds)
func nextAvailable(pods []*corev1.Pod, minReadySeconds int32, now time.Time) (time.Duration, bool) {
	if minReadySeconds <= 0 {
		return 0, false
	}
	minReady := time.Duration(minReadySeconds) * time.Second
	var soonest time.Duration
	found := false
	for _, pod := range pods {
		c := readyCondition(pod)
		if pod.DeletionTimestamp != nil || c == nil || c.Status != corev1.ConditionTrue || c.LastTransitionTime.IsZero() {
			continue
		}
		due := c.LastTransitionTime.Add(minReady)
		if due.Before(now) {
			continue // available already
		}
		if d := due.Sub(now) + availabilityMargin; !found || d < soonest {
			soonest, found = d, true
		}
	}
	return soonest, found
}

// isPodUpdated: the pod carries the current template hash
// (docs/daemonset-controller.md#updated-pods). Upstream also compares the template-generation
// label but against a formatted pointer, so only the hash ever matched.
func isPodUpdated(pod *corev1.Pod, hash string) bool {
	return hash != "" && pod.Labels[RevisionHashLabel] == hash
}

// sortPodsOldestFirst orders pods as podByCreationTimestampAndPhase does
// (docs/daemonset-controller.md#pod-order): bound before unbound, then older
// creationTimestamp, then name. Despite upstream's name the phase plays no part.
func sortPodsOldestFirst(pods []*corev1.Pod) {
	if len(pods) < 2 {
		return
	}
	slices.SortStableFunc(pods, compareOldestFirst)
}

func compareOldestFirst(a, b *corev1.Pod) int {
	if aBound, bBound := a.Spec.NodeName != "", b.Spec.NodeName != ""; aBound != bBound {
		if aBound {
			return -1
		}
		return 1
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		if a.CreationTimestamp.Before(&b.CreationTimestamp) {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Name, b.Name)
}

// surgeCount is maxSurge scaled (rounding up) against n; 0 unless the strategy is
// RollingUpdate with maxSurge set.
func surgeCount(ds *appsv1.DaemonSet, n int) (int, error) {
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate == nil {
		return 0, nil
	}
	if v := ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge; v != nil {
		return intstr.GetScaledValueFromIntOrPercent(v, n, true)
	}
	return 0, nil
}

// unavailableCount is maxUnavailable scaled (rounding up) against n; 0 unless the strategy
// is RollingUpdate with maxUnavailable set.
func unavailableCount(ds *appsv1.DaemonSet, n int) (int, error) {
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate == nil {
		return 0, nil
	}
	if v := ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable; v != nil {
		return intstr.GetScaledValueFromIntOrPercent(v, n, true)
	}
	return 0, nil
}

// allowsSurge reports whether the DaemonSet surges (maxSurge non-zero, scaled against 1).
func allowsSurge(ds *appsv1.DaemonSet) bool {
	n, err := surgeCount(ds, 1)
	return err == nil && n > 0
}

// templateGeneration parses the deprecated template-generation annotation (nil if absent or
// unparsable).
func templateGeneration(ds *appsv1.DaemonSet) *int64 {
	v, ok := ds.Annotations[TemplateGenerationAnnotation]
	if !ok {
		return nil
	}
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil
	}
	return &g
}

// computeHash is Kubernetes' ComputeHash (docs/daemonset-controller.md#revision-hash):
// FNV-1a (32 bit) over a deterministic dump of the template, plus 8 bytes carrying
// collisionCount when set, written as the decimal sum mapped into the safe alphabet.
// Byte-exact parity keeps hashes equal to a real cluster's; TestComputeHash pins them.
func computeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(*template))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// revisionName names a ControllerRevision "<ds>-<hash>", trimming the prefix to 223 characters
// so the name stays a valid DNS subdomain.
func revisionName(dsName, hash string) string {
	if len(dsName) > 223 {
		dsName = dsName[:223]
	}
	return dsName + "-" + hash
}

// historyPatch is the ControllerRevision data for ds
// (docs/daemonset-controller.md#revision-data): the canonical JSON (sorted keys) of
// {"spec":{"template":{...,"$patch":"replace"}}}, a strategic-merge patch that restores the
// template. kubectl rollout undo applies exactly these bytes, and Match compares them byte for
// byte, so the encoding must not change.
func historyPatch(ds *appsv1.DaemonSet) ([]byte, error) {
	raw, err := json.Marshal(ds.Spec.Template)
	if err != nil {
		return nil, err
	}
	// apimachinery's decoder keeps integers as int64; encoding/json's float64 would round
	// those above 2^53, and kubectl rollout undo would restore the rounded value.
	var template map[string]any
	if err := utiljson.Unmarshal(raw, &template); err != nil {
		return nil, err
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
}

// podNamePrefix is the generateName for daemon pods: "<ds>-" unless that is not a valid
// prefix, then the bare name.
func podNamePrefix(dsName string) string {
	prefix := dsName + "-"
	// A generateName is valid when it would be a valid name with the trailing dash replaced.
	if len(validation.IsDNS1123Subdomain(dsName+"a")) != 0 {
		return dsName
	}
	return prefix
}

// findUpdatedPodsOnNode splits a node's non-terminating pods into the one with the current
// hash and the one without; ok is false when either kind occurs more than once
// (docs/daemonset-controller.md#updated-pods).
func findUpdatedPodsOnNode(pods []*corev1.Pod, hash string) (newPod, oldPod *corev1.Pod, ok bool) {
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if isPodUpdated(pod, hash) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = pod
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = pod
		}
	}
	return newPod, oldPod, true
}

// isTerminalAndDeleted: Succeeded or Failed and already being deleted (e.g. held by a
// finalizer). CURRENT leaves such pods out of bookkeeping so the node can be refilled at once.
func isTerminalAndDeleted(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed)
}
