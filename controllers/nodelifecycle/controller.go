package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/worker"
)

// UserAgent identifies the controller's API requests.
const UserAgent = "node-lifecycle-controller"

// Event sources, as kube-controller-manager names them.
const (
	nodeComponent     = "node-controller"
	evictionComponent = "taint-eviction-controller"
)

// The bound on RegisteredNode and RemovingNode events: kube-controller-manager's default
// --kube-api-qps and --kube-api-burst, which bound everything its controllers write.
const (
	nodeEventQPS   = 20
	nodeEventBurst = 30
)

// NodeLeaseNamespace holds the kubelets' heartbeat Leases, one per node, named after it.
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// podNodeNameIndex indexes pods by spec.nodeName (qualified: the pod informer is shared).
const podNodeNameIndex = "miniplane.io/nodelifecycle-node-name"

// Options are the controller's dependencies. Client and Informers are required.
type Options struct {
	// Client updates node status and taints and deletes evicted pods.
	Client kubernetes.Interface
	// Informers provides node, lease and pod informers; the caller starts it after New.
	Informers informers.SharedInformerFactory
	// Clock drives the monitor period, grace periods and eviction times; nil means the real
	// clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Recorder emits node and eviction events; nil means a recorder posting through Client.
	Recorder record.EventRecorder
	// Registerer, when set, receives the controller's metrics.
	Registerer prometheus.Registerer
}

// Controller is the node lifecycle controller. Create it with New and start it with Run.
type Controller struct {
	client             kubernetes.Interface
	nodeLister         corelisters.NodeLister
	leaseLister        coordinationlisters.LeaseLister
	podLister          corelisters.PodLister
	podIndexer         cache.Indexer
	synced             []cache.InformerSynced
	monitorPeriod      time.Duration
	gracePeriod        time.Duration
	startupGracePeriod time.Duration
	workers            int
	clock              clock.WithTicker
	logger             *slog.Logger
	nodeRecorder       record.EventRecorder
	evictionRecorder   record.EventRecorder
	broadcaster        record.EventBroadcaster
	// nodeEventBudget bounds RegisteredNode and RemovingNode, which a controller start
	// records for every node: kube-controller-manager's client allows 20 requests/s (burst
	// 30), and a cluster of 5,000 nodes would otherwise write 5,000 events as it starts.
	nodeEventBudget *rate.Limiter

	nodeQueue workqueue.TypedRateLimitingInterface[string]
	podQueue  workqueue.TypedRateLimitingInterface[string]

	healthMu sync.Mutex
	health   map[string]*nodeHealth

	evictMu sync.Mutex
	// evictionStart is when a pod was first seen tolerating its node's NoExecute taints for
	// a limited time; its deletion is due tolerationSeconds after that.
	evictionStart map[string]evictionClock

	evictions   prometheus.Counter
	transitions prometheus.Counter
}

type evictionClock struct {
	uid   types.UID
	start time.Time
}

// New validates cfg and builds a controller from it and opts, registering an index and
// handlers on the node, lease and pod informers. Call it before the informer factory is
// started.
func New(cfg configs.NodeLifecycleController, opts Options) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nodelifecycle: %w", err)
	}
	if opts.Client == nil || opts.Informers == nil {
		return nil, errors.New("nodelifecycle: Options.Client and Options.Informers are required")
	}
	c := newController(cfg, opts)
	if err := c.registerMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("nodelifecycle: metrics: %w", err)
	}
	c.setRecorders(opts.Recorder, opts.Client)
	if err := c.watch(opts.Informers); err != nil {
		return nil, fmt.Errorf("nodelifecycle: %w", err)
	}
	return c, nil
}

// newController returns the controller's state: settings, queues and metrics, with the
// injected clock and logger (or the real clock and the default logger).
func newController(cfg configs.NodeLifecycleController, opts Options) *Controller {
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Controller{
		client:             opts.Client,
		monitorPeriod:      cfg.MonitorPeriod,
		gracePeriod:        cfg.GracePeriod,
		startupGracePeriod: cfg.StartupGracePeriod,
		workers:            cfg.Workers,
		clock:              clk,
		logger:             logger,
		health:             map[string]*nodeHealth{},
		nodeEventBudget:    rate.NewLimiter(nodeEventQPS, nodeEventBurst),
		evictionStart:      map[string]evictionClock{},
		nodeQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Clock: clk}),
		podQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Clock: clk}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "node_lifecycle_taint_evictions_total",
			Help: "Pods deleted because they do not tolerate a NoExecute taint of their node.",
		}),
		transitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "node_lifecycle_unknown_transitions_total",
			Help: "Times a node was marked Ready=Unknown after its heartbeats stopped.",
		}),
	}
}

// registerMetrics registers the controller's metrics with reg, when there is one.
func (c *Controller) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for _, col := range []prometheus.Collector{c.evictions, c.transitions} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}

// setRecorders uses the injected recorder for both event sources, or builds a broadcaster
// posting through client, which Run shuts down.
func (c *Controller) setRecorders(recorder record.EventRecorder, client kubernetes.Interface) {
	if recorder != nil {
		c.nodeRecorder, c.evictionRecorder = recorder, recorder
		return
	}
	c.broadcaster = record.NewBroadcaster()
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	c.nodeRecorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: nodeComponent})
	c.evictionRecorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: evictionComponent})
}

// watch takes the listers, indexes pods by node (unless a previous controller on the same
// factory did) and registers the handlers whose HasSynced Run waits for.
func (c *Controller) watch(factory informers.SharedInformerFactory) error {
	nodeInformer := factory.Core().V1().Nodes()
	leaseInformer := factory.Coordination().V1().Leases()
	podInformer := factory.Core().V1().Pods()
	c.nodeLister = nodeInformer.Lister()
	c.leaseLister = leaseInformer.Lister()
	c.podLister = podInformer.Lister()
	if _, exists := podInformer.Informer().GetIndexer().GetIndexers()[podNodeNameIndex]; !exists {
		if err := podInformer.Informer().AddIndexers(cache.Indexers{podNodeNameIndex: indexPodByNodeName}); err != nil {
			return fmt.Errorf("pod index: %w", err)
		}
	}
	c.podIndexer = podInformer.Informer().GetIndexer()

	handlers := []struct {
		name     string
		informer cache.SharedIndexInformer
		funcs    cache.ResourceEventHandlerFuncs
	}{
		{"node", nodeInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.onNode(nil, obj) },
			UpdateFunc: c.onNode,
			DeleteFunc: c.onNodeDelete,
		}},
		{"lease", leaseInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.onLease,
			UpdateFunc: func(_, obj any) { c.onLease(obj) },
		}},
		{"pod", podInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.onPod,
			UpdateFunc: func(_, obj any) { c.onPod(obj) },
			DeleteFunc: c.onPodDelete,
		}},
	}
	for _, h := range handlers {
		reg, err := h.informer.AddEventHandler(h.funcs)
		if err != nil {
			return fmt.Errorf("%s handler: %w", h.name, err)
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return nil
}

func indexPodByNodeName(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

// Run waits for the caches, then monitors nodes and evicts pods until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	defer c.nodeQueue.ShutDown()
	defer c.podQueue.ShutDown()
	if c.broadcaster != nil {
		defer c.broadcaster.Shutdown()
	}
	c.logger.Info("starting node lifecycle controller", "gracePeriod", c.gracePeriod, "monitorPeriod", c.monitorPeriod)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() {
			worker.Run(ctx, c.nodeQueue, c.syncNode, c.syncFailed("node"))
		})
		wg.Go(func() {
			worker.Run(ctx, c.podQueue, c.syncPod, c.syncFailed("pod"))
		})
	}
	wg.Go(func() { c.monitorLoop(ctx) })
	<-ctx.Done()
	c.nodeQueue.ShutDown()
	c.podQueue.ShutDown()
	wg.Wait()
	c.logger.Info("stopped node lifecycle controller")
	return nil
}

// monitorLoop checks every node each monitor period: a node that went silent produces no
// event, so only the clock can notice it.
func (c *Controller) monitorLoop(ctx context.Context) {
	t := c.clock.NewTicker(c.monitorPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.enqueueAllNodes()
		}
	}
}

func (c *Controller) enqueueAllNodes() {
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, n := range nodes {
		c.nodeQueue.Add(n.Name)
	}
}

// syncFailed returns what logs a key of kind ("node" or "pod", the log key) whose sync
// failed; the worker tries it again. Warn, not Debug: a key that keeps failing is a stuck
// controller (a node never marked Unknown, a pod never evicted), and the retry count tells
// a transient failure from a persistent one.
func (c *Controller) syncFailed(kind string) func(string, int, error) {
	return func(key string, requeues int, err error) {
		c.logger.Warn("sync failed; retrying", kind, key, "retries", requeues, "err", err)
	}
}

func (c *Controller) onNode(oldObj, newObj any) {
	node, ok := newObj.(*corev1.Node)
	if !ok {
		return
	}
	c.observe(node, c.lease(node.Name))
	c.nodeQueue.Add(node.Name)
	var oldTaints []corev1.Taint
	if old, ok := oldObj.(*corev1.Node); ok {
		oldTaints = old.Spec.Taints
	}
	if !apiequality.Semantic.DeepEqual(noExecuteTaints(oldTaints), noExecuteTaints(node.Spec.Taints)) {
		c.enqueuePodsOn(node.Name)
	}
}

func (c *Controller) onNodeDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if node, ok := obj.(*corev1.Node); ok {
		c.removed(node.Name)
	}
}

// recordNodeEvent records one of the controller's own events about a node joining or
// leaving, within nodeEventBudget.
func (c *Controller) recordNodeEvent(name string, uid types.UID, reason, event string) {
	if !c.nodeEventBudget.AllowN(c.clock.Now(), 1) {
		return
	}
	c.nodeRecorder.Eventf(&corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: uid},
		corev1.EventTypeNormal, reason, "Node %s event: %s", name, event)
}

func (c *Controller) onLease(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok || lease.Namespace != NodeLeaseNamespace {
		return
	}
	node, err := c.nodeLister.Get(lease.Name)
	if err != nil {
		return
	}
	c.observe(node, lease)
	c.nodeQueue.Add(node.Name)
}

func (c *Controller) lease(nodeName string) *coordinationv1.Lease {
	l, err := c.leaseLister.Leases(NodeLeaseNamespace).Get(nodeName)
	if err != nil {
		return nil
	}
	return l
}

// syncNode brings one node's conditions and taints in line with its heartbeats.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		c.removed(name)
		return nil
	}
	if err != nil {
		return err
	}
	h := c.observe(node, c.lease(name))
	if c.register(node) {
		c.recordNodeEvent(name, node.UID, "RegisteredNode", "Registered Node "+name+" in Controller")
	}
	grace := c.gracePeriod
	if !h.hasReady {
		grace = c.startupGracePeriod
	}
	now := c.clock.Now()
	if now.After(h.probeTime.Add(grace)) {
		updated := node.DeepCopy()
		if markUnknown(updated, metav1.NewTime(now)) {
			c.logger.Info("node stopped posting status", "node", name, "lastHeartbeat", h.probeTime, "gracePeriod", grace)
			node, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("marking node %s unknown: %w", name, err)
			}
			c.transitions.Inc()
			c.nodeRecorder.Eventf(&corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID},
				corev1.EventTypeNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", name)
		}
	}
	return c.syncTaints(ctx, node)
}

// syncTaints writes the managed taints node's conditions call for, retrying on conflict
// with a fresh read.
func (c *Controller) syncTaints(ctx context.Context, node *corev1.Node) error {
	for attempt := 0; ; attempt++ {
		taints, changed := reconcileTaints(node.Spec.Taints, desiredTaints(node), metav1.NewTime(c.clock.Now()))
		if !changed {
			return nil
		}
		updated := node.DeepCopy()
		updated.Spec.Taints = taints
		_, err := c.client.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{})
		switch {
		case err == nil:
			c.logger.Debug("updated node taints", "node", node.Name, "taints", len(taints))
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || attempt >= 4:
			return fmt.Errorf("updating taints of node %s: %w", node.Name, err)
		}
		if node, err = c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
	}
}
