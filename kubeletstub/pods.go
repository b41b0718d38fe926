package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/controllers/placement"
)

// podNodeIndex indexes the shared pod informer by spec.nodeName.
const podNodeIndex = "spec.nodeName"

func indexPodByNode(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

// podController plays the kubelet's part for pods bound to the fleet's nodes: admission,
// Pending → Running → Ready, injected failures, and stopping and deleting deleted pods. Its
// sync is level-based: the status is computed from the pod, the node's record of it, the
// faults and the clock, written only when it differs, and the key is re-queued for the next
// moment the status changes by itself (start delay, ready delay, fail-after).
type podController struct {
	client     kubernetes.Interface
	podLister  corelisters.PodLister
	podIndexer cache.Indexer
	nodeLister corelisters.NodeLister
	// classLister finds the handler of a pod's RuntimeClass.
	classLister nodelisters.RuntimeClassLister
	nodes       map[string]*stubNode
	clock       clock.WithTicker
	queue       workqueue.TypedRateLimitingInterface[string]
	// timers is the queue's delaying layer, for re-syncs at a computed instant.
	timers  *timerQueue[string]
	log     *slog.Logger
	metrics *metrics
	events  *eventRecorder
	// pullFailures are the images no node of the fleet can pull (configuration).
	pullFailures []imagePattern
}

func (c *podController) enqueue(pod *corev1.Pod) {
	if _, ok := c.nodes[pod.Spec.NodeName]; !ok {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(pod)
	if err == nil {
		c.queue.Add(key)
	}
}

// enqueueNode queues every pod bound to the node, e.g. when its fault annotations change.
func (c *podController) enqueueNode(name string) {
	objs, err := c.podIndexer.ByIndex(podNodeIndex, name)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok {
			c.enqueue(pod)
		}
	}
}

// forget drops the record of a pod that is gone.
func (c *podController) forget(pod *corev1.Pod) {
	if n, ok := c.nodes[pod.Spec.NodeName]; ok {
		n.mu.Lock()
		delete(n.pods, pod.UID)
		n.mu.Unlock()
	}
}

func (c *podController) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *podController) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	wakeAt, err := c.sync(ctx, key)
	c.metrics.podSyncs.Inc()
	if err != nil {
		c.metrics.podSyncErrors.Inc()
		c.queue.AddRateLimited(key)
		if ctx.Err() == nil {
			retries := c.queue.NumRequeues(key)
			c.log.Log(ctx, syncFailureLevel(err, retries), "pod sync failed; retrying", "pod", key, "retries", retries, "err", err)
		}
		return true
	}
	c.queue.Forget(key)
	if !wakeAt.IsZero() {
		c.timers.AddAt(key, wakeAt)
	}
	return true
}

// quietConflicts is how many conflicts in a row a pod's sync may hit before they are logged
// above Debug. A status written from a stale cache conflicts, and the retry from fresher data
// a few milliseconds later normally succeeds; a pod that keeps conflicting is stuck.
const quietConflicts = 3

// syncFailureLevel is the level a failed pod sync is logged at: Warn, so that a stuck pod
// shows at the default level, except for the first few conflicts, which are routine.
func syncFailureLevel(err error, retries int) slog.Level {
	if apierrors.IsConflict(err) && retries <= quietConflicts {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// sync brings one pod one step closer to what its node says about it, and returns when the
// pod's status next changes by itself (zero: never).
func (c *podController) sync(ctx context.Context, key string) (time.Time, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return time.Time{}, nil
	}
	pod, err := c.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	n, ok := c.nodes[pod.Spec.NodeName]
	if !ok {
		return time.Time{}, nil
	}
	if pod.DeletionTimestamp != nil {
		return time.Time{}, c.stop(ctx, n, pod)
	}
	if placement.IsTerminal(pod) {
		c.forget(pod)
		return time.Time{}, nil
	}
	node, err := c.nodeLister.Get(n.name)
	if apierrors.IsNotFound(err) {
		return time.Time{}, nil // not registered yet: the node's add event re-queues its pods
	}
	if err != nil {
		return time.Time{}, err
	}
	f := currentFaults(&n.tmpl, node.Annotations)
	now := c.clock.Now()
	rec, err := c.record(n, pod, node, f, now)
	if errors.Is(err, errNoPodCIDR) {
		// As a kubelet whose network is not ready: the pod waits, and the Node update that
		// brings the block re-queues the node's pods.
		c.log.Debug("pod waits for its node's pod CIDR", "node", n.name, "pod", key)
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}

	var (
		want    corev1.PodStatus
		wake    time.Duration
		sandbox string // why the pod's sandbox cannot be created, if it cannot
	)
	if rec.rejected == nil && rec.sandboxAt.IsZero() {
		sandbox = c.createSandbox(pod, rec, f, n.tmpl.StartDelay, now)
		if sandbox != "" && rec.sandboxEventDue(sandbox, now) {
			c.events.event(n, pod, corev1.EventTypeWarning, reasonFailedCreatePodSandBox, sandbox)
		}
	}
	switch {
	case rec.rejected != nil:
		want = rejectedStatus(pod, rec.rejected)
	case sandbox != "":
		want = noSandboxStatus(pod, n.hostIP, rec)
		// Tried again as a kubelet's pod worker does after a failed sync; a node update
		// (a handler added) re-queues it sooner.
		wake = sandboxRetryInterval
	default:
		want, wake = startedStatus(pod, statusInput{
			hostIP: n.hostIP,
			rec:    rec,
			tl:     timeline(rec, pod.Spec.RestartPolicy, n.tmpl.StartDelay, f),
			pulls:  pullPolicy{cluster: c.pullFailures, node: f.pullFailures},
			probes: n.observeProbeFaults(f, now),
			now:    now,
		})
	}
	var wakeAt time.Time
	if wake > 0 {
		wakeAt = now.Add(wake)
	}
	if equality.Semantic.DeepEqual(want, pod.Status) {
		rec.written = nil
		return wakeAt, nil
	}
	if rec.written != nil && equality.Semantic.DeepEqual(want, *rec.written) {
		return wakeAt, nil // written already; the cache has not caught up
	}
	if err := c.writeStatus(ctx, pod, want); err != nil {
		return time.Time{}, err
	}
	rec.written = &want
	switch {
	case rec.rejected != nil:
		c.events.event(n, pod, corev1.EventTypeWarning, rec.rejected.reason, rec.rejected.message)
	case sandbox == "": // a failed sandbox's event is recorded with each try, above
		c.pullEvents(n, pod, &pod.Status, &want)
		c.recordContainerEvents(n, pod, n.startEvents(pod, &pod.Status, &want), now)
	}
	return wakeAt, nil
}

const (
	// reasonFailedCreatePodSandBox is the kubelet's event reason when the runtime cannot
	// create a pod's sandbox.
	reasonFailedCreatePodSandBox = "FailedCreatePodSandBox"
	// sandboxRetryInterval is how soon a pod whose sandbox could not be created is tried
	// again: the kubelet's back-off after a failed pod sync. It also covers a RuntimeClass
	// created just before its pod and not yet in the stub's cache.
	sandboxRetryInterval = 10 * time.Second
)

// createSandbox creates the admitted pod's sandbox, on the node's runtime handler for the
// pod's RuntimeClass: it records when, and returns "". When the node has no such handler
// (or the class is gone) it returns the kubelet's event message instead, and the pod waits:
// the node update that adds the handler re-queues it, and the sandbox is created then.
// A pod whose sandbox an earlier run of the stub created keeps it.
func (c *podController) createSandbox(pod *corev1.Pod, rec *podRecord, f faults, startDelay time.Duration, now time.Time) string {
	if cond := podCondition(pod, corev1.PodReadyToStartContainers); cond != nil && cond.Status == corev1.ConditionTrue {
		// The condition turned True when the containers started, the start delay after the
		// sandbox: a pod that waited for its handler keeps the time it really started.
		rec.sandboxAt = rec.start
		if at := cond.LastTransitionTime.Add(-startDelay); at.After(rec.start) {
			rec.sandboxAt = at
		}
		return ""
	}
	if name := pod.Spec.RuntimeClassName; name != nil && *name != "" {
		class, err := c.classLister.Get(*name)
		switch {
		case err != nil:
			rec.waitedForSandbox = true
			// The kubelet's message is the lookup's NotFound error as it stands.
			return fmt.Sprintf("Failed to create pod sandbox: %v", err)
		case !f.hasRuntimeHandler(class.Handler):
			rec.waitedForSandbox = true
			return fmt.Sprintf("Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for %q is configured", class.Handler)
		}
	}
	// A pod that never waited starts from its admission, as before there were handlers to
	// wait for; one that waited starts now.
	rec.sandboxAt = rec.start
	if rec.waitedForSandbox {
		rec.sandboxAt = now
	}
	return ""
}

func podCondition(pod *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == typ {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// record returns the node's record of pod, admitting the pod first if the node has not
// decided about it yet. Admission is serialized per node so that two pods cannot both take
// the last free resources or the same IP.
func (c *podController) record(n *stubNode, pod *corev1.Pod, node *corev1.Node, f faults, now time.Time) (*podRecord, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if rec, ok := n.pods[pod.UID]; ok {
		return rec, nil
	}
	if pod.Status.StartTime != nil {
		// Admitted by an earlier run of this stub: keep what it decided.
		rec := &podRecord{admitted: true, start: pod.Status.StartTime.Time, ip: pod.Status.PodIP}
		if rec.ip == "" {
			var err error
			if rec.ip, err = c.podIP(n, pod, node); err != nil {
				return nil, err
			}
		}
		n.pods[pod.UID] = rec
		n.keepImages(&pod.Status)
		return rec, nil
	}
	rec := &podRecord{}
	if f.rejectReason != "" && n.chance(f.rejectRate) {
		rec.rejected = &admission{reason: f.rejectReason, message: rejectedPrefix + "injected by " + f.rejectSource}
	} else if a := admit(pod, node, c.admittedPods(n, pod)); !a.admitted {
		rec.rejected = &a
	}
	if rec.rejected != nil {
		c.metrics.admissions.WithLabelValues("rejected", rec.rejected.reason).Inc()
		c.log.Debug("pod rejected", "node", n.name, "pod", pod.Namespace+"/"+pod.Name, "reason", rec.rejected.reason)
		n.pods[pod.UID] = rec
		return rec, nil
	}
	ip, err := c.podIP(n, pod, node)
	if err != nil {
		return nil, err
	}
	rec.admitted, rec.ip, rec.start = true, ip, now
	if cf := n.tmpl.Faults; cf.FailAfter > 0 && n.chance(cf.FailRate) {
		rec.failAfter = cf.FailAfter
	}
	c.metrics.admissions.WithLabelValues("admitted", "").Inc()
	n.pods[pod.UID] = rec
	return rec, nil
}

// admittedPods lists the pods the node runs besides pod: those it admitted and has not
// stopped, and those an earlier run admitted (they have a start time). Callers hold n.mu.
func (c *podController) admittedPods(n *stubNode, pod *corev1.Pod) []*corev1.Pod {
	objs, _ := c.podIndexer.ByIndex(podNodeIndex, n.name)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.UID == pod.UID || placement.IsTerminal(p) {
			continue
		}
		if rec, ok := n.pods[p.UID]; ok {
			if rec.admitted && !rec.stopped {
				out = append(out, p)
			}
			continue
		}
		if p.Status.StartTime != nil {
			out = append(out, p)
		}
	}
	return out
}

// errNoPodCIDR: the Node has no pod CIDR yet (the control plane has not assigned one).
var errNoPodCIDR = errors.New("node has no pod CIDR yet")

// podIP picks the pod's IP: the node's InternalIP for host-network pods, else a free address
// of the node's pod CIDR (the Node's spec.podCIDR, or the configured block). Callers hold
// n.mu.
func (c *podController) podIP(n *stubNode, pod *corev1.Pod, node *corev1.Node) (string, error) {
	if pod.Spec.HostNetwork {
		return n.hostIP, nil
	}
	block := node.Spec.PodCIDR
	if block == "" {
		block = n.podCIDR
	}
	if block == "" {
		return "", errNoPodCIDR
	}
	used := map[string]bool{}
	for _, rec := range n.pods {
		if rec.ip != "" && !rec.stopped {
			used[rec.ip] = true
		}
	}
	objs, _ := c.podIndexer.ByIndex(podNodeIndex, n.name)
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && p.Status.PodIP != "" && !placement.IsTerminal(p) {
			used[p.Status.PodIP] = true
		}
	}
	return n.allocateIP(block, used)
}

// stop plays the kubelet's part in a deletion: the containers are stopped (their statuses
// say terminated) and the pod is then deleted with grace period 0. A pod that never ran or
// has finished is deleted at once.
func (c *podController) stop(ctx context.Context, n *stubNode, pod *corev1.Pod) error {
	n.mu.Lock()
	rec, ok := n.pods[pod.UID]
	if !ok {
		rec = &podRecord{}
		n.pods[pod.UID] = rec
	}
	n.mu.Unlock()
	if !placement.IsTerminal(pod) && !rec.stopped {
		now := c.clock.Now()
		if err := c.writeStatus(ctx, pod, stoppedStatus(pod, now)); err != nil {
			return err
		}
		n.mu.Lock()
		rec.stopped = true
		n.mu.Unlock()
		c.recordContainerEvents(n, pod, stopEvents(&pod.Status), now)
	}
	zero := int64(0)
	uid := pod.UID
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	switch {
	case err == nil:
		c.metrics.podWrites.WithLabelValues("delete").Inc()
		c.log.Debug("pod deleted", "node", n.name, "pod", pod.Namespace+"/"+pod.Name)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone, or replaced by a new pod of the same name
	default:
		return fmt.Errorf("delete pod: %w", err)
	}
}

// writeStatus replaces the pod's status. It is an UPDATE with the cached resourceVersion, so
// a stale cache ends in a conflict and a retry from fresher data rather than in a status
// computed from old facts.
func (c *podController) writeStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	p := pod.DeepCopy()
	p.Status = status
	if _, err := c.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update pod status: %w", err)
	}
	c.metrics.podWrites.WithLabelValues("status").Inc()
	return nil
}

// podFromDeleted returns the pod of a delete event, which may be the last known state.
func podFromDeleted(obj any) (*corev1.Pod, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}
