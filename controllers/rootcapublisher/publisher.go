package rootcapublisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/controllers/internal/worker"
)

// UserAgent identifies the controller's API requests; with service account credentials it
// acts as the ServiceAccount of the same name in kube-system, as upstream's does.
const UserAgent = "root-ca-cert-publisher"

// What every namespace gets: upstream's names, which pods and tools look up.
const (
	ConfigMapName = "kube-root-ca.crt"
	// DataKey holds the PEM bundle.
	DataKey = "ca.crt"
	// DescriptionAnnotation and Description say what the bundle is for, in upstream's words.
	DescriptionAnnotation = "kubernetes.io/description"
	Description           = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
)

// workers is the number of namespaces synced at once, upstream's default.
const workers = 1

// Options are the publisher's dependencies; Client, Informers and RootCA are required.
type Options struct {
	// Client creates and updates the ConfigMaps.
	Client kubernetes.Interface
	// Informers supplies the Namespace and ConfigMap informers; the caller starts it (Run
	// starts it too).
	Informers informers.SharedInformerFactory
	// RootCA is the PEM bundle to publish.
	RootCA []byte
	// Clock drives the retry backoff; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
}

// Publisher keeps kube-root-ca.crt in every namespace. Create it with New and start it with Run.
type Publisher struct {
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	rootCA   string
	nsLister corelisters.NamespaceLister
	cmLister corelisters.ConfigMapLister
	synced   []cache.InformerSynced
	log      *slog.Logger
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New registers the publisher's handlers on the Namespace and ConfigMap informers.
func New(opts Options) (*Publisher, error) {
	if opts.Client == nil || opts.Informers == nil {
		return nil, errors.New("rootcapublisher: Options.Client and Options.Informers are required")
	}
	if len(opts.RootCA) == 0 {
		return nil, errors.New("rootcapublisher: Options.RootCA is empty")
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &Publisher{
		client:  opts.Client,
		factory: opts.Informers,
		rootCA:  string(opts.RootCA),
		log:     log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "root_ca_cert_publisher", Clock: clk},
		),
	}
	namespaces := opts.Informers.Core().V1().Namespaces()
	if _, err := namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.namespaceChanged,
		UpdateFunc: func(_, cur any) { p.namespaceChanged(cur) },
	}); err != nil {
		return nil, fmt.Errorf("rootcapublisher: adding namespace handler: %w", err)
	}
	configMaps := opts.Informers.Core().V1().ConfigMaps()
	if _, err := configMaps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) { p.configMapChanged(cur) },
		DeleteFunc: p.configMapChanged,
	}); err != nil {
		return nil, fmt.Errorf("rootcapublisher: adding configmap handler: %w", err)
	}
	p.nsLister, p.cmLister = namespaces.Lister(), configMaps.Lister()
	p.synced = []cache.InformerSynced{namespaces.Informer().HasSynced, configMaps.Informer().HasSynced}
	return p, nil
}

func (p *Publisher) namespaceChanged(obj any) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		p.queue.Add(ns.Name)
	}
}

// configMapChanged queues the namespace of a changed or deleted kube-root-ca.crt; every
// other ConfigMap is none of the publisher's business.
func (p *Publisher) configMapChanged(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == ConfigMapName {
		p.queue.Add(cm.Namespace)
	}
}

// Run waits for the caches, then syncs namespaces until ctx ends.
func (p *Publisher) Run(ctx context.Context) {
	defer p.queue.ShutDown()
	p.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return
	}
	p.log.Info("starting root CA certificate publisher")
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				worker.Run(ctx, p.queue, p.sync, p.syncFailed)
			}, time.Second)
		})
	}
	<-ctx.Done()
	p.queue.ShutDown()
	wg.Wait()
}

// syncFailed logs a namespace whose bundle could not be written; the worker tries it again.
func (p *Publisher) syncFailed(ns string, requeues int, err error) {
	p.log.Debug("syncing namespace failed, will retry", "namespace", ns, "retries", requeues, "err", err)
}

// sync makes namespace ns hold the bundle: it creates the ConfigMap when missing, and puts
// back its data and description when they differ. As upstream's publisher, it replaces the
// data whole (a key someone added goes) and keeps every other label and annotation.
func (p *Publisher) sync(ctx context.Context, ns string) error {
	namespace, err := p.nsLister.Get(ns)
	if apierrors.IsNotFound(err) || (err == nil && namespace.Status.Phase == corev1.NamespaceTerminating) {
		return nil
	}
	if err != nil {
		return err
	}
	data := map[string]string{DataKey: p.rootCA}
	cm, err := p.cmLister.ConfigMaps(ns).Get(ConfigMapName)
	if apierrors.IsNotFound(err) {
		_, err = p.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Annotations: map[string]string{DescriptionAnnotation: Description}},
			Data:       data,
		}, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || apierrors.IsAlreadyExists(err) {
			// Gone or going away: nothing to publish into. Already there: the informer
			// brings it, and its update event queues the namespace again if it differs.
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if maps.Equal(cm.Data, data) && cm.Annotations[DescriptionAnnotation] != "" {
		return nil
	}
	cm = cm.DeepCopy() // the cache's copy is shared
	cm.Data = data
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[DescriptionAnnotation] = Description
	_, err = p.client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
