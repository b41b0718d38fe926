package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/placement"
)

// Component is the event source name, as kube-scheduler's default profile reports itself.
const Component = "default-scheduler"

// Options are the scheduler's dependencies. Client and Informers are required.
type Options struct {
	// Client binds pods and updates their status.
	Client kubernetes.Interface
	// Informers provides the pod and node informers; the caller starts it.
	Informers informers.SharedInformerFactory
	// Recorder emits Scheduled and FailedScheduling events; nil means a recorder posting
	// through EventClient (or Client).
	Recorder record.EventRecorder
	// EventClient posts events when Recorder is nil; nil means Client. A separate client
	// keeps event writes from eating the binding rate limit.
	EventClient kubernetes.Interface
	// Clock drives backoff and retries; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Metrics counts scheduling attempts and binding latency; nil means unregistered metrics.
	Metrics *Metrics
}

// Scheduler binds pending pods to nodes. Create it with New and start it with Run.
type Scheduler struct {
	client        kubernetes.Interface
	podLister     corelisters.PodLister
	synced        []cache.InformerSynced
	recorder      record.EventRecorder
	broadcaster   record.EventBroadcaster // owned when the recorder was built here
	schedulerName string
	workers       int
	flushInterval time.Duration
	clock         clock.WithTicker
	logger        *slog.Logger
	metrics       *Metrics

	cache *nodeCache
	queue workqueue.TypedDelayingInterface[string]

	backoffMu sync.Mutex
	backoff   *flowcontrol.Backoff
	// unschedulable holds keys of pods that fit nowhere, with the time of the last attempt;
	// a node or pod change requeues them once their backoff has passed.
	unschedulable map[string]time.Time
	// moveCycle counts the cluster changes that requeued unschedulable pods. An attempt
	// that fails while a change arrives must not park its pod: the change may be the one
	// that makes it fit, and it came too early to requeue it (kube-scheduler's
	// moveRequestCycle).
	moveCycle uint64

	// bindFn is a seam for tests.
	bindFn func(ctx context.Context, b *corev1.Binding) error
}

// New validates cfg and builds a scheduler from it and opts, registering handlers on the pod
// and node informers. Call it before the informer factory is started.
func New(cfg configs.Scheduler, opts Options) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if opts.Client == nil || opts.Informers == nil {
		return nil, errors.New("scheduler: Options.Client and Options.Informers are required")
	}
	s := newScheduler(cfg, opts)
	s.setRecorder(opts.Recorder, opts.EventClient, opts.Client)
	if err := s.watch(opts.Informers); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return s, nil
}

// newScheduler returns the scheduler's state, with the injected clock, logger and metrics
// (or the real clock, the default logger and unregistered metrics).
func newScheduler(cfg configs.Scheduler, opts Options) *Scheduler {
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	metrics := opts.Metrics
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	s := &Scheduler{
		client:        opts.Client,
		schedulerName: cfg.SchedulerName,
		workers:       cfg.Workers,
		flushInterval: cfg.UnschedulableFlushInterval,
		clock:         clk,
		logger:        logger,
		metrics:       metrics,
		cache:         newCache(),
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
			Clock: clk,
		}),
		backoff:       flowcontrol.NewFakeBackOff(cfg.PodInitialBackoff, cfg.PodMaxBackoff, clk),
		unschedulable: map[string]time.Time{},
	}
	s.bindFn = func(ctx context.Context, b *corev1.Binding) error {
		return s.client.CoreV1().Pods(b.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	}
	return s
}

// setRecorder uses the injected recorder, or builds a broadcaster posting through
// eventClient (client when nil), which Run shuts down.
func (s *Scheduler) setRecorder(recorder record.EventRecorder, eventClient, client kubernetes.Interface) {
	if recorder != nil {
		s.recorder = recorder
		return
	}
	if eventClient == nil {
		eventClient = client
	}
	s.broadcaster = record.NewBroadcaster()
	s.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: eventClient.CoreV1().Events("")})
	s.recorder = s.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component})
}

// watch takes the pod lister and registers the pod and node handlers whose HasSynced Run
// waits for.
func (s *Scheduler) watch(factory informers.SharedInformerFactory) error {
	podInformer := factory.Core().V1().Pods()
	nodeInformer := factory.Core().V1().Nodes()
	s.podLister = podInformer.Lister()
	podReg, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.addPod,
		UpdateFunc: s.updatePod,
		DeleteFunc: s.deletePod,
	})
	if err != nil {
		return fmt.Errorf("pod handler: %w", err)
	}
	nodeReg, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.addNode,
		UpdateFunc: s.updateNode,
		DeleteFunc: s.deleteNode,
	})
	if err != nil {
		return fmt.Errorf("node handler: %w", err)
	}
	// The handlers' own HasSynced: the cache must have seen every initial node and pod
	// before a decision is made, not just the informer's store.
	s.synced = []cache.InformerSynced{podReg.HasSynced, nodeReg.HasSynced}
	return nil
}

// Run waits for the caches, then schedules with the configured workers until ctx is
// cancelled.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.queue.ShutDown()
	if s.broadcaster != nil {
		defer s.broadcaster.Shutdown()
	}
	s.logger.Info("starting scheduler", "schedulerName", s.schedulerName, "workers", s.workers)
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for s.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { s.flushLoop(ctx) })
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
	s.logger.Info("stopped scheduler")
	return nil
}

// flushLoop retries every unschedulable pod each flush interval, in case a change that
// makes it fit was not one the handlers react to.
func (s *Scheduler) flushLoop(ctx context.Context) {
	t := s.clock.NewTicker(s.flushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.requeueUnschedulable()
		}
	}
}

func (s *Scheduler) processNext(ctx context.Context) bool {
	key, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(key)
	s.scheduleOne(ctx, key)
	return true
}

// responsible reports whether pod waits for this scheduler.
func (s *Scheduler) responsible(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && !placement.IsTerminal(pod) &&
		(pod.Spec.SchedulerName == s.schedulerName || pod.Spec.SchedulerName == "")
}

// scheduleOne schedules the pod with the given key: filter, pick, assume, bind. Failures are
// recorded on the pod and the key goes to the unschedulable set with backoff.
func (s *Scheduler) scheduleOne(ctx context.Context, key string) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	pod, err := s.podLister.Pods(ns).Get(name)
	if err != nil || !s.responsible(pod) || s.cache.has(pod.UID) {
		// Gone, bound, or bound by us and not yet seen bound: nothing to do.
		s.forgetBackoff(key)
		return
	}
	logger := s.logger.With("pod", key)
	start := s.clock.Now()
	cycle := s.currentMoveCycle()
	nodeName, fitErr := s.cache.scheduleAndAssume(pod)
	if fitErr != nil {
		s.metrics.attempts.WithLabelValues("unschedulable").Inc()
		msg := fitErr.Error()
		logger.Debug("pod is unschedulable", "reason", msg)
		s.recorder.Event(pod, corev1.EventTypeWarning, "FailedScheduling", msg)
		s.markUnschedulable(ctx, pod, msg, logger)
		s.addUnschedulable(key, cycle)
		return
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if err := s.bindFn(ctx, binding); err != nil {
		s.cache.forget(pod.UID)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || ctx.Err() != nil {
			// Deleted, bound by someone else, or shutting down: the informer will tell.
			logger.Debug("binding abandoned", "node", nodeName, "err", err)
			return
		}
		s.metrics.attempts.WithLabelValues("error").Inc()
		logger.Warn("binding failed", "node", nodeName, "err", err)
		s.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedScheduling", "Binding rejected: %v", err)
		s.addUnschedulable(key, cycle)
		return
	}
	s.metrics.attempts.WithLabelValues("scheduled").Inc()
	s.metrics.bindDuration.Observe(s.clock.Since(start).Seconds())
	s.forgetBackoff(key)
	logger.Debug("bound pod", "node", nodeName)
	s.recorder.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, nodeName)
}

// markUnschedulable sets PodScheduled=False/Unschedulable with msg, unless the pod already
// says exactly that (avoids a write per retry).
func (s *Scheduler) markUnschedulable(ctx context.Context, pod *corev1.Pod, msg string, logger *slog.Logger) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse &&
			c.Reason == corev1.PodReasonUnschedulable && c.Message == msg {
			return
		}
	}
	updated := pod.DeepCopy()
	cond := corev1.PodCondition{
		Type:               corev1.PodScheduled,
		Status:             corev1.ConditionFalse,
		Reason:             corev1.PodReasonUnschedulable,
		Message:            msg,
		LastTransitionTime: metav1.NewTime(s.clock.Now()),
	}
	replaced := false
	for i, c := range updated.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			if c.Status == cond.Status {
				cond.LastTransitionTime = c.LastTransitionTime
			}
			updated.Status.Conditions[i] = cond
			replaced = true
		}
	}
	if !replaced {
		updated.Status.Conditions = append(updated.Status.Conditions, cond)
	}
	_, err := s.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case apierrors.IsConflict(err) || ctx.Err() != nil:
		// The pod changed meanwhile (its update event brings it back) or we are stopping.
		logger.Debug("updating pod status failed", "err", err)
	default:
		// The next retry writes it again; until then users see a stale condition.
		logger.Warn("updating pod status failed", "err", err)
	}
}

// addUnschedulable records a failed attempt: the pod is retried after its backoff once a
// node or pod changes, or at the next flush.
// cycle is the move cycle read when the attempt began: if a change has requeued pods since,
// the pod goes straight back to the queue after its backoff.
func (s *Scheduler) addUnschedulable(key string, cycle uint64) {
	s.backoffMu.Lock()
	defer s.backoffMu.Unlock()
	now := s.clock.Now()
	s.backoff.Next(key, now)
	if s.moveCycle != cycle {
		s.queue.AddAfter(key, s.backoff.Get(key))
		return
	}
	s.unschedulable[key] = now
}

func (s *Scheduler) currentMoveCycle() uint64 {
	s.backoffMu.Lock()
	defer s.backoffMu.Unlock()
	return s.moveCycle
}

func (s *Scheduler) forgetBackoff(key string) {
	s.backoffMu.Lock()
	defer s.backoffMu.Unlock()
	delete(s.unschedulable, key)
	s.backoff.DeleteEntry(key)
}

// requeueUnschedulable moves every unschedulable pod back to the queue, each after what is
// left of its backoff.
func (s *Scheduler) requeueUnschedulable() {
	s.backoffMu.Lock()
	defer s.backoffMu.Unlock()
	s.moveCycle++
	now := s.clock.Now()
	for key, failedAt := range s.unschedulable {
		delay := failedAt.Add(s.backoff.Get(key)).Sub(now)
		delete(s.unschedulable, key)
		if delay > 0 {
			s.queue.AddAfter(key, delay)
		} else {
			s.queue.Add(key)
		}
	}
}

// requeueOne retries one unschedulable pod after its backoff (its spec changed).
func (s *Scheduler) requeueOne(key string) {
	s.backoffMu.Lock()
	defer s.backoffMu.Unlock()
	failedAt, ok := s.unschedulable[key]
	if !ok {
		s.queue.Add(key)
		return
	}
	delete(s.unschedulable, key)
	if delay := failedAt.Add(s.backoff.Get(key)).Sub(s.clock.Now()); delay > 0 {
		s.queue.AddAfter(key, delay)
		return
	}
	s.queue.Add(key)
}

func (s *Scheduler) addPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.cache.setPod(pod)
	if s.responsible(pod) {
		s.queue.Add(podKey(pod))
	}
}

func (s *Scheduler) updatePod(oldObj, newObj any) {
	oldPod, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	s.cache.setPod(pod)
	key := podKey(pod)
	switch {
	case s.responsible(pod):
		// Our own status writes come back here; only a change to what the filters read
		// deserves an attempt before the backoff says so.
		if !apiequality.Semantic.DeepEqual(oldPod.Spec, pod.Spec) || !apiequality.Semantic.DeepEqual(oldPod.Labels, pod.Labels) {
			s.requeueOne(key)
		}
	case oldPod.Spec.NodeName != "" && placement.IsTerminal(pod) && !placement.IsTerminal(oldPod):
		s.forgetBackoff(key)
		s.requeueUnschedulable() // a finished pod frees resources and ports
	default:
		if oldPod.Spec.NodeName == "" && pod.Spec.NodeName != "" {
			s.forgetBackoff(key)
		}
	}
}

func (s *Scheduler) deletePod(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.cache.removePod(pod.UID)
	s.forgetBackoff(podKey(pod))
	if pod.Spec.NodeName != "" {
		s.requeueUnschedulable()
	}
}

func (s *Scheduler) addNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s.cache.setNode(node)
	s.requeueUnschedulable()
}

func (s *Scheduler) updateNode(oldObj, newObj any) {
	oldNode, ok1 := oldObj.(*corev1.Node)
	node, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	s.cache.setNode(node)
	// Heartbeats change only conditions; retry pods only when something a filter reads moved.
	if !apiequality.Semantic.DeepEqual(oldNode.Spec, node.Spec) ||
		!apiequality.Semantic.DeepEqual(oldNode.Labels, node.Labels) ||
		!apiequality.Semantic.DeepEqual(oldNode.Status.Allocatable, node.Status.Allocatable) {
		s.requeueUnschedulable()
	}
}

func (s *Scheduler) deleteNode(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if node, ok := obj.(*corev1.Node); ok {
		s.cache.removeNode(node.Name)
	}
}

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
