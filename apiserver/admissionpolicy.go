package apiserver

import (
	"context"
	"encoding/json"
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
	mutatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/tools/cache"
)

// Admission policies are enforced by k8s.io/apiserver's ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy plugins, the ones kube-apiserver runs: matching, CEL compilation
// and evaluation, params, validation actions, patches, messages and audit annotations are
// theirs. miniplane feeds them what kube-apiserver feeds them through its loopback client:
// informers over the watch caches, a REST mapper over the registry, for params a read-only
// dynamic client answered from the caches, and for the mutating plugin's merge types the
// server's own OpenAPI v3 documents. docs/kinds-and-admission.md, "Admission policies",
// says more.

// admissionPolicies holds the two policy plugins and what they read.
type admissionPolicies struct {
	validating *validatingpolicy.Plugin
	mutating   *mutatingpolicy.Plugin
	objects    genericadmission.ObjectInterfaces
	// validatingBound and mutatingBound count the bindings of each kind. While one is 0
	// no policy of that kind can apply, and a write does not build the plugin's
	// attributes at all.
	validatingBound, mutatingBound bindingCount
}

// bindingCount follows the number of objects an informer holds.
type bindingCount struct {
	n   atomic.Int64
	inf cache.SharedIndexInformer
}

func (c *bindingCount) follow(inf cache.SharedIndexInformer) error {
	c.inf = inf
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.recount() },
		UpdateFunc: func(any, any) { c.recount() },
		DeleteFunc: func(any) { c.recount() },
	})
	return err
}

func (c *bindingCount) recount() { c.n.Store(int64(len(c.inf.GetStore().ListKeys()))) }

func (p *admissionPolicies) recount() {
	p.validatingBound.recount()
	p.mutatingBound.recount()
}

// policyPlugin is what the two plugins share of their setup (k8s.io/apiserver's generic
// policy plugin).
type policyPlugin interface {
	SetExternalKubeInformerFactory(informers.SharedInformerFactory)
	SetExternalKubeClientSet(kubernetes.Interface)
	SetRESTMapper(meta.RESTMapper)
	SetDynamicClient(dynamic.Interface)
	SetDrainedNotification(<-chan struct{})
	SetUnconditionalAuthorizer(authorizer.UnconditionalAuthorizer)
	SetEnabled(bool)
	ValidateInitialization() error
}

// newAdmissionPolicies builds the plugins on factory, whose informers the caller starts.
func (s *Server) newAdmissionPolicies(ctx context.Context, factory informers.SharedInformerFactory, objects genericadmission.ObjectInterfaces) (*admissionPolicies, error) {
	p := &admissionPolicies{objects: objects}
	var err error
	if p.validating, err = validatingpolicy.NewPlugin(nil); err != nil {
		return nil, err
	}
	if p.mutating, err = mutatingpolicy.NewPlugin(nil); err != nil {
		return nil, err
	}
	mapper := &registryRESTMapper{reg: s.reg}
	for _, plugin := range []policyPlugin{p.validating, p.mutating} {
		plugin.SetExternalKubeInformerFactory(paramlessFactory{factory})
		plugin.SetExternalKubeClientSet(namespaceGetter{s: s})
		plugin.SetRESTMapper(mapper)
		plugin.SetDynamicClient(cacheDynamicClient{s: s, ctx: ctx})
		plugin.SetDrainedNotification(ctx.Done())
		plugin.SetUnconditionalAuthorizer(webhookAuthorizer{s: s})
		// The mutating plugin is off unless its feature gate is on; it is GA and on in
		// kube-apiserver 1.37.
		plugin.SetEnabled(true)
		if err := plugin.ValidateInitialization(); err != nil {
			return nil, err
		}
	}
	v1 := factory.Admissionregistration().V1()
	if err := p.validatingBound.follow(v1.ValidatingAdmissionPolicyBindings().Informer()); err != nil {
		return nil, err
	}
	if err := p.mutatingBound.follow(v1.MutatingAdmissionPolicyBindings().Informer()); err != nil {
		return nil, err
	}
	return p, nil
}

// validates and mutates report whether a write must go to the validating or the mutating
// plugin: some binding of its kind exists, and the write comes from a client, as for the
// webhooks (admissionWebhooks.called).
func (p *admissionPolicies) validates(ctx context.Context) bool {
	return p != nil && p.validatingBound.binds(ctx)
}

func (p *admissionPolicies) mutates(ctx context.Context) bool {
	return p != nil && p.mutatingBound.binds(ctx)
}

func (c *bindingCount) binds(ctx context.Context) bool {
	return c.n.Load() > 0 && stateFrom(ctx).user != nil
}

// validatePolicies is the ValidatingAdmissionPolicy plugin.
func validatePolicies(s *Server, ctx context.Context, a *admission) error {
	p := s.policies.Load()
	if !p.validates(ctx) {
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

// admitMutatingPolicies is the MutatingAdmissionPolicy plugin. It reports whether it ran:
// then the object may have changed and must be prepared again, as after a webhook. Each
// policy runs once: reinvocation (reinvocationPolicy IfNeeded) is not done.
func (s *Server) admitMutatingPolicies(ctx context.Context, a *admission) (bool, error) {
	p := s.policies.Load()
	if !p.mutates(ctx) {
		return false, nil
	}
	attrs := newAuditedAttributes(admissionAttributes(ctx, a))
	if !p.mutating.Handles(attrs.GetOperation()) {
		return false, nil
	}
	err := p.mutating.Admit(ctx, attrs, admissionObjectsFor(p.objects, a.res))
	attrs.flush(ctx)
	return true, err
}

// admitPoliciesOnCreate runs the mutating policies in the create's chain.
func admitPoliciesOnCreate(s *Server, ctx context.Context, a *admission) error {
	if a.op != opCreate {
		return nil
	}
	ran, err := s.admitMutatingPolicies(ctx, a)
	if ran && err == nil {
		a.res.strategy.prepareForCreate(a.obj, s.clock.Now())
	}
	return err
}

// admitMutating runs the mutating policies, then the mutating webhooks.
// It reports whether either ran: then the object must be prepared again.
func (s *Server) admitMutating(ctx context.Context, a *admission) (bool, error) {
	policies, err := s.admitMutatingPolicies(ctx, a)
	if err != nil {
		return policies, err
	}
	webhooks, err := s.admitMutatingWebhooks(ctx, a)
	return policies || webhooks, err
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

// policyResources are the kinds whose informers the policy plugins read.
var policyResources = []schema.GroupVersionResource{
	admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"),
	admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings"),
	admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicies"),
	admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicybindings"),
}

// Discovery is what the mutating policy plugin reads the OpenAPI v3 documents from (it
// builds the merge types of apply configurations from them).
func (g namespaceGetter) Discovery() discovery.DiscoveryInterfaces { return openAPIDiscovery{s: g.s} }

// openAPIDiscovery answers OpenAPIV3 only; the embedded nil interface makes any other call
// fail loudly.
type openAPIDiscovery struct {
	discovery.DiscoveryInterfaces
	s *Server
}

func (d openAPIDiscovery) OpenAPIV3() openapi.Client { return serverOpenAPIV3{s: d.s} }

// serverOpenAPIV3 is an OpenAPI v3 client that reads the server's own documents, with no
// request: each group version's URL carries the registry's revision, so a new custom
// resource version replaces what was built from the older document.
type serverOpenAPIV3 struct{ s *Server }

func (c serverOpenAPIV3) Paths() (map[string]openapi.GroupVersion, error) {
	rev := c.s.reg.currentRevision()
	_, plan, _, err := c.s.openapi.current()
	if err != nil {
		return nil, err
	}
	out := make(map[string]openapi.GroupVersion, len(plan.v3Paths))
	for _, path := range plan.v3Paths {
		out[path] = serverOpenAPIDocument{path: path, rev: rev, plan: plan}
	}
	return out, nil
}

// serverOpenAPIDocument builds its document when read: the plugin keeps what it makes of it.
type serverOpenAPIDocument struct {
	path string
	rev  uint64
	plan *openAPIPlan
}

func (d serverOpenAPIDocument) Schema(contentType string) ([]byte, error) {
	if contentType != runtime.ContentTypeJSON {
		return nil, fmt.Errorf("apiserver: OpenAPI documents are read as JSON here, not %s", contentType)
	}
	doc, err := d.plan.v3(d.path)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

func (d serverOpenAPIDocument) ServerRelativeURL() string {
	return "/openapi/v3/" + d.path + "?hash=" + strconv.FormatUint(d.rev, 10)
}
