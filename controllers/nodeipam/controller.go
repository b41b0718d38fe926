package nodeipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/worker"
)

// UserAgent identifies the controller's API requests. kube-controller-manager runs node
// IPAM with the node controller's credentials, and so does this one.
const UserAgent = "node-ipam-controller"

// EventSource is the component of the controller's events (upstream's cidrAllocator).
const EventSource = "cidrAllocator"

// Event reasons, as upstream's range allocator records them on the Node.
const (
	ReasonCIDRNotAvailable     = "CIDRNotAvailable"
	ReasonCIDRAssignmentFailed = "CIDRAssignmentFailed"
)

// Options are the controller's dependencies; Client and Informers are required.
type Options struct {
	// Client patches Nodes and records events.
	Client kubernetes.Interface
	// Informers supplies the Node informer; the caller starts it (Run starts it too).
	Informers informers.SharedInformerFactory
	// Clock drives the retry backoff; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Recorder emits events; nil means one posting through Client.
	Recorder record.EventRecorder
}

// Controller assigns pod CIDRs to Nodes. Create it with New and start it with Run.
type Controller struct {
	client     kubernetes.Interface
	factory    informers.SharedInformerFactory
	nodeLister corelisters.NodeLister
	synced     cache.InformerSynced
	cidrs      *cidrSet
	workers    int
	log        *slog.Logger

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	queue       workqueue.TypedRateLimitingInterface[string]
}

// New validates cfg and registers the controller's handlers on the Node informer.
func New(cfg configs.NodeIPAMController, opts Options) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nodeipam: %w", err)
	}
	if opts.Client == nil || opts.Informers == nil {
		return nil, errors.New("nodeipam: Options.Client and Options.Informers are required")
	}
	cidrs, err := newCIDRSet(cfg.ClusterCIDR, cfg.NodeCIDRMaskSize)
	if err != nil {
		return nil, fmt.Errorf("nodeipam: %w", err)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Controller{
		client:  opts.Client,
		factory: opts.Informers,
		cidrs:   cidrs,
		workers: cfg.Workers,
		log:     log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeipam", Clock: clk},
		),
		recorder: opts.Recorder,
	}
	if c.recorder == nil {
		c.broadcaster = record.NewBroadcaster()
		c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource})
	}
	inf := opts.Informers.Core().V1().Nodes()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addNode,
		UpdateFunc: func(_, cur any) { c.addNode(cur) },
		DeleteFunc: c.deleteNode,
	}); err != nil {
		return nil, fmt.Errorf("nodeipam: adding event handler: %w", err)
	}
	c.nodeLister = inf.Lister()
	c.synced = inf.Informer().HasSynced
	return c, nil
}

// addNode occupies a Node's block at once, whether or not allocation has started, and
// queues a Node that has none.
func (c *Controller) addNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if node.Spec.PodCIDR != "" {
		c.occupy(node)
		return
	}
	c.queue.Add(node.Name)
}

func (c *Controller) deleteNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if node, ok = tombstone.Obj.(*corev1.Node); !ok {
			return
		}
	}
	if node.Spec.PodCIDR != "" {
		c.cidrs.release(node.Name, node.Spec.PodCIDR)
		c.log.Debug("released pod CIDR of deleted node", "node", node.Name, "podCIDR", node.Spec.PodCIDR)
	}
}

func (c *Controller) occupy(node *corev1.Node) {
	if err := c.cidrs.occupy(node.Name, node.Spec.PodCIDR); err != nil {
		// A block set by hand outside the cluster CIDR: the node keeps it; it cannot collide
		// with what this controller hands out.
		c.log.Debug("node pod CIDR outside the cluster CIDR", "node", node.Name, "err", err)
	}
}

// Run waits for the Node cache, occupies every cached Node's block, then assigns blocks
// until ctx ends. No worker starts before every stored Node's block is marked used, so a
// restarted controller cannot hand one out again.
func (c *Controller) Run(ctx context.Context) error {
	if c.broadcaster != nil {
		c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
		defer c.broadcaster.Shutdown()
	}
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return ctx.Err()
	}
	if err := c.occupyAll(); err != nil {
		return err
	}
	c.log.Info("starting node IPAM controller", "clusterCIDR", c.cidrs.base.String(), "nodeCIDRMaskSize", c.cidrs.maskSize,
		"blocks", c.cidrs.blocks, "used", c.cidrs.used())
	var wg sync.WaitGroup
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				worker.Run(ctx, c.queue, c.sync, c.syncFailed)
			}, time.Second)
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// occupyAll re-derives the used blocks from the stored Nodes: the handlers have done so for
// every Node delivered so far, this makes sure of it before the first allocation.
func (c *Controller) occupyAll() error {
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("nodeipam: listing nodes: %w", err)
	}
	for _, n := range nodes {
		if n.Spec.PodCIDR != "" {
			c.occupy(n)
		}
	}
	return nil
}

// syncFailed logs a node whose block could not be given; the worker tries it again.
func (c *Controller) syncFailed(name string, requeues int, err error) {
	c.log.Warn("pod CIDR allocation failed, retrying", "node", name, "retries", requeues, "err", err)
}

// sync gives the named Node a block if it still has none. It runs only after occupyAll.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if node.Spec.PodCIDR != "" {
		c.occupy(node)
		return nil
	}
	block, err := c.cidrs.allocate(node.Name)
	if err != nil {
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonCIDRNotAvailable, "Node %s status is now: %s", node.Name, ReasonCIDRNotAvailable)
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	cidr := block.String()
	if err := c.assign(ctx, node, cidr); err != nil {
		c.cidrs.release(node.Name, cidr)
		if apierrors.IsNotFound(err) {
			return nil
		}
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonCIDRAssignmentFailed, "Node %s status is now: %s", node.Name, ReasonCIDRAssignmentFailed)
		return fmt.Errorf("node %s: assigning %s: %w", node.Name, cidr, err)
	}
	c.log.Debug("assigned pod CIDR", "node", node.Name, "podCIDR", cidr)
	return nil
}

// assign patches spec.podCIDR(s), with the Node's UID as a precondition so that a Node
// recreated under the same name is not given the block meant for the old one. Its
// resourceVersion is not: the kubelet's status heartbeats would make the patch conflict
// again and again on a busy fleet, and only the elected controller-manager assigns.
func (c *Controller) assign(ctx context.Context, node *corev1.Node, cidr string) error {
	patch := map[string]any{
		"metadata": map[string]any{"uid": node.UID},
		"spec":     map[string]any{"podCIDR": cidr, "podCIDRs": []string{cidr}},
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{})
	return err
}
