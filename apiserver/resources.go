package apiserver

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// strategy holds the rules of one kind: defaulting, validation, which fields a client may
// change through the main resource and through status, and how a row of `kubectl get`
// looks. Generic object-metadata rules live in the handlers. now is the server clock's
// time of the request, so that tests stepping a fake clock see it in what is stored.
//
// A strategy may also implement gracefulDeleter or deletionHolder to change how its
// objects are deleted.
type strategy interface {
	// prepareForCreate clears what a client may not set on create (usually status) and
	// applies defaults.
	prepareForCreate(obj runtime.Object, now time.Time)
	validate(obj runtime.Object) field.ErrorList
	// prepareForUpdate copies from old what the main resource may not change (status).
	prepareForUpdate(obj, old runtime.Object, now time.Time)
	validateUpdate(obj, old runtime.Object) field.ErrorList
	// prepareForStatusUpdate copies from old everything but status.
	prepareForStatusUpdate(obj, old runtime.Object, now time.Time)
	validateStatusUpdate(obj, old runtime.Object) field.ErrorList
	// tableColumns and tableRow render `kubectl get`.
	tableColumns() []metav1.TableColumnDefinition
	tableRow(obj runtime.Object, now time.Time) []any
}

// gracefulDeleter is implemented by the strategies of kinds whose objects linger, marked
// for deletion, until something outside the server has let go of them (a bound pod until
// its kubelet has stopped it).
type gracefulDeleter interface {
	// gracePeriod is how many seconds obj stays with deletionTimestamp set before it may
	// be removed; 0 removes it at once.
	gracePeriod(obj runtime.Object, opts *metav1.DeleteOptions) int64
}

// deletionHolder is implemented by the strategies of kinds that keep a finalizer list of
// their own besides metadata.finalizers (a namespace's spec.finalizers): an object marked
// for deletion is not removed while it holds one.
type deletionHolder interface {
	holdsDeletion(obj runtime.Object) bool
}

// deleteFunc deletes one object of res and returns its last state and whether it is gone.
// authorize, when not nil, must accept the stored object before anything changes.
type deleteFunc func(s *Server, ctx context.Context, res *resource, namespace, name string,
	opts *metav1.DeleteOptions, authorize func(runtime.Object) error) (runtime.Object, bool, error)

// fieldFunc reads one selectable field of an object, as a fieldSelector compares it.
type fieldFunc func(obj runtime.Object) string

// fieldsOf declares the selectable fields of one kind, once: the keys are the names a
// fieldSelector may use (besides metadata.name and metadata.namespace, which every kind
// has), the values read them from an object of type T.
func fieldsOf[T runtime.Object](getters map[string]func(T) string) map[string]fieldFunc {
	out := make(map[string]fieldFunc, len(getters))
	for name, get := range getters {
		out[name] = func(obj runtime.Object) string { return get(obj.(T)) }
	}
	return out
}

// subresource is one path below an object: /<resource>/<name>/<subresource>.
type subresource struct {
	name string
	// verbs are the verbs it serves, sorted as discovery lists them.
	verbs metav1.Verbs
	// kind is what it takes or returns when that is not the resource's kind (Binding).
	kind string
	// serve handles every request to it. nil means the verb handlers serve it as a view
	// of the object, with the strategy's status rules (status).
	serve func(c *call)
	// getParams are the query parameters of its GET, for OpenAPI.
	getParams []string
}

// statusSubresource is the status of an object, written apart from its spec.
var statusSubresource = subresource{name: "status", verbs: metav1.Verbs{"get", "patch", "update"}}

// resource describes one served resource: its names, its Go type and its rules. Entries
// are immutable once registered.
type resource struct {
	group, version, name string
	kind, singular       string
	shortNames           []string
	categories           []string
	namespaced           bool
	subresources         []subresource
	newFunc              func() runtime.Object
	newListFunc          func() runtime.Object
	strategy             strategy
	// fields are the selectable fields beyond metadata.name and metadata.namespace, made
	// with fieldsOf; nil when there are none.
	fields map[string]fieldFunc
	// validateName checks metadata.name; nil means a DNS subdomain, as for most kinds.
	validateName apivalidation.ValidateNameFunc
	// deleteFunc replaces the generic deletion ((*Server).deleteObject) for kinds whose
	// objects go through a lifecycle of their own (namespaces).
	deleteFunc deleteFunc
	// noDeleteCollection answers DELETE on the collection with 405 (namespaces).
	noDeleteCollection bool
	// tracksGeneration: metadata.generation starts at 1 and grows with spec changes.
	tracksGeneration bool
	// allowCreateOnUpdate lets PUT create a missing object (leases and events).
	allowCreateOnUpdate bool
	// returnDeletedObject: DELETE answers with the object rather than a Status (pods).
	returnDeletedObject bool
	// ttl makes objects expire (events).
	ttl time.Duration
	// nodeNameOf names the node an object belongs to, for node authorization.
	nodeNameOf func(obj runtime.Object) string

	// cache is the resource's watch cache, set before the resource is served.
	cache *cacher
}

func (r *resource) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.group, Version: r.version, Resource: r.name}
}

func (r *resource) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.group, Version: r.version, Kind: r.kind}
}

func (r *resource) groupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.group, Resource: r.name}
}

func (r *resource) apiVersion() string { return r.gvk().GroupVersion().String() }

func (r *resource) listKind() string { return r.kind + "List" }

// key is the etcd key of an object: <prefix>/<resource>/<namespace>/<name>, or without
// the namespace for cluster-scoped resources.
func (r *resource) key(prefix, namespace, name string) string {
	if r.namespaced {
		return fmt.Sprintf("%s/%s/%s/%s", prefix, r.storageName(), namespace, name)
	}
	return fmt.Sprintf("%s/%s/%s", prefix, r.storageName(), name)
}

// keyPrefix is the prefix of every key of the resource, or of one namespace of it.
func (r *resource) keyPrefix(prefix, namespace string) string {
	if r.namespaced && namespace != "" {
		return fmt.Sprintf("%s/%s/%s/", prefix, r.storageName(), namespace)
	}
	return fmt.Sprintf("%s/%s/", prefix, r.storageName())
}

// storageName is the key segment of the resource: its plural name, as kube-apiserver
// lays out its keys. No two served resources share a name.
func (r *resource) storageName() string { return r.name }

// subresource returns the subresource called name, or nil.
func (r *resource) subresource(name string) *subresource {
	for i := range r.subresources {
		if r.subresources[i].name == name {
			return &r.subresources[i]
		}
	}
	return nil
}

// subresourceKind is the kind sub takes or returns.
func (r *resource) subresourceKind(sub *subresource) string {
	if sub.kind != "" {
		return sub.kind
	}
	return r.kind
}

// nameValidator is the rule for metadata.name.
func (r *resource) nameValidator() apivalidation.ValidateNameFunc {
	if r.validateName != nil {
		return r.validateName
	}
	return apivalidation.NameIsDNSSubdomain
}

// objectFields returns every selectable field of obj.
func (r *resource) objectFields(obj runtime.Object, name, namespace string) fields.Set {
	set := make(fields.Set, len(r.fields)+2)
	for f, get := range r.fields {
		set[f] = get(obj)
	}
	set["metadata.name"] = name
	if r.namespaced {
		set["metadata.namespace"] = namespace
	}
	return set
}

// supportsField reports whether fieldSelector may name f.
func (r *resource) supportsField(f string) bool {
	if f == "metadata.name" || (r.namespaced && f == "metadata.namespace") {
		return true
	}
	_, ok := r.fields[f]
	return ok
}

// builtinResources are the kinds every miniplane serves, in discovery order.
func builtinResources(eventTTL time.Duration) []*resource {
	return []*resource{
		{
			version: "v1", name: "namespaces", kind: "Namespace", singular: "namespace",
			shortNames: []string{"ns"}, subresources: []subresource{statusSubresource},
			newFunc: func() runtime.Object { return &corev1.Namespace{} }, newListFunc: func() runtime.Object { return &corev1.NamespaceList{} },
			strategy: namespaceStrategy{}, fields: namespaceFields,
			validateName: apivalidation.NameIsDNSLabel, deleteFunc: (*Server).deleteNamespace, noDeleteCollection: true,
		},
		{
			version: "v1", name: "nodes", kind: "Node", singular: "node",
			shortNames: []string{"no"}, subresources: []subresource{statusSubresource},
			newFunc: func() runtime.Object { return &corev1.Node{} }, newListFunc: func() runtime.Object { return &corev1.NodeList{} },
			strategy: nodeStrategy{}, fields: nodeFields,
			nodeNameOf: func(obj runtime.Object) string { return obj.(*corev1.Node).Name },
		},
		{
			version: "v1", name: "pods", kind: "Pod", singular: "pod", namespaced: true,
			shortNames: []string{"po"}, categories: []string{"all"},
			subresources: []subresource{
				statusSubresource,
				{name: "binding", kind: "Binding", verbs: metav1.Verbs{"create"}, serve: (*call).bind},
				{name: "log", verbs: metav1.Verbs{"get"}, serve: (*call).podLog, getParams: []string{"container", "follow"}},
				{name: "exec", verbs: metav1.Verbs{"create", "get"}, serve: (*call).podExec},
				{name: "attach", verbs: metav1.Verbs{"create", "get"}, serve: (*call).podAttach},
				{name: "portforward", verbs: metav1.Verbs{"create", "get"}, serve: (*call).podPortForward},
			},
			newFunc: func() runtime.Object { return &corev1.Pod{} }, newListFunc: func() runtime.Object { return &corev1.PodList{} },
			strategy: podStrategy{}, fields: podFields, returnDeletedObject: true, tracksGeneration: true,
			nodeNameOf: func(obj runtime.Object) string { return obj.(*corev1.Pod).Spec.NodeName },
		},
		{
			version: "v1", name: "events", kind: "Event", singular: "event", namespaced: true,
			shortNames: []string{"ev"},
			newFunc:    func() runtime.Object { return &corev1.Event{} }, newListFunc: func() runtime.Object { return &corev1.EventList{} },
			strategy: eventStrategy{}, fields: eventFields, ttl: eventTTL, allowCreateOnUpdate: true,
		},
		{
			group: "apps", version: "v1", name: "daemonsets", kind: "DaemonSet", singular: "daemonset", namespaced: true,
			shortNames: []string{"ds"}, categories: []string{"all"}, subresources: []subresource{statusSubresource},
			newFunc: func() runtime.Object { return &appsv1.DaemonSet{} }, newListFunc: func() runtime.Object { return &appsv1.DaemonSetList{} },
			strategy: daemonSetStrategy{}, tracksGeneration: true,
		},
		{
			group: "apps", version: "v1", name: "controllerrevisions", kind: "ControllerRevision", singular: "controllerrevision", namespaced: true,
			newFunc: func() runtime.Object { return &appsv1.ControllerRevision{} }, newListFunc: func() runtime.Object { return &appsv1.ControllerRevisionList{} },
			strategy: controllerRevisionStrategy{},
		},
		{
			group: "coordination.k8s.io", version: "v1", name: "leases", kind: "Lease", singular: "lease", namespaced: true,
			newFunc: func() runtime.Object { return &coordinationv1.Lease{} }, newListFunc: func() runtime.Object { return &coordinationv1.LeaseList{} },
			strategy: leaseStrategy{}, allowCreateOnUpdate: true,
			nodeNameOf: func(obj runtime.Object) string {
				l := obj.(*coordinationv1.Lease)
				if l.Namespace != corev1.NamespaceNodeLease {
					return ""
				}
				return l.Name
			},
		},
	}
}
