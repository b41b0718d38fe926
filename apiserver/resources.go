package apiserver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
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

// poolUser is implemented by the strategies of kinds whose objects hold values handed out
// from a pool all objects share (a Service's cluster IP and node ports). The handlers call
// allocate before an object is written (old is nil on create); undo when that write
// fails; and release once a write succeeded, with obj the new state or nil when the
// object is gone, so that what old held and obj no longer does goes back to the pool.
type poolUser interface {
	allocate(ctx context.Context, obj, old runtime.Object, dryRun bool) (undo func(), err error)
	release(ctx context.Context, obj, old runtime.Object)
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
	// kindGroupVersion is the group/version of kind when it is not the resource's
	// (policy/v1 Eviction); nil means the resource's.
	kindGroupVersion *schema.GroupVersion
	// serve handles every request to it. nil means the verb handlers serve it as a view
	// of the object, with the strategy's status rules (status).
	serve func(c *call)
	// getParams are the query parameters of its GET, for OpenAPI.
	getParams []string
	// produces are the media types its GET answers with when that is text rather than an
	// object (log), for OpenAPI.
	produces []string
	// rules, when set, are what a write through it may change (namespaces/finalize: only
	// spec.finalizers); nil means the strategy's status rules.
	rules *subresourceRules
}

// subresourceRules are the update rules of a subresource that writes part of its object
// other than status.
type subresourceRules struct {
	// prepare copies from old everything a write through the subresource may not change.
	prepare  func(obj, old runtime.Object)
	validate func(obj, old runtime.Object) field.ErrorList
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
	// fieldNamesList orders every selectable field, metadata.name and metadata.namespace
	// included, as objectFields reports their values; made on first use.
	fieldNamesOnce sync.Once
	fieldNamesList []string
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
	// checkDelete, when set, may refuse to delete an object (the system PriorityClasses);
	// its error becomes a 403.
	checkDelete func(obj runtime.Object) error
	// notRunBy names the controller miniplane does not run for this kind (Deployments):
	// every new object gets a Warning event saying so, so that nobody mistakes it for
	// running.
	notRunBy string
	// notRunEffect says what the missing controller would have done, for that event;
	// empty means "no pods are created for it".
	notRunEffect string
	// inertNote, when set, says what of an object of this kind is stored but changes
	// nothing (a webhook configuration's webhooks that name a Service, which miniplane does
	// not call), or "". Every write of such an object answers with it as a Warning header,
	// which kubectl prints, and a new one gets it as a Warning event.
	inertNote func(runtime.Object) string

	// view, when set, serves this resource from another's stored objects (events.k8s.io/v1
	// Events from the core/v1 ones); see storageView.
	view *storageView
	// lazyCache: the watch cache starts on the first read that needs it rather than with
	// the server, so that a second shape of objects nobody reads through costs no memory
	// (views). See (*Server).ensureCache.
	lazyCache      bool
	lazyCacheStart sync.Once

	// cache is the resource's watch cache, set before the resource is served.
	cache *cacher
	// custom is the definition version a custom resource is served from; nil for the
	// built-in kinds. Custom resources have no protobuf form and no strategic merge patch.
	custom *customResourceVersion
	// terminating refuses new objects: the definition of these custom resources is being
	// deleted.
	terminating atomic.Bool
	// stop ends the watch cache of a resource served at run time.
	stop func()

	// lastCreateRV is the resourceVersion of the newest object this server created, so
	// that what the server reads from the cache for its own decisions (the quotas of a
	// namespace) includes what it has just written.
	lastCreateRV atomic.Int64
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
	// Concatenation builds the key in one allocation; Sprintf boxed each part as well, and
	// every write, read and watch event of the server builds a key.
	if r.namespaced {
		return prefix + "/" + r.storageName() + "/" + namespace + "/" + name
	}
	return prefix + "/" + r.storageName() + "/" + name
}

// keyPrefix is the prefix of every key of the resource, or of one namespace of it.
func (r *resource) keyPrefix(prefix, namespace string) string {
	if r.namespaced && namespace != "" {
		return fmt.Sprintf("%s/%s/%s/", prefix, r.storageName(), namespace)
	}
	return fmt.Sprintf("%s/%s/", prefix, r.storageName())
}

// storageName is the key segment of the resource, as kube-apiserver lays out its keys: the
// plural name of a built-in kind, group/plural for a custom resource. The group keeps a
// definition's objects apart from a built-in kind's or another group's of the same plural
// (a services.serving.knative.dev beside core Services); a definition's group has a dot,
// which no built-in plural has. Two served resources share a name only when one is a view
// of the other (events in two groups) or both are versions of one definition, and then
// they share the objects too.
func (r *resource) storageName() string {
	if r.custom != nil {
		return r.group + "/" + r.name
	}
	return r.name
}

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

// subresourceGVK is the group/version/kind sub takes or returns.
func (r *resource) subresourceGVK(sub *subresource) schema.GroupVersionKind {
	if sub.kindGroupVersion != nil {
		return sub.kindGroupVersion.WithKind(r.subresourceKind(sub))
	}
	return r.gvk().GroupVersion().WithKind(r.subresourceKind(sub))
}

// nameValidator is the rule for metadata.name.
func (r *resource) nameValidator() apivalidation.ValidateNameFunc {
	if r.validateName != nil {
		return r.validateName
	}
	return apivalidation.NameIsDNSSubdomain
}

// objectFields returns every selectable field of obj.
func (r *resource) objectFields(obj runtime.Object, name, namespace string) fieldValues {
	names := r.selectableNames()
	values := make([]string, len(names))
	for i, f := range names {
		switch f {
		case "metadata.name":
			values[i] = name
		case "metadata.namespace":
			values[i] = namespace
		default:
			values[i] = r.fields[f](obj)
		}
	}
	return fieldValues{names: names, values: values}
}

// selectableNames returns the names objectFields reports, in the order of its values.
func (r *resource) selectableNames() []string {
	r.fieldNamesOnce.Do(func() {
		names := slices.Sorted(maps.Keys(r.fields))
		names = append(names, "metadata.name")
		if r.namespaced {
			names = append(names, "metadata.namespace")
		}
		r.fieldNamesList = names
	})
	return r.fieldNamesList
}

// supportsField reports whether fieldSelector may name f.
func (r *resource) supportsField(f string) bool {
	if f == "metadata.name" || (r.namespaced && f == "metadata.namespace") {
		return true
	}
	_, ok := r.fields[f]
	return ok
}

// builtinDeps are what the built-in kinds' strategies need from the server.
type builtinDeps struct {
	eventTTL time.Duration
	// services hands out cluster IPs and node ports; nil in tests that serve no Service.
	services *serviceAllocator
	// quota counts quota usage; nil in tests that serve no ResourceQuota.
	quota *quotaTracker
}

// builtinResources are the kinds every miniplane serves, in discovery order.
func builtinResources(deps builtinDeps) []*resource {
	var out []*resource
	core := coreResources(deps)
	for _, group := range [][]*resource{core, appsResources(), eventsResources(core), otherResources(), storageAndNodeResources(), admissionResources()} {
		out = append(out, group...)
	}
	return out
}

// eventsResources serves events.k8s.io/v1 Events from the core/v1 Events among core.
func eventsResources(core []*resource) []*resource {
	i := slices.IndexFunc(core, func(r *resource) bool { return r.name == "events" })
	coreEvents := core[i]
	view := eventsV1View(coreEvents)
	return []*resource{{
		group: eventsv1.GroupName, version: "v1", name: "events", kind: "Event", singular: "event", namespaced: true,
		shortNames: []string{"ev"},
		newFunc:    func() runtime.Object { return &eventsv1.Event{} }, newListFunc: func() runtime.Object { return &eventsv1.EventList{} },
		strategy: eventsV1Strategy{}, fields: view.fields(), ttl: coreEvents.ttl, allowCreateOnUpdate: true,
		view: view, lazyCache: true,
	}}
}

// listOf pairs the constructors of a kind and its list, for resource entries.
func listOf[T, L any, PT interface {
	*T
	runtime.Object
}, PL interface {
	*L
	runtime.Object
}]() (func() runtime.Object, func() runtime.Object) {
	return func() runtime.Object { return PT(new(T)) }, func() runtime.Object { return PL(new(L)) }
}

func coreResources(deps builtinDeps) []*resource {
	out := []*resource{
		{
			version: "v1", name: "namespaces", kind: "Namespace", singular: "namespace",
			shortNames: []string{"ns"}, subresources: []subresource{namespaceFinalizeSubresource, statusSubresource},
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
				{name: "eviction", kind: "Eviction", kindGroupVersion: &policyv1.SchemeGroupVersion, verbs: metav1.Verbs{"create"}, serve: (*call).evict},
				{name: "log", verbs: metav1.Verbs{"get"}, serve: (*call).podLog, getParams: []string{"container", "follow"}, produces: []string{"text/plain"}},
				{name: "exec", verbs: metav1.Verbs{"create", "get"}, serve: (*call).podExec},
				{name: "attach", verbs: metav1.Verbs{"create", "get"}, serve: (*call).podAttach},
				{name: "portforward", verbs: metav1.Verbs{"create", "get"}, serve: (*call).podPortForward},
				podEphemeralContainersSubresource,
			},
			newFunc: func() runtime.Object { return &corev1.Pod{} }, newListFunc: func() runtime.Object { return &corev1.PodList{} },
			strategy: podStrategy{}, fields: podFields, returnDeletedObject: true, tracksGeneration: true,
			nodeNameOf: func(obj runtime.Object) string { return obj.(*corev1.Pod).Spec.NodeName },
		},
		{
			version: "v1", name: "events", kind: "Event", singular: "event", namespaced: true,
			shortNames: []string{"ev"},
			newFunc:    func() runtime.Object { return &corev1.Event{} }, newListFunc: func() runtime.Object { return &corev1.EventList{} },
			strategy: eventStrategy{}, fields: eventFields, ttl: deps.eventTTL, allowCreateOnUpdate: true,
		},
	}
	newCM, newCMList := listOf[corev1.ConfigMap, corev1.ConfigMapList]()
	newSecret, newSecretList := listOf[corev1.Secret, corev1.SecretList]()
	newSA, newSAList := listOf[corev1.ServiceAccount, corev1.ServiceAccountList]()
	newSvc, newSvcList := listOf[corev1.Service, corev1.ServiceList]()
	newEp, newEpList := listOf[corev1.Endpoints, corev1.EndpointsList]()
	newRQ, newRQList := listOf[corev1.ResourceQuota, corev1.ResourceQuotaList]()
	newLR, newLRList := listOf[corev1.LimitRange, corev1.LimitRangeList]()
	newPT, newPTList := listOf[corev1.PodTemplate, corev1.PodTemplateList]()
	newPVC, newPVCList := listOf[corev1.PersistentVolumeClaim, corev1.PersistentVolumeClaimList]()
	newPV, newPVList := listOf[corev1.PersistentVolume, corev1.PersistentVolumeList]()
	newRC, newRCList := listOf[corev1.ReplicationController, corev1.ReplicationControllerList]()
	return append(out,
		&resource{version: "v1", name: "configmaps", kind: "ConfigMap", singular: "configmap", namespaced: true,
			shortNames: []string{"cm"}, newFunc: newCM, newListFunc: newCMList, strategy: configMapRules},
		&resource{version: "v1", name: "secrets", kind: "Secret", singular: "secret", namespaced: true,
			newFunc: newSecret, newListFunc: newSecretList, strategy: secretRules, fields: secretFields},
		&resource{version: "v1", name: "serviceaccounts", kind: "ServiceAccount", singular: "serviceaccount", namespaced: true,
			shortNames: []string{"sa"}, subresources: []subresource{tokenRequestSubresource},
			newFunc: newSA, newListFunc: newSAList, strategy: serviceAccountRules},
		&resource{version: "v1", name: "services", kind: "Service", singular: "service", namespaced: true,
			shortNames: []string{"svc"}, categories: []string{"all"}, subresources: []subresource{statusSubresource},
			newFunc: newSvc, newListFunc: newSvcList, strategy: newServiceStrategy(deps.services), fields: serviceFields},
		&resource{version: "v1", name: "endpoints", kind: "Endpoints", singular: "endpoints", namespaced: true,
			shortNames: []string{"ep"}, newFunc: newEp, newListFunc: newEpList, strategy: endpointsRules},
		&resource{version: "v1", name: "resourcequotas", kind: "ResourceQuota", singular: "resourcequota", namespaced: true,
			shortNames: []string{"quota"}, subresources: []subresource{statusSubresource},
			newFunc: newRQ, newListFunc: newRQList, strategy: quotaStrategy{kindRules: resourceQuotaRules, tracker: deps.quota}},
		&resource{version: "v1", name: "limitranges", kind: "LimitRange", singular: "limitrange", namespaced: true,
			shortNames: []string{"limits"}, newFunc: newLR, newListFunc: newLRList, strategy: limitRangeRules},
		&resource{version: "v1", name: "podtemplates", kind: "PodTemplate", singular: "podtemplate", namespaced: true,
			newFunc: newPT, newListFunc: newPTList, strategy: podTemplateRules},
		&resource{version: "v1", name: "persistentvolumeclaims", kind: "PersistentVolumeClaim", singular: "persistentvolumeclaim", namespaced: true,
			shortNames: []string{"pvc"}, subresources: []subresource{statusSubresource},
			newFunc: newPVC, newListFunc: newPVCList, strategy: persistentVolumeClaimRules,
			notRunBy: "persistentvolume-binder", notRunEffect: "it stays Pending: no volume is bound to it or provisioned for it"},
		&resource{version: "v1", name: "persistentvolumes", kind: "PersistentVolume", singular: "persistentvolume",
			shortNames: []string{"pv"}, subresources: []subresource{statusSubresource},
			newFunc: newPV, newListFunc: newPVList, strategy: persistentVolumeRules,
			notRunBy: "persistentvolume-binder", notRunEffect: "it stays Pending: it is never made Available or bound to a claim"},
		&resource{version: "v1", name: "replicationcontrollers", kind: "ReplicationController", singular: "replicationcontroller", namespaced: true,
			shortNames: []string{"rc"}, categories: []string{"all"}, subresources: []subresource{statusSubresource, replicationControllerScale},
			newFunc: newRC, newListFunc: newRCList, strategy: replicationControllerRules, tracksGeneration: true, notRunBy: "replicationcontroller",
			fields: fieldsOf(map[string]func(*corev1.ReplicationController) string{
				"status.replicas": func(rc *corev1.ReplicationController) string { return strconv.Itoa(int(rc.Status.Replicas)) },
			})},
	)
}

func appsResources() []*resource {
	newDeploy, newDeployList := listOf[appsv1.Deployment, appsv1.DeploymentList]()
	newRS, newRSList := listOf[appsv1.ReplicaSet, appsv1.ReplicaSetList]()
	newSTS, newSTSList := listOf[appsv1.StatefulSet, appsv1.StatefulSetList]()
	return []*resource{
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
		{group: "apps", version: "v1", name: "deployments", kind: "Deployment", singular: "deployment", namespaced: true,
			shortNames: []string{"deploy"}, categories: []string{"all"}, subresources: []subresource{statusSubresource, deploymentScale},
			newFunc: newDeploy, newListFunc: newDeployList, strategy: deploymentRules, tracksGeneration: true, notRunBy: "deployment"},
		{group: "apps", version: "v1", name: "replicasets", kind: "ReplicaSet", singular: "replicaset", namespaced: true,
			shortNames: []string{"rs"}, categories: []string{"all"}, subresources: []subresource{statusSubresource, replicaSetScale},
			newFunc: newRS, newListFunc: newRSList, strategy: replicaSetRules, tracksGeneration: true, notRunBy: "replicaset",
			fields: fieldsOf(map[string]func(*appsv1.ReplicaSet) string{
				"status.replicas": func(rs *appsv1.ReplicaSet) string { return strconv.Itoa(int(rs.Status.Replicas)) },
			})},
		{group: "apps", version: "v1", name: "statefulsets", kind: "StatefulSet", singular: "statefulset", namespaced: true,
			shortNames: []string{"sts"}, categories: []string{"all"}, subresources: []subresource{statusSubresource, statefulSetScale},
			newFunc: newSTS, newListFunc: newSTSList, strategy: statefulSetRules, tracksGeneration: true, notRunBy: "statefulset"},
	}
}

func otherResources() []*resource {
	newJob, newJobList := listOf[batchv1.Job, batchv1.JobList]()
	newCJ, newCJList := listOf[batchv1.CronJob, batchv1.CronJobList]()
	newPDB, newPDBList := listOf[policyv1.PodDisruptionBudget, policyv1.PodDisruptionBudgetList]()
	newPC, newPCList := listOf[schedulingv1.PriorityClass, schedulingv1.PriorityClassList]()
	newRole, newRoleList := listOf[rbacv1.Role, rbacv1.RoleList]()
	newRB, newRBList := listOf[rbacv1.RoleBinding, rbacv1.RoleBindingList]()
	newCR, newCRList := listOf[rbacv1.ClusterRole, rbacv1.ClusterRoleList]()
	newCRB, newCRBList := listOf[rbacv1.ClusterRoleBinding, rbacv1.ClusterRoleBindingList]()
	newNP, newNPList := listOf[networkingv1.NetworkPolicy, networkingv1.NetworkPolicyList]()
	newIng, newIngList := listOf[networkingv1.Ingress, networkingv1.IngressList]()
	newIC, newICList := listOf[networkingv1.IngressClass, networkingv1.IngressClassList]()
	newES, newESList := listOf[discoveryv1.EndpointSlice, discoveryv1.EndpointSliceList]()
	newCRD, newCRDList := listOf[apiextensionsv1.CustomResourceDefinition, apiextensionsv1.CustomResourceDefinitionList]()
	const rbac = "rbac.authorization.k8s.io"
	return []*resource{
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
		{group: "batch", version: "v1", name: "jobs", kind: "Job", singular: "job", namespaced: true,
			categories: []string{"all"}, subresources: []subresource{statusSubresource},
			newFunc: newJob, newListFunc: newJobList, strategy: jobRules, tracksGeneration: true, notRunBy: "job",
			fields: fieldsOf(map[string]func(*batchv1.Job) string{
				"status.successful": func(j *batchv1.Job) string { return strconv.Itoa(int(j.Status.Succeeded)) },
			})},
		{group: "batch", version: "v1", name: "cronjobs", kind: "CronJob", singular: "cronjob", namespaced: true,
			shortNames: []string{"cj"}, categories: []string{"all"}, subresources: []subresource{statusSubresource},
			newFunc: newCJ, newListFunc: newCJList, strategy: cronJobRules, tracksGeneration: true, notRunBy: "cronjob"},
		{group: "policy", version: "v1", name: "poddisruptionbudgets", kind: "PodDisruptionBudget", singular: "poddisruptionbudget", namespaced: true,
			shortNames: []string{"pdb"}, subresources: []subresource{statusSubresource},
			newFunc: newPDB, newListFunc: newPDBList, strategy: podDisruptionBudgetRules, tracksGeneration: true},
		{group: "scheduling.k8s.io", version: "v1", name: "priorityclasses", kind: "PriorityClass", singular: "priorityclass",
			shortNames: []string{"pc"}, newFunc: newPC, newListFunc: newPCList, strategy: priorityClassRules,
			checkDelete: func(obj runtime.Object) error { return priorityClassDeletion(obj) }},
		{group: rbac, version: "v1", name: "roles", kind: "Role", singular: "role", namespaced: true,
			newFunc: newRole, newListFunc: newRoleList, strategy: roleRules, validateName: validateRBACName},
		{group: rbac, version: "v1", name: "rolebindings", kind: "RoleBinding", singular: "rolebinding", namespaced: true,
			newFunc: newRB, newListFunc: newRBList, strategy: roleBindingRules, validateName: validateRBACName},
		{group: rbac, version: "v1", name: "clusterroles", kind: "ClusterRole", singular: "clusterrole",
			newFunc: newCR, newListFunc: newCRList, strategy: clusterRoleRules, validateName: validateRBACName},
		{group: rbac, version: "v1", name: "clusterrolebindings", kind: "ClusterRoleBinding", singular: "clusterrolebinding",
			newFunc: newCRB, newListFunc: newCRBList, strategy: clusterRoleBindingRules, validateName: validateRBACName},
		{group: "networking.k8s.io", version: "v1", name: "networkpolicies", kind: "NetworkPolicy", singular: "networkpolicy", namespaced: true,
			shortNames: []string{"netpol"}, newFunc: newNP, newListFunc: newNPList, strategy: networkPolicyRules, tracksGeneration: true},
		{group: "networking.k8s.io", version: "v1", name: "ingresses", kind: "Ingress", singular: "ingress", namespaced: true,
			shortNames: []string{"ing"}, subresources: []subresource{statusSubresource},
			newFunc: newIng, newListFunc: newIngList, strategy: ingressRules, tracksGeneration: true},
		{group: "networking.k8s.io", version: "v1", name: "ingressclasses", kind: "IngressClass", singular: "ingressclass",
			newFunc: newIC, newListFunc: newICList, strategy: ingressClassRules, tracksGeneration: true},
		{group: "discovery.k8s.io", version: "v1", name: "endpointslices", kind: "EndpointSlice", singular: "endpointslice", namespaced: true,
			newFunc: newES, newListFunc: newESList, strategy: endpointSliceRules},
		{group: "apiextensions.k8s.io", version: "v1", name: "customresourcedefinitions", kind: "CustomResourceDefinition",
			singular: "customresourcedefinition", shortNames: []string{"crd", "crds"}, categories: []string{"api-extensions"},
			subresources: []subresource{statusSubresource}, newFunc: newCRD, newListFunc: newCRDList,
			strategy: crdStrategy{crdRules}, tracksGeneration: true, deleteFunc: (*Server).deleteCRD,
			inertNote: unreachableConversionWebhook},
	}
}

func storageAndNodeResources() []*resource {
	newSC, newSCList := listOf[storagev1.StorageClass, storagev1.StorageClassList]()
	newCSI, newCSIList := listOf[storagev1.CSIDriver, storagev1.CSIDriverList]()
	newRC, newRCList := listOf[nodev1.RuntimeClass, nodev1.RuntimeClassList]()
	newVA, newVAList := listOf[storagev1.VolumeAttachment, storagev1.VolumeAttachmentList]()
	newCap, newCapList := listOf[storagev1.CSIStorageCapacity, storagev1.CSIStorageCapacityList]()
	return []*resource{
		{group: "storage.k8s.io", version: "v1", name: "storageclasses", kind: "StorageClass", singular: "storageclass",
			shortNames: []string{"sc"}, newFunc: newSC, newListFunc: newSCList, strategy: storageClassRules},
		{group: "storage.k8s.io", version: "v1", name: "csidrivers", kind: "CSIDriver", singular: "csidriver",
			newFunc: newCSI, newListFunc: newCSIList, strategy: csiDriverRules, validateName: validateCSIDriverName},
		{group: "storage.k8s.io", version: "v1", name: "volumeattachments", kind: "VolumeAttachment", singular: "volumeattachment",
			subresources: []subresource{statusSubresource}, newFunc: newVA, newListFunc: newVAList, strategy: volumeAttachmentRules},
		{group: "storage.k8s.io", version: "v1", name: "csistoragecapacities", kind: "CSIStorageCapacity", singular: "csistoragecapacity",
			namespaced: true, newFunc: newCap, newListFunc: newCapList, strategy: csiStorageCapacityRules},
		{group: "node.k8s.io", version: "v1", name: "runtimeclasses", kind: "RuntimeClass", singular: "runtimeclass",
			newFunc: newRC, newListFunc: newRCList, strategy: runtimeClassRules},
	}
}

func admissionResources() []*resource {
	newVWC, newVWCList := listOf[admissionregistrationv1.ValidatingWebhookConfiguration, admissionregistrationv1.ValidatingWebhookConfigurationList]()
	newMWC, newMWCList := listOf[admissionregistrationv1.MutatingWebhookConfiguration, admissionregistrationv1.MutatingWebhookConfigurationList]()
	newAPIService, newAPIServiceList := listOf[apiregistrationv1.APIService, apiregistrationv1.APIServiceList]()
	newVAP, newVAPList := listOf[admissionregistrationv1.ValidatingAdmissionPolicy, admissionregistrationv1.ValidatingAdmissionPolicyList]()
	newVAPB, newVAPBList := listOf[admissionregistrationv1.ValidatingAdmissionPolicyBinding, admissionregistrationv1.ValidatingAdmissionPolicyBindingList]()
	newMAP, newMAPList := listOf[admissionregistrationv1.MutatingAdmissionPolicy, admissionregistrationv1.MutatingAdmissionPolicyList]()
	newMAPB, newMAPBList := listOf[admissionregistrationv1.MutatingAdmissionPolicyBinding, admissionregistrationv1.MutatingAdmissionPolicyBindingList]()
	const group = "admissionregistration.k8s.io"
	return []*resource{
		{group: apiregistrationv1.GroupName, version: "v1", name: "apiservices", kind: "APIService", singular: "apiservice",
			categories: []string{"api-extensions"}, subresources: []subresource{statusSubresource},
			newFunc: newAPIService, newListFunc: newAPIServiceList, strategy: apiServiceRules, validateName: anyAPIServiceName},
		{group: group, version: "v1", name: "validatingwebhookconfigurations", kind: "ValidatingWebhookConfiguration",
			singular: "validatingwebhookconfiguration", categories: []string{"api-extensions"}, newFunc: newVWC, newListFunc: newVWCList,
			strategy: webhookConfigurationStrategy[*admissionregistrationv1.ValidatingWebhookConfiguration]{validatingWebhookConfigurationRules,
				func(c *admissionregistrationv1.ValidatingWebhookConfiguration) any { return c.Webhooks }},
			tracksGeneration: true, inertNote: unreachableWebhooks},
		{group: group, version: "v1", name: "mutatingwebhookconfigurations", kind: "MutatingWebhookConfiguration",
			singular: "mutatingwebhookconfiguration", categories: []string{"api-extensions"}, newFunc: newMWC, newListFunc: newMWCList,
			strategy: webhookConfigurationStrategy[*admissionregistrationv1.MutatingWebhookConfiguration]{mutatingWebhookConfigurationRules,
				func(c *admissionregistrationv1.MutatingWebhookConfiguration) any { return c.Webhooks }},
			tracksGeneration: true, inertNote: unreachableWebhooks},
		{group: group, version: "v1", name: "validatingadmissionpolicies", kind: "ValidatingAdmissionPolicy",
			singular: "validatingadmissionpolicy", categories: []string{"api-extensions"}, subresources: []subresource{statusSubresource},
			newFunc: newVAP, newListFunc: newVAPList, strategy: validatingAdmissionPolicyRules, tracksGeneration: true},
		{group: group, version: "v1", name: "validatingadmissionpolicybindings", kind: "ValidatingAdmissionPolicyBinding",
			singular: "validatingadmissionpolicybinding", categories: []string{"api-extensions"},
			newFunc: newVAPB, newListFunc: newVAPBList, strategy: validatingAdmissionPolicyBindingRules, tracksGeneration: true},
		{group: group, version: "v1", name: "mutatingadmissionpolicies", kind: "MutatingAdmissionPolicy",
			singular: "mutatingadmissionpolicy", categories: []string{"api-extensions"},
			newFunc: newMAP, newListFunc: newMAPList, strategy: mutatingAdmissionPolicyRules, tracksGeneration: true},
		{group: group, version: "v1", name: "mutatingadmissionpolicybindings", kind: "MutatingAdmissionPolicyBinding",
			singular: "mutatingadmissionpolicybinding", categories: []string{"api-extensions"},
			newFunc: newMAPB, newListFunc: newMAPBList, strategy: mutatingAdmissionPolicyBindingRules, tracksGeneration: true},
	}
}

// noControllerNote says that miniplane runs no controller for the kind, if so: the text of
// the NoController event on each new object and of the warning every write of one answers
// with (a chart's Deployment would otherwise wait for pods in silence).
func (r *resource) noControllerNote() string {
	if r.notRunBy == "" {
		return ""
	}
	effect := r.notRunEffect
	if effect == "" {
		effect = "no pods are created for it"
	}
	return fmt.Sprintf("miniplane runs no %s controller: this %s is stored and served, but nothing acts on it (%s)",
		r.notRunBy, r.kind, effect)
}

// secretFields are the selectable fields of secrets, as kube-apiserver offers them.
var secretFields = fieldsOf(map[string]func(*corev1.Secret) string{
	"type": func(s *corev1.Secret) string { return string(s.Type) },
})
