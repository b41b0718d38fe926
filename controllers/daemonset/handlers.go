package daemonset

import (
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Event handlers only enqueue keys and maintain expectations
// (docs/daemonset-controller.md#handlers); all decisions are taken in syncDaemonSet.

// --- DaemonSet handlers ---

func (c *Controller) addDaemonSet(obj any) {
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		c.log.Debug("daemonset added", "daemonSet", ds.Namespace+"/"+ds.Name)
		c.enqueue(ds)
	}
}

func (c *Controller) onUpdateDaemonSet(oldObj, curObj any) {
	old, ok1 := oldObj.(*appsv1.DaemonSet)
	cur, ok2 := curObj.(*appsv1.DaemonSet)
	if !ok1 || !ok2 {
		return
	}
	if old.UID != cur.UID {
		// Deleted and recreated under the same name between two watch events.
		c.deleteDaemonSet(cache.DeletedFinalStateUnknown{Key: old.Namespace + "/" + old.Name, Obj: old})
	}
	c.enqueue(cur)
}

func (c *Controller) deleteDaemonSet(obj any) {
	ds, ok := obj.(*appsv1.DaemonSet)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if ds, ok = tombstone.Obj.(*appsv1.DaemonSet); !ok {
			return
		}
	}
	key, err := cache.MetaNamespaceKeyFunc(ds)
	if err != nil {
		return
	}
	c.expectations.Delete(key)
	c.steady.forget(key)
	c.evaluators.forget(ds.UID)
	c.suspended.removeEverywhere(key)
	c.queue.Add(key)
}

// --- ControllerRevision handlers ---

func (c *Controller) addHistory(obj any) {
	h, ok := obj.(*appsv1.ControllerRevision)
	if !ok {
		return
	}
	c.steady.bumpHistory(h.Namespace)
	if h.DeletionTimestamp != nil {
		c.deleteHistory(h)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(h); ref != nil {
		// Its owner learns about it on its next sync; nothing to wake up.
		return
	}
	for _, ds := range c.daemonSetsMatching(h.Namespace, h.Labels) {
		c.enqueue(ds)
	}
}

func (c *Controller) updateHistory(oldObj, curObj any) {
	old, ok1 := oldObj.(*appsv1.ControllerRevision)
	cur, ok2 := curObj.(*appsv1.ControllerRevision)
	if !ok1 || !ok2 || old.ResourceVersion == cur.ResourceVersion {
		return
	}
	c.steady.bumpHistory(cur.Namespace)
	c.routeUpdate(old, cur)
}

func (c *Controller) deleteHistory(obj any) {
	h, ok := obj.(*appsv1.ControllerRevision)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if h, ok = tombstone.Obj.(*appsv1.ControllerRevision); !ok {
			return
		}
	}
	c.steady.bumpHistory(h.Namespace)
	if ref := metav1.GetControllerOfNoCopy(h); ref != nil {
		if ds := c.resolveControllerRef(h.Namespace, ref); ds != nil {
			c.enqueue(ds)
		}
	}
}

// --- Pod handlers ---

func (c *Controller) addPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.steady.bumpPods(podInputKeys(pod)...)
	if pod.DeletionTimestamp != nil {
		// Seen for the first time already terminating (e.g. after a restart): a deletion
		// observation, never a creation one.
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		ds := c.resolveControllerRef(pod.Namespace, ref)
		if ds == nil {
			return
		}
		key, _ := cache.MetaNamespaceKeyFunc(ds)
		c.expectations.CreationObserved(key)
		c.queue.Add(key)
		return
	}
	// An orphan: wake every DaemonSet that might adopt it.
	for _, ds := range c.daemonSetsMatching(pod.Namespace, pod.Labels) {
		c.enqueue(ds)
	}
}

func (c *Controller) updatePod(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	cur, ok2 := curObj.(*corev1.Pod)
	if !ok1 || !ok2 || old.ResourceVersion == cur.ResourceVersion {
		// Periodic resyncs deliver unchanged objects.
		return
	}
	c.steady.bumpPods(append(podInputKeys(old), podInputKeys(cur)...)...)
	if cur.DeletionTimestamp != nil {
		// A graceful deletion began. Its later updates and its final removal are observed
		// again; expectations ignore deletions they no longer wait for.
		c.deletePod(cur)
		return
	}
	ds := c.routeUpdate(old, cur)
	// A pod that just became Ready turns Available minReadySeconds later; nothing else
	// would wake the DaemonSet then.
	if ds != nil && !isPodReady(old) && isPodReady(cur) && ds.Spec.MinReadySeconds > 0 {
		c.enqueueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second+time.Second)
	}
}

// routeUpdate enqueues the DaemonSets an update of a pod or ControllerRevision concerns:
// the former controller when the controller reference changed, the current controller, or,
// for an orphan whose labels or reference changed, every DaemonSet that might adopt it. It
// returns the current controller, if any.
func (c *Controller) routeUpdate(old, cur metav1.Object) *appsv1.DaemonSet {
	curRef, oldRef := metav1.GetControllerOfNoCopy(cur), metav1.GetControllerOfNoCopy(old)
	refChanged := !reflect.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if ds := c.resolveControllerRef(old.GetNamespace(), oldRef); ds != nil {
			c.enqueue(ds)
		}
	}
	if curRef != nil {
		ds := c.resolveControllerRef(cur.GetNamespace(), curRef)
		if ds != nil {
			c.enqueue(ds)
		}
		return ds
	}
	if refChanged || !reflect.DeepEqual(cur.GetLabels(), old.GetLabels()) {
		for _, ds := range c.daemonSetsMatching(cur.GetNamespace(), cur.GetLabels()) {
			c.enqueue(ds)
		}
	}
	return nil
}

func (c *Controller) deletePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tombstone.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	c.steady.bumpPods(podInputKeys(pod)...)
	ref := metav1.GetControllerOfNoCopy(pod)
	var ds *appsv1.DaemonSet
	if ref != nil {
		ds = c.resolveControllerRef(pod.Namespace, ref)
	}
	if ds == nil {
		// Not a daemon pod. In LEGACY-BIND mode its resources may be what a suspended
		// DaemonSet was waiting for on that node.
		if c.legacy && pod.Spec.NodeName != "" {
			c.requeueSuspended(pod.Spec.NodeName)
		}
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(ds)
	c.expectations.DeletionObserved(key, pod.Name)
	c.queue.Add(key)
}

// --- Node handlers (deletion enqueues nothing: pods on a vanished node are left to pod
// garbage collection, and unbound ones are removed by manage) ---

func (c *Controller) addNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.steady.bumpNodes()
	dss, err := c.dsLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range dss {
		if d, _ := c.decide(ds, node); d.shouldSchedule {
			c.enqueue(ds)
		}
	}
}

func (c *Controller) updateNode(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	cur, ok2 := curObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if c.shouldIgnoreNodeUpdate(old, cur) {
		return
	}
	c.steady.bumpNodes()
	dss, err := c.dsLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range dss {
		before, _ := c.decide(ds, old)
		after, _ := c.decide(ds, cur)
		if before.shouldSchedule != after.shouldSchedule || before.shouldContinueRunning != after.shouldContinueRunning {
			c.enqueue(ds)
		}
	}
}

// deleteNode enqueues nothing (pods on a vanished node are left to pod garbage collection,
// and unbound ones go on the next sync), but the node list a sync reads has changed.
func (c *Controller) deleteNode(any) {
	c.steady.bumpNodes()
}

// shouldIgnoreNodeUpdate filters node updates that cannot change a placement answer, such as
// the heartbeats that make up most node traffic. CURRENT looks only at labels and taints. In
// LEGACY-BIND mode allocatable, unschedulable and pressure conditions matter as well, so the
// seed's rule applies: a change in the set of True conditions counts, otherwise the nodes
// must be equal apart from resourceVersion, managedFields and conditions.
func (c *Controller) shouldIgnoreNodeUpdate(old, cur *corev1.Node) bool {
	if !c.legacy {
		return apiequality.Semantic.DeepEqual(old.Labels, cur.Labels) &&
			apiequality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints)
	}
	if !reflect.DeepEqual(trueConditions(old), trueConditions(cur)) {
		return false
	}
	o := old.DeepCopy()
	o.ResourceVersion = cur.ResourceVersion
	o.ManagedFields = cur.ManagedFields
	o.Status.Conditions = cur.Status.Conditions
	return apiequality.Semantic.DeepEqual(o, cur)
}

func trueConditions(node *corev1.Node) map[corev1.NodeConditionType]bool {
	out := map[corev1.NodeConditionType]bool{}
	for _, c := range node.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			out[c.Type] = true
		}
	}
	return out
}

// --- ownership helpers ---

// resolveControllerRef returns the cached DaemonSet ref points to, or nil if it is not a
// DaemonSet or the DaemonSet by that name is a different object (UID mismatch).
func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *appsv1.DaemonSet {
	if ref.Kind != controllerKind.Kind {
		return nil
	}
	ds, err := c.dsLister.DaemonSets(namespace).Get(ref.Name)
	if err != nil || ds.UID != ref.UID {
		return nil
	}
	return ds
}

// daemonSetsMatching lists the DaemonSets in namespace whose selector matches set. A nil or
// empty selector matches nothing here, and unlabeled objects match no DaemonSet.
func (c *Controller) daemonSetsMatching(namespace string, set map[string]string) []*appsv1.DaemonSet {
	if len(set) == 0 {
		return nil
	}
	dss, err := c.dsLister.DaemonSets(namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*appsv1.DaemonSet
	for _, ds := range dss {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(set)) {
			continue
		}
		out = append(out, ds)
	}
	if len(out) > 1 {
		c.log.Warn("more than one daemonset selects the same object", "namespace", namespace, "labels", set, "count", len(out))
	}
	return out
}

// podControllerIndex indexes pods by their controller's UID, and orphans by namespace, so a
// sync looks only at its own pods and adoption candidates instead of the whole namespace.
func podControllerIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return []string{controllerIndexKey(string(ref.UID))}, nil
	}
	return []string{orphanIndexKey(pod.Namespace)}, nil
}

func controllerIndexKey(uid string) string { return "uid/" + uid }
func orphanIndexKey(ns string) string      { return "orphan/" + ns }

// podNodeIndex indexes bound pods by spec.nodeName (LEGACY-BIND's per-node simulation).
func podNodeIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}
