package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
)

// UserAgent identifies the stub's requests in the API server's logs and metrics.
const UserAgent = "miniplane-kubeletstub"

// Pod sync retry backoff: conflicts from a stale cache clear within milliseconds; an API
// server that is down is retried up to every 30s.
const (
	podRetryInitial = 5 * time.Millisecond
	podRetryMax     = 30 * time.Second
)

// Options are a Fleet's dependencies. RestConfig or Client is required.
type Options struct {
	// RestConfig carries the fleet's credentials (a node identity in group system:nodes);
	// New builds the fleet's client from it, with the QPS and Burst ClientConfig describes.
	RestConfig *rest.Config
	// Client, when set, is used instead of a clientset built from RestConfig; tests pass
	// client-go's fake clientset here (and no RestConfig).
	Client kubernetes.Interface
	// Clock drives heartbeats, delays and fault timers; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the fleet's Prometheus metrics; nil keeps them unregistered.
	// Fleets sharing a registerer share (add up) their metrics.
	Registerer prometheus.Registerer
	// Informers, when set, is a factory whose Node and Pod informers the fleet reads instead
	// of watching for itself: in one process with the controllers, the one they share, so
	// the process holds one cache of every Node and Pod rather than two. Its informers must
	// list every Node and Pod, with no selector; the fleet starts the two it takes but never
	// shuts the factory down. Nil gives the fleet its own watches.
	Informers informers.SharedInformerFactory
}

// Fleet is one process's stub kubelets: one node or many, sharing one node informer, one
// pod informer, one heartbeat timer queue and one pod work queue.
type Fleet struct {
	cfg    configs.KubeletStub
	client kubernetes.Interface
	clock  clock.WithTicker
	log    *slog.Logger

	nodes  []*stubNode
	byName map[string]*stubNode

	nodeFactory informers.SharedInformerFactory
	podFactory  informers.SharedInformerFactory
	// sharedInformers is set when the factories are Options.Informers, someone else's.
	sharedInformers bool
	nodeInformer    cache.SharedIndexInformer
	podInformer     cache.SharedIndexInformer
	// classFactory watches RuntimeClasses, to find the handler a pod's class names; the
	// node and pod factories filter by field, which a RuntimeClass has none of.
	classFactory  informers.SharedInformerFactory
	classInformer cache.SharedIndexInformer

	registrar *registrar
	heartbeat *heartbeater
	pods      *podController
	metrics   *metrics
	events    *eventRecorder
	// timers are the delaying layers of the three queues, started by Run.
	timers []interface{ start() }

	readyNodes atomic.Int64
	ready      atomic.Bool
	running    atomic.Bool
}

// ClientConfig returns a copy of restConfig for a fleet described by cfg: user agent
// "miniplane-kubeletstub" and a client rate limit sized to the fleet, because client-go's default (5 QPS, burst 10) would starve it. In steady
// state every node renews its Lease each lease-renew-interval (500 requests/s for 5,000
// nodes at the 10s default); at start each node needs two requests (Node and Lease create)
// and pods come in bursts. So unless cfg sets client-qps/client-burst, QPS is 200 + N (for
// 5,000 nodes 5,200) and Burst twice that, or restConfig's own values when higher: in
// practice the fleet is limited by its worker counts and the server's latency, not by the
// client. A rate limiter already set on restConfig is dropped so these limits apply.
func ClientConfig(cfg configs.KubeletStub, restConfig *rest.Config) *rest.Config {
	rc := rest.CopyConfig(restConfig)
	rc.UserAgent = UserAgent
	qps := max(float32(200+len(cfg.NodeNames())), restConfig.QPS)
	if cfg.ClientQPS != 0 {
		qps = cfg.ClientQPS
	}
	burst := max(int(2*qps), restConfig.Burst)
	if cfg.ClientBurst > 0 {
		burst = cfg.ClientBurst
	}
	rc.QPS, rc.Burst, rc.RateLimiter = qps, max(burst, 1), nil
	return rc
}

// New validates cfg and builds the fleet it describes, with the client opts gives or builds.
// Nothing talks to the API server before Run.
func New(cfg configs.KubeletStub, opts Options) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubeletstub: %w", err)
	}
	f := &Fleet{cfg: cfg, client: opts.Client, clock: opts.Clock, log: opts.Logger}
	if f.clock == nil {
		f.clock = clock.RealClock{}
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	f.log = f.log.With("component", "kubeletstub")
	if f.client == nil {
		if opts.RestConfig == nil {
			return nil, errors.New("kubeletstub: Options.RestConfig or Options.Client is required")
		}
		client, err := kubernetes.NewForConfig(ClientConfig(cfg, opts.RestConfig))
		if err != nil {
			return nil, fmt.Errorf("kubeletstub: client: %w", err)
		}
		f.client = client
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var err error
	if f.metrics, err = newMetrics(reg); err != nil {
		return nil, fmt.Errorf("kubeletstub: metrics: %w", err)
	}
	f.events = &eventRecorder{budget: newEventBudget(cfg), dropped: f.metrics.eventsDropped}

	pullFailures, err := parseImagePatterns(cfg.ImagePullFailures)
	if err != nil {
		return nil, fmt.Errorf("kubeletstub: image-pull-failures: %w", err)
	}

	names := cfg.NodeNames()
	f.byName = make(map[string]*stubNode, len(names))
	resources := resourceCache{}
	for i, name := range names {
		n, err := newStubNode(&cfg, name, i, resources)
		if err != nil {
			return nil, fmt.Errorf("kubeletstub: %w", err)
		}
		f.nodes = append(f.nodes, n)
		f.byName[name] = n
	}
	f.metrics.nodes.WithLabelValues("configured").Add(float64(len(names)))

	f.buildInformers(opts.Informers)
	f.buildLoops()
	f.pods.pullFailures = pullFailures
	if err := f.addHandlers(); err != nil {
		return nil, fmt.Errorf("kubeletstub: %w", err)
	}
	return f, nil
}

// buildInformers sets up the fleet's only two watches, or takes them from shared. One node
// watches with field selectors, as a kubelet does; a fleet watches every node and every
// bound pod and filters by name, because field selectors cannot say "one of these 5,000
// names". The filtering is also what lets a fleet read shared caches of every Node and Pod.
func (f *Fleet) buildInformers(shared informers.SharedInformerFactory) {
	if shared != nil {
		f.nodeFactory, f.podFactory, f.classFactory, f.sharedInformers = shared, shared, shared, true
		f.nodeInformer = shared.Core().V1().Nodes().Informer()
		f.podInformer = shared.Core().V1().Pods().Informer()
		f.classInformer = shared.Node().V1().RuntimeClasses().Informer()
		return
	}
	nodeSelector, podSelector := fields.Everything(), fields.OneTermNotEqualSelector("spec.nodeName", "")
	if f.cfg.NodeName != "" {
		nodeSelector = fields.OneTermEqualSelector("metadata.name", f.cfg.NodeName)
		podSelector = fields.OneTermEqualSelector("spec.nodeName", f.cfg.NodeName)
	}
	f.nodeFactory = informers.NewSharedInformerFactoryWithOptions(f.client, 0,
		informers.WithTransform(trimObject),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = nodeSelector.String() }))
	f.podFactory = informers.NewSharedInformerFactoryWithOptions(f.client, 0,
		informers.WithTransform(trimObject),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = podSelector.String() }))
	f.classFactory = informers.NewSharedInformerFactoryWithOptions(f.client, 0, informers.WithTransform(trimObject))
	f.nodeInformer = f.nodeFactory.Core().V1().Nodes().Informer()
	f.podInformer = f.podFactory.Core().V1().Pods().Informer()
	f.classInformer = f.classFactory.Node().V1().RuntimeClasses().Informer()
}

// trimObject drops managed fields from cached objects: the stub never reads them, and with
// thousands of nodes they would be most of the cache.
func trimObject(obj any) (any, error) {
	if acc, ok := obj.(metav1.ObjectMetaAccessor); ok {
		acc.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

func (f *Fleet) buildLoops() {
	nodeLister := f.nodeFactory.Core().V1().Nodes().Lister()
	f.heartbeat = &heartbeater{
		client:               f.client,
		nodeLister:           nodeLister,
		nodes:                f.nodes,
		clock:                f.clock,
		queue:                newTimerQueue[beatKey](f.clock),
		log:                  f.log,
		metrics:              f.metrics,
		events:               f.events,
		heartbeatInterval:    f.cfg.HeartbeatInterval,
		reportInterval:       f.cfg.ReportInterval,
		renewInterval:        f.cfg.LeaseRenewInterval,
		leaseDurationSeconds: int32(f.cfg.LeaseDuration / time.Second),
		onBeat:               f.onBeat,
	}
	registrationTimers := newTimerQueue[int32](f.clock)
	f.registrar = &registrar{
		client:     f.client,
		nodeLister: nodeLister,
		nodes:      f.nodes,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[int32](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[int32]{DelayingQueue: registrationTimers}),
		clock:        f.clock,
		log:          f.log,
		onRegistered: f.onRegistered,
	}
	podTimers := newTimerQueue[string](f.clock)
	f.pods = &podController{
		client:      f.client,
		podLister:   f.podFactory.Core().V1().Pods().Lister(),
		podIndexer:  f.podInformer.GetIndexer(),
		nodeLister:  nodeLister,
		classLister: f.classFactory.Node().V1().RuntimeClasses().Lister(),
		nodes:       f.byName,
		clock:       f.clock,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](podRetryInitial, podRetryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{DelayingQueue: podTimers}),
		timers:  podTimers,
		log:     f.log,
		metrics: f.metrics,
		events:  f.events,
	}
	f.timers = []interface{ start() }{f.heartbeat.queue, registrationTimers, podTimers}
}

// addHandlers ties the loops together: node events poke the heartbeater and re-queue the
// node's pods when its fault annotations change; pod events queue pods bound to the fleet.
func (f *Fleet) addHandlers() error {
	if err := f.podInformer.AddIndexers(cache.Indexers{podNodeIndex: indexPodByNode}); err != nil {
		return err
	}
	if _, err := f.podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				f.pods.enqueue(pod)
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				f.pods.enqueue(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if pod, ok := podFromDeleted(obj); ok {
				f.pods.forget(pod)
			}
		},
	}); err != nil {
		return err
	}
	_, err := f.nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if node, ok := obj.(*corev1.Node); ok {
				f.nodeAdded(node)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := obj.(*corev1.Node)
			if !ok1 || !ok2 {
				return
			}
			n, ok := f.byName[node.Name]
			if !ok {
				return
			}
			if old.Spec.PodCIDR != node.Spec.PodCIDR {
				// Pods waiting for the node's network can start now.
				f.pods.enqueueNode(n.name)
			}
			if old.Spec.Unschedulable != node.Spec.Unschedulable {
				// The kubelet notices a cordon at its next status check; this is it.
				f.heartbeat.poke(n, beatStatus)
			}
			if !faultAnnotationsChanged(old.Annotations, node.Annotations) {
				return
			}
			f.log.Info("node fault annotations changed", "node", n.name)
			f.reportAnnotationProblems(n, node)
			f.heartbeat.poke(n, beatStatus)
			f.heartbeat.poke(n, beatLease)
			f.pods.enqueueNode(n.name)
		},
	})
	return err
}

// nodeAdded handles the node informer's add event for one of the fleet's nodes. A heartbeat
// job that ran before the cache held the node found nothing and did nothing, so it is poked
// to run now; one that has already beaten is left in its slot of the schedule. client-go
// calls handlers after the cache has the object, so the event can arrive after the first
// beats, and poking those again would shift their next renewal.
func (f *Fleet) nodeAdded(node *corev1.Node) {
	n, ok := f.byName[node.Name]
	if !ok {
		return
	}
	f.reportAnnotationProblems(n, node)
	for _, kind := range []beatKind{beatStatus, beatLease} {
		if n.progress.Load()&beatProgress(kind) == 0 {
			f.heartbeat.poke(n, kind)
		}
	}
	f.pods.enqueueNode(n.name)
}

func (f *Fleet) reportAnnotationProblems(n *stubNode, node *corev1.Node) {
	for _, err := range annotationProblems(node.Annotations) {
		f.log.Warn("ignoring malformed fault annotation", "node", n.name, "err", err)
	}
}

// onRegistered is the registrar's callback: the node exists, so its kubelet has started
// (its start events) and its heartbeats start.
func (f *Fleet) onRegistered(n *stubNode) {
	if f.mark(n, progressRegistered) {
		f.metrics.nodes.WithLabelValues("registered").Inc()
		if f.events.enabled() {
			annotations := n.annotations
			if node, err := f.heartbeat.nodeLister.Get(n.name); err == nil {
				annotations = node.Annotations
			}
			f.events.recordNodeEvents(n, startNodeEvents(conditions(currentFaults(&n.tmpl, annotations))), f.clock.Now())
		}
		f.heartbeat.begin(n)
	}
}

// onBeat is the heartbeater's callback: it counts nodes that have sent their first status
// and lease, which is what Ready reports.
func (f *Fleet) onBeat(n *stubNode, kind beatKind) {
	f.mark(n, beatProgress(kind))
}

// beatProgress is the progress bit a node's first beat of kind sets.
func beatProgress(kind beatKind) uint32 {
	if kind == beatLease {
		return progressLease
	}
	return progressStatus
}

// mark sets a progress bit of n and reports whether it was newly set; the node that
// completes its progress is counted ready.
func (f *Fleet) mark(n *stubNode, bit uint32) bool {
	for {
		old := n.progress.Load()
		if old&bit != 0 {
			return false
		}
		if !n.progress.CompareAndSwap(old, old|bit) {
			continue
		}
		if old|bit == progressAll {
			f.metrics.nodes.WithLabelValues("ready").Inc()
			if f.readyNodes.Add(1) == int64(len(f.nodes)) {
				f.ready.Store(true)
				f.log.Info("all stub nodes registered and heartbeating", "nodes", len(f.nodes))
			}
		}
		return true
	}
}

// Ready reports whether every node is registered and has sent its first status and Lease
// (a node whose heartbeats are stopped by a fault counts once it has been checked). It backs
// /readyz.
func (f *Fleet) Ready() bool { return f.ready.Load() }

// NodeNames returns the names of the fleet's nodes, in index order.
func (f *Fleet) NodeNames() []string {
	out := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.name
	}
	return out
}

// Run registers the nodes and runs their heartbeats and pods until ctx is cancelled, then
// stops every goroutine it started and returns nil. It may be called once.
func (f *Fleet) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return errors.New("kubeletstub: Run may be called once")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var broadcaster record.EventBroadcaster
	if f.cfg.RecordEvents {
		broadcaster = record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: f.client.CoreV1().Events("")})
		f.events.newRecorder = func(node string) record.EventRecorder {
			return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: node})
		}
	}

	f.nodeFactory.Start(ctx.Done())
	f.podFactory.Start(ctx.Done())
	f.classFactory.Start(ctx.Done())
	var wg sync.WaitGroup
	for _, t := range f.timers {
		t.start()
	}
	if cache.WaitForCacheSync(ctx.Done(), f.nodeInformer.HasSynced, f.podInformer.HasSynced, f.classInformer.HasSynced) {
		f.heartbeat.origin = f.clock.Now()
		for range f.cfg.HeartbeatWorkerCount() {
			wg.Go(func() { f.registrar.worker(ctx) })
			wg.Go(func() { f.heartbeat.worker(ctx) })
		}
		for range f.cfg.PodWorkerCount() {
			wg.Go(func() { f.pods.worker(ctx) })
		}
		f.registrar.enqueueAll()
		f.log.Info("stub kubelets started", "nodes", len(f.nodes), "first", f.nodes[0].name)
	}
	<-ctx.Done()
	f.registrar.queue.ShutDown()
	f.heartbeat.queue.ShutDown()
	f.pods.queue.ShutDown()
	wg.Wait()
	if !f.sharedInformers {
		f.nodeFactory.Shutdown()
		f.podFactory.Shutdown()
		f.classFactory.Shutdown()
	}
	if broadcaster != nil {
		broadcaster.Shutdown()
	}
	f.log.Info("stub kubelets stopped", "nodes", len(f.nodes))
	return nil
}
