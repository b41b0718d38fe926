package daemonset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// matchesHistory reports whether cr records ds's current template: its data is byte for byte
// the patch historyPatch builds now.
func matchesHistory(ds *appsv1.DaemonSet, cr *appsv1.ControllerRevision) (bool, error) {
	patch, err := historyPatch(ds)
	if err != nil {
		return false, err
	}
	return bytes.Equal(patch, cr.Data.Raw), nil
}

// constructHistory returns the ControllerRevision of ds's current template, creating or
// renumbering it as needed, and the older ones (docs/daemonset-controller.md#history).
//
// Invariants: exactly one current revision survives (duplicates are merged into the one with
// the highest revision); the current revision's number is above every old one, so a template
// that returns to an earlier revision (rollout undo) reuses that object under a new number.
func (c *Controller) constructHistory(ctx context.Context, s *syncState) (*appsv1.ControllerRevision, []*appsv1.ControllerRevision, error) {
	ds := s.ds
	histories, err := c.controlledHistories(ctx, ds)
	if err != nil {
		return nil, nil, err
	}
	var current, old []*appsv1.ControllerRevision
	for _, h := range histories {
		if _, ok := h.Labels[RevisionHashLabel]; !ok {
			// Revisions from elsewhere may lack the hash label; the name is as good a hash and
			// cannot collide.
			toUpdate := h.DeepCopy()
			if toUpdate.Labels == nil {
				toUpdate.Labels = map[string]string{}
			}
			toUpdate.Labels[RevisionHashLabel] = toUpdate.Name
			if h, err = c.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
				return nil, nil, err
			}
		}
		match, err := matchesHistory(ds, h)
		if err != nil {
			return nil, nil, err
		}
		if match {
			current = append(current, h)
		} else {
			old = append(old, h)
		}
	}

	next := maxRevision(old) + 1
	if len(current) == 0 {
		cur, err := c.snapshot(ctx, ds, next)
		return cur, old, err
	}
	cur, err := c.dedupCurHistories(ctx, s, current)
	if err != nil {
		return nil, nil, err
	}
	if cur.Revision < next {
		toUpdate := cur.DeepCopy()
		toUpdate.Revision = next
		if _, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
			return nil, nil, err
		}
	}
	return cur, old, nil
}

func maxRevision(hs []*appsv1.ControllerRevision) int64 {
	var m int64
	for _, h := range hs {
		if h.Revision > m {
			m = h.Revision
		}
	}
	return m
}

// dedupCurHistories keeps the current revision with the highest number (the later one on a
// tie), moves pods labelled with the others' hashes onto it, and deletes the others.
func (c *Controller) dedupCurHistories(ctx context.Context, s *syncState, current []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	ds := s.ds
	if len(current) == 1 {
		return current[0], nil
	}
	var keep *appsv1.ControllerRevision
	var maxRev int64
	for _, h := range current {
		if h.Revision >= maxRev {
			keep, maxRev = h, h.Revision
		}
	}
	keepHash := keep.Labels[RevisionHashLabel]
	pods, err := c.getDaemonPods(ctx, s)
	if err != nil {
		return nil, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{RevisionHashLabel: keepHash}}})
	if err != nil {
		return nil, err
	}
	for _, pod := range pods {
		if pod.Labels[RevisionHashLabel] == keepHash {
			continue
		}
		if err := c.podControl.PatchPod(ctx, pod.Namespace, pod.Name, types.MergePatchType, patch); err != nil {
			return nil, err
		}
	}
	for _, h := range current {
		if h.Name == keep.Name {
			continue
		}
		if err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{}); err != nil {
			return nil, err
		}
	}
	return keep, nil
}

// snapshot creates the ControllerRevision for ds's current template with the given revision.
// A name clash with a revision of a different template is a hash collision: collisionCount is
// raised (from the API server's copy, so a stale cache cannot bump it twice) and the sync
// fails, to retry with the new hash (docs/daemonset-controller.md#hash-collisions).
func (c *Controller) snapshot(ctx context.Context, ds *appsv1.DaemonSet, revision int64) (*appsv1.ControllerRevision, error) {
	patch, err := historyPatch(ds)
	if err != nil {
		return nil, err
	}
	hash := computeHash(&ds.Spec.Template, ds.Status.CollisionCount)
	name := revisionName(ds.Name, hash)
	labels := make(map[string]string, len(ds.Spec.Template.Labels)+1)
	for k, v := range ds.Spec.Template.Labels {
		labels[k] = v
	}
	labels[RevisionHashLabel] = hash
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       ds.Namespace,
			Labels:          labels,
			Annotations:     ds.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: patch},
		Revision: revision,
	}
	created, createErr := c.client.AppsV1().ControllerRevisions(ds.Namespace).Create(ctx, cr, metav1.CreateOptions{})
	if createErr == nil || !apierrors.IsAlreadyExists(createErr) {
		return created, createErr
	}
	existing, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if match, err := matchesHistory(ds, existing); err != nil {
		return nil, err
	} else if match {
		return existing, nil
	}
	fresh, err := c.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(fresh.Status.CollisionCount, ds.Status.CollisionCount) {
		return nil, fmt.Errorf("found a stale collision count (%s, expected %s) of DaemonSet %q while processing; will retry until it is updated",
			fmtCount(ds.Status.CollisionCount), fmtCount(fresh.Status.CollisionCount), ds.Name)
	}
	if fresh.Status.CollisionCount == nil {
		fresh.Status.CollisionCount = new(int32)
	}
	*fresh.Status.CollisionCount++
	if _, err := c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	c.log.Info("hash collision, bumped collisionCount", "daemonSet", ds.Namespace+"/"+ds.Name, "collisionCount", *fresh.Status.CollisionCount)
	return nil, createErr
}

func fmtCount(p *int32) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// cleanupHistory deletes the oldest old revisions beyond revisionHistoryLimit, sparing any
// whose hash a pod still carries (even a terminal one being deleted): deleting it would lose
// the template those pods run (docs/daemonset-controller.md#history-cleanup).
func (c *Controller) cleanupHistory(ctx context.Context, s *syncState, old []*appsv1.ControllerRevision) error {
	ds := s.ds
	limit := 10
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	toKill := len(old) - limit
	if toKill <= 0 {
		return nil
	}
	nodeToPods, err := c.nodesToDaemonPods(ctx, s, true)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, pods := range nodeToPods {
		for _, pod := range pods {
			if h := pod.Labels[RevisionHashLabel]; h != "" {
				live[h] = true
			}
		}
	}
	sorted := append([]*appsv1.ControllerRevision(nil), old...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Revision < sorted[j].Revision })
	for _, h := range sorted {
		if toKill <= 0 {
			break
		}
		if live[h.Labels[RevisionHashLabel]] {
			continue
		}
		if err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		toKill--
	}
	return nil
}
