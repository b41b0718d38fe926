package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/miniplane/miniplane/store"
)

// Evictions (POST pods/<name>/eviction, what `kubectl drain` does) honour
// PodDisruptionBudgets as kube-apiserver does: a pod covered by a budget is deleted only
// if the budget allows a disruption, and each eviction spends one (status.disruptionsAllowed
// goes down and the pod is noted in status.disruptedPods in the same compare-and-swap), so
// two concurrent evictions cannot both spend the last one.
//
// The budgets' status — kube-controller-manager's disruption controller — is recounted by
// the API server from its watch caches (budgetTracker), so that draining works without a
// controller-manager.

var (
	budgetsResource      = policyv1.Resource("poddisruptionbudgets")
	daemonSetsResource   = appsv1.Resource("daemonsets")
	replicaSetsResource  = appsv1.Resource("replicasets")
	statefulSetsResource = appsv1.Resource("statefulsets")
)

// disruptedPodTimeout is how long an evicted pod stays in a budget's disruptedPods waiting
// to be seen deleted, as in the disruption controller.
const disruptedPodTimeout = 2 * time.Minute

// evict serves POST pods/<name>/eviction.
func (c *call) evict() {
	data, err := c.readBody()
	if err != nil {
		c.fail(err)
		return
	}
	ev := &policyv1.Eviction{}
	if err := c.decodeObject(data, policyv1.SchemeGroupVersion.WithKind("Eviction"), ev); err != nil {
		// policy/v1beta1 Evictions have the same shape.
		ev = &policyv1.Eviction{}
		if err2 := c.decodeJSON(data, policyv1.SchemeGroupVersion.WithKind("Eviction"), ev); err2 != nil {
			c.fail(err)
			return
		}
	}
	if ev.Name != "" && ev.Name != c.info.name {
		c.fail(badRequest("name in URL does not match name in Eviction object"))
		return
	}
	dryRun, err := c.dryRun()
	if err != nil {
		c.fail(err)
		return
	}
	if err := c.admitSubresourceCreate(policyv1.SchemeGroupVersion.WithKind("Eviction"), ev, dryRun); err != nil {
		c.fail(err)
		return
	}
	opts := ev.DeleteOptions
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if err := c.s.evict(c.r.Context(), c.info.namespace, c.info.name, opts, c.authorizeNodeObject); err != nil {
		c.fail(err)
		return
	}
	writeJSON(c.w, http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
}

// evict deletes a pod if its disruption budget allows it.
func (s *Server) evict(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions, authorize func(runtime.Object) error) error {
	pods := s.reg.lookupGroupResource(podsResource)
	obj, err := s.store.Get(ctx, pods.key(s.cfg.EtcdPrefix, namespace, name))
	if errors.Is(err, store.ErrNotFound) {
		return apierrors.NewNotFound(podsResource, name)
	}
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	if err := authorize(pod); err != nil {
		return err
	}
	if opts.Preconditions == nil || opts.Preconditions.UID == nil {
		// Delete the pod that was checked, not a new one of the same name.
		uid := pod.UID
		if opts.Preconditions == nil {
			opts.Preconditions = &metav1.Preconditions{}
		}
		opts.Preconditions.UID = &uid
	}
	// A pod that is not running, or already going, takes nothing from a budget.
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded ||
		pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodPending {
		_, _, err := s.deleteObject(ctx, pods, namespace, name, opts, nil)
		return err
	}
	var budgets []*policyv1.PodDisruptionBudget
	for _, o := range s.cached(budgetsResource, namespace) {
		pdb := o.(*policyv1.PodDisruptionBudget)
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && sel.Matches(labels.Set(pod.Labels)) {
			budgets = append(budgets, pdb)
		}
	}
	switch len(budgets) {
	case 0:
		_, _, err := s.deleteObject(ctx, pods, namespace, name, opts, nil)
		return err
	case 1:
	default:
		return apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
	}
	if err := s.spendDisruption(ctx, budgets[0], pod, len(opts.DryRun) > 0); err != nil {
		return err
	}
	_, _, err = s.deleteObject(ctx, pods, namespace, name, opts, nil)
	return err
}

// spendDisruption takes one disruption from pdb for pod, or fails with 429.
func (s *Server) spendDisruption(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pod *corev1.Pod, dryRun bool) error {
	res := s.reg.lookupGroupResource(budgetsResource)
	key := res.key(s.cfg.EtcdPrefix, pdb.Namespace, pdb.Name)
	return s.rewrite(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		b := cur.(*policyv1.PodDisruptionBudget)
		if b.Status.ObservedGeneration < b.Generation {
			return nil, tooManyEvictions(fmt.Sprintf("The disruption budget %s is still being processed by the server.", b.Name))
		}
		if !podReady(pod) {
			// An unhealthy pod may go when the budget is met without it, or always.
			alwaysAllow := b.Spec.UnhealthyPodEvictionPolicy != nil && *b.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow
			if alwaysAllow || (b.Status.CurrentHealthy >= b.Status.DesiredHealthy && b.Status.DesiredHealthy > 0) {
				return nil, errDryRun{}
			}
		}
		if b.Status.DisruptionsAllowed <= 0 {
			return nil, tooManyEvictions(fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently",
				b.Name, b.Status.DesiredHealthy, b.Status.CurrentHealthy))
		}
		if dryRun {
			return nil, errDryRun{}
		}
		b.Status.DisruptionsAllowed--
		if b.Status.DisruptedPods == nil {
			b.Status.DisruptedPods = map[string]metav1.Time{}
		}
		b.Status.DisruptedPods[pod.Name] = metav1.NewTime(s.clock.Now().Truncate(time.Second))
		return b, nil
	})
}

// tooManyEvictions is the 429 an eviction gets when a budget forbids it.
func tooManyEvictions(cause string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: cause})
	return err
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// budgetTracker keeps the status of disruption budgets current.
type budgetTracker struct {
	s *Server
	*recountLoop
}

func newBudgetTracker(s *Server) *budgetTracker {
	t := &budgetTracker{s: s}
	t.recountLoop = newRecountLoop("disruption", s.log, t.recount)
	return t
}

// recount writes the status of every budget in namespace.
func (t *budgetTracker) recount(ctx context.Context, namespace string) error {
	budgets := t.s.cached(budgetsResource, namespace)
	if len(budgets) == 0 {
		return nil
	}
	res := t.s.reg.lookupGroupResource(budgetsResource)
	pods := t.s.cached(podsResource, namespace)
	var errs []error
	for _, obj := range budgets {
		pdb := obj.(*policyv1.PodDisruptionBudget)
		err := t.s.rewrite(ctx, res.key(t.s.cfg.EtcdPrefix, namespace, pdb.Name), func(cur runtime.Object) (runtime.Object, error) {
			b := cur.(*policyv1.PodDisruptionBudget)
			next := t.status(b, pods)
			if apiequality.Semantic.DeepEqual(b.Status, next) {
				return nil, errDryRun{}
			}
			b.Status = next
			return b, nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// status computes a budget's status from the pods it covers, as the disruption
// controller does.
func (t *budgetTracker) status(pdb *policyv1.PodDisruptionBudget, all []runtime.Object) policyv1.PodDisruptionBudgetStatus {
	now := t.s.clock.Now()
	st := policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return budgetFailed(pdb, st, now, err)
	}
	var pods []*corev1.Pod
	for _, o := range all {
		if p := o.(*corev1.Pod); sel.Matches(labels.Set(p.Labels)) {
			pods = append(pods, p)
		}
	}
	expected, desired, err := t.expectation(pdb, pods)
	if err != nil {
		return budgetFailed(pdb, st, now, err)
	}
	disrupted := map[string]metav1.Time{}
	exists := map[string]*corev1.Pod{}
	for _, p := range pods {
		exists[p.Name] = p
	}
	for name, at := range pdb.Status.DisruptedPods {
		if p, ok := exists[name]; ok && p.DeletionTimestamp == nil && now.Sub(at.Time) < disruptedPodTimeout {
			disrupted[name] = at
		}
	}
	healthy := int32(0)
	for _, p := range pods {
		if _, gone := disrupted[p.Name]; !gone && p.DeletionTimestamp == nil && podReady(p) {
			healthy++
		}
	}
	st.ExpectedPods, st.DesiredHealthy, st.CurrentHealthy = expected, desired, healthy
	if len(disrupted) > 0 {
		st.DisruptedPods = disrupted
	}
	allowed := healthy - desired
	if expected <= 0 || allowed <= 0 {
		allowed = 0
	}
	st.DisruptionsAllowed = allowed
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason,
		ObservedGeneration: pdb.Generation}
	if allowed == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
	}
	st.Conditions = setBudgetCondition(pdb.Status.Conditions, cond, now)
	return st
}

// expectation returns how many pods the budget expects and how many must stay healthy.
func (t *budgetTracker) expectation(pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod) (expected, desired int32, err error) {
	if v := pdb.Spec.MinAvailable; v != nil && v.Type == intstr.Int {
		return int32(len(pods)), v.IntVal, nil
	}
	if pdb.Spec.MinAvailable == nil && pdb.Spec.MaxUnavailable == nil {
		return int32(len(pods)), 0, nil
	}
	// Percentages and maxUnavailable are of the pods the owning controllers want.
	scales := map[string]int32{}
	for _, p := range pods {
		ref := metav1.GetControllerOf(p)
		if ref == nil {
			return 0, 0, fmt.Errorf("found no controller ref for pod %q", p.Name)
		}
		key := ref.Kind + "/" + ref.Name
		if _, seen := scales[key]; seen {
			continue
		}
		scale, err := t.scaleOf(p.Namespace, ref)
		if err != nil {
			return 0, 0, err
		}
		scales[key] = scale
	}
	for _, n := range scales {
		expected += n
	}
	if v := pdb.Spec.MaxUnavailable; v != nil {
		n, err := intstr.GetScaledValueFromIntOrPercent(v, int(expected), true)
		if err != nil {
			return 0, 0, err
		}
		return expected, max(expected-int32(n), 0), nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true)
	if err != nil {
		return 0, 0, err
	}
	return expected, int32(min(n, math.MaxInt32)), nil
}

// scaleOf is how many pods the controller ref points at wants.
func (t *budgetTracker) scaleOf(namespace string, ref *metav1.OwnerReference) (int32, error) {
	lookup := func(gr schema.GroupResource) (runtime.Object, error) {
		return t.s.lookup(context.Background(), gr, namespace, ref.Name)
	}
	switch ref.Kind {
	case "DaemonSet":
		o, err := lookup(daemonSetsResource)
		if err != nil {
			return 0, err
		}
		return o.(*appsv1.DaemonSet).Status.DesiredNumberScheduled, nil
	case "ReplicaSet":
		o, err := lookup(replicaSetsResource)
		if err != nil {
			return 0, err
		}
		return replicasOf(o.(*appsv1.ReplicaSet).Spec.Replicas), nil
	case "StatefulSet":
		o, err := lookup(statefulSetsResource)
		if err != nil {
			return 0, err
		}
		return replicasOf(o.(*appsv1.StatefulSet).Spec.Replicas), nil
	}
	return 0, fmt.Errorf("unsupported controller kind %q of the pods", ref.Kind)
}

func budgetFailed(pdb *policyv1.PodDisruptionBudget, st policyv1.PodDisruptionBudgetStatus, now time.Time, err error) policyv1.PodDisruptionBudgetStatus {
	st.Conditions = setBudgetCondition(pdb.Status.Conditions, metav1.Condition{Type: policyv1.DisruptionAllowedCondition,
		Status: metav1.ConditionFalse, Reason: policyv1.SyncFailedReason, Message: err.Error(), ObservedGeneration: pdb.Generation}, now)
	return st
}

// setBudgetCondition replaces the condition of c's type, keeping its transition time
// when the status is unchanged.
func setBudgetCondition(conds []metav1.Condition, c metav1.Condition, now time.Time) []metav1.Condition {
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	for _, old := range conds {
		if old.Type == c.Type && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return []metav1.Condition{c}
}
