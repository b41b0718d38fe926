package daemonset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// claimer applies Kubernetes' ClaimObject rules (docs/daemonset-controller.md#claiming) for one
// DaemonSet during one pass over pods or ControllerRevisions.
type claimer struct {
	ds       *appsv1.DaemonSet
	selector labels.Selector
	kind     string // "Pod" or "ControllerRevision", for error messages
	adopt    func(ctx context.Context, obj metav1.Object, patch []byte) error
	release  func(ctx context.Context, obj metav1.Object, patch []byte) error
	// recheck is an uncached GET of the DaemonSet, done at most once per pass and only
	// before the first adoption: the cache may not show yet that the DaemonSet is going away.
	recheck     func(ctx context.Context) error
	recheckOnce sync.Once
	recheckErr  error
}

func (c *Controller) newClaimer(ds *appsv1.DaemonSet, selector labels.Selector, kind string,
	patch func(ctx context.Context, namespace, name string, patch []byte) error) *claimer {
	m := &claimer{ds: ds, selector: selector, kind: kind}
	m.adopt = func(ctx context.Context, obj metav1.Object, p []byte) error {
		return patch(ctx, obj.GetNamespace(), obj.GetName(), p)
	}
	m.release = m.adopt
	m.recheck = func(ctx context.Context) error {
		fresh, err := c.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
		if err == nil && fresh.UID != ds.UID {
			err = fmt.Errorf("original DaemonSet %v/%v is gone: got uid %v, wanted %v", ds.Namespace, ds.Name, fresh.UID, ds.UID)
		}
		if err != nil {
			return fmt.Errorf("can't recheck DeletionTimestamp: %w", err)
		}
		if fresh.DeletionTimestamp != nil {
			return fmt.Errorf("%v/%v has just been deleted at %v", fresh.Namespace, fresh.Name, fresh.DeletionTimestamp)
		}
		return nil
	}
	return m
}

// claim decides whether obj belongs to the DaemonSet, adopting a matching orphan or
// releasing an owned object that no longer matches. NotFound during either means the object
// is gone and is not an error.
func (m *claimer) claim(ctx context.Context, obj metav1.Object) (bool, error) {
	matches := m.selector.Matches(labels.Set(obj.GetLabels()))
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		if ref.UID != m.ds.UID {
			return false, nil // someone else's
		}
		if matches {
			return true, nil
		}
		if m.ds.DeletionTimestamp != nil {
			return false, nil
		}
		err := m.release(ctx, obj, releasePatch(m.ds.UID, obj.GetUID()))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
			return false, err
		}
		return false, nil
	}
	if m.ds.DeletionTimestamp != nil || !matches || obj.GetDeletionTimestamp() != nil || obj.GetNamespace() != m.ds.Namespace {
		return false, nil
	}
	m.recheckOnce.Do(func() { m.recheckErr = m.recheck(ctx) })
	if m.recheckErr != nil {
		return false, fmt.Errorf("can't adopt %s %v/%v (%v): %w", m.kind, obj.GetNamespace(), obj.GetName(), obj.GetUID(), m.recheckErr)
	}
	if err := m.adopt(ctx, obj, adoptPatch(m.ds, obj.GetUID())); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

type patchMeta struct {
	Metadata struct {
		OwnerReferences any       `json:"ownerReferences"`
		UID             types.UID `json:"uid"`
	} `json:"metadata"`
}

// adoptPatch makes ds the controller of the object with uid (the uid is a precondition:
// the API server refuses to change it, so a recreated object is not adopted by mistake).
func adoptPatch(ds *appsv1.DaemonSet, uid types.UID) []byte {
	var p patchMeta
	p.Metadata.OwnerReferences = []metav1.OwnerReference{{
		APIVersion:         controllerKind.GroupVersion().String(),
		Kind:               controllerKind.Kind,
		Name:               ds.Name,
		UID:                ds.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}}
	p.Metadata.UID = uid
	b, _ := json.Marshal(p)
	return b
}

// releasePatch removes the owner reference to dsUID from the object with uid.
func releasePatch(dsUID, uid types.UID) []byte {
	var p patchMeta
	p.Metadata.OwnerReferences = []map[string]string{{"$patch": "delete", "uid": string(dsUID)}}
	p.Metadata.UID = uid
	b, _ := json.Marshal(p)
	return b
}

// getDaemonPods returns the pods the synced DaemonSet owns after claiming: its own pods that
// still match, plus matching orphans it adopted. Only the controller-UID and orphan index
// buckets are read, so the cost is O(own pods + orphans), not O(namespace).
//
// The claim runs once per sync and every step reuses its result. Upstream re-lists in each
// step, but the steps that follow a write (status) are re-run by the watch events that write
// causes, and the steps that decide (rolling update) run only when manage wrote nothing; so
// the answer is the same while a sync at 5,000 nodes does a third of the work, and an orphan
// is adopted with one PATCH, not one per step.
func (c *Controller) getDaemonPods(ctx context.Context, s *syncState) ([]*corev1.Pod, error) {
	if s.claimed {
		return s.pods, s.claimErr
	}
	s.pods, s.claimErr = c.claimPods(ctx, s.ds)
	s.claimed = true
	return s.pods, s.claimErr
}

func (c *Controller) claimPods(ctx context.Context, ds *appsv1.DaemonSet) ([]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	owned, err := c.podIndexer.ByIndex(indexPodsByController, controllerIndexKey(string(ds.UID)))
	if err != nil {
		return nil, err
	}
	orphans, err := c.podIndexer.ByIndex(indexPodsByController, orphanIndexKey(ds.Namespace))
	if err != nil {
		return nil, err
	}
	m := c.newClaimer(ds, selector, "Pod", func(ctx context.Context, ns, name string, p []byte) error {
		return c.podControl.PatchPod(ctx, ns, name, types.StrategicMergePatchType, p)
	})
	claimed := make([]*corev1.Pod, 0, len(owned))
	var errs []error
	for _, list := range [][]any{owned, orphans} {
		for _, o := range list {
			pod, ok := o.(*corev1.Pod)
			if !ok || pod.Namespace != ds.Namespace {
				continue
			}
			ok, err := m.claim(ctx, pod)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				claimed = append(claimed, pod)
			}
		}
	}
	return claimed, errors.Join(errs...)
}

// controlledHistories returns the ControllerRevisions in ds's namespace that ds owns after
// claiming them with the same rules as pods.
func (c *Controller) controlledHistories(ctx context.Context, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	all, err := c.historyLister.ControllerRevisions(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := c.newClaimer(ds, selector, "ControllerRevision", func(ctx context.Context, ns, name string, p []byte) error {
		_, err := c.client.AppsV1().ControllerRevisions(ns).Patch(ctx, name, types.StrategicMergePatchType, p, metav1.PatchOptions{})
		return err
	})
	var claimed []*appsv1.ControllerRevision
	var errs []error
	for _, h := range all {
		ok, err := m.claim(ctx, h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			claimed = append(claimed, h)
		}
	}
	return claimed, errors.Join(errs...)
}
