package apiserver

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// strategy holds what differs between resources: defaulting, validation, which fields a
// client may change through the main resource and through status, and how a row of
// `kubectl get` looks. Generic object-metadata rules live in the handlers.
type strategy interface {
	// prepareForCreate clears what a client may not set on create (usually status) and
	// applies defaults.
	prepareForCreate(obj runtime.Object)
	validate(obj runtime.Object) field.ErrorList
	// prepareForUpdate copies from old what the main resource may not change (status).
	prepareForUpdate(obj, old runtime.Object)
	validateUpdate(obj, old runtime.Object) field.ErrorList
	// prepareForStatusUpdate copies from old everything but status.
	prepareForStatusUpdate(obj, old runtime.Object)
	validateStatusUpdate(obj, old runtime.Object) field.ErrorList
	// selectableFields are the fields a fieldSelector may name, beyond metadata.name and
	// metadata.namespace.
	selectableFields(obj runtime.Object) fields.Set
	// tableColumns and tableRow render `kubectl get`.
	tableColumns() []metav1.TableColumnDefinition
	tableRow(obj runtime.Object, now time.Time) []any
}

// resource describes one served resource: its names, its Go type and its rules.
type resource struct {
	group, version, name string
	kind, singular       string
	shortNames           []string
	categories           []string
	namespaced           bool
	// subresources served besides the main resource: "status", "binding", "log".
	subresources []string
	newFunc      func() runtime.Object
	newListFunc  func() runtime.Object
	strategy     strategy
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
	// fieldNames lists the selectable fields beyond metadata.name/namespace.
	fieldNames []string

	cache *cacher
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

func (r *resource) hasSubresource(name string) bool {
	for _, s := range r.subresources {
		if s == name {
			return true
		}
	}
	return false
}

// objectFields returns every selectable field of obj.
func (r *resource) objectFields(obj runtime.Object, name, namespace string) fields.Set {
	set := r.strategy.selectableFields(obj)
	if set == nil {
		set = fields.Set{}
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
	for _, n := range r.fieldNames {
		if n == f {
			return true
		}
	}
	return false
}

// registry is every resource the server knows, by group/version and by name.
type registry struct {
	all     []*resource
	byGVR   map[string]*resource // "group/version/resource"
	groups  []string             // API groups in discovery order ("" is core)
	version map[string]string    // group → its one served version
}

func newRegistry(eventTTL time.Duration) *registry {
	reg := &registry{byGVR: map[string]*resource{}, version: map[string]string{}}
	reg.add(&resource{
		version: "v1", name: "namespaces", kind: "Namespace", singular: "namespace",
		shortNames: []string{"ns"}, subresources: []string{"status"},
		newFunc: func() runtime.Object { return &corev1.Namespace{} }, newListFunc: func() runtime.Object { return &corev1.NamespaceList{} },
		strategy: namespaceStrategy{}, fieldNames: []string{"status.phase"},
	})
	reg.add(&resource{
		version: "v1", name: "nodes", kind: "Node", singular: "node",
		shortNames: []string{"no"}, subresources: []string{"status"},
		newFunc: func() runtime.Object { return &corev1.Node{} }, newListFunc: func() runtime.Object { return &corev1.NodeList{} },
		strategy: nodeStrategy{}, fieldNames: []string{"spec.unschedulable"},
		nodeNameOf: func(obj runtime.Object) string { return obj.(*corev1.Node).Name },
	})
	reg.add(&resource{
		version: "v1", name: "pods", kind: "Pod", singular: "pod", namespaced: true,
		shortNames: []string{"po"}, categories: []string{"all"}, subresources: []string{"status", "binding", "log"},
		newFunc: func() runtime.Object { return &corev1.Pod{} }, newListFunc: func() runtime.Object { return &corev1.PodList{} },
		strategy: podStrategy{}, returnDeletedObject: true, tracksGeneration: true,
		fieldNames: []string{"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
			"spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
		nodeNameOf: func(obj runtime.Object) string { return obj.(*corev1.Pod).Spec.NodeName },
	})
	reg.add(&resource{
		version: "v1", name: "events", kind: "Event", singular: "event", namespaced: true,
		shortNames: []string{"ev"},
		newFunc:    func() runtime.Object { return &corev1.Event{} }, newListFunc: func() runtime.Object { return &corev1.EventList{} },
		strategy: eventStrategy{}, ttl: eventTTL, allowCreateOnUpdate: true,
		fieldNames: []string{"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
			"involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
			"reason", "reportingComponent", "source", "type"},
	})
	reg.add(&resource{
		group: "apps", version: "v1", name: "daemonsets", kind: "DaemonSet", singular: "daemonset", namespaced: true,
		shortNames: []string{"ds"}, categories: []string{"all"}, subresources: []string{"status"},
		newFunc: func() runtime.Object { return &appsv1.DaemonSet{} }, newListFunc: func() runtime.Object { return &appsv1.DaemonSetList{} },
		strategy: daemonSetStrategy{}, tracksGeneration: true,
	})
	reg.add(&resource{
		group: "apps", version: "v1", name: "controllerrevisions", kind: "ControllerRevision", singular: "controllerrevision", namespaced: true,
		newFunc: func() runtime.Object { return &appsv1.ControllerRevision{} }, newListFunc: func() runtime.Object { return &appsv1.ControllerRevisionList{} },
		strategy: controllerRevisionStrategy{},
	})
	reg.add(&resource{
		group: "coordination.k8s.io", version: "v1", name: "leases", kind: "Lease", singular: "lease", namespaced: true,
		newFunc: func() runtime.Object { return &coordinationv1.Lease{} }, newListFunc: func() runtime.Object { return &coordinationv1.LeaseList{} },
		strategy: leaseStrategy{}, allowCreateOnUpdate: true,
		nodeNameOf: func(obj runtime.Object) string {
			l := obj.(*coordinationv1.Lease)
			if l.Namespace != "kube-node-lease" {
				return ""
			}
			return l.Name
		},
	})
	return reg
}

func (reg *registry) add(r *resource) {
	reg.all = append(reg.all, r)
	reg.byGVR[r.group+"/"+r.version+"/"+r.name] = r
	if _, ok := reg.version[r.group]; !ok {
		reg.groups = append(reg.groups, r.group)
		reg.version[r.group] = r.version
	}
}

func (reg *registry) lookup(group, version, name string) *resource {
	return reg.byGVR[group+"/"+version+"/"+name]
}

// inGroupVersion returns the resources of one group/version in registration order.
func (reg *registry) inGroupVersion(group, version string) []*resource {
	var out []*resource
	for _, r := range reg.all {
		if r.group == group && r.version == version {
			out = append(out, r)
		}
	}
	return out
}

// groupVersionPath is the URL prefix of a group/version: /api/v1 or /apis/<g>/<v>.
func groupVersionPath(group, version string) string {
	if group == "" {
		return "/api/" + version
	}
	return "/apis/" + group + "/" + version
}
