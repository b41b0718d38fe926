package daemonset

import (
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/miniplane/miniplane/controllers/placement"
)

// decision is the placement answer for one DaemonSet on one node
// (docs/daemonset-controller.md#placement). In CURRENT mode the first two are the same boolean,
// shouldRun.
type decision struct {
	// wantToRun: the node is in the DaemonSet's scope; it counts towards
	// desiredNumberScheduled and the rolling-update budget.
	wantToRun bool
	// shouldSchedule: a missing daemon pod should be created on the node now.
	shouldSchedule bool
	// shouldContinueRunning: daemon pods already on the node may stay.
	shouldContinueRunning bool
}

var (
	runEverywhere = decision{wantToRun: true, shouldSchedule: true, shouldContinueRunning: true}
	runNowhere    = decision{}
)

// Reasons for FailedPlacement events in LEGACY-BIND mode, worded as the seed-era scheduler.
const (
	reasonMemoryPressure = "node(s) had memory pressure"
	reasonDiskPressure   = "node(s) had disk pressure"
)

// evaluator holds what the decision needs from one DaemonSet version, prepared once: the
// evaluation pod (template plus automatic tolerations) and its parsed node affinity.
type evaluator struct {
	resourceVersion string
	uid             types.UID
	pod             *corev1.Pod
	nodeName        string
	affinity        placement.AffinityMatcher
	critical        bool
	bestEffort      bool
}

func newEvaluator(ds *appsv1.DaemonSet) *evaluator {
	pod := newEvalPod(ds)
	return &evaluator{
		resourceVersion: ds.ResourceVersion,
		uid:             ds.UID,
		pod:             pod,
		nodeName:        ds.Spec.Template.Spec.NodeName,
		affinity:        placement.NewAffinityMatcher(pod),
		critical:        isCriticalPod(pod),
		bestEffort:      isBestEffort(pod),
	}
}

// evaluatorCache keeps one evaluator per DaemonSet UID, rebuilt when the cached object's
// resourceVersion moves. Node events evaluate every DaemonSet against the node, so a
// fleet joining at once would otherwise copy each template thousands of times.
type evaluatorCache struct {
	mu sync.Mutex
	m  map[types.UID]*evaluator
}

func (c *evaluatorCache) get(ds *appsv1.DaemonSet) *evaluator {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[ds.UID]; ok && e.resourceVersion == ds.ResourceVersion && ds.ResourceVersion != "" {
		return e
	}
	e := newEvaluator(ds)
	if c.m == nil {
		c.m = map[types.UID]*evaluator{}
	}
	c.m[ds.UID] = e
	return e
}

func (c *evaluatorCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// current is CURRENT's NodeShouldRunDaemonPod (docs/daemonset-controller.md#placement-current):
// only the template's nodeName, node selector and required affinity, and NoSchedule/NoExecute
// taints matter; the scheduler and kubelet judge everything else.
func (e *evaluator) current(node *corev1.Node) decision {
	if e.nodeName != "" && e.nodeName != node.Name {
		return runNowhere
	}
	if !e.affinity.Matches(node) {
		return runNowhere
	}
	if _, untolerated := placement.UntoleratedTaint(e.pod, node, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute); untolerated {
		// A pod already there survives a NoSchedule taint but is evicted by NoExecute.
		_, noExecute := placement.UntoleratedTaint(e.pod, node, corev1.TaintEffectNoExecute)
		return decision{shouldContinueRunning: !noExecute}
	}
	return runEverywhere
}

// legacy is the seed era's nodeShouldRunDaemonPod with the full predicate set (gate off;
// docs/daemonset-controller.md#placement-legacy). others are the pods bound to node that this
// DaemonSet does not control. It returns the FailedPlacement reasons to report, in the order
// the seed emitted them.
//
// The failure reasons are visited in the seed's order: taints, resources, host ports, node
// selector/affinity, then node pressure. Intentional mismatches (selector, host ports,
// NoExecute taint) return at once with no event; insufficient resources only block placement
// (the node stays wanted, so it counts as desired and the DaemonSet is suspended there) and
// are reported only when nothing else already blocked it.
func (e *evaluator) legacy(node *corev1.Node, others []*corev1.Pod) (decision, []string) {
	if e.nodeName != "" && e.nodeName != node.Name {
		return runNowhere, nil
	}
	d := runEverywhere
	if _, untolerated := placement.UntoleratedTaint(e.pod, node, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute); untolerated {
		if _, noExecute := placement.UntoleratedTaint(e.pod, node, corev1.TaintEffectNoExecute); noExecute {
			return runNowhere, nil
		}
		d.wantToRun, d.shouldSchedule = false, false
	}
	var insufficient []placement.Insufficient
	if !e.critical {
		// Critical pods are checked against the essential predicates only.
		insufficient = placement.InsufficientResources(e.pod, node, others)
	}
	if placement.HostPortConflict(e.pod, others) {
		return runNowhere, nil
	}
	if !e.affinity.Matches(node) {
		return runNowhere, nil
	}
	var reasons []string
	if !e.critical {
		if e.bestEffort && nodeCondition(node, corev1.NodeMemoryPressure) {
			d.shouldSchedule = false
			reasons = append(reasons, reasonMemoryPressure)
		}
		if nodeCondition(node, corev1.NodeDiskPressure) {
			d.shouldSchedule = false
			reasons = append(reasons, reasonDiskPressure)
		}
	}
	if len(insufficient) > 0 && d.shouldSchedule {
		// The seed remembered the last insufficient resource and reported it alone.
		reasons = append(reasons, fmt.Sprintf("Insufficient %s", insufficient[len(insufficient)-1].Resource))
		d.shouldSchedule = false
	}
	return d, reasons
}

// otherPodsOnNode lists the pods bound to node that ds does not control (the seed's simulate
// input). Terminal pods are skipped by the placement helpers themselves.
func (c *Controller) otherPodsOnNode(ds *appsv1.DaemonSet, node string) []*corev1.Pod {
	objs, err := c.podIndexer.ByIndex(indexPodsByNode, node)
	if err != nil {
		return nil
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && ref.UID == ds.UID {
			continue
		}
		out = append(out, pod)
	}
	return out
}

// decide answers for ds on node in the configured mode. Events are for the sync path only:
// handlers evaluate nodes too but must not report placement failures.
func (c *Controller) decide(ds *appsv1.DaemonSet, node *corev1.Node) (decision, []string) {
	e := c.evaluators.get(ds)
	if !c.legacy {
		return e.current(node), nil
	}
	return e.legacy(node, c.otherPodsOnNode(ds, node.Name))
}

// suspendedSet remembers, per node, the DaemonSets that want to run there but could not be
// placed (e.g. insufficient resources), so that a pod leaving the node retries them.
type suspendedSet struct {
	mu sync.Mutex
	m  map[string]map[string]struct{}
}

func (s *suspendedSet) set(node, key string, suspended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !suspended {
		if keys, ok := s.m[node]; ok {
			delete(keys, key)
			if len(keys) == 0 {
				delete(s.m, node)
			}
		}
		return
	}
	if s.m == nil {
		s.m = map[string]map[string]struct{}{}
	}
	if s.m[node] == nil {
		s.m[node] = map[string]struct{}{}
	}
	s.m[node][key] = struct{}{}
}

func (s *suspendedSet) list(node string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.m[node]))
	for k := range s.m[node] {
		out = append(out, k)
	}
	return out
}

func (s *suspendedSet) removeEverywhere(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, keys := range s.m {
		delete(keys, key)
		if len(keys) == 0 {
			delete(s.m, node)
		}
	}
}

// requeueSuspended re-enqueues, rate limited, the DaemonSets suspended on node.
func (c *Controller) requeueSuspended(node string) {
	for _, key := range c.suspended.list(node) {
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			continue
		}
		if _, err := c.dsLister.DaemonSets(ns).Get(name); err != nil {
			continue
		}
		c.queue.AddRateLimited(key)
	}
}
