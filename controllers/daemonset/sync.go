package daemonset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/miniplane/miniplane/controllers/placement"
)

// syncState is what one sync of one DaemonSet shares between its steps.
type syncState struct {
	ds    *appsv1.DaemonSet
	key   string
	log   *slog.Logger
	nodes []*corev1.Node
	hash  string

	nodeByName map[string]*corev1.Node
	decisions  map[string]decision

	// The claimed pods, computed once (getDaemonPods).
	claimed  bool
	pods     []*corev1.Pod
	claimErr error
	// nodeToPods is nodesToDaemonPods(false), built once.
	nodeToPods map[string][]*corev1.Pod

	// status is what updateStatus computed; timed is set when the sync armed a delayed
	// requeue, so its outcome may change with time alone (steady.go).
	status statusCounts
	timed  bool
}

// decideOnce returns the placement answer for node, computed once per sync. In LEGACY-BIND mode
// the FailedPlacement events are recorded here, so each node reports at most once per sync
// (the seed repeated identical events per step; the recorder would fold them anyway).
func (c *Controller) decideOnce(s *syncState, node *corev1.Node) decision {
	if d, ok := s.decisions[node.Name]; ok {
		return d
	}
	d, reasons := c.decide(s.ds, node)
	for _, r := range reasons {
		c.recorder.Eventf(s.ds, corev1.EventTypeWarning, ReasonFailedPlacement, "failed to place pod on %q: %s", node.Name, r)
	}
	if s.decisions == nil {
		s.decisions = make(map[string]decision, len(s.nodes))
	}
	s.decisions[node.Name] = d
	return d
}

// node returns the named node from this sync's node list.
func (s *syncState) node(name string) (*corev1.Node, bool) {
	if s.nodeByName == nil {
		s.nodeByName = make(map[string]*corev1.Node, len(s.nodes))
		for _, n := range s.nodes {
			s.nodeByName[n.Name] = n
		}
	}
	n, ok := s.nodeByName[name]
	return n, ok
}

// syncDaemonSet brings one DaemonSet's pods, history and status in line with its spec
// (docs/daemonset-controller.md#sync-loop). It is level-based: everything is recomputed from
// the caches on every call.
func (c *Controller) syncDaemonSet(ctx context.Context, key string) error {
	start := c.clock.Now()
	log := c.log.With("daemonSet", key)
	defer func() { log.Debug("finished syncing daemonset", "duration", c.clock.Since(start)) }()

	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	ds, err := c.dsLister.DaemonSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.steady.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("unable to retrieve daemonset %s from store: %w", key, err)
	}
	// Read before the caches: a change landing during this sync must not be remembered as seen.
	inputs := c.steady.versions(ds)
	if c.steady.unchanged(key, ds, inputs) && c.expectations.Satisfied(key) {
		log.Debug("daemonset inputs unchanged since its last settled sync")
		return nil
	}
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("couldn't list nodes: %w", err)
	}

	if reflect.DeepEqual(ds.Spec.Selector, &metav1.LabelSelector{}) {
		c.recorder.Event(ds, corev1.EventTypeWarning, ReasonSelectingAll, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	if ds.Spec.Selector == nil {
		// Validation forbids it; acting on it would release every pod created and create
		// again, forever.
		log.Warn("daemonset has no selector, ignoring it")
		return nil
	}
	if ds.DeletionTimestamp != nil {
		// Being deleted: the garbage collector removes the pods; no status writes either.
		return nil
	}

	s := &syncState{ds: ds, key: key, log: log, nodes: nodes}
	cur, old, err := c.constructHistory(ctx, s)
	if err != nil {
		return fmt.Errorf("failed to construct revisions of DaemonSet: %w", err)
	}
	s.hash = cur.Labels[RevisionHashLabel]

	if !c.expectations.Satisfied(key) {
		// Our last creates/deletes are not all visible yet: report, do not act.
		return c.updateStatus(ctx, s, false)
	}

	err = c.updateDaemonSet(ctx, s, old)
	statusErr := c.updateStatus(ctx, s, true)
	switch {
	case err != nil:
		if statusErr != nil {
			log.Warn("failed to update daemonset status", "err", statusErr)
		}
		return err
	case statusErr != nil:
		return statusErr
	}
	if !s.timed && c.expectations.Satisfied(key) {
		c.steady.remember(key, ds, inputs, s.status)
	}
	return nil
}

// updateDaemonSet is step 7 of the sync: manage pods, then roll out (RollingUpdate) once the
// pods manage just touched are observed, then prune history.
func (c *Controller) updateDaemonSet(ctx context.Context, s *syncState, old []*appsv1.ControllerRevision) error {
	if err := c.manage(ctx, s); err != nil {
		return err
	}
	if c.expectations.Satisfied(s.key) && s.ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if err := c.rollingUpdate(ctx, s); err != nil {
			return err
		}
	}
	if err := c.cleanupHistory(ctx, s, old); err != nil {
		return fmt.Errorf("failed to clean up revisions of DaemonSet: %w", err)
	}
	return nil
}

// nodesToDaemonPods groups the DaemonSet's claimed pods by the node they are pinned to.
// Unless includeDeletedTerminal, terminal pods already being deleted are left out so the
// node can get its replacement at once. Pods whose node cannot be told are ignored.
//
// The map without deleted terminal pods is built once per sync and shared by manage, the
// rolling update and status: callers must not add or remove entries (sorting a node's
// slice in place is fine).
func (c *Controller) nodesToDaemonPods(ctx context.Context, s *syncState, includeDeletedTerminal bool) (map[string][]*corev1.Pod, error) {
	if !includeDeletedTerminal && s.nodeToPods != nil {
		return s.nodeToPods, nil
	}
	pods, err := c.getDaemonPods(ctx, s)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]*corev1.Pod, len(pods))
	if !includeDeletedTerminal {
		defer func() { s.nodeToPods = out }()
	}
	// Most nodes hold one pod: their slices are windows of one capacity into a single
	// array, so the map costs one allocation for the pods rather than one per node. A node
	// with a second pod gets a slice of its own from append.
	one := make([]*corev1.Pod, len(pods))
	for i, pod := range pods {
		if !includeDeletedTerminal && isTerminalAndDeleted(pod) {
			continue
		}
		node, ok := placement.TargetNodeName(pod)
		if !ok {
			continue
		}
		if have, ok := out[node]; ok {
			out[node] = append(have, pod)
			continue
		}
		one[i] = pod
		out[node] = one[i : i+1 : i+1]
	}
	return out, nil
}

// allowsSurge: surge is a CURRENT feature; LEGACY-BIND treats maxSurge as 0
// (docs/daemonset-controller.md#update-budget), since its own simulation excludes the
// DaemonSet's pods and would double-book the node.
func (c *Controller) allowsSurge(ds *appsv1.DaemonSet) bool {
	return !c.legacy && allowsSurge(ds)
}

// manage creates missing daemon pods and deletes failed, succeeded, surplus and misplaced
// ones (docs/daemonset-controller.md#manage).
func (c *Controller) manage(ctx context.Context, s *syncState) error {
	nodeToPods, err := c.nodesToDaemonPods(ctx, s, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %w", s.ds.Name, err)
	}
	var nodesNeeding, podsToDelete []string
	for _, node := range s.nodes {
		need, del := c.podsShouldBeOnNode(s, node, nodeToPods)
		nodesNeeding = append(nodesNeeding, need...)
		podsToDelete = append(podsToDelete, del...)
	}
	if !c.legacy {
		// Unbound pods pinned to a node that does not exist can never be scheduled. Bound
		// pods on a vanished node are left to pod garbage collection.
		for nodeName, pods := range nodeToPods {
			if _, ok := s.node(nodeName); ok {
				continue
			}
			for _, pod := range pods {
				if pod.Spec.NodeName == "" {
					podsToDelete = append(podsToDelete, pod.Name)
				}
			}
		}
	}
	return c.syncNodes(ctx, s, podsToDelete, nodesNeeding)
}

// failedPodsBackoffKey scopes failed-pod backoff to a DaemonSet generation and a node, so a
// spec change starts afresh.
func failedPodsBackoffKey(ds *appsv1.DaemonSet, node string) string {
	return fmt.Sprintf("%s/%d/%s", ds.UID, ds.Status.ObservedGeneration, node)
}

// podsShouldBeOnNode decides, for one node, whether a pod must be created and which pods
// must go (docs/daemonset-controller.md#node-decision). The cases are tried in order and the
// first that applies wins.
func (c *Controller) podsShouldBeOnNode(s *syncState, node *corev1.Node, nodeToPods map[string][]*corev1.Pod) (nodesNeeding, podsToDelete []string) {
	d := c.decideOnce(s, node)
	pods, exists := nodeToPods[node.Name]
	if c.legacy {
		c.suspended.set(node.Name, s.key, d.wantToRun && !d.shouldSchedule)
	}

	switch {
	case d.wantToRun && !d.shouldSchedule:
		// LEGACY-BIND only (CURRENT's booleans are equal): wanted but not placeable now;
		// retried when a pod leaves the node or the node changes.
		return nil, nil
	case d.shouldSchedule && !exists:
		return []string{node.Name}, nil
	case d.shouldContinueRunning:
		return c.podsToKeepOnNode(s, node, d, pods)
	case exists:
		// The node must not run the DaemonSet any more.
		for _, pod := range pods {
			if pod.DeletionTimestamp == nil {
				podsToDelete = append(podsToDelete, pod.Name)
			}
		}
	}
	return nil, podsToDelete
}

// podsToKeepOnNode handles a node whose daemon pods may stay: terminal pods go (failed ones
// under a backoff), and of the pods still running one is kept, or, while surging, one per
// revision.
func (c *Controller) podsToKeepOnNode(s *syncState, node *corev1.Node, d decision, pods []*corev1.Pod) (nodesNeeding, podsToDelete []string) {
	running, podsToDelete, waiting := c.sortOutTerminalPods(s, node, pods)
	if !c.allowsSurge(s.ds) {
		// Keep the oldest pod. Nothing is created here even if every pod was failed: the
		// node is refilled on a later sync, once the failed pod is gone.
		return nil, append(podsToDelete, surplusPods(running)...)
	}
	if len(running) <= 1 {
		// Surging keeps a live pod on the node, so one is created at once when there is
		// none; but not next to a failed pod still in backoff: with a kubelet that rejects
		// every pod that would create a pod per sync (as upstream does, cf.
		// kubernetes#124388). The replacement comes with the deletion, when the backoff
		// allows it. See docs/daemonset-controller.md#departures.
		if len(running) == 0 && d.shouldSchedule && !waiting {
			nodesNeeding = []string{node.Name}
		}
		return nodesNeeding, podsToDelete
	}
	return nil, append(podsToDelete, c.surgePodsToDelete(s, running)...)
}

// sortOutTerminalPods splits a node's pods that are not being deleted into those still
// running (any phase but Failed and Succeeded) and terminal ones to delete
// (docs/daemonset-controller.md#failed-pods). A failed pod is deleted only outside its
// backoff; waiting reports that one is held back, and the DaemonSet is then requeued for
// when the backoff ends.
func (c *Controller) sortOutTerminalPods(s *syncState, node *corev1.Node, pods []*corev1.Pod) (running []*corev1.Pod, podsToDelete []string, waiting bool) {
	if allRunning(pods) {
		// The common case, once per node per sync: hand back the node's own slice rather
		// than a copy of it (callers only sort it in place, which nodesToDaemonPods allows).
		return pods, nil, false
	}
	ds := s.ds
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		switch pod.Status.Phase {
		case corev1.PodFailed:
			// Delete failed pods so they are replaced, but never faster than the backoff:
			// a kubelet that keeps rejecting the pod must not make us hot-loop.
			key := failedPodsBackoffKey(ds, node.Name)
			now := c.clock.Now()
			if c.backoff.IsInBackOffSinceUpdate(key, now) {
				delay := c.backoff.Get(key)
				s.log.Debug("failed daemon pod in backoff", "pod", pod.Name, "node", node.Name, "delay", delay)
				c.enqueueAfter(ds, delay)
				s.timed = true
				waiting = true
				continue
			}
			c.backoff.Next(key, now)
			msg := fmt.Sprintf("Found failed daemon pod %s/%s on node %s, will try to kill it", pod.Namespace, pod.Name, node.Name)
			s.log.Info("found failed daemon pod, deleting it", "pod", pod.Name, "node", node.Name)
			c.recorder.Event(ds, corev1.EventTypeWarning, ReasonFailedDaemonPod, msg)
			podsToDelete = append(podsToDelete, pod.Name)
		case corev1.PodSucceeded:
			msg := fmt.Sprintf("Found succeeded daemon pod %s/%s on node %s, will try to delete it", pod.Namespace, pod.Name, node.Name)
			c.recorder.Event(ds, corev1.EventTypeNormal, ReasonSucceededDaemonPod, msg)
			podsToDelete = append(podsToDelete, pod.Name)
		default:
			running = append(running, pod)
		}
	}
	return running, podsToDelete, waiting
}

// allRunning reports whether none of pods is being deleted or has ended.
func allRunning(pods []*corev1.Pod) bool {
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return false
		}
	}
	return true
}

// surplusPods returns every running pod but the oldest (docs/daemonset-controller.md#pod-order).
// It sorts running in place.
func surplusPods(running []*corev1.Pod) []string {
	if len(running) <= 1 {
		return nil
	}
	sortPodsOldestFirst(running)
	out := make([]string, 0, len(running)-1)
	for _, pod := range running[1:] {
		out = append(out, pod.Name)
	}
	return out
}

// surgePodsToDelete handles a surging node with several running pods
// (docs/daemonset-controller.md#surge-on-node): it keeps the oldest pod of each revision,
// drops the rest, and drops the old one once the new one is available (or the old one is
// not even ready). It sorts running in place.
func (c *Controller) surgePodsToDelete(s *syncState, running []*corev1.Pod) (podsToDelete []string) {
	sortPodsOldestFirst(running)
	var oldestNew, oldestOld *corev1.Pod
	for _, pod := range running {
		if pod.Labels[RevisionHashLabel] == s.hash {
			if oldestNew == nil {
				oldestNew = pod
				continue
			}
		} else if oldestOld == nil {
			oldestOld = pod
			continue
		}
		podsToDelete = append(podsToDelete, pod.Name)
	}
	if oldestNew != nil && oldestOld != nil {
		if !isPodReady(oldestOld) || isPodAvailable(oldestNew, s.ds.Spec.MinReadySeconds, c.clock.Now()) {
			podsToDelete = append(podsToDelete, oldestOld.Name)
		}
	}
	return podsToDelete
}

// podTemplate is the template every new daemon pod starts from: the DaemonSet's template with
// the automatic tolerations, the revision hash label and the template-generation label.
func podTemplate(ds *appsv1.DaemonSet, hash string) *corev1.PodTemplateSpec {
	t := ds.Spec.Template.DeepCopy()
	addOrUpdateDaemonPodTolerations(&t.Spec)
	if g := templateGeneration(ds); g != nil || hash != "" {
		l := make(map[string]string, len(t.Labels)+2)
		for k, v := range t.Labels {
			l[k] = v
		}
		if g != nil {
			l[TemplateGenerationLabel] = strconv.FormatInt(*g, 10)
		}
		if hash != "" {
			l[RevisionHashLabel] = hash
		}
		t.Labels = l
	}
	return t
}

// newDaemonPod builds the pod to create on node from template: pinned by node affinity
// (CURRENT, the scheduler binds it) or bound directly (LEGACY-BIND).
func (c *Controller) newDaemonPod(ds *appsv1.DaemonSet, template *corev1.PodTemplateSpec, node string) *corev1.Pod {
	t := template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    podNamePrefix(ds.Name),
			Namespace:       ds.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Spec: t.Spec,
	}
	if c.legacy {
		pod.Spec.NodeName = node
	} else {
		pod.Spec.Affinity = replaceNodeNameAffinity(pod.Spec.Affinity, node)
	}
	return pod
}

// syncNodes issues up to BurstReplicas creates and, separately, deletes
// (docs/daemonset-controller.md#sync-nodes). Expectations are raised before the first call so
// that the watch events they cause cannot race ahead of the bookkeeping. Creates go out in
// slow-start batches of 1, 2, 4, …: a systematic failure (quota, admission, a broken template)
// costs one call rather than hundreds, and the creates never attempted are taken off the
// expectations again.
func (c *Controller) syncNodes(ctx context.Context, s *syncState, podsToDelete, nodesNeeding []string) error {
	ds, key := s.ds, s.key
	createDiff := min(len(nodesNeeding), c.cfg.BurstReplicas)
	deleteDiff := min(len(podsToDelete), c.cfg.BurstReplicas)
	c.expectations.Set(key, createDiff, podsToDelete[:deleteDiff])

	errCh := make(chan error, createDiff+deleteDiff)
	template := podTemplate(ds, s.hash)
	batchSize := min(createDiff, 1)
	for pos := 0; pos < createDiff; batchSize, pos = min(2*batchSize, createDiff-(pos+batchSize)), pos+batchSize {
		errorsBefore := len(errCh)
		var wg sync.WaitGroup
		wg.Add(batchSize)
		for _, node := range nodesNeeding[pos : pos+batchSize] {
			go func() {
				defer wg.Done()
				err := c.podControl.CreatePod(ctx, ds, c.newDaemonPod(ds, template, node))
				if err == nil {
					return
				}
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					// The namespace is going away; the pod will never appear and the
					// DaemonSet with it. Not an error, and no expectation to correct.
					return
				}
				s.log.Debug("failed to create daemon pod", "node", node, "err", err)
				c.expectations.CreationObserved(key)
				errCh <- err
			}()
		}
		wg.Wait()
		if skipped := createDiff - (pos + batchSize); len(errCh) > errorsBefore && skipped > 0 {
			s.log.Debug("slow-start failure, skipping remaining creates", "skipped", skipped)
			c.expectations.LowerCreations(key, skipped)
			break
		}
	}

	var wg sync.WaitGroup
	wg.Add(deleteDiff)
	for _, name := range podsToDelete[:deleteDiff] {
		go func() {
			defer wg.Done()
			if err := c.podControl.DeletePod(ctx, ds, name); err != nil {
				c.expectations.DeletionObserved(key, name)
				if !apierrors.IsNotFound(err) {
					s.log.Debug("failed to delete daemon pod", "pod", name, "err", err)
					errCh <- err
				}
			}
		}()
	}
	wg.Wait()

	close(errCh)
	var errs []error
	for err := range errCh {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
