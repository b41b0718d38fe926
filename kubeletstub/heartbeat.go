package kubeletstub

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"
)

// beatKind tells the two periodic jobs of a node apart.
type beatKind uint8

const (
	// beatStatus checks the node's status and writes it when it changed or is due.
	beatStatus beatKind = iota
	// beatLease renews the node's Lease.
	beatLease
)

func (k beatKind) String() string {
	if k == beatLease {
		return "lease"
	}
	return "status"
}

// beatKey is one periodic job of one node in the fleet's single timer queue.
type beatKey struct {
	node int32
	kind beatKind
}

// Error backoff of a failed status write or lease renewal: the kubelet retries quickly, then
// backs off; the retry never waits longer than the regular interval.
const (
	beatRetryInitial = 200 * time.Millisecond
	beatRetryMax     = 7 * time.Second
)

// heartbeater runs the periodic work of every node in the fleet from ONE timer queue (a
// heap served by one goroutine, on the injected clock; see timerQueue) and a few workers,
// instead of a goroutine and a ticker per node, so 5,000 nodes cost a heap entry each.
//
// Invariants:
//   - a node's jobs are scheduled only after it is registered (begin);
//   - the work queue never hands one key to two workers at once, so the per-node fields a
//     job touches (lastReport, lease, error counts) need no lock;
//   - node i's job of period p fires at origin + i·p/N + k·p: the fleet's load is spread
//     evenly over the period, and a late or failed beat does not drift the phase.
type heartbeater struct {
	client     kubernetes.Interface
	nodeLister corelisters.NodeLister
	nodes      []*stubNode
	clock      clock.WithTicker
	queue      *timerQueue[beatKey]
	log        *slog.Logger
	metrics    *metrics
	events     *eventRecorder

	// origin is the phase origin of every schedule; set once before the first begin.
	origin               time.Time
	heartbeatInterval    time.Duration
	reportInterval       time.Duration
	renewInterval        time.Duration
	leaseDurationSeconds int32

	// onBeat is called after each successful (or deliberately skipped) job; the fleet uses
	// it to know when every node has sent its first heartbeat.
	onBeat func(n *stubNode, kind beatKind)
}

// begin schedules a newly registered node's jobs, running both at once: the first heartbeat
// follows registration immediately.
func (h *heartbeater) begin(n *stubNode) {
	h.queue.Add(beatKey{node: int32(n.index), kind: beatStatus})
	h.queue.Add(beatKey{node: int32(n.index), kind: beatLease})
}

// poke runs a registered node's job now, e.g. because its fault annotations changed.
func (h *heartbeater) poke(n *stubNode, kind beatKind) {
	if n.progress.Load()&progressRegistered != 0 {
		h.queue.Add(beatKey{node: int32(n.index), kind: kind})
	}
}

// nextDue returns the first instant of node index's schedule of period interval after now.
func (h *heartbeater) nextDue(index int, interval time.Duration, now time.Time) time.Time {
	phase := time.Duration(int64(interval) * int64(index) / int64(len(h.nodes)))
	first := h.origin.Add(phase)
	if now.Before(first) {
		return first
	}
	periods := now.Sub(first)/interval + 1
	return first.Add(periods * interval)
}

func (h *heartbeater) worker(ctx context.Context) {
	for h.processNext(ctx) {
	}
}

func (h *heartbeater) processNext(ctx context.Context) bool {
	key, quit := h.queue.Get()
	if quit {
		return false
	}
	defer h.queue.Done(key)
	// The next run is computed from when this one started and queued at that absolute
	// time, so a clock that moves during the job neither skips nor delays a beat.
	started := h.clock.Now()
	n := h.nodes[key.node]
	var (
		err      error
		interval time.Duration
		errs     *int
	)
	switch key.kind {
	case beatStatus:
		err, interval, errs = h.syncStatus(ctx, n), h.heartbeatInterval, &n.statusErrors
	case beatLease:
		err, interval, errs = h.syncLease(ctx, n), h.renewInterval, &n.leaseErrors
	}
	if err != nil {
		h.metrics.heartbeat(key.kind, resultError)
		if ctx.Err() != nil {
			return true
		}
		delay := beatRetryInitial << min(*errs, 10)
		delay = min(delay, beatRetryMax, interval)
		*errs++
		h.log.Warn("heartbeat failed", "node", n.name, "kind", key.kind.String(), "retryIn", delay, "err", err)
		h.queue.AddAt(key, started.Add(delay))
		return true
	}
	*errs = 0
	h.queue.AddAt(key, h.nextDue(n.index, interval, started))
	return true
}

// syncStatus writes the node's status when a condition, the capacity, the addresses or the
// node info differ from what the API server has, or when the report interval has passed
// since the last write; otherwise it only looks.
func (h *heartbeater) syncStatus(ctx context.Context, n *stubNode) error {
	node, err := h.nodeLister.Get(n.name)
	if apierrors.IsNotFound(err) {
		// Not in the cache yet (the informer's add event pokes us) or deleted by someone:
		// like the kubelet, the stub does not re-create a deleted Node.
		return nil
	}
	if err != nil {
		return err
	}
	f := currentFaults(&n.tmpl, node.Annotations)
	if f.stopHeartbeats {
		h.metrics.heartbeat(beatStatus, resultSkipped)
		h.onBeat(n, beatStatus)
		return nil
	}
	now := h.clock.Now()
	if node.Spec.Unschedulable != n.lastUnschedulable {
		h.events.recordNodeEvents(n, []string{schedulableEvent(node.Spec.Unschedulable)}, now)
		n.lastUnschedulable = node.Spec.Unschedulable
	}
	want := conditions(f)
	lastReport, differs := n.lastReport, false
	if ready := findNodeCondition(node, corev1.NodeReady); ready != nil && ready.LastHeartbeatTime.After(lastReport.Time) {
		lastReport = ready.LastHeartbeatTime // written by an earlier run of the stub
	}
	cacheBehind := false
	if ready := findNodeCondition(node, corev1.NodeReady); ready == nil || ready.LastHeartbeatTime.Before(&n.lastReport) {
		// The cache has not seen our last write yet (every write stamps Ready's heartbeat):
		// compare with what we wrote rather than write the same thing twice.
		differs = n.lastConditions == nil || !slices.Equal(want, n.lastConditions) || !slices.Equal(f.runtimeHandlers, n.lastHandlers)
		cacheBehind = n.lastConditions != nil
	} else {
		differs = n.statusDiffers(node, want, f.runtimeHandlers)
	}
	if !differs && now.Sub(lastReport.Time) < h.reportInterval {
		h.metrics.heartbeat(beatStatus, resultUnchanged)
		h.onBeat(n, beatStatus)
		return nil
	}
	stamp := metav1.NewTime(now).Rfc3339Copy()
	status := n.status(want, f.runtimeHandlers, node, stamp)
	// A strategic merge patch, as the kubelet sends: conditions merge by type, so other
	// writers' conditions survive, and no resourceVersion means no conflicts with the node
	// lifecycle controller or kubectl annotate.
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if _, err := h.client.CoreV1().Nodes().Patch(ctx, n.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch node status: %w", err)
	}
	if h.events.enabled() {
		before := n.lastConditions
		if !cacheBehind {
			before = reportedConditions(node)
		}
		h.events.recordNodeEvents(n, conditionChangeEvents(want, before), now)
	}
	n.lastReport, n.lastConditions, n.lastHandlers = stamp, want, f.runtimeHandlers
	h.metrics.heartbeat(beatStatus, resultWritten)
	h.onBeat(n, beatStatus)
	return nil
}

// statusDiffers reports whether the node's status says anything other than want, the
// runtime handlers and the configured capacity, addresses and node info (timestamps aside).
func (n *stubNode) statusDiffers(node *corev1.Node, want []condition, handlers []string) bool {
	if !runtimeHandlersMatch(node.Status.RuntimeHandlers, handlers) {
		return true
	}
	for _, c := range want {
		cur := findNodeCondition(node, c.typ)
		if cur == nil || cur.Status != c.status || cur.Reason != c.reason || cur.Message != c.message {
			return true
		}
	}
	for name, q := range n.capacity {
		if cur, ok := node.Status.Capacity[name]; !ok || cur.Cmp(q) != 0 {
			return true
		}
	}
	for name, q := range n.allocatable {
		if cur, ok := node.Status.Allocatable[name]; !ok || cur.Cmp(q) != 0 {
			return true
		}
	}
	return !equality.Semantic.DeepEqual(node.Status.Addresses, n.addresses) ||
		node.Status.NodeInfo.KubeletVersion != KubeletVersion
}

func findNodeCondition(node *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// syncLease renews the node's Lease in kube-node-lease, creating it when missing. The last
// Lease the server returned is kept, so a renewal is one UPDATE; on any error it is dropped
// and read again on the retry, as the kubelet's lease controller does.
func (h *heartbeater) syncLease(ctx context.Context, n *stubNode) error {
	node, err := h.nodeLister.Get(n.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if currentFaults(&n.tmpl, node.Annotations).stopHeartbeats {
		h.metrics.heartbeat(beatLease, resultSkipped)
		h.onBeat(n, beatLease)
		return nil
	}
	leases := h.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(h.clock.Now())
	if n.lease == nil {
		created, err := h.ensureLease(ctx, n, node, now)
		if err != nil {
			return err
		}
		if created {
			h.metrics.heartbeat(beatLease, resultWritten)
			h.onBeat(n, beatLease)
			return nil
		}
	}
	lease := n.lease.DeepCopy()
	h.fillLease(lease, node, now)
	updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		n.lease = nil
		return fmt.Errorf("renew lease: %w", err)
	}
	n.lease = trimLease(updated)
	h.metrics.heartbeat(beatLease, resultWritten)
	h.onBeat(n, beatLease)
	return nil
}

// ensureLease loads the node's Lease into n.lease, creating it (renewed now) when it does
// not exist; created says whether this was the renewal. A node registration just created
// tries the create first, anything else reads first, as the kubelet does.
func (h *heartbeater) ensureLease(ctx context.Context, n *stubNode, node *corev1.Node, now metav1.MicroTime) (created bool, err error) {
	leases := h.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	create := func() (bool, error) {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease}}
		h.fillLease(lease, node, now)
		got, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("create lease: %w", err)
		}
		n.lease = trimLease(got)
		return true, nil
	}
	if n.freshLease {
		n.freshLease = false
		ok, err := create()
		if !apierrors.IsAlreadyExists(err) {
			return ok, err
		}
	}
	cur, err := leases.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return create()
	}
	if err != nil {
		return false, fmt.Errorf("get lease: %w", err)
	}
	n.lease = trimLease(cur)
	return false, nil
}

// fillLease sets what a kubelet's Lease says: held by the node, renewed now, owned by the
// Node (so it goes when the Node goes).
func (h *heartbeater) fillLease(lease *coordinationv1.Lease, node *corev1.Node, now metav1.MicroTime) {
	holder := node.Name
	lease.Spec.HolderIdentity = &holder
	duration := h.leaseDurationSeconds
	lease.Spec.LeaseDurationSeconds = &duration
	lease.Spec.RenewTime = &now
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0] != owner {
		if node.UID != "" {
			lease.OwnerReferences = []metav1.OwnerReference{owner}
		}
	}
}

// trimLease drops what the stub never needs from the Lease it keeps per node.
func trimLease(l *coordinationv1.Lease) *coordinationv1.Lease {
	l.ManagedFields = nil
	return l
}
