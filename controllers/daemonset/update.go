package daemonset

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// rollingUpdate replaces pods that do not carry the current hash (daemonset-behavior.md
// (g), CURRENT). It only deletes old pods or adds surge pods; manage creates the
// replacements on emptied nodes in a later sync.
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
	maxSurge, maxUnavailable, desired, emptyDesired, err := c.updatedDesiredNodeCounts(s, nodeToPods)
	if err != nil {
		return fmt.Errorf("couldn't get unavailable numbers: %w", err)
	}
	now := c.clock.Now()
	available := func(p *corev1.Pod) bool { return isPodAvailable(p, ds.Spec.MinReadySeconds, now) }

	if maxSurge == 0 {
		// Desired nodes without pods are unavailable (manage fills them). Upstream visits them
		// in random map order among the others; counting them first is one of those orders.
		numUnavailable := emptyDesired
		var allowed, candidates []string
		for _, pods := range nodeToPods {
			newPod, oldPod, ok := findUpdatedPodsOnNode(pods, s.hash)
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
			default:
				switch {
				case !available(oldPod):
					allowed = append(allowed, oldPod.Name)
					numUnavailable++
				case numUnavailable >= maxUnavailable:
				default:
					candidates = append(candidates, oldPod.Name)
				}
			}
		}
		remaining := min(max(maxUnavailable-numUnavailable, 0), len(candidates))
		toDelete := append(allowed, candidates[:remaining]...)
		s.log.Debug("rolling update", "maxUnavailable", maxUnavailable, "unavailable", numUnavailable, "deleting", len(toDelete))
		return c.syncNodes(ctx, s, toDelete, nil)
	}

	var numSurge, numAvailable int
	var oldToDelete, shouldNotRunToDelete, candidateNew, allowedNew []string
	shouldRun := func(name string) bool {
		// A node missing from the list no longer runs anything; its pods are not waited for.
		n, ok := s.node(name)
		return ok && c.decideOnce(s, n).wantToRun
	}
	for nodeName, pods := range nodeToPods {
		newPod, oldPod, ok := findUpdatedPodsOnNode(pods, s.hash)
		if !ok {
			numSurge++
			continue
		}
		if oldPod != nil && available(oldPod) {
			numAvailable++
		} else if newPod != nil && available(newPod) {
			numAvailable++
		}
		switch {
		case oldPod == nil:
			// Nothing to replace; manage creates a pod on an empty node.
		case newPod == nil:
			switch {
			case !available(oldPod):
				if !shouldRun(nodeName) {
					oldToDelete = append(oldToDelete, oldPod.Name)
					continue
				}
				allowedNew = append(allowedNew, nodeName)
			case numSurge >= maxSurge:
			default:
				if !shouldRun(nodeName) {
					shouldNotRunToDelete = append(shouldNotRunToDelete, oldPod.Name)
					continue
				}
				candidateNew = append(candidateNew, nodeName)
			}
		default:
			if !available(newPod) {
				numSurge++
				continue
			}
			oldToDelete = append(oldToDelete, oldPod.Name)
		}
	}
	// Pods on nodes that no longer want them go only while availability elsewhere exceeds
	// the desired count, so a node change cannot dip below it during a surge rollout.
	if deletable := numAvailable - desired; deletable > 0 {
		for _, name := range shouldNotRunToDelete {
			if deletable <= 0 {
				break
			}
			if _, err := c.podLister.Pods(ds.Namespace).Get(name); err != nil {
				continue
			}
			oldToDelete = append(oldToDelete, name)
			deletable--
		}
	}
	remaining := min(max(maxSurge-numSurge, 0), len(candidateNew))
	toCreate := append(allowedNew, candidateNew[:remaining]...)
	s.log.Debug("rolling update with surge", "maxSurge", maxSurge, "surging", numSurge, "creating", len(toCreate), "deleting", len(oldToDelete))
	return c.syncNodes(ctx, s, oldToDelete, toCreate)
}

// updatedDesiredNodeCounts counts the nodes that want the DaemonSet (and those of them
// without pods), and scales maxSurge and maxUnavailable against that count (rounding up).
// Both zero with nodes to update would stall the rollout, so maxUnavailable becomes 1.
func (c *Controller) updatedDesiredNodeCounts(s *syncState, nodeToPods map[string][]*corev1.Pod) (maxSurge, maxUnavailable, desired, emptyDesired int, err error) {
	for _, node := range s.nodes {
		if !c.decideOnce(s, node).wantToRun {
			continue
		}
		desired++
		if _, ok := nodeToPods[node.Name]; !ok {
			emptyDesired++
		}
	}
	if maxUnavailable, err = unavailableCount(s.ds, desired); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("invalid value for MaxUnavailable: %w", err)
	}
	if !c.legacy {
		if maxSurge, err = surgeCount(s.ds, desired); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("invalid value for MaxSurge: %w", err)
		}
	}
	if desired > 0 && maxUnavailable == 0 && maxSurge == 0 {
		s.log.Info("daemonset is not configured for surge or unavailability, defaulting to maxUnavailable=1")
		maxUnavailable = 1
	}
	return maxSurge, maxUnavailable, desired, emptyDesired, nil
}
