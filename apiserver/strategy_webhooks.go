package apiserver

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/util/webhook"
)

// Webhook configurations come with the operators and node agents that publish them beside
// their DaemonSet (a load balancer's speaker, a service mesh's CNI agent, a policy engine),
// and with the controllers users test against miniplane. They are stored and served with
// kube-apiserver's defaults and validation; the webhooks reached by url are called
// (webhooks.go), those that name a Service are not. docs/kinds-and-admission.md says more.

// maxMatchConditions bounds a webhook's matchConditions, as upstream does.
const maxMatchConditions = 64

// acceptedAdmissionReviewVersions are the AdmissionReview versions a webhook must offer one
// of: the ones kube-apiserver can send.
var acceptedAdmissionReviewVersions = []string{"v1", "v1beta1"}

var (
	failurePolicies    = []string{string(admissionregistrationv1.Fail), string(admissionregistrationv1.Ignore)}
	matchPolicies      = []string{string(admissionregistrationv1.Equivalent), string(admissionregistrationv1.Exact)}
	noSideEffects      = []string{string(admissionregistrationv1.SideEffectClassNone), string(admissionregistrationv1.SideEffectClassNoneOnDryRun)}
	reinvocations      = []string{string(admissionregistrationv1.IfNeededReinvocationPolicy), string(admissionregistrationv1.NeverReinvocationPolicy)}
	webhookOperations  = []string{"*", string(admissionregistrationv1.Connect), string(admissionregistrationv1.Create), string(admissionregistrationv1.Delete), string(admissionregistrationv1.Update)}
	webhookRuleScopes  = []string{"*", string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope)}
	defaultWebhookWait = int32(10)
)

// webhookFields are the fields ValidatingWebhook and MutatingWebhook share, as pointers into
// one of them, so that one function defaults and checks both kinds.
type webhookFields struct {
	name                    string
	clientConfig            *admissionregistrationv1.WebhookClientConfig
	rules                   []admissionregistrationv1.RuleWithOperations
	failurePolicy           **admissionregistrationv1.FailurePolicyType
	matchPolicy             **admissionregistrationv1.MatchPolicyType
	namespaceSelector       **metav1.LabelSelector
	objectSelector          **metav1.LabelSelector
	sideEffects             *admissionregistrationv1.SideEffectClass
	timeoutSeconds          **int32
	admissionReviewVersions []string
	matchConditions         []admissionregistrationv1.MatchCondition
}

func validatingWebhookFields(h *admissionregistrationv1.ValidatingWebhook) webhookFields {
	return webhookFields{name: h.Name, clientConfig: &h.ClientConfig, rules: h.Rules, failurePolicy: &h.FailurePolicy,
		matchPolicy: &h.MatchPolicy, namespaceSelector: &h.NamespaceSelector, objectSelector: &h.ObjectSelector,
		sideEffects: h.SideEffects, timeoutSeconds: &h.TimeoutSeconds, admissionReviewVersions: h.AdmissionReviewVersions,
		matchConditions: h.MatchConditions}
}

func mutatingWebhookFields(h *admissionregistrationv1.MutatingWebhook) webhookFields {
	return webhookFields{name: h.Name, clientConfig: &h.ClientConfig, rules: h.Rules, failurePolicy: &h.FailurePolicy,
		matchPolicy: &h.MatchPolicy, namespaceSelector: &h.NamespaceSelector, objectSelector: &h.ObjectSelector,
		sideEffects: h.SideEffects, timeoutSeconds: &h.TimeoutSeconds, admissionReviewVersions: h.AdmissionReviewVersions,
		matchConditions: h.MatchConditions}
}

// setDefaults applies admissionregistration/v1's defaults: a webhook fails closed, matches
// equivalent versions of its resources, selects everything, waits 10 s; a rule covers both
// scopes; a service is called on port 443.
func (w webhookFields) setDefaults() {
	if *w.failurePolicy == nil {
		p := admissionregistrationv1.Fail
		*w.failurePolicy = &p
	}
	if *w.matchPolicy == nil {
		p := admissionregistrationv1.Equivalent
		*w.matchPolicy = &p
	}
	if *w.namespaceSelector == nil {
		*w.namespaceSelector = &metav1.LabelSelector{}
	}
	if *w.objectSelector == nil {
		*w.objectSelector = &metav1.LabelSelector{}
	}
	if *w.timeoutSeconds == nil {
		t := defaultWebhookWait
		*w.timeoutSeconds = &t
	}
	for i := range w.rules {
		if w.rules[i].Scope == nil {
			s := admissionregistrationv1.AllScopes
			w.rules[i].Scope = &s
		}
	}
	if s := w.clientConfig.Service; s != nil && s.Port == nil {
		port := int32(443)
		s.Port = &port
	}
}

// check validates one webhook as kube-apiserver validates a new one.
func (w webhookFields) check(p *field.Path) field.ErrorList {
	errs := validation.IsFullyQualifiedName(p.Child("name"), w.name)
	for i := range w.rules {
		errs = append(errs, checkWebhookRule(&w.rules[i], p.Child("rules").Index(i))...)
	}
	if fp := *w.failurePolicy; fp != nil && !slices.Contains(failurePolicies, string(*fp)) {
		errs = append(errs, field.NotSupported(p.Child("failurePolicy"), *fp, failurePolicies))
	}
	if mp := *w.matchPolicy; mp != nil && !slices.Contains(matchPolicies, string(*mp)) {
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *mp, matchPolicies))
	}
	switch {
	case w.sideEffects == nil:
		errs = append(errs, field.Required(p.Child("sideEffects"), "must specify one of "+strings.Join(noSideEffects, ", ")))
	case !slices.Contains(noSideEffects, string(*w.sideEffects)):
		errs = append(errs, field.NotSupported(p.Child("sideEffects"), *w.sideEffects, noSideEffects))
	}
	if t := *w.timeoutSeconds; t != nil && (*t < 1 || *t > 30) {
		errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *t, "the timeout value must be between 1 and 30 seconds"))
	}
	if s := *w.namespaceSelector; s != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, p.Child("namespaceSelector"))...)
	}
	if s := *w.objectSelector; s != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, p.Child("objectSelector"))...)
	}
	cc, cp := w.clientConfig, p.Child("clientConfig")
	switch {
	case (cc.URL == nil) == (cc.Service == nil):
		errs = append(errs, field.Required(cp, "exactly one of url or service is required"))
	case cc.URL != nil:
		errs = append(errs, webhook.ValidateWebhookURL(cp.Child("url"), *cc.URL, true)...)
	default:
		port := int32(443)
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		// The library names its parameters namespace, name; kube-apiserver passes the name
		// first, so that a missing namespace is reported as service.name. Same here, so
		// that the error names the field kube-apiserver names.
		errs = append(errs, webhook.ValidateWebhookService(cp.Child("service"), cc.Service.Name, cc.Service.Namespace, cc.Service.Path, port)...)
	}
	errs = append(errs, checkMatchConditions(w.matchConditions, p.Child("matchConditions"))...)
	return append(errs, checkAdmissionReviewVersions(w.admissionReviewVersions, p.Child("admissionReviewVersions"))...)
}

func checkWebhookRule(r *admissionregistrationv1.RuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ops := make([]string, len(r.Operations))
	for i, op := range r.Operations {
		ops[i] = string(op)
		if !slices.Contains(webhookOperations, ops[i]) {
			errs = append(errs, field.NotSupported(p.Child("operations").Index(i), op, webhookOperations))
		}
	}
	errs = append(errs, checkRuleList(ops, p.Child("operations"), "operations")...)
	errs = append(errs, checkRuleList(r.APIGroups, p.Child("apiGroups"), "API groups")...)
	errs = append(errs, checkRuleList(r.APIVersions, p.Child("apiVersions"), "API versions")...)
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(p.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, checkRuleResources(r.Resources, p.Child("resources"))...)
	if r.Scope != nil && !slices.Contains(webhookRuleScopes, string(*r.Scope)) {
		errs = append(errs, field.NotSupported(p.Child("scope"), *r.Scope, webhookRuleScopes))
	}
	return errs
}

// checkRuleList: a rule's list is required, and "*" stands alone in it.
func checkRuleList(values []string, p *field.Path, what string) field.ErrorList {
	if len(values) == 0 {
		return field.ErrorList{field.Required(p, "")}
	}
	if len(values) > 1 && slices.Contains(values, "*") {
		return field.ErrorList{field.Invalid(p, values, fmt.Sprintf("if '*' is present, must not specify other %s", what))}
	}
	return nil
}

// checkRuleResources checks a rule's resources, which may name subresources ("pods/status")
// and wildcards on either side; a wildcard must not overlap a name it already covers.
func checkRuleResources(resources []string, p *field.Path) field.ErrorList {
	if len(resources) == 0 {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	allSubresourcesOf := sets.New[string]()  // "x/*"
	anyResourceWithSub := sets.New[string]() // "*/x"
	doubleWildcard, singleWildcard, plainResource := false, false, false
	for i, rs := range resources {
		if rs == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
			continue
		}
		doubleWildcard = doubleWildcard || rs == "*/*"
		singleWildcard = singleWildcard || rs == "*"
		res, sub, found := strings.Cut(rs, "/")
		if !found {
			plainResource = plainResource || rs != "*"
			continue
		}
		if allSubresourcesOf.Has(res) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, rs)))
		}
		if anyResourceWithSub.Has(sub) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, rs)))
		}
		if sub == "*" {
			allSubresourcesOf.Insert(res)
		}
		if res == "*" {
			anyResourceWithSub.Insert(sub)
		}
	}
	if len(resources) > 1 && doubleWildcard {
		errs = append(errs, field.Invalid(p, resources, "if '*/*' is present, must not specify other resources"))
	}
	if singleWildcard && plainResource {
		errs = append(errs, field.Invalid(p, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
}

func checkAdmissionReviewVersions(versions []string, p *field.Path) field.ErrorList {
	if len(versions) == 0 {
		return field.ErrorList{field.Required(p, "must specify one of "+strings.Join(acceptedAdmissionReviewVersions, ", "))}
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	accepted := false
	for i, v := range versions {
		if seen.Has(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, "duplicate version"))
			continue
		}
		seen.Insert(v)
		for _, msg := range validation.IsDNS1035Label(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, msg))
		}
		accepted = accepted || slices.Contains(acceptedAdmissionReviewVersions, v)
	}
	if !accepted {
		errs = append(errs, field.Invalid(p, versions, "must include at least one of "+strings.Join(acceptedAdmissionReviewVersions, ", ")))
	}
	return errs
}

// matchConditionCompiler compiles match conditions with kube-apiserver's CEL environment.
// Building it takes a few milliseconds and some memory, so the first configuration that
// has a condition builds it.
var matchConditionCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

func checkMatchConditions(conditions []admissionregistrationv1.MatchCondition, p *field.Path) field.ErrorList {
	return checkMatchConditionsDeclaring(conditions, plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, p)
}

// checkMatchConditionsDeclaring checks match conditions whose expressions may use the
// variables decls declares: a webhook's have no params, a policy's may.
func checkMatchConditionsDeclaring(conditions []admissionregistrationv1.MatchCondition, decls plugincel.OptionalVariableDeclarations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(conditions) > maxMatchConditions {
		errs = append(errs, field.TooMany(p, len(conditions), maxMatchConditions))
	}
	names := sets.New[string]()
	for i, c := range conditions {
		cp := p.Index(i)
		if expr := strings.TrimSpace(c.Expression); expr == "" {
			errs = append(errs, field.Required(cp.Child("expression"), ""))
		} else {
			errs = append(errs, compileMatchCondition(expr, decls, cp.Child("expression"))...)
		}
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(cp.Child("name"), ""))
		case names.Has(c.Name):
			errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
		default:
			names.Insert(c.Name)
			for _, msg := range validation.IsQualifiedName(c.Name) {
				errs = append(errs, field.Invalid(cp.Child("name"), c.Name, msg))
			}
		}
	}
	return errs
}

// compileMatchCondition compiles one condition as a new expression: it must be CEL that
// yields a bool from object, oldObject, request, authorizer and what else decls declares.
func compileMatchCondition(expr string, decls plugincel.OptionalVariableDeclarations, p *field.Path) field.ErrorList {
	result := matchConditionCompiler().CompileCELExpression(&matchconditions.MatchCondition{Expression: expr}, decls, environment.NewExpressions)
	if result.Error == nil {
		return nil
	}
	return field.ErrorList{celFieldError(p, expr, result.Error)}
}

// checkWebhookNames: every webhook of a configuration has a name of its own.
func checkWebhookNames(names []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, n := range names {
		if n == "" {
			continue
		}
		if seen.Has(n) {
			errs = append(errs, field.Duplicate(field.NewPath("webhooks").Index(i).Child("name"), n))
		}
		seen.Insert(n)
	}
	return errs
}

// webhookColumns are the columns of `kubectl get` for both kinds.
var webhookColumns = []metav1.TableColumnDefinition{nameColumn(),
	{Name: "Webhooks", Type: "integer", Description: "Webhooks indicates the number of webhooks included in the configuration."},
	ageColumn(),
}

var validatingWebhookConfigurationRules = kindRules[*admissionregistrationv1.ValidatingWebhookConfiguration]{
	defaults: func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
		for i := range c.Webhooks {
			validatingWebhookFields(&c.Webhooks[i]).setDefaults()
		}
	},
	check: func(c *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
		var errs field.ErrorList
		names := make([]string, len(c.Webhooks))
		for i := range c.Webhooks {
			names[i] = c.Webhooks[i].Name
			errs = append(errs, validatingWebhookFields(&c.Webhooks[i]).check(field.NewPath("webhooks").Index(i))...)
		}
		return append(errs, checkWebhookNames(names)...)
	},
	columns: webhookColumns,
	row: func(c *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) []any {
		return []any{c.Name, int64(len(c.Webhooks)), age(c.CreationTimestamp, now)}
	},
}

var mutatingWebhookConfigurationRules = kindRules[*admissionregistrationv1.MutatingWebhookConfiguration]{
	defaults: func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
		for i := range c.Webhooks {
			mutatingWebhookFields(&c.Webhooks[i]).setDefaults()
			if c.Webhooks[i].ReinvocationPolicy == nil {
				never := admissionregistrationv1.NeverReinvocationPolicy
				c.Webhooks[i].ReinvocationPolicy = &never
			}
		}
	},
	check: func(c *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
		var errs field.ErrorList
		names := make([]string, len(c.Webhooks))
		for i := range c.Webhooks {
			h := &c.Webhooks[i]
			names[i] = h.Name
			p := field.NewPath("webhooks").Index(i)
			errs = append(errs, mutatingWebhookFields(h).check(p)...)
			if rp := h.ReinvocationPolicy; rp != nil && !slices.Contains(reinvocations, string(*rp)) {
				errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), *rp, reinvocations))
			}
		}
		return append(errs, checkWebhookNames(names)...)
	},
	columns: webhookColumns,
	row: func(c *admissionregistrationv1.MutatingWebhookConfiguration, now time.Time) []any {
		return []any{c.Name, int64(len(c.Webhooks)), age(c.CreationTimestamp, now)}
	},
}

// webhookConfigurationStrategy counts a change of the webhooks for metadata.generation, as
// upstream's strategies do: the kinds have no spec.
type webhookConfigurationStrategy[T runtime.Object] struct {
	kindRules[T]
	webhooks func(T) any
}

func (s webhookConfigurationStrategy[T]) generationChanged(obj, old runtime.Object) bool {
	return !apiequality.Semantic.DeepEqual(s.webhooks(obj.(T)), s.webhooks(old.(T)))
}
