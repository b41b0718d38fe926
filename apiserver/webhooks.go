package apiserver

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericadmission "k8s.io/apiserver/pkg/admission"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// Admission webhooks are called by k8s.io/apiserver's MutatingAdmissionWebhook and
// ValidatingAdmissionWebhook plugins, the ones kube-apiserver runs: rule and selector
// matching, match conditions, the AdmissionReview versions, failure and reinvocation
// policies, JSON patches, timeouts and the audit annotations are theirs. miniplane feeds
// them the configurations and namespaces from its watch caches and calls them from its own
// admission chain (admission.go). Only webhooks reached by `url` are called: one that names
// a Service would be a pod, and stub pods run no server. docs/kinds-and-admission.md says
// more.

// admissionWebhooks holds the two plugins and what they read.
type admissionWebhooks struct {
	mutating   *mutatingwebhook.Plugin
	validating *validatingwebhook.Plugin
	objects    genericadmission.ObjectInterfaces
	// callable counts the webhooks that can be called. While it is 0 (no configuration
	// has a `url` webhook) a write does not build the plugins' attributes at all.
	callable atomic.Int64
	recount  func()
}

// startAdmission builds the admission plugins that k8s.io/apiserver provides (webhooks and
// policies) on one informer factory whose informers follow the server's own watch caches,
// and waits until those hold what the caches hold.
func (s *Server) startAdmission(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(nil, 0, informers.WithTransform(onlyURLWebhooks))
	admissionKinds := append([]schema.GroupVersionResource{
		corev1.SchemeGroupVersion.WithResource("namespaces"),
		admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations"),
		admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations"),
	}, policyResources...)
	for _, gvr := range admissionKinds {
		res := s.reg.lookup(gvr.Group, gvr.Version, gvr.Resource)
		if res == nil {
			return fmt.Errorf("apiserver: %s is not served", gvr.Resource)
		}
		lw := &cacheListerWatcher{s: s, res: res, ctx: ctx}
		// The factory hands this informer to whoever asks for the type, the plugins included.
		factory.InformerFor(res.newFunc(), func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
			return cache.NewSharedIndexInformer(lw, res.newFunc(), 0, cache.Indexers{})
		})
	}
	objects := &genericadmission.RuntimeObjectInterfaces{
		ObjectCreater:            Scheme,
		ObjectTyper:              Scheme,
		ObjectDefaulter:          Scheme,
		ObjectConvertor:          sameTypeConvertor{Scheme},
		EquivalentResourceMapper: s.equivalents,
	}
	webhooks, err := s.newAdmissionWebhooks(factory, objects)
	if err != nil {
		return err
	}
	policies, err := s.newAdmissionPolicies(ctx, factory, objects)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for typ, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return fmt.Errorf("apiserver: the admission informer for %v did not sync", typ)
		}
	}
	webhooks.recount()
	policies.recount()
	s.webhooks.Store(webhooks)
	s.policies.Store(policies)
	return nil
}

// newAdmissionWebhooks builds the webhook plugins on factory, whose informers the caller
// starts.
func (s *Server) newAdmissionWebhooks(factory informers.SharedInformerFactory, objects genericadmission.ObjectInterfaces) (*admissionWebhooks, error) {
	w := &admissionWebhooks{objects: objects}
	var err error
	if w.mutating, err = mutatingwebhook.NewMutatingWebhook(nil); err != nil {
		return nil, err
	}
	if w.validating, err = validatingwebhook.NewValidatingAdmissionWebhook(nil); err != nil {
		return nil, err
	}
	namespaces := namespaceGetter{s: s}
	for _, p := range []interface {
		SetExternalKubeClientSet(kubernetes.Interface)
		SetExternalKubeInformerFactory(informers.SharedInformerFactory)
		SetUnconditionalAuthorizer(authorizer.UnconditionalAuthorizer)
		ValidateInitialization() error
	}{w.mutating, w.validating} {
		p.SetExternalKubeClientSet(namespaces)
		p.SetExternalKubeInformerFactory(factory)
		p.SetUnconditionalAuthorizer(webhookAuthorizer{s: s})
		if err := p.ValidateInitialization(); err != nil {
			return nil, err
		}
	}
	w.recount = func() { w.callable.Store(int64(countWebhooks(factory))) }
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.recount() },
		UpdateFunc: func(any, any) { w.recount() },
		DeleteFunc: func(any) { w.recount() },
	}
	for _, inf := range []cache.SharedIndexInformer{
		factory.Admissionregistration().V1().MutatingWebhookConfigurations().Informer(),
		factory.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// onlyURLWebhooks drops, from the configurations the plugins see, the webhooks that name a
// Service: nothing serves them here, and under their usual failurePolicy Fail every write
// they match would be refused for good. Writes of such configurations say so (inertNote).
// The informers' objects are deep copies of the cache's, so they may be changed.
func onlyURLWebhooks(obj any) (any, error) {
	switch c := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		c.Webhooks = keepURLWebhooks(c.Webhooks, func(h *admissionregistrationv1.MutatingWebhook) bool { return h.ClientConfig.URL != nil })
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		c.Webhooks = keepURLWebhooks(c.Webhooks, func(h *admissionregistrationv1.ValidatingWebhook) bool { return h.ClientConfig.URL != nil })
	}
	return obj, nil
}

func keepURLWebhooks[T any](hooks []T, hasURL func(*T) bool) []T {
	kept := hooks[:0]
	for i := range hooks {
		if hasURL(&hooks[i]) {
			kept = append(kept, hooks[i])
		}
	}
	return kept
}

// countWebhooks counts the webhooks the informers hold, service-backed ones already dropped.
func countWebhooks(f informers.SharedInformerFactory) int {
	n := 0
	mwcs, _ := f.Admissionregistration().V1().MutatingWebhookConfigurations().Lister().List(labels.Everything())
	for _, c := range mwcs {
		n += len(c.Webhooks)
	}
	vwcs, _ := f.Admissionregistration().V1().ValidatingWebhookConfigurations().Lister().List(labels.Everything())
	for _, c := range vwcs {
		n += len(c.Webhooks)
	}
	return n
}

// unreachableWebhooks is the warning a write of a webhook configuration answers with, and
// the event a new one gets, when some of its webhooks name a Service; "" when none does.
func unreachableWebhooks(obj runtime.Object) string {
	var names []string
	switch c := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for _, h := range c.Webhooks {
			if h.ClientConfig.Service != nil {
				names = append(names, h.Name)
			}
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for _, h := range c.Webhooks {
			if h.ClientConfig.Service != nil {
				names = append(names, h.Name)
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("miniplane calls admission webhooks reached by url only: %s %s a Service, whose pods run no server here, "+
		"so writes are admitted as if %s did not exist", strings.Join(names, ", "), plural(len(names), "names", "name"), plural(len(names), "it", "they"))
}

func plural(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}

// sameTypeConvertor is the scheme's convertor, plus the copy the plugins ask for when a
// mutating webhook changed an object: miniplane admits objects in their served version, so
// the "conversion" back is between two values of one Go type, which the scheme has no
// function for.
type sameTypeConvertor struct{ runtime.ObjectConvertor }

func (c sameTypeConvertor) Convert(in, out, context any) error {
	if reflect.TypeOf(in) == reflect.TypeOf(out) && reflect.TypeOf(in).Kind() == reflect.Pointer {
		if _, unstructured := in.(runtime.Unstructured); !unstructured {
			reflect.ValueOf(out).Elem().Set(reflect.ValueOf(in).Elem())
			return nil
		}
	}
	return c.ObjectConvertor.Convert(in, out, context)
}

// namespaceGetter is the client the plugins fall back on for a namespace their informer
// does not hold yet: it reads the server's cache, then etcd. Nothing else of the client is
// used; the embedded nil interfaces make any other call fail loudly.
type namespaceGetter struct {
	kubernetes.Interface
	s *Server
}

func (g namespaceGetter) CoreV1() typedcorev1.CoreV1Interface { return namespaceCoreV1{s: g.s} }

type namespaceCoreV1 struct {
	typedcorev1.CoreV1Interface
	s *Server
}

func (g namespaceCoreV1) Namespaces() typedcorev1.NamespaceInterface {
	return namespaceClient{s: g.s}
}

type namespaceClient struct {
	typedcorev1.NamespaceInterface
	s *Server
}

func (c namespaceClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	obj, err := c.s.lookup(ctx, corev1.Resource("namespaces"), "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Namespace).DeepCopy(), nil
}

// webhookAuthorizer answers the `authorizer` of match conditions with the server's own
// authorizers, as a SubjectAccessReview would be answered.
type webhookAuthorizer struct{ s *Server }

func (w webhookAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	info := a.GetUser()
	if info == nil {
		return authorizer.DecisionNoOpinion, "no user", nil
	}
	u := &auth.User{Name: info.GetName(), UID: info.GetUID(), Groups: info.GetGroups(), Extra: info.GetExtra()}
	attrs := auth.Attributes{Verb: a.GetVerb(), NonResourcePath: a.GetPath()}
	if a.IsResourceRequest() {
		attrs = auth.Attributes{Verb: a.GetVerb(), Group: a.GetAPIGroup(), Resource: a.GetResource(),
			Subresource: a.GetSubresource(), Namespace: a.GetNamespace(), Name: a.GetName()}
	}
	switch d, reason := w.s.authorize(u, attrs); d {
	case auth.Allow, auth.NodeObjectCheck:
		return authorizer.DecisionAllow, reason, nil
	case auth.Deny:
		return authorizer.DecisionDeny, reason, nil
	default:
		return authorizer.DecisionNoOpinion, reason, nil
	}
}

// admissionAttributes describes a write to the library's plugins, as kube-apiserver's
// handlers do.
func admissionAttributes(ctx context.Context, a *admission) genericadmission.Attributes {
	var op genericadmission.Operation
	var options runtime.Object
	var dryRun []string
	if a.dryRun {
		dryRun = []string{metav1.DryRunAll}
	}
	optionsKind := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: kind}
	}
	switch a.op {
	case opCreate:
		op, options = genericadmission.Create, &metav1.CreateOptions{TypeMeta: optionsKind("CreateOptions"), DryRun: dryRun}
	case opUpdate:
		op, options = genericadmission.Update, &metav1.UpdateOptions{TypeMeta: optionsKind("UpdateOptions"), DryRun: dryRun}
	case opDelete:
		op, options = genericadmission.Delete, &metav1.DeleteOptions{TypeMeta: optionsKind("DeleteOptions"), DryRun: dryRun}
	}
	kind := a.res.gvk()
	if a.kind != nil {
		kind = *a.kind
	}
	if a.obj != nil {
		a.obj.GetObjectKind().SetGroupVersionKind(kind)
	}
	return genericadmission.NewAttributesRecord(a.obj, a.old, kind, a.namespace, a.name, a.res.gvr(),
		a.subresource, op, options, a.dryRun, webhookUser(stateFrom(ctx).user))
}

func webhookUser(u *auth.User) user.Info {
	return &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
}

// called reports whether a write must go to the plugins: some webhook can be called, and
// the write comes from a client. The server's own writes (its bootstrap objects, events,
// the kubernetes Service's endpoints) are not sent, so that a webhook that is down cannot
// keep the server from starting.
func (w *admissionWebhooks) called(ctx context.Context) bool {
	return w != nil && w.callable.Load() > 0 && stateFrom(ctx).user != nil
}

// admitMutatingWebhooks is the MutatingAdmissionWebhook plugin. It reports whether it ran:
// then the object may have changed, and the kind's preparation must run again (a create's
// defaults here, an update's in the caller), as kube-apiserver prepares an object after
// mutating admission.
func (s *Server) admitMutatingWebhooks(ctx context.Context, a *admission) (bool, error) {
	w := s.webhooks.Load()
	if !w.called(ctx) {
		return false, nil
	}
	attrs := newAuditedAttributes(admissionAttributes(ctx, a))
	if !w.mutating.Handles(attrs.GetOperation()) {
		return false, nil
	}
	err := w.mutating.Admit(ctx, attrs, admissionObjectsFor(w.objects, a.res))
	attrs.flush(ctx)
	return true, err
}

// admissionObjectsFor is what the plugins create, convert and default res's objects with,
// base for built-in kinds. A webhook or policy whose rule names another version of a
// definition's resource (matchPolicy Equivalent) is given the object converted to that
// version by the definition's converter, and what it changes is converted back.
func admissionObjectsFor(base genericadmission.ObjectInterfaces, res *resource) genericadmission.ObjectInterfaces {
	if res.custom == nil {
		return base
	}
	var convertor runtime.ObjectConvertor = Scheme // a straight copy between unstructured objects
	if res.custom.conv != nil {
		convertor = res.custom.conv.convertor
	}
	return &genericadmission.RuntimeObjectInterfaces{
		ObjectCreater:            unstructuredCreater{},
		ObjectTyper:              Scheme,
		ObjectDefaulter:          Scheme, // the schema's defaults come after, as the write is prepared again
		ObjectConvertor:          convertor,
		EquivalentResourceMapper: base.GetEquivalentResourceMapper(),
	}
}

// admitWebhooksOnCreate runs the mutating webhooks in the create's chain.
func admitWebhooksOnCreate(s *Server, ctx context.Context, a *admission) error {
	if a.op != opCreate {
		return nil
	}
	ran, err := s.admitMutatingWebhooks(ctx, a)
	if ran && err == nil {
		a.res.strategy.prepareForCreate(a.obj, s.clock.Now())
	}
	return err
}

// validateWebhooks is the ValidatingAdmissionWebhook plugin.
func validateWebhooks(s *Server, ctx context.Context, a *admission) error {
	w := s.webhooks.Load()
	if !w.called(ctx) {
		return nil
	}
	attrs := newAuditedAttributes(admissionAttributes(ctx, a))
	if !w.validating.Handles(attrs.GetOperation()) {
		return nil
	}
	err := w.validating.Validate(ctx, attrs, admissionObjectsFor(w.objects, a.res))
	attrs.flush(ctx)
	return err
}

// admitDelete sends a client's delete to the webhooks of both kinds and to the policies, with
// the stored object as the old one, as kube-apiserver's delete handler does; none can change
// it.
func (s *Server) admitDelete(ctx context.Context, res *resource, cur runtime.Object, namespace, name string, dryRun bool) error {
	if !s.webhooks.Load().called(ctx) && !s.policies.Load().validates(ctx) {
		return nil
	}
	a := &admission{op: opDelete, res: res, old: cur, namespace: namespace, name: name, dryRun: dryRun}
	return s.admitUnchangeable(ctx, a)
}

// admitSubresourceCreate sends the create of a subresource's object (a pod's Binding or
// Eviction) to the webhooks of both kinds and to the policies, before the server acts on
// it, as kube-apiserver's create handler and the subresource's storage do. A mutating
// webhook may change obj.
func (c *call) admitSubresourceCreate(kind schema.GroupVersionKind, obj runtime.Object, dryRun bool) error {
	ctx := c.r.Context()
	a := &admission{op: opCreate, res: c.info.res, kind: &kind, obj: obj, subresource: c.info.subresource,
		namespace: c.info.namespace, name: c.info.name, dryRun: dryRun}
	return c.s.admitUnchangeable(ctx, a)
}

// admitUnchangeable runs the mutating policies and webhooks, then the validating ones, on a
// write that the kind's preparation does not see again.
func (s *Server) admitUnchangeable(ctx context.Context, a *admission) error {
	if _, err := s.admitMutating(ctx, a); err != nil {
		return err
	}
	if err := validatePolicies(s, ctx, a); err != nil {
		return err
	}
	return validateWebhooks(s, ctx, a)
}
