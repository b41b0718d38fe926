package apiserver

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/util/jsonpath"
)

// ValidatingAdmissionPolicies and their bindings come with the charts of policy engines and
// operators that prefer CEL to a webhook server. They are stored and served with
// kube-apiserver's defaults and validation, so that a chart kube-apiserver refuses is refused
// here too, with the same fields named; enforcing them is the admission chain's business.
// The checks both policy kinds share (match resources, parameters, variables, match
// conditions, bindings' paramRef) are here; strategy_mutatingpolicy.go adds the mutating
// kinds' own.

const (
	// maxAuditAnnotations bounds a policy's auditAnnotations, as upstream does.
	maxAuditAnnotations = 20
	// maxAuditAnnotationExpression bounds the length of an audit annotation's expression.
	maxAuditAnnotationExpression = 5 * 1024
)

var (
	validationReasons = []string{string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid),
		string(metav1.StatusReasonRequestEntityTooLarge)}
	validationActions     = []string{string(admissionregistrationv1.Audit), string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn)}
	paramNotFoundActions  = []string{string(admissionregistrationv1.DenyAction), string(admissionregistrationv1.AllowAction)}
	lineBreak             = regexp.MustCompile(`[\n\r]`)
	celIdentifier         = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)
	celReservedIdentifier = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
		"function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
)

// defaultMatchResources applies admissionregistration/v1's defaults to a policy's
// matchConstraints or a binding's matchResources: equivalent versions match, the selectors
// select everything, a rule covers both scopes.
func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		p := admissionregistrationv1.Equivalent
		m.MatchPolicy = &p
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				s := admissionregistrationv1.AllScopes
				rules[i].Scope = &s
			}
		}
	}
}

func defaultFailurePolicy(fp **admissionregistrationv1.FailurePolicyType) {
	if *fp == nil {
		f := admissionregistrationv1.Fail
		*fp = &f
	}
}

func checkFailurePolicy(fp *admissionregistrationv1.FailurePolicyType, p *field.Path) field.ErrorList {
	switch {
	case fp == nil:
		return field.ErrorList{field.Required(p, "")}
	case !slices.Contains(failurePolicies, string(*fp)):
		return field.ErrorList{field.NotSupported(p, *fp, failurePolicies)}
	}
	return nil
}

// checkMatchResources checks a binding's matchResources, or a policy's matchConstraints
// past their presence. The defaults fill in the policy and selectors, so a nil one means
// a client that wrote the object around them.
func checkMatchResources(m *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	switch {
	case m.MatchPolicy == nil:
		errs = append(errs, field.Required(p.Child("matchPolicy"), ""))
	case !slices.Contains(matchPolicies, string(*m.MatchPolicy)):
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *m.MatchPolicy, matchPolicies))
	}
	for _, sel := range []struct {
		s    *metav1.LabelSelector
		name string
	}{{m.NamespaceSelector, "namespaceSelector"}, {m.ObjectSelector, "objectSelector"}} {
		if sel.s == nil {
			errs = append(errs, field.Required(p.Child(sel.name), ""))
			continue
		}
		errs = append(errs, metav1validation.ValidateLabelSelector(sel.s, metav1validation.LabelSelectorValidationOptions{}, p.Child(sel.name))...)
	}
	for i := range m.ResourceRules {
		errs = append(errs, checkNamedRule(&m.ResourceRules[i], p.Child("resourceRules").Index(i))...)
	}
	for i := range m.ExcludeResourceRules {
		errs = append(errs, checkNamedRule(&m.ExcludeResourceRules[i], p.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

// checkMatchConstraints checks a policy's matchConstraints: required, and with a resource
// rule at least, which is what gives the policy's expressions the type of their object.
func checkMatchConstraints(m *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	if m == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	errs := checkMatchResources(m, p)
	if len(m.ResourceRules) == 0 {
		errs = append(errs, field.Required(p.Child("resourceRules"), ""))
	}
	return errs
}

// checkNamedRule checks a webhook-style rule that may also name the objects it covers.
func checkNamedRule(r *admissionregistrationv1.NamedRuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, name := range r.ResourceNames {
		for _, msg := range content.IsPathSegmentName(name) {
			errs = append(errs, field.Invalid(p.Child("resourceNames").Index(i), name, msg))
		}
		if seen.Has(name) {
			errs = append(errs, field.Duplicate(p.Child("resourceNames").Index(i), name))
		}
		seen.Insert(name)
	}
	return append(errs, checkWebhookRule(&r.RuleWithOperations, p)...)
}

// checkParamKind: the kind a policy's params are of must be a well-formed group, version
// and kind.
func checkParamKind(pk *admissionregistrationv1.ParamKind, p *field.Path) field.ErrorList {
	if pk == nil {
		return nil
	}
	var errs field.ErrorList
	vp := p.Child("apiVersion")
	switch {
	case pk.APIVersion == "":
		errs = append(errs, field.Required(vp, ""))
	case strings.Count(pk.APIVersion, "/") > 1:
		errs = append(errs, field.Invalid(vp, pk.APIVersion, "unexpected GroupVersion string: "+pk.APIVersion))
	default:
		group, version := "", pk.APIVersion
		if g, v, found := strings.Cut(pk.APIVersion, "/"); found {
			group, version = g, v
		}
		if group != "" {
			if msgs := validation.IsDNS1123Subdomain(group); len(msgs) > 0 {
				errs = append(errs, field.Invalid(vp, group, strings.Join(msgs, ",")))
			}
		}
		if version == "" {
			errs = append(errs, field.Invalid(vp, pk.APIVersion, "version must be specified"))
		} else if msgs := validation.IsDNS1035Label(version); len(msgs) > 0 {
			errs = append(errs, field.Invalid(vp, version, strings.Join(msgs, ",")))
		}
	}
	if pk.Kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), ""))
	} else if msgs := validation.IsDNS1035Label(strings.ToLower(pk.Kind)); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("kind"), pk.Kind, "may have mixed case, but should otherwise match: "+strings.Join(msgs, ",")))
	}
	return errs
}

// checkPolicyName checks the policy a binding names (which need not exist yet).
func checkPolicyName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// checkBinding checks the fields both binding kinds have, under p (the spec).
func checkBinding(policyName string, pr *admissionregistrationv1.ParamRef, mr *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	errs := checkPolicyName(policyName, p.Child("policyName"))
	errs = append(errs, checkParamRef(pr, p.Child("paramRef"))...)
	return append(errs, checkMatchResources(mr, p.Child("matchResources"))...)
}

// checkParamRef checks how a binding finds its params: by name or by selector, not both,
// and what to do when none is found.
func checkParamRef(pr *admissionregistrationv1.ParamRef, p *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	var errs field.ErrorList
	if pr.Name != "" {
		for _, msg := range content.IsPathSegmentName(pr.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), pr.Name, msg))
		}
		if pr.Selector != nil {
			errs = append(errs, field.Forbidden(p.Child("name"), "name and selector are mutually exclusive"))
		}
	}
	if pr.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(pr.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		if pr.Name != "" {
			errs = append(errs, field.Forbidden(p.Child("selector"), "name and selector are mutually exclusive"))
		}
	}
	if pr.Name == "" && pr.Selector == nil {
		errs = append(errs, field.Required(p, "one of name or selector must be specified"))
	}
	switch a := pr.ParameterNotFoundAction; {
	case a == nil || *a == "":
		errs = append(errs, field.Required(p.Child("parameterNotFoundAction"), ""))
	case !slices.Contains(paramNotFoundActions, string(*a)):
		errs = append(errs, field.NotSupported(p.Child("parameterNotFoundAction"), *a, paramNotFoundActions))
	}
	return errs
}

// policyCompiler compiles the expressions of one policy as kube-apiserver's validation
// does: a policy with variables gets a compiler of its own that learns each variable's type
// as it goes, so that an expression may use the variables declared before it; one without
// shares the stateless compiler of match conditions (the same environment, without
// `variables`).
type policyCompiler struct {
	hasVariables bool
	compiler     plugincel.Compiler
	// stored are the expressions of the policy an update replaces: they compile in the
	// environment of stored expressions, which knows every CEL library the server does,
	// so that a policy written when the server was newer stays writable.
	stored sets.Set[string]
}

func (c *policyCompiler) get() plugincel.Compiler {
	if c.compiler != nil {
		return c.compiler
	}
	c.compiler = matchConditionCompiler()
	if c.hasVariables {
		// The composited compiler keeps the variables' types, so it cannot be shared.
		if composited, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())); err == nil {
			c.compiler = composited
		}
	}
	return c.compiler
}

func (c *policyCompiler) envType(expr string) environment.Type {
	if c.stored.Has(expr) {
		return environment.StoredExpressions
	}
	return environment.NewExpressions
}

// compile compiles one expression and reports why it does not compile at p; reported is
// the expression as written, which may differ from the one compiled by surrounding space.
func (c *policyCompiler) compile(e plugincel.ExpressionAccessor, written string, decls plugincel.OptionalVariableDeclarations, p *field.Path) field.ErrorList {
	result := c.get().CompileCELExpression(e, decls, c.envType(e.GetExpression()))
	if result.Error == nil {
		return nil
	}
	return field.ErrorList{celFieldError(p, written, result.Error)}
}

// celFieldError turns a CEL compilation error into the field error kube-apiserver reports.
func celFieldError(p *field.Path, expr string, err *apiservercel.Error) *field.Error {
	switch err.Type {
	case apiservercel.ErrorTypeRequired:
		return field.Required(p, err.Detail)
	case apiservercel.ErrorTypeInvalid:
		return field.Invalid(p, expr, err.Detail)
	default:
		return field.InternalError(p, err)
	}
}

// checkVariables checks a policy's variables in order, each compiled with the ones before
// it known. Names are not checked for repeats: kube-apiserver does not, and a later
// variable of a name replaces the earlier.
func checkVariables(c *policyCompiler, vars []admissionregistrationv1.Variable, hasParams bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, v := range vars {
		vp := p.Index(i)
		switch {
		case strings.TrimSpace(v.Name) == "":
			errs = append(errs, field.Required(vp.Child("name"), "name is not specified"))
		case !celIdentifier.MatchString(v.Name) || celReservedIdentifier.Has(v.Name):
			errs = append(errs, field.Invalid(vp.Child("name"), v.Name, "name is not a valid CEL identifier"))
		}
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(vp.Child("expression"), "expression is not specified"))
			continue
		}
		composited, ok := c.get().(*plugincel.CompositedCompiler)
		if !ok {
			errs = append(errs, field.InternalError(vp, fmt.Errorf("variable composition is not allowed")))
			continue
		}
		variable := &validatingpolicy.Variable{Name: v.Name, Expression: v.Expression}
		result := composited.CompileAndStoreVariable(variable,
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, c.envType(v.Expression))
		if result.Error != nil {
			errs = append(errs, celFieldError(vp.Child("expression"), v.Expression, result.Error))
		}
	}
	return errs
}

// checkValidation checks one of a policy's validations.
func checkValidation(c *policyCompiler, v *admissionregistrationv1.Validation, hasParams bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(v.Expression) == "" {
		errs = append(errs, field.Required(p.Child("expression"), "expression is not specified"))
	} else {
		errs = append(errs, c.compile(&validatingpolicy.ValidationCondition{Expression: v.Expression}, v.Expression,
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, p.Child("expression"))...)
	}
	if v.MessageExpression != "" {
		if strings.TrimSpace(v.MessageExpression) == "" {
			errs = append(errs, field.Invalid(p.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
		} else {
			// Compiled untrimmed, so that the columns of a compile error count from what
			// the author wrote. A message is built without the authorizer.
			errs = append(errs, c.compile(&validatingpolicy.MessageExpressionCondition{MessageExpression: v.MessageExpression}, v.MessageExpression,
				plugincel.OptionalVariableDeclarations{HasParams: hasParams}, p.Child("messageExpression"))...)
		}
	}
	msg := strings.TrimSpace(v.Message)
	switch {
	case v.Message != "" && msg == "":
		errs = append(errs, field.Invalid(p.Child("message"), v.Message, "message must be non-empty if specified"))
	case lineBreak.MatchString(msg):
		errs = append(errs, field.Invalid(p.Child("message"), v.Message, "message must not contain line breaks"))
	}
	if v.Reason != nil && !slices.Contains(validationReasons, string(*v.Reason)) {
		errs = append(errs, field.NotSupported(p.Child("reason"), *v.Reason, validationReasons))
	}
	return errs
}

// checkAuditAnnotations checks a policy's audit annotations: each key, prefixed by the
// policy's name, is the annotation's key in the audit log, so the two together must make a
// qualified name, and no key may repeat.
func checkAuditAnnotations(c *policyCompiler, policyName string, annotations []admissionregistrationv1.AuditAnnotation, hasParams bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(annotations) > maxAuditAnnotations {
		errs = append(errs, field.Invalid(p, annotations, fmt.Sprintf("must not have more than %d auditAnnotations", maxAuditAnnotations)))
	}
	keys := sets.New[string]()
	for i, a := range annotations {
		ap := p.Index(i)
		if policyName == "" {
			errs = append(errs, field.Invalid(ap.Child("key"), a.Key, "requires metadata.name be non-empty"))
		} else {
			key := policyName + "/" + a.Key
			for _, msg := range validation.IsQualifiedName(key) {
				errs = append(errs, field.Invalid(ap.Child("key"), key, msg))
			}
		}
		expr := strings.TrimSpace(a.ValueExpression)
		switch {
		case expr == "":
			errs = append(errs, field.Required(ap.Child("valueExpression"), "valueExpression is not specified"))
		case len(expr) > maxAuditAnnotationExpression:
			// kube-apiserver reports the length as a missing value; so does miniplane, for
			// clients that match on the error's type.
			errs = append(errs, field.Required(ap.Child("valueExpression"), fmt.Sprintf("must not exceed %d bytes in length", maxAuditAnnotationExpression)))
		default:
			errs = append(errs, c.compile(&validatingpolicy.AuditAnnotationCondition{ValueExpression: expr}, a.ValueExpression,
				plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, ap.Child("valueExpression"))...)
		}
		if keys.Has(a.Key) {
			errs = append(errs, field.Duplicate(ap.Child("key"), a.Key))
		}
		keys.Insert(a.Key)
	}
	return errs
}

// checkValidationActions: a binding does at least one thing with a failed validation, each
// once, and does not both deny and warn, which would say the same thing twice.
func checkValidationActions(actions []admissionregistrationv1.ValidationAction, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[admissionregistrationv1.ValidationAction]()
	for i, a := range actions {
		if !slices.Contains(validationActions, string(a)) {
			errs = append(errs, field.NotSupported(p.Index(i), a, validationActions))
		}
		if seen.Has(a) {
			errs = append(errs, field.Duplicate(p.Index(i), a))
		}
		seen.Insert(a)
	}
	if seen.Has(admissionregistrationv1.Deny) && seen.Has(admissionregistrationv1.Warn) {
		errs = append(errs, field.Invalid(p, actions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if len(actions) == 0 {
		errs = append(errs, field.Required(p, "at least one validation action is required"))
	}
	return errs
}

// policyCore are the fields both policy kinds have, for the checks they share.
type policyCore struct {
	failurePolicy    *admissionregistrationv1.FailurePolicyType
	paramKind        *admissionregistrationv1.ParamKind
	matchConstraints *admissionregistrationv1.MatchResources
	matchConditions  []admissionregistrationv1.MatchCondition
	variables        []admissionregistrationv1.Variable
}

// check checks the shared fields of a policy, old being the stored policy's on update and
// nil on create. It compiles the variables into c, for the kind's own expressions after.
func (pc policyCore) check(c *policyCompiler, old *policyCore, p *field.Path) field.ErrorList {
	errs := checkFailurePolicy(pc.failurePolicy, p.Child("failurePolicy"))
	errs = append(errs, checkParamKind(pc.paramKind, p.Child("paramKind"))...)
	errs = append(errs, checkMatchConstraints(pc.matchConstraints, p.Child("matchConstraints"))...)
	// An update that changes neither the match conditions nor the paramKind leaves the
	// conditions unchecked, as kube-apiserver does, so that conditions stored under other
	// rules do not block every later write of the policy.
	if old == nil || !apiequality.Semantic.DeepEqual(pc.matchConditions, old.matchConditions) ||
		!apiequality.Semantic.DeepEqual(pc.paramKind, old.paramKind) {
		errs = append(errs, checkMatchConditionsDeclaring(pc.matchConditions,
			plugincel.OptionalVariableDeclarations{HasParams: pc.paramKind != nil, HasAuthorizer: true}, p.Child("matchConditions"))...)
	}
	return append(errs, checkVariables(c, pc.variables, pc.paramKind != nil, p.Child("variables"))...)
}

func validatingPolicyCore(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) policyCore {
	return policyCore{failurePolicy: s.FailurePolicy, paramKind: s.ParamKind, matchConstraints: s.MatchConstraints,
		matchConditions: s.MatchConditions, variables: s.Variables}
}

// validatingPolicyExpressions are the expressions of a stored policy, for policyCompiler.
func validatingPolicyExpressions(spec *admissionregistrationv1.ValidatingAdmissionPolicySpec) sets.Set[string] {
	s := sets.New[string]()
	for _, v := range spec.Variables {
		s.Insert(v.Expression)
	}
	for _, v := range spec.Validations {
		s.Insert(v.Expression, v.MessageExpression)
	}
	for _, a := range spec.AuditAnnotations {
		s.Insert(strings.TrimSpace(a.ValueExpression))
	}
	return s
}

// checkValidatingPolicy checks a policy on create (old nil) or update.
func checkValidatingPolicy(pol, old *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	spec, p := &pol.Spec, field.NewPath("spec")
	c := &policyCompiler{hasVariables: len(spec.Variables) > 0}
	var oldCore *policyCore
	if old != nil {
		c.stored = validatingPolicyExpressions(&old.Spec)
		core := validatingPolicyCore(&old.Spec)
		oldCore = &core
	}
	errs := validatingPolicyCore(spec).check(c, oldCore, p)
	hasParams := spec.ParamKind != nil
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		const msg = "validations or auditAnnotations must contain at least one item"
		return append(errs, field.Required(p.Child("validations"), msg), field.Required(p.Child("auditAnnotations"), msg))
	}
	for i := range spec.Validations {
		errs = append(errs, checkValidation(c, &spec.Validations[i], hasParams, p.Child("validations").Index(i))...)
	}
	return append(errs, checkAuditAnnotations(c, pol.Name, spec.AuditAnnotations, hasParams, p.Child("auditAnnotations"))...)
}

// checkValidatingPolicyStatus checks what the type checker writes to a policy's status.
func checkValidatingPolicyStatus(pol, _ *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	p := field.NewPath("status")
	var errs field.ErrorList
	if tc := pol.Status.TypeChecking; tc != nil {
		for i, w := range tc.ExpressionWarnings {
			wp := p.Child("typeChecking", "expressionWarnings").Index(i)
			if w.Warning == "" {
				errs = append(errs, field.Required(wp.Child("warning"), ""))
			}
			ref := strings.TrimSpace(w.FieldRef)
			if ref == "" {
				errs = append(errs, field.Required(wp.Child("fieldRef"), ""))
			} else if err := jsonpath.New("spec").Parse("{" + ref + "}"); err != nil {
				errs = append(errs, field.Invalid(wp.Child("fieldRef"), ref, fmt.Sprintf("invalid JSONPath: %v", err)))
			}
		}
	}
	return append(errs, metav1validation.ValidateConditions(pol.Status.Conditions, p.Child("conditions"))...)
}

// policyStrategy is the strategy of the admission policy kinds: their checks compile CEL
// and differ on update, where expressions already stored compile in the environment of
// stored expressions and unchanged match conditions are not compiled again.
type policyStrategy[T runtime.Object] struct {
	kindRules[T]
	// checkPolicy checks obj on create (old is nil) and on update.
	checkPolicy func(obj, old T) field.ErrorList
}

func (s policyStrategy[T]) validate(obj runtime.Object) field.ErrorList {
	var none T
	return s.checkPolicy(obj.(T), none)
}

func (s policyStrategy[T]) validateUpdate(obj, old runtime.Object) field.ErrorList {
	return s.checkPolicy(obj.(T), old.(T))
}

// paramKindCell and paramRefCell render the PARAMKIND and PARAMREF columns as kubectl shows
// them against kube-apiserver.
func paramKindCell(pk *admissionregistrationv1.ParamKind) string {
	if pk == nil {
		return "<unset>"
	}
	return pk.APIVersion + "/" + pk.Kind
}

func paramRefCell(pr *admissionregistrationv1.ParamRef) string {
	switch {
	case pr == nil:
		return "<unset>"
	case pr.Name != "" && pr.Namespace != "":
		return pr.Namespace + "/" + pr.Name
	case pr.Name != "":
		// Whether the params are cluster-scoped is the policy's paramKind's to say, which
		// a binding's row does not look up; so any namespace.
		return "*/" + pr.Name
	case pr.Selector != nil:
		return pr.Selector.String()
	}
	return "<unset>"
}

// policyBindingColumns are the columns of `kubectl get` for both binding kinds.
var policyBindingColumns = []metav1.TableColumnDefinition{nameColumn(),
	{Name: "PolicyName", Type: "string", Description: "PolicyName indicates the policy definition which the policy binding binded to"},
	{Name: "ParamRef", Type: "string", Description: "ParamRef indicates the param resource which sets the configuration param"},
	ageColumn(),
}

var paramKindColumn = metav1.TableColumnDefinition{Name: "ParamKind", Type: "string",
	Description: "ParamKind specifies the kind of resources used to parameterize this policy"}

var validatingAdmissionPolicyRules = policyStrategy[*admissionregistrationv1.ValidatingAdmissionPolicy]{
	kindRules: kindRules[*admissionregistrationv1.ValidatingAdmissionPolicy]{
		defaults: func(pol *admissionregistrationv1.ValidatingAdmissionPolicy) {
			defaultFailurePolicy(&pol.Spec.FailurePolicy)
			defaultMatchResources(pol.Spec.MatchConstraints)
		},
		hasStatus:   true,
		checkStatus: checkValidatingPolicyStatus,
		columns: []metav1.TableColumnDefinition{nameColumn(),
			{Name: "Validations", Type: "integer", Description: "Validations indicates the number of validation rules defined in this configuration"},
			paramKindColumn, ageColumn()},
		row: func(pol *admissionregistrationv1.ValidatingAdmissionPolicy, now time.Time) []any {
			return []any{pol.Name, int64(len(pol.Spec.Validations)), paramKindCell(pol.Spec.ParamKind), age(pol.CreationTimestamp, now)}
		},
	},
	checkPolicy: checkValidatingPolicy,
}

var validatingAdmissionPolicyBindingRules = kindRules[*admissionregistrationv1.ValidatingAdmissionPolicyBinding]{
	defaults: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		defaultMatchResources(b.Spec.MatchResources)
	},
	check: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
		p := field.NewPath("spec")
		errs := checkBinding(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, p)
		return append(errs, checkValidationActions(b.Spec.ValidationActions, p.Child("validationActions"))...)
	},
	columns: policyBindingColumns,
	row: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, now time.Time) []any {
		return []any{b.Name, b.Spec.PolicyName, paramRefCell(b.Spec.ParamRef), age(b.CreationTimestamp, now)}
	},
}
