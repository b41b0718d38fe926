package component

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// NewInformerFactory returns the shared informer factory of a component: every object it
// caches has its managedFields dropped (see TrimForCache).
func NewInformerFactory(client kubernetes.Interface, resync time.Duration) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(TrimForCache))
}

// TrimForCache drops what no controller reads from an object before an informer caches it:
// its managedFields, which on a Node or a Pod written by several managers are a third of
// the decoded object (kube-controller-manager and kube-scheduler trim them the same way).
// A controller that updates a cached object sends it without managedFields, and the API
// server then keeps the stored ones. Anything that is not an object, such as a tombstone,
// is returned as it is.
func TrimForCache(obj any) (any, error) {
	if acc, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m := acc.GetObjectMeta(); m.GetManagedFields() != nil {
			m.SetManagedFields(nil)
		}
	}
	return obj, nil
}
