package daemonset

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// updateBudget is what updatedDesiredNodeCounts works out for one rolling-update pass.
type updateBudget struct {
	// maxSurge and maxUnavailable are the strategy's values scaled (rounding up) against
	// desired. At most one is non-zero once the API server has validated the DaemonSet.
	maxSurge, maxUnavailable int
	// desired counts the nodes that want the DaemonSet; emptyDesired those of them with no
	// entry in the node-to-pods map.
	desired, emptyDesired int
}

// rollingUpdate replaces pods that do not carry the current hash
// (docs/daemonset-controller.md#rolling-update). It only deletes old pods or adds surge
// pods; manage creates the replacements on emptied nodes in a later sync.
//
// Assumptions and invariants:
//   - it runs only when expectations are satisfied, so the cache reflects our last writes;
//   - every node that should run the DaemonSet appears in the node-to-pods map (possibly with
//     no pods) and counts as unavailable until it has one available pod;
//   - maxUnavailable mode never makes an available old pod unavailable while the count of
//     unavailable nodes is at or above the budget; old pods that are already unavailable are
//     replaced without limit, as waiting would not improve availability;
//   - surge mode never runs more than maxSurge nodes with two pods, except that an
//     unavailable old pod is always surged at once, and removes an old pod only when its
//     replacement is available.
func (c *Controller) rollingUpdate(ctx context.Context, s *syncState) error {
	ds := s.ds
	nodeToPods, err := c.nodesToDaemonPods(ctx, s, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %w", ds.Name, err)
	}
	budget, err := c.updatedDesiredNodeCounts(s, nodeToPods)
	if err != nil {
		return fmt.Errorf("couldn't get unavailable numbers: %w", err)
	}
	now := c.clock.Now()
	available := func(p *corev1.Pod) bool { return isPodAvailable(p, ds.Spec.MinReadySeconds, now) }

	if budget.maxSurge == 0 {
		toDelete, numUnavailable := pickUnavailableUpdates(nodeToPods, s.hash, budget, available)
		s.log.Debug("rolling update", "maxUnavailable", budget.maxUnavailable, "unavailable", numUnavailable, "deleting", len(toDelete))
		return c.syncNodes(ctx, s, toDelete, nil)
	}

	plan := c.planSurge(s, nodeToPods, budget.maxSurge, available)
	toDelete := c.shouldNotRunDeletions(s, plan, budget.desired)
	toCreate := plan.creates(budget.maxSurge)
	s.log.Debug("rolling update with surge", "maxSurge", budget.maxSurge, "surging", plan.numSurge, "creating", len(toCreate), "deleting", len(toDelete))
	return c.syncNodes(ctx, s, toDelete, toCreate)
}

// pickUnavailableUpdates chooses the old pods to delete when maxSurge is 0
// (docs/daemonset-controller.md#max-unavailable): every old pod that is unavailable anyway,
// and available old pods while the number of unavailable nodes stays under
// maxUnavailable. It also returns that number of unavailable nodes.
func pickUnavailableUpdates(nodeToPods map[string][]*corev1.Pod, hash string, budget updateBudget, available func(*corev1.Pod) bool) (toDelete []string, numUnavailable int) {
	// Desired nodes without pods are unavailable (manage fills them). Upstream visits them
	// in random map order among the others; counting them first is one of those orders.
	numUnavailable = budget.emptyDesired
	var allowed, candidates []string
	for _, pods := range nodeToPods {
		newPod, oldPod, ok := findUpdatedPodsOnNode(pods, hash)
		if !ok {
			// Duplicates; manage prunes them. Count the node as unavailable meanwhile.
			numUnavailable++
			continue
		}
		switch {
		case oldPod == nil && newPod == nil, oldPod != nil && newPod != nil:
			// Empty (manage creates) or mid-replacement (manage deletes the extra).
			numUnavailable++
		case newPod != nil:
			if !available(newPod) {
				numUnavailable++
			}
		case !available(oldPod):
			// Only an old pod, and it is not serving: replacing it costs nothing.
			allowed = append(allowed, oldPod.Name)
			numUnavailable++
		case numUnavailable >= budget.maxUnavailable:
			// Only an available old pod, and the budget is spent.
		default:
			candidates = append(candidates, oldPod.Name)
		}
	}
	remaining := min(max(budget.maxUnavailable-numUnavailable, 0), len(candidates))
	return append(allowed, candidates[:remaining]...), numUnavailable
}

// surgePlan is what one surge pass decides before the budget is applied.
type surgePlan struct {
	// numSurge counts nodes that already run (or are stuck with) more than one pod;
	// numAvailable counts nodes whose serving pod is available.
	numSurge, numAvailable int
	// oldToDelete are old pods to delete now; shouldNotRunToDelete are available old pods
	// on nodes that no longer want the DaemonSet, deleted only while availability allows.
	oldToDelete, shouldNotRunToDelete []string
	// allowedNew are nodes to surge regardless of the budget (their old pod is unavailable);
	// candidateNew are nodes to surge within it.
	allowedNew, candidateNew []string
}

// planSurge classifies every node for a maxSurge rollout
// (docs/daemonset-controller.md#max-surge).
func (c *Controller) planSurge(s *syncState, nodeToPods map[string][]*corev1.Pod, maxSurge int, available func(*corev1.Pod) bool) *surgePlan {
	p := &surgePlan{}
	shouldRun := func(name string) bool {
		// A node missing from the list no longer runs anything; its pods are not waited for.
		n, ok := s.node(name)
		return ok && c.decideOnce(s, n).wantToRun
	}
	for nodeName, pods := range nodeToPods {
		newPod, oldPod, ok := findUpdatedPodsOnNode(pods, s.hash)
		if !ok {
			p.numSurge++
			continue
		}
		// A node with an old pod is as available as that pod, even beside an available new
		// one: the old pod is about to go, so only a node without one counts its new pod.
		if oldPod != nil {
			if available(oldPod) {
				p.numAvailable++
			}
		} else if newPod != nil && available(newPod) {
			p.numAvailable++
		}
		switch {
		case oldPod == nil:
			// Nothing to replace; manage creates a pod on an empty node.
		case newPod == nil:
			p.planOldOnly(nodeName, oldPod, maxSurge, available(oldPod), shouldRun)
		case !available(newPod):
			// Still surging: both pods stay until the new one is available.
			p.numSurge++
		default:
			p.oldToDelete = append(p.oldToDelete, oldPod.Name)
		}
	}
	return p
}

// planOldOnly decides for a node that runs only an old pod: surge it at once if the old
// pod is unavailable, within the budget if it is available; on a node that no longer
// wants the DaemonSet, delete the old pod instead.
func (p *surgePlan) planOldOnly(nodeName string, oldPod *corev1.Pod, maxSurge int, oldAvailable bool, shouldRun func(string) bool) {
	switch {
	case !oldAvailable:
		if !shouldRun(nodeName) {
			p.oldToDelete = append(p.oldToDelete, oldPod.Name)
			return
		}
		p.allowedNew = append(p.allowedNew, nodeName)
	case !shouldRun(nodeName):
		// Asked before the budget: a node that no longer wants the DaemonSet is not surged,
		// so a spent budget must not hold back the deletion of its pod.
		p.shouldNotRunToDelete = append(p.shouldNotRunToDelete, oldPod.Name)
	case p.numSurge >= maxSurge:
		// The budget is spent; the node waits for a later pass.
	default:
		p.candidateNew = append(p.candidateNew, nodeName)
	}
}

// creates returns the nodes to surge now: every allowed node, and candidates while the
// number of surging nodes stays within maxSurge.
func (p *surgePlan) creates(maxSurge int) []string {
	remaining := min(max(maxSurge-p.numSurge, 0), len(p.candidateNew))
	return append(p.allowedNew, p.candidateNew[:remaining]...)
}

// shouldNotRunDeletions returns the pods to delete in a surge pass: plan.oldToDelete, plus
// available old pods on nodes that no longer want them, but only while availability
// elsewhere exceeds the desired count, so a node change cannot dip below it during a surge
// rollout. Pods already gone from the cache are skipped.
func (c *Controller) shouldNotRunDeletions(s *syncState, plan *surgePlan, desired int) []string {
	toDelete := plan.oldToDelete
	deletable := plan.numAvailable - desired
	for _, name := range plan.shouldNotRunToDelete {
		if deletable <= 0 {
			break
		}
		if _, err := c.podLister.Pods(s.ds.Namespace).Get(name); err != nil {
			continue
		}
		toDelete = append(toDelete, name)
		deletable--
	}
	return toDelete
}

// updatedDesiredNodeCounts counts the nodes that want the DaemonSet (and those of them
// without pods), and scales maxSurge and maxUnavailable against that count (rounding up)
// (docs/daemonset-controller.md#update-budget). Both zero with nodes to update would stall
// the rollout, so maxUnavailable becomes 1.
func (c *Controller) updatedDesiredNodeCounts(s *syncState, nodeToPods map[string][]*corev1.Pod) (updateBudget, error) {
	var b updateBudget
	for _, node := range s.nodes {
		if !c.decideOnce(s, node).wantToRun {
			continue
		}
		b.desired++
		if _, ok := nodeToPods[node.Name]; !ok {
			b.emptyDesired++
		}
	}
	var err error
	if b.maxUnavailable, err = unavailableCount(s.ds, b.desired); err != nil {
		return updateBudget{}, fmt.Errorf("invalid value for MaxUnavailable: %w", err)
	}
	if !c.legacy {
		if b.maxSurge, err = surgeCount(s.ds, b.desired); err != nil {
			return updateBudget{}, fmt.Errorf("invalid value for MaxSurge: %w", err)
		}
	}
	if b.desired > 0 && b.maxUnavailable == 0 && b.maxSurge == 0 {
		s.log.Info("daemonset is not configured for surge or unavailability, defaulting to maxUnavailable=1")
		b.maxUnavailable = 1
	}
	return b, nil
}
