package garbagecollector

import (
	"context"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ownerUIDIndex indexes objects by the UIDs in their ownerReferences: the owner → dependents
// edges of the graph. The name is qualified because the informers are shared.
const ownerUIDIndex = "miniplane.io/garbagecollector-owner-uid"

// resource is one kind the collector serves: its informer and the typed client calls the
// collector needs on it.
type resource struct {
	group, kind string // as in an ownerReference's apiVersion (group part) and kind
	name        string // plural resource name, for logs and metrics
	namespaced  bool
	informer    cache.SharedIndexInformer
	get         func(ctx context.Context, namespace, name string) (runtime.Object, error)
	update      func(ctx context.Context, obj runtime.Object) error
	delete      func(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
	// list reads the objects of a namespace live, bypassing the informer.
	list func(ctx context.Context, namespace string) ([]runtime.Object, error)
}

// servedResources returns the kinds the collector tracks, both as owners and as dependents.
func servedResources(client kubernetes.Interface, factory informers.SharedInformerFactory) []*resource {
	return []*resource{
		{
			group: "", kind: "Pod", name: "pods", namespaced: true,
			informer: factory.Core().V1().Pods().Informer(),
			get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
				return client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			},
			update: func(ctx context.Context, obj runtime.Object) error {
				p := obj.(*corev1.Pod)
				_, err := client.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{})
				return err
			},
			delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
				return client.CoreV1().Pods(ns).Delete(ctx, name, opts)
			},
			list: func(ctx context.Context, ns string) ([]runtime.Object, error) {
				l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				return objects(l.Items), nil
			},
		},
		{
			group: "apps", kind: "DaemonSet", name: "daemonsets", namespaced: true,
			informer: factory.Apps().V1().DaemonSets().Informer(),
			get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
				return client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
			},
			update: func(ctx context.Context, obj runtime.Object) error {
				d := obj.(*appsv1.DaemonSet)
				_, err := client.AppsV1().DaemonSets(d.Namespace).Update(ctx, d, metav1.UpdateOptions{})
				return err
			},
			delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
				return client.AppsV1().DaemonSets(ns).Delete(ctx, name, opts)
			},
			list: func(ctx context.Context, ns string) ([]runtime.Object, error) {
				l, err := client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				return objects(l.Items), nil
			},
		},
		{
			group: "apps", kind: "ControllerRevision", name: "controllerrevisions", namespaced: true,
			informer: factory.Apps().V1().ControllerRevisions().Informer(),
			get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
				return client.AppsV1().ControllerRevisions(ns).Get(ctx, name, metav1.GetOptions{})
			},
			update: func(ctx context.Context, obj runtime.Object) error {
				r := obj.(*appsv1.ControllerRevision)
				_, err := client.AppsV1().ControllerRevisions(r.Namespace).Update(ctx, r, metav1.UpdateOptions{})
				return err
			},
			delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
				return client.AppsV1().ControllerRevisions(ns).Delete(ctx, name, opts)
			},
			list: func(ctx context.Context, ns string) ([]runtime.Object, error) {
				l, err := client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				return objects(l.Items), nil
			},
		},
	}
}

// objects returns pointers to the items of a typed list.
func objects[T any, PT interface {
	*T
	runtime.Object
}](items []T) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// indexByOwnerUID is the ownerUIDIndex function.
func indexByOwnerUID(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	refs := m.GetOwnerReferences()
	if len(refs) == 0 {
		return nil, nil
	}
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = string(r.UID)
	}
	return out, nil
}

// groupOf returns the group of an apiVersion ("apps/v1" → "apps", "v1" → "").
func groupOf(apiVersion string) string {
	if i := strings.Index(apiVersion, "/"); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// objectRef identifies one object of a served resource; it is the work queue item.
type objectRef struct {
	res       int // index into GarbageCollector.resources
	namespace string
	name      string
	uid       types.UID
}

func (r objectRef) key() string {
	if r.namespace == "" {
		return r.name
	}
	return r.namespace + "/" + r.name
}

func hasFinalizer(m metav1.Object, finalizer string) bool {
	for _, f := range m.GetFinalizers() {
		if f == finalizer {
			return true
		}
	}
	return false
}
