package podgc

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/podcondition"
)

// UserAgent identifies the collector's API requests; with service account credentials it
// acts as the ServiceAccount of the same name in kube-system, as upstream's does.
const UserAgent = "pod-garbage-collector"

// Upstream's fixed periods.
const (
	// CheckPeriod is how often the collector looks at every pod.
	CheckPeriod = 20 * time.Second
	// Quarantine is how long a node name missing from the cache waits before the API is
	// asked whether the Node is really gone.
	Quarantine = 40 * time.Second
)

// Options are the collector's dependencies; Client and Informers are required.
type Options struct {
	// Client reads Nodes, patches pod status and deletes pods.
	Client kubernetes.Interface
	// Informers supplies the Pod and Node informers; the caller starts it (Run starts it too).
	Informers informers.SharedInformerFactory
	// Clock drives the period and the quarantine; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
}

// Collector is the pod garbage collector. Create it with New and start it with Run.
type Collector struct {
	client     kubernetes.Interface
	factory    informers.SharedInformerFactory
	pods       corelisters.PodLister
	nodes      corelisters.NodeLister
	synced     []cache.InformerSynced
	clock      clock.WithTicker
	log        *slog.Logger
	threshold  int
	quarantine map[string]time.Time // node name → when the collector first missed it
}

// New builds a collector from cfg and opts.
func New(cfg configs.PodGCController, opts Options) (*Collector, error) {
	if opts.Client == nil || opts.Informers == nil {
		return nil, errors.New("podgc: Options.Client and Options.Informers are required")
	}
	c := &Collector{
		client:     opts.Client,
		factory:    opts.Informers,
		pods:       opts.Informers.Core().V1().Pods().Lister(),
		nodes:      opts.Informers.Core().V1().Nodes().Lister(),
		clock:      opts.Clock,
		log:        opts.Logger,
		threshold:  cfg.TerminatedPodGCThreshold,
		quarantine: map[string]time.Time{},
	}
	c.synced = []cache.InformerSynced{
		opts.Informers.Core().V1().Pods().Informer().HasSynced,
		opts.Informers.Core().V1().Nodes().Informer().HasSynced,
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Run waits for the caches, then collects at once and every CheckPeriod until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	c.log.Info("starting pod garbage collector")
	ticker := c.clock.NewTicker(CheckPeriod)
	defer ticker.Stop()
	for {
		c.Collect(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// Collect runs one pass over the cached pods and reports how many it deleted.
func (c *Collector) Collect(ctx context.Context) int {
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		c.log.Error("listing pods", "err", err)
		return 0
	}
	deleted := c.collectTerminated(ctx, pods)
	deleted += c.collectOutOfService(ctx, pods)
	deleted += c.collectOrphaned(ctx, pods)
	deleted += c.collectUnscheduledTerminating(ctx, pods)
	return deleted
}

func terminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func evicted(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "Evicted"
}

// collectTerminated deletes the terminated pods beyond the threshold: evicted ones first,
// then the oldest, then by name.
func (c *Collector) collectTerminated(ctx context.Context, pods []*corev1.Pod) int {
	if c.threshold <= 0 {
		return 0
	}
	var done []*corev1.Pod
	for _, pod := range pods {
		if terminated(pod) {
			done = append(done, pod)
		}
	}
	excess := len(done) - c.threshold
	if excess <= 0 {
		return 0
	}
	slices.SortFunc(done, func(a, b *corev1.Pod) int {
		if ea, eb := evicted(a), evicted(b); ea != eb {
			if ea {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	c.log.Info("deleting terminated pods over the threshold", "pods", excess, "threshold", c.threshold)
	return c.deleteAll(ctx, done[:excess], nil, "terminated")
}

// collectOutOfService deletes terminating pods on NotReady Nodes an administrator tainted
// out of service: their kubelet is known to be gone.
func (c *Collector) collectOutOfService(ctx context.Context, pods []*corev1.Pod) int {
	var stuck []*corev1.Pod
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil || pod.Spec.NodeName == "" {
			continue
		}
		node, err := c.nodes.Get(pod.Spec.NodeName)
		if err != nil {
			continue
		}
		if !nodeReady(node) && hasTaint(node, corev1.TaintNodeOutOfService) {
			stuck = append(stuck, pod)
		}
	}
	return c.deleteAll(ctx, stuck, nil, "terminating on an out-of-service node")
}

// collectOrphaned deletes the pods bound to Nodes that are gone. A node name the cache lacks
// waits out the quarantine; then one GET decides. A name that turns out to exist (or whose
// GET failed) leaves the quarantine and, if still missing, enters it again on a later pass.
func (c *Collector) collectOrphaned(ctx context.Context, pods []*corev1.Pod) int {
	now := c.clock.Now()
	for _, pod := range pods {
		name := pod.Spec.NodeName
		if name == "" {
			continue
		}
		if _, err := c.nodes.Get(name); apierrors.IsNotFound(err) {
			if _, held := c.quarantine[name]; !held {
				c.quarantine[name] = now
			}
		}
	}
	gone := map[string]bool{}
	for name, since := range c.quarantine {
		if now.Sub(since) < Quarantine {
			continue
		}
		delete(c.quarantine, name)
		if _, err := c.nodes.Get(name); err == nil {
			continue
		}
		_, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone[name] = true
		case err != nil:
			c.log.Error("looking up a node pods are bound to", "node", name, "err", err)
		}
	}
	if len(gone) == 0 {
		return 0
	}
	var orphans []*corev1.Pod
	for _, pod := range pods {
		if gone[pod.Spec.NodeName] {
			orphans = append(orphans, pod)
		}
	}
	return c.deleteAll(ctx, orphans, &corev1.PodCondition{
		Type:    corev1.DisruptionTarget,
		Status:  corev1.ConditionTrue,
		Reason:  podcondition.ReasonDeletionByPodGC,
		Message: podcondition.MessageNodeGone,
	}, "bound to a node that is gone")
}

// collectUnscheduledTerminating deletes terminating pods that were never bound: no kubelet
// will ever confirm their end.
func (c *Collector) collectUnscheduledTerminating(ctx context.Context, pods []*corev1.Pod) int {
	var stuck []*corev1.Pod
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil && pod.Spec.NodeName == "" {
			stuck = append(stuck, pod)
		}
	}
	return c.deleteAll(ctx, stuck, nil, "terminating and never bound")
}

// deleteAll force-deletes pods and reports how many went; why is for the log.
func (c *Collector) deleteAll(ctx context.Context, pods []*corev1.Pod, cond *corev1.PodCondition, why string) int {
	n := 0
	for _, pod := range pods {
		if err := c.markFailedAndDelete(ctx, pod, cond); err != nil && !apierrors.IsNotFound(err) {
			c.log.Error("force-deleting pod", "pod", pod.Namespace+"/"+pod.Name, "why", why, "err", err)
			continue
		}
		c.log.Info("force-deleted pod", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName, "why", why)
		n++
	}
	return n
}

// markFailedAndDelete moves a pod that has not terminated to Failed (with cond, when given)
// before deleting it with no grace period: with no kubelet left to do so, it would otherwise
// be gone while its status still said Running.
func (c *Collector) markFailedAndDelete(ctx context.Context, pod *corev1.Pod, cond *corev1.PodCondition) error {
	if !terminated(pod) {
		status := *pod.Status.DeepCopy()
		status.Phase = corev1.PodFailed
		if cond != nil {
			podcondition.Set(&status, *cond, c.clock.Now())
		}
		if err := podcondition.PatchStatus(ctx, c.client, pod, status); err != nil {
			return err
		}
	}
	return c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
}

func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasTaint(node *corev1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}
