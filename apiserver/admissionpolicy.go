package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	genericadmission "k8s.io/apiserver/pkg/admission"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// ValidatingAdmissionPolicies are enforced by k8s.io/apiserver's ValidatingAdmissionPolicy
// plugin, the one kube-apiserver runs: matching, CEL compilation and evaluation, params,
// validation actions, messages and audit annotations are its own. miniplane feeds it what
// kube-apiserver feeds it through its loopback client: informers over the watch caches, a
// REST mapper over the registry, and for params a read-only dynamic client answered from the
// caches. docs/kinds-and-admission.md, "Admission policies", says more.

// admissionPolicies holds the policy plugin and what it reads.
type admissionPolicies struct {
	validating *validatingpolicy.Plugin
	objects    genericadmission.ObjectInterfaces
	// bound counts the ValidatingAdmissionPolicyBindings. While it is 0 no policy can
	// apply, and a write does not build the plugin's attributes at all.
	bound    atomic.Int64
	bindings cache.SharedIndexInformer
}

func (p *admissionPolicies) recount() { p.bound.Store(int64(len(p.bindings.GetStore().ListKeys()))) }

// newAdmissionPolicies builds the plugin on factory, whose informers the caller starts.
func (s *Server) newAdmissionPolicies(ctx context.Context, factory informers.SharedInformerFactory, objects genericadmission.ObjectInterfaces) (*admissionPolicies, error) {
	p := &admissionPolicies{objects: objects}
	var err error
	if p.validating, err = validatingpolicy.NewPlugin(nil); err != nil {
		return nil, err
	}
	p.validating.SetExternalKubeInformerFactory(paramlessFactory{factory})
	p.validating.SetExternalKubeClientSet(namespaceGetter{s: s})
	p.validating.SetRESTMapper(&registryRESTMapper{reg: s.reg})
	p.validating.SetDynamicClient(cacheDynamicClient{s: s, ctx: ctx})
	p.validating.SetDrainedNotification(ctx.Done())
	p.validating.SetUnconditionalAuthorizer(webhookAuthorizer{s: s})
	if err := p.validating.ValidateInitialization(); err != nil {
		return nil, err
	}
	p.bindings = factory.Admissionregistration().V1().ValidatingAdmissionPolicyBindings().Informer()
	if _, err := p.bindings.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.recount() },
		UpdateFunc: func(any, any) { p.recount() },
		DeleteFunc: func(any) { p.recount() },
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// applies reports whether a write must go to the plugin: some binding exists, and the write
// comes from a client, as for the webhooks (admissionWebhooks.called).
func (p *admissionPolicies) applies(ctx context.Context) bool {
	return p != nil && p.bound.Load() > 0 && stateFrom(ctx).user != nil
}

// validatePolicies is the ValidatingAdmissionPolicy plugin.
func validatePolicies(s *Server, ctx context.Context, a *admission) error {
	p := s.policies.Load()
	if !p.applies(ctx) {
		return nil
	}
	attrs := newAuditedAttributes(admissionAttributes(ctx, a))
	if !p.validating.Handles(attrs.GetOperation()) {
		return nil
	}
	err := p.validating.Validate(ctx, attrs, admissionObjectsFor(p.objects, a.res))
	attrs.flush(ctx)
	return err
}

// auditedAttributes passes the audit annotations a plugin adds to the request's audit event
// (kube-apiserver's handlers wrap the attributes the same way). Webhooks of one write are
// called in parallel, hence the lock; the annotations reach the request's state once the
// plugin has returned.
type auditedAttributes struct {
	genericadmission.Attributes
	mu          sync.Mutex
	annotations map[string]string
}

func newAuditedAttributes(a genericadmission.Attributes) *auditedAttributes {
	return &auditedAttributes{Attributes: a}
}

func (a *auditedAttributes) AddAnnotation(key, value string) error {
	return a.AddAnnotationWithLevel(key, value, auditinternal.LevelMetadata)
}

func (a *auditedAttributes) AddAnnotationWithLevel(key, value string, level auditinternal.Level) error {
	if err := a.Attributes.AddAnnotationWithLevel(key, value, level); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.annotations == nil {
		a.annotations = map[string]string{}
	}
	a.annotations[key] = value
	return nil
}

// flush writes the annotations into the request's audit event.
func (a *auditedAttributes) flush(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	stateFrom(ctx).annotate(a.annotations)
}

// paramlessFactory is the informer factory the policy plugin gets. The plugin asks it
// first for an informer of a policy's paramKind; the factory would build one on its own
// (nil) client, so it answers that it has none, and the plugin follows the params with a
// dynamic informer over cacheDynamicClient instead.
type paramlessFactory struct {
	informers.SharedInformerFactory
}

func (paramlessFactory) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	return nil, fmt.Errorf("no shared informer for %s", gvr)
}

// registryRESTMapper maps kinds to resources as the server serves them, custom resources
// included: a DefaultRESTMapper built from the registry, built again when the registry
// changes.
type registryRESTMapper struct {
	reg    *registry
	mu     sync.Mutex
	rev    uint64
	mapper meta.RESTMapper
}

var _ meta.RESTMapper = (*registryRESTMapper)(nil)

func (m *registryRESTMapper) current() meta.RESTMapper {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev := m.reg.currentRevision()
	if m.mapper != nil && rev == m.rev {
		return m.mapper
	}
	mapper := meta.NewDefaultRESTMapper(m.reg.allGroupVersions())
	for _, r := range m.reg.resources() {
		scope := meta.RESTScopeRoot
		if r.namespaced {
			scope = meta.RESTScopeNamespace
		}
		singular := r.singular
		if singular == "" {
			singular = r.name
		}
		mapper.AddSpecific(r.gvk(), r.gvr(), r.gvr().GroupVersion().WithResource(singular), scope)
	}
	m.mapper, m.rev = mapper, rev
	return mapper
}

func (m *registryRESTMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return m.current().KindFor(resource)
}

func (m *registryRESTMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return m.current().KindsFor(resource)
}

func (m *registryRESTMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return m.current().ResourceFor(input)
}

func (m *registryRESTMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return m.current().ResourcesFor(input)
}

func (m *registryRESTMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return m.current().RESTMapping(gk, versions...)
}

func (m *registryRESTMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return m.current().RESTMappings(gk, versions...)
}

func (m *registryRESTMapper) ResourceSingularizer(resource string) (string, error) {
	return m.current().ResourceSingularizer(resource)
}

// cacheDynamicClient is the dynamic client the policy plugin reads params with: Get, List
// and Watch answered from the watch caches, as unstructured objects. Nothing else of it is
// used; the embedded nil interface makes any other call fail loudly.
type cacheDynamicClient struct {
	s   *Server
	ctx context.Context
}

func (c cacheDynamicClient) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return cacheDynamicResource{s: c.s, ctx: c.ctx, gvr: gvr}
}

type cacheDynamicResource struct {
	dynamic.NamespaceableResourceInterface
	s         *Server
	ctx       context.Context
	gvr       schema.GroupVersionResource
	namespace string
}

func (r cacheDynamicResource) Namespace(ns string) dynamic.ResourceInterface {
	r.namespace = ns
	return r
}

func (r cacheDynamicResource) resource() (*resource, error) {
	res := r.s.reg.lookup(r.gvr.Group, r.gvr.Version, r.gvr.Resource)
	if res == nil {
		return nil, fmt.Errorf("apiserver: %s is not served", r.gvr)
	}
	return res, nil
}

func (r cacheDynamicResource) Get(ctx context.Context, name string, _ metav1.GetOptions, subresources ...string) (*unstructured.Unstructured, error) {
	if len(subresources) > 0 {
		return nil, errors.New("apiserver: the cache client reads no subresources")
	}
	res, err := r.resource()
	if err != nil {
		return nil, err
	}
	obj, err := r.s.lookup(ctx, res.groupResource(), r.namespace, name)
	if err != nil {
		return nil, err
	}
	return toUnstructured(res, obj)
}

func (r cacheDynamicResource) List(ctx context.Context, _ metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	res, err := r.resource()
	if err != nil {
		return nil, err
	}
	listed, err := (&cacheListerWatcher{s: r.s, res: res, ctx: r.ctx}).List(metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	objs, err := meta.ExtractList(listed)
	if err != nil {
		return nil, err
	}
	out := &unstructured.UnstructuredList{}
	out.SetAPIVersion(res.apiVersion())
	out.SetKind(res.listKind())
	if lm, err := meta.ListAccessor(listed); err == nil {
		out.SetResourceVersion(lm.GetResourceVersion())
	}
	for _, obj := range objs {
		if r.namespace != "" && obj.(metav1.Object).GetNamespace() != r.namespace {
			continue
		}
		u, err := toUnstructured(res, obj)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *u)
	}
	return out, nil
}

func (r cacheDynamicResource) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	res, err := r.resource()
	if err != nil {
		return nil, err
	}
	if _, err := strconv.ParseInt(opts.ResourceVersion, 10, 64); err != nil {
		// The informer lists before it watches; a watch of its own from "now" is not needed.
		return nil, fmt.Errorf("apiserver: a cache watch needs a resourceVersion: %w", err)
	}
	w, err := (&cacheListerWatcher{s: r.s, res: res, ctx: r.ctx}).Watch(opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if m, ok := ev.Object.(metav1.Object); ok && r.namespace != "" && m.GetNamespace() != r.namespace {
			return ev, false
		}
		if ev.Type == watch.Error || ev.Type == watch.Bookmark {
			return ev, true
		}
		u, err := toUnstructured(res, ev.Object)
		if err != nil {
			return watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}, true
		}
		ev.Object = u
		return ev, true
	}), nil
}

// toUnstructured turns an object of res into an unstructured one with its apiVersion and
// kind set (the caches' typed objects carry none). obj is not changed.
func toUnstructured(res *resource, obj runtime.Object) (*unstructured.Unstructured, error) {
	var content map[string]any
	if u, ok := obj.(runtime.Unstructured); ok {
		content = runtime.DeepCopyJSON(u.UnstructuredContent())
	} else {
		var err error
		if content, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return nil, err
		}
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetAPIVersion(res.apiVersion())
	u.SetKind(res.kind)
	return u, nil
}

// validatingPolicyResources are the kinds whose informers the policy plugin reads.
var validatingPolicyResources = []schema.GroupVersionResource{
	admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"),
	admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings"),
}
