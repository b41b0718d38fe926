package daemonset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/worker"
)

// EventSource is the source component of the controller's events.
const EventSource = "daemonset-controller"

// statusUpdateRetries is how many extra status PUTs follow a failed one (CURRENT: 1, so 2 in all).
const statusUpdateRetries = 1

// Indexer names. They are namespaced by the package because the informers are shared with
// other controllers, and index names must be unique per informer.
const (
	indexPodsByController = "daemonset.miniplane.io/controller"
	indexPodsByNode       = "daemonset.miniplane.io/node"
)

// Options are the controller's dependencies, and the feature gate that selects its placement
// mode. Client and Informers are required.
type Options struct {
	// Client writes pods, ControllerRevisions, DaemonSet status and events.
	Client kubernetes.Interface
	// Informers supplies the DaemonSet, ControllerRevision, Pod and Node informers. The caller
	// starts it (Run also starts any informer not yet started).
	Informers informers.SharedInformerFactory
	// ScheduleDaemonSetPods is the feature gate (configs.ControllerManager's FeatureGates,
	// not a field of configs.DaemonSetController): true (CURRENT) pins pods with node
	// affinity and lets the scheduler bind them; false (LEGACY-BIND) runs the full predicate
	// set here and sets spec.nodeName.
	ScheduleDaemonSetPods bool
	// Clock drives backoff, expectations, availability and requeues; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
}

// Controller keeps one daemon pod on every eligible node for each DaemonSet, rolls out
// template changes, keeps ControllerRevision history and reports status.
type Controller struct {
	client kubernetes.Interface
	cfg    configs.DaemonSetController
	legacy bool
	clock  clock.WithTicker
	log    *slog.Logger

	factory     informers.SharedInformerFactory
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	dsLister      appslisters.DaemonSetLister
	historyLister appslisters.ControllerRevisionLister
	podLister     corelisters.PodLister
	nodeLister    corelisters.NodeLister
	podIndexer    cache.Indexer
	synced        []cache.InformerSynced

	queue        workqueue.TypedRateLimitingInterface[string]
	expectations *expectations
	backoff      *flowcontrol.Backoff
	evaluators   evaluatorCache
	suspended    suspendedSet
	steady       steadyState

	// Seams for tests.
	syncHandler func(ctx context.Context, key string) error
	podControl  podControl
	addAfter    func(key string, d time.Duration)
}

// New validates cfg, registers event handlers and indexers on the shared informers of opts
// and returns a controller ready to Run.
func New(cfg configs.DaemonSetController, opts Options) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("daemonset: %w", err)
	}
	if opts.Client == nil {
		return nil, errors.New("daemonset: Options.Client is required")
	}
	if opts.Informers == nil {
		return nil, errors.New("daemonset: Options.Informers is required")
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	// The caller names the controller in the logger's attributes (the manager adds
	// controller=daemonset), as it does for every controller it runs.
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}

	broadcaster := record.NewBroadcaster()
	c := &Controller{
		client:       opts.Client,
		cfg:          cfg,
		legacy:       !opts.ScheduleDaemonSetPods,
		clock:        clk,
		log:          log,
		factory:      opts.Informers,
		broadcaster:  broadcaster,
		recorder:     broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource}),
		expectations: newExpectations(clk, cfg.ExpectationsTimeout),
		backoff:      flowcontrol.NewFakeBackOff(cfg.FailedPodBackoffInitial, cfg.FailedPodBackoffMax, clk),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "daemonset", Clock: clk},
		),
	}
	c.steady.disabled = c.legacy
	c.syncHandler = c.syncDaemonSet
	c.addAfter = c.queue.AddAfter
	c.podControl = &realPodControl{client: opts.Client, recorder: func() record.EventRecorder { return c.recorder }}

	dsInformer := opts.Informers.Apps().V1().DaemonSets()
	historyInformer := opts.Informers.Apps().V1().ControllerRevisions()
	podInformer := opts.Informers.Core().V1().Pods()
	nodeInformer := opts.Informers.Core().V1().Nodes()

	if err := podInformer.Informer().AddIndexers(cache.Indexers{
		indexPodsByController: podControllerIndex,
		indexPodsByNode:       podNodeIndex,
	}); err != nil {
		return nil, fmt.Errorf("daemonset: adding pod indexers: %w", err)
	}

	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{dsInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.addDaemonSet, UpdateFunc: c.onUpdateDaemonSet, DeleteFunc: c.deleteDaemonSet}},
		{historyInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.addHistory, UpdateFunc: c.updateHistory, DeleteFunc: c.deleteHistory}},
		{podInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.addPod, UpdateFunc: c.updatePod, DeleteFunc: c.deletePod}},
		{nodeInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.addNode, UpdateFunc: c.updateNode, DeleteFunc: c.deleteNode}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("daemonset: adding event handler: %w", err)
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}

	c.dsLister = dsInformer.Lister()
	c.historyLister = historyInformer.Lister()
	c.podLister = podInformer.Lister()
	c.nodeLister = nodeInformer.Lister()
	c.podIndexer = podInformer.Informer().GetIndexer()
	return c, nil
}

// Run records events through the API, waits for the caches, then runs cfg.Workers workers
// and the backoff garbage collector until ctx is cancelled. It returns once they have stopped.
func (c *Controller) Run(ctx context.Context) {
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()
	defer c.queue.ShutDown()

	c.factory.Start(ctx.Done())
	c.log.Info("starting daemonset controller", "workers", c.cfg.Workers, "scheduleDaemonSetPods", !c.legacy)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		c.log.Info("daemonset controller stopped before caches synced")
		return
	}

	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A worker that panics or returns is restarted after a second, as upstream.
			wait.UntilWithContext(ctx, c.runWorker, time.Second)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.runBackoffGC(ctx)
	}()

	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	c.log.Info("daemonset controller stopped")
}

// runBackoffGC drops failed-pod backoff entries that have been quiet for twice the maximum.
func (c *Controller) runBackoffGC(ctx context.Context) {
	t := c.clock.NewTicker(c.cfg.BackoffGCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.backoff.GC()
		}
	}
}

// runWorker syncs keys until the queue shuts down: success forgets a key's failures, an
// error requeues it with the rate limiter (5ms·2^n per key, 10 qps overall).
func (c *Controller) runWorker(ctx context.Context) {
	worker.Run(ctx, c.queue, c.syncHandler, func(key string, requeues int, err error) {
		c.log.Warn("sync failed, requeueing", "daemonSet", key, "retries", requeues, "err", err)
	})
}

// --- enqueueing ---

func (c *Controller) enqueue(ds *appsv1.DaemonSet) {
	key, err := cache.MetaNamespaceKeyFunc(ds)
	if err != nil {
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueAfter(ds *appsv1.DaemonSet, d time.Duration) {
	key, err := cache.MetaNamespaceKeyFunc(ds)
	if err != nil {
		return
	}
	c.addAfter(key, d)
}
