package kubeletstub

import (
	"context"
	"fmt"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// registrar registers the fleet's nodes. Registration is idempotent: a Node that already
// exists (a restart, or another process registered it) is re-used as it is, like a kubelet
// re-joining, and its status is brought up to date by the first heartbeat.
type registrar struct {
	client     kubernetes.Interface
	nodeLister corelisters.NodeLister
	nodes      []*stubNode
	queue      workqueue.TypedRateLimitingInterface[int32]
	clock      clock.Clock
	log        *slog.Logger

	// onRegistered is called once the node exists in the API.
	onRegistered func(n *stubNode)
}

func (r *registrar) enqueueAll() {
	for i := range r.nodes {
		r.queue.Add(int32(i))
	}
}

func (r *registrar) worker(ctx context.Context) {
	for r.processNext(ctx) {
	}
}

func (r *registrar) processNext(ctx context.Context) bool {
	i, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(i)
	n := r.nodes[i]
	if err := r.register(ctx, n); err != nil {
		r.queue.AddRateLimited(i)
		if ctx.Err() == nil {
			r.log.Warn("node registration failed; retrying", "node", n.name, "retries", r.queue.NumRequeues(i), "err", err)
		}
		return true
	}
	r.queue.Forget(i)
	return true
}

// register creates the node unless the cache or the API server already has it.
func (r *registrar) register(ctx context.Context, n *stubNode) error {
	if _, err := r.nodeLister.Get(n.name); err == nil {
		r.log.Debug("node re-used", "node", n.name)
		r.onRegistered(n)
		return nil
	}
	_, err := r.client.CoreV1().Nodes().Create(ctx, n.newNodeObject(r.clock.Now()), metav1.CreateOptions{})
	switch {
	case err == nil:
		r.log.Debug("node registered", "node", n.name)
		n.freshLease = true // its Lease cannot exist yet unless left over: create it directly
	case apierrors.IsAlreadyExists(err):
		r.log.Debug("node re-used", "node", n.name)
	default:
		return fmt.Errorf("create node: %w", err)
	}
	r.onRegistered(n)
	return nil
}
