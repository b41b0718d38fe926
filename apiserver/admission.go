package apiserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	networkingv1beta1 "k8s.io/api/networking/v1beta1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/miniplane/miniplane/store"
)

// Admission runs between decoding and storage, in the order kube-apiserver runs the plugins
// miniplane has: NamespaceLifecycle (checkNamespaceOpen, before everything), then the
// mutating ServiceAccount, Priority, RuntimeClass, DefaultStorageClass and DefaultIngressClass
// plugins, the MutatingAdmissionPolicies and the mutating admission webhooks, then the kind's own validation, then the
// validating plugins: PodSecurity, RuntimeClass's overhead check, RBAC's escalation check (which kube-apiserver makes in the RBAC
// kinds' storage), the ValidatingAdmissionPolicies, the validating admission webhooks and
// ResourceQuota, which charges the quota last, so that nothing refused later has been
// counted. Updates run the mutating policies and webhooks (applyUpdate) and the validating
// plugins; deletes and subresource creates the webhooks and policies of both kinds.

// admissionOp is the operation being admitted.
type admissionOp string

const (
	opCreate admissionOp = "CREATE"
	opUpdate admissionOp = "UPDATE"
	opDelete admissionOp = "DELETE"
)

// admissionPhase says whether a plugin may change the object (mutating, before
// validation) or only accept or refuse it (validating, after validation).
type admissionPhase int

const (
	mutating admissionPhase = iota
	validating
)

// admission is one write on its way through the plugins.
type admission struct {
	op              admissionOp
	res             *resource
	obj, old        runtime.Object // old is nil on create, obj on delete
	namespace, name string
	// subresource is the subresource written ("status"), "" for the object itself.
	subresource string
	// kind is obj's kind when it is not the resource's (a pod's Binding or Eviction).
	kind   *schema.GroupVersionKind
	dryRun bool
}

// is reports whether the write is to the resource group/name (its main resource).
func (a *admission) is(gr schema.GroupResource) bool { return a.res.groupResource() == gr }

// forbidden is the error a plugin refuses a write with, as admission.NewForbidden words it.
func (a *admission) forbidden(err error) error {
	return apierrors.NewForbidden(a.res.groupResource(), a.name, err)
}

type admissionPlugin struct {
	name  string
	phase admissionPhase
	admit func(s *Server, ctx context.Context, a *admission) error
}

// admissionPlugins run in this order.
var admissionPlugins = []admissionPlugin{
	{name: "ServiceAccount", phase: mutating, admit: admitServiceAccount},
	{name: "Priority", phase: mutating, admit: admitPriority},
	{name: "RuntimeClass", phase: mutating, admit: admitRuntimeClass},
	{name: "DefaultStorageClass", phase: mutating, admit: admitDefaultStorageClass},
	{name: "DefaultIngressClass", phase: mutating, admit: admitDefaultIngressClass},
	{name: "MutatingAdmissionPolicy", phase: mutating, admit: admitPoliciesOnCreate},
	{name: "MutatingAdmissionWebhook", phase: mutating, admit: admitWebhooksOnCreate},
	{name: "PodSecurity", phase: validating, admit: admitPodSecurity},
	{name: "RuntimeClass", phase: validating, admit: validateRuntimeClassOverhead},
	{name: "RBACEscalation", phase: validating, admit: admitRBACEscalation},
	{name: "ValidatingAdmissionPolicy", phase: validating, admit: validatePolicies},
	{name: "ValidatingAdmissionWebhook", phase: validating, admit: validateWebhooks},
	{name: "ResourceQuota", phase: validating, admit: admitQuota},
}

// admit runs the plugins of one phase.
func (s *Server) admit(ctx context.Context, a *admission, phase admissionPhase) error {
	for _, p := range admissionPlugins {
		if p.phase != phase {
			continue
		}
		if err := p.admit(s, ctx, a); err != nil {
			return err
		}
	}
	return nil
}

var (
	podsResource            = corev1.Resource("pods")
	serviceAccountsResource = corev1.Resource("serviceaccounts")
	priorityClassesResource = schedulingv1.Resource("priorityclasses")
	ingressesResource       = networkingv1.Resource("ingresses")
	ingressClassesResource  = networkingv1.Resource("ingressclasses")
	claimsResource          = corev1.Resource("persistentvolumeclaims")
	storageClassesResource  = storagev1.Resource("storageclasses")
	runtimeClassesResource  = nodev1.Resource("runtimeclasses")
)

// admitPriority is the Priority plugin: a pod's priority comes from its PriorityClass (or
// the global default one), and only one class may be the global default.
func admitPriority(s *Server, ctx context.Context, a *admission) error {
	switch {
	case a.is(podsResource) && a.op == opCreate:
		return admitPodPriority(s, ctx, a)
	case a.is(priorityClassesResource):
		pc := a.obj.(*schedulingv1.PriorityClass)
		if !pc.GlobalDefault {
			return nil
		}
		classes, err := s.cachedOwn(ctx, priorityClassesResource, "")
		if err != nil {
			return err
		}
		for _, other := range classes {
			o := other.(*schedulingv1.PriorityClass)
			if o.GlobalDefault && o.Name != pc.Name {
				return a.forbidden(fmt.Errorf("PriorityClass %v is already marked as default. Only one default can exist", o.Name))
			}
		}
	}
	return nil
}

func admitPodPriority(s *Server, ctx context.Context, a *admission) error {
	pod := a.obj.(*corev1.Pod)
	var priority int32
	policy := corev1.PreemptLowerPriority
	if pod.Spec.PriorityClassName == "" {
		classes, err := s.cachedOwn(ctx, priorityClassesResource, "")
		if err != nil {
			return err
		}
		if def := defaultPriorityClass(classes); def != nil {
			pod.Spec.PriorityClassName, priority = def.Name, def.Value
			if def.PreemptionPolicy != nil {
				policy = *def.PreemptionPolicy
			}
		}
	} else {
		obj, err := s.lookup(ctx, priorityClassesResource, "", pod.Spec.PriorityClassName)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return a.forbidden(fmt.Errorf("no PriorityClass with name %v was found", pod.Spec.PriorityClassName))
			}
			return err
		}
		pc := obj.(*schedulingv1.PriorityClass)
		priority = pc.Value
		if pc.PreemptionPolicy != nil {
			policy = *pc.PreemptionPolicy
		}
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority != priority {
		return a.forbidden(fmt.Errorf("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *pod.Spec.Priority, priority))
	}
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy != policy {
		return a.forbidden(fmt.Errorf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", *pod.Spec.PreemptionPolicy, policy))
	}
	pod.Spec.Priority, pod.Spec.PreemptionPolicy = &priority, &policy
	return nil
}

// defaultPriorityClass is the global default PriorityClass, the lowest-valued one should
// several claim it.
func defaultPriorityClass(classes []runtime.Object) *schedulingv1.PriorityClass {
	var def *schedulingv1.PriorityClass
	for _, obj := range classes {
		pc := obj.(*schedulingv1.PriorityClass)
		if pc.GlobalDefault && (def == nil || pc.Value < def.Value) {
			def = pc
		}
	}
	return def
}

// admitDefaultIngressClass is the DefaultIngressClass plugin: a new Ingress that names no
// class, by field or by the older annotation, gets the default IngressClass, the newest
// one should several be marked default.
func admitDefaultIngressClass(s *Server, ctx context.Context, a *admission) error {
	if a.op != opCreate || !a.is(ingressesResource) {
		return nil
	}
	ing := a.obj.(*networkingv1.Ingress)
	if _, annotated := ing.Annotations[networkingv1beta1.AnnotationIngressClass]; ing.Spec.IngressClassName != nil || annotated {
		return nil
	}
	classes, err := s.cachedOwn(ctx, ingressClassesResource, "")
	if err != nil {
		return err
	}
	if def := newestDefault(classes, networkingv1.AnnotationIsDefaultIngressClass); def != "" {
		ing.Spec.IngressClassName = &def
	}
	return nil
}

// podRuntimeClass is the RuntimeClass a new pod names: nil when it names none, a 403 when
// the class does not exist.
func podRuntimeClass(s *Server, ctx context.Context, a *admission) (*corev1.Pod, *nodev1.RuntimeClass, error) {
	if a.op != opCreate || !a.is(podsResource) {
		return nil, nil, nil
	}
	pod := a.obj.(*corev1.Pod)
	name := pod.Spec.RuntimeClassName
	if name == nil || *name == "" {
		return pod, nil, nil
	}
	obj, err := s.lookup(ctx, runtimeClassesResource, "", *name)
	if apierrors.IsNotFound(err) {
		return nil, nil, a.forbidden(fmt.Errorf("pod rejected: RuntimeClass %q not found", *name))
	} else if err != nil {
		return nil, nil, err
	}
	return pod, obj.(*nodev1.RuntimeClass), nil
}

// admitRuntimeClass is the mutating half of the RuntimeClass plugin: a pod running under a
// RuntimeClass gets its overhead, and its node selector and tolerations merged in.
func admitRuntimeClass(s *Server, ctx context.Context, a *admission) error {
	pod, rc, err := podRuntimeClass(s, ctx, a)
	if rc == nil || err != nil {
		return err
	}
	if rc.Overhead != nil {
		if len(pod.Spec.Overhead) > 0 && !apiequality.Semantic.DeepEqual(rc.Overhead.PodFixed, pod.Spec.Overhead) {
			return a.forbidden(errors.New("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"))
		}
		pod.Spec.Overhead = rc.Overhead.PodFixed.DeepCopy()
	}
	if rc.Scheduling == nil {
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(rc.Scheduling.NodeSelector)) {
		want := rc.Scheduling.NodeSelector[key]
		if have, ok := pod.Spec.NodeSelector[key]; ok && have != want {
			return a.forbidden(fmt.Errorf("conflict: runtimeClass.scheduling.nodeSelector[%s] = %s; pod.spec.nodeSelector[%s] = %s", key, want, key, have))
		}
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		pod.Spec.NodeSelector[key] = want
	}
	for _, t := range rc.Scheduling.Tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
	return nil
}

// validateRuntimeClassOverhead is the validating half: a pod's overhead is its
// RuntimeClass's, and a pod without one has none.
func validateRuntimeClassOverhead(s *Server, ctx context.Context, a *admission) error {
	pod, rc, err := podRuntimeClass(s, ctx, a)
	if pod == nil || err != nil {
		return err
	}
	if rc != nil && rc.Overhead != nil {
		if !apiequality.Semantic.DeepEqual(rc.Overhead.PodFixed, pod.Spec.Overhead) {
			return a.forbidden(errors.New("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"))
		}
	} else if pod.Spec.Overhead != nil {
		return a.forbidden(errors.New("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"))
	}
	return nil
}

// admitDefaultStorageClass is the DefaultStorageClass plugin: a new claim that leaves its
// storage class unset (not set to "", which asks for none, and not named by the older
// annotation) gets the default StorageClass,
// the newest one should several be marked default.
func admitDefaultStorageClass(s *Server, ctx context.Context, a *admission) error {
	if a.op != opCreate || !a.is(claimsResource) {
		return nil
	}
	pvc := a.obj.(*corev1.PersistentVolumeClaim)
	if _, annotated := pvc.Annotations[corev1.BetaStorageClassAnnotation]; pvc.Spec.StorageClassName != nil || annotated {
		return nil
	}
	classes, err := s.cachedOwn(ctx, storageClassesResource, "")
	if err != nil {
		return err
	}
	if def := newestDefault(classes, defaultStorageClassAnnotations...); def != "" {
		pvc.Spec.StorageClassName = &def
	}
	return nil
}

// newestDefault names the newest of objs that one of the annotations marks the default
// ("true"), by creation time and then by name, as upstream's default-class plugins choose;
// "" when none is.
func newestDefault(objs []runtime.Object, annotations ...string) string {
	var best metav1.Object
	for _, obj := range objs {
		m := obj.(metav1.Object)
		if !isDefaultClass(m.GetAnnotations(), annotations) {
			continue
		}
		if best == nil {
			best = m
			continue
		}
		t, bt := m.GetCreationTimestamp().UnixNano(), best.GetCreationTimestamp().UnixNano()
		if t > bt || (t == bt && m.GetName() < best.GetName()) {
			best = m
		}
	}
	if best == nil {
		return ""
	}
	return best.GetName()
}

// lookup reads one object of a served resource: from its watch cache, or from etcd when
// the cache has not seen it (it may have been created a moment ago). The error is a
// NotFound status when there is no such object.
func (s *Server) lookup(ctx context.Context, gr schema.GroupResource, namespace, name string) (runtime.Object, error) {
	res := s.reg.lookupGroupResource(gr)
	if res == nil {
		return nil, fmt.Errorf("apiserver: %s is not served", gr)
	}
	key := res.key(s.cfg.EtcdPrefix, namespace, name)
	if co, ok := res.cache.get(key); ok {
		return co.object(), nil
	}
	obj, err := s.store.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(gr, name)
	}
	return obj, err
}

// cachedOwn is cached once the cache holds every object this server has created: what a
// plugin decides on must include a quota or a PriorityClass created a moment ago.
func (s *Server) cachedOwn(ctx context.Context, gr schema.GroupResource, namespace string) ([]runtime.Object, error) {
	if res := s.reg.lookupGroupResource(gr); res != nil {
		if err := res.cache.waitForRV(ctx, res.lastCreateRV.Load(), 5*time.Second); err != nil {
			return nil, err
		}
	}
	return s.cached(gr, namespace), nil
}

// cached returns the objects of a served resource in one namespace ("" for all) as its
// watch cache holds them, sorted by name. Callers must not modify them.
func (s *Server) cached(gr schema.GroupResource, namespace string) []runtime.Object {
	res := s.reg.lookupGroupResource(gr)
	if res == nil {
		return nil
	}
	items, _ := res.cache.list(&watchFilter{namespace: namespace})
	out := make([]runtime.Object, len(items))
	for i, it := range items {
		out[i] = it.object()
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].(metav1.Object).GetName() < out[j].(metav1.Object).GetName()
	})
	return out
}

// afterCreate does what follows the creation of an object: a namespace gets its default
// ServiceAccount at once (kube-controller-manager's ServiceAccount controller does it a
// moment later, which makes a pod created right after its namespace fail); a kind
// miniplane runs no controller for, or does not enforce, gets an event saying so.
func (s *Server) afterCreate(ctx context.Context, res *resource, obj runtime.Object) {
	m := obj.(metav1.Object)
	var rv int64
	if _, err := fmt.Sscan(m.GetResourceVersion(), &rv); err == nil {
		res.lastCreateRV.Store(rv)
	}
	if res == s.namespaces() {
		s.ensureDefaultServiceAccount(ctx, m.GetName())
	}
	if note := res.noControllerNote(); note != "" {
		s.recordEvent(ctx, res, obj, corev1.EventTypeWarning, "NoController", note)
	}
	if res.inertNote != nil {
		if note := res.inertNote(obj); note != "" {
			s.recordEvent(ctx, res, obj, corev1.EventTypeWarning, "NotEnforced", note)
		}
	}
}

// ensureDefaultServiceAccount creates the namespace's default ServiceAccount if it is
// missing.
func (s *Server) ensureDefaultServiceAccount(ctx context.Context, namespace string) {
	res := s.reg.lookupGroupResource(serviceAccountsResource)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: defaultServiceAccountName, Namespace: namespace}}
	_, err := s.createStored(ctx, res, sa, createOptions{manager: serverFieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.log.Warn("default service account not created", "namespace", namespace, "err", err)
	}
}

// recordEvent writes an event about obj, reported by the API server.
func (s *Server) recordEvent(ctx context.Context, res *resource, obj runtime.Object, eventType, reason, message string) {
	m := obj.(metav1.Object)
	now := metav1.NewTime(s.clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.GetNamespace(), Name: fmt.Sprintf("%s.%x", m.GetName(), now.UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: res.kind, APIVersion: res.apiVersion(), Namespace: m.GetNamespace(),
			Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()},
		Reason: reason, Message: message, Type: eventType, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: "miniplane-apiserver"},
		ReportingController: "miniplane-apiserver",
	}
	if ev.Namespace == "" {
		ev.Namespace = metav1.NamespaceDefault
	}
	if _, err := s.createStored(ctx, s.reg.lookupGroupResource(corev1.Resource("events")), ev, createOptions{manager: serverFieldManager}); err != nil {
		s.log.Warn("event not recorded", "reason", reason, "object", m.GetName(), "err", err)
	}
}
