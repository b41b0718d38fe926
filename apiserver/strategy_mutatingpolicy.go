package apiserver

import (
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
)

// MutatingAdmissionPolicies and their bindings are checked as kube-apiserver checks them,
// with the checks the validating kinds share (strategy_admissionpolicy.go) and the mutating
// kinds' own: what a mutation patches with, when it is run again, and that it applies to
// creates and updates only, a deleted object having nothing left to mutate.

var (
	// mutatingOperations are the operations a mutating policy may match: all but DELETE,
	// as upstream.
	mutatingOperations = []string{"*", string(admissionregistrationv1.Connect), string(admissionregistrationv1.Create),
		string(admissionregistrationv1.Update)}
	patchTypes = []string{string(admissionregistrationv1.PatchTypeApplyConfiguration), string(admissionregistrationv1.PatchTypeJSONPatch)}
)

// checkMutatingOperations refuses the operations a mutating policy cannot act on in its
// resource rules. The error names the operations of the rules, not the rule, as
// kube-apiserver's does; its exclude rules may name any operation.
func checkMutatingOperations(m *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	for _, r := range m.ResourceRules {
		for _, op := range r.Operations {
			if !slices.Contains(mutatingOperations, string(op)) {
				errs = append(errs, field.NotSupported(p.Child("resourceRules", "operations"), op, mutatingOperations))
			}
		}
	}
	return errs
}

// checkMutation checks one mutation: its patch type, and the one expression of that type,
// compiled with the patch types (Object, JSONPatch) declared, as the mutating plugin does.
func checkMutation(c *policyCompiler, m *admissionregistrationv1.Mutation, hasParams bool, p *field.Path) field.ErrorList {
	decls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, HasPatchTypes: true}
	compile := func(e plugincel.ExpressionAccessor, ep *field.Path) field.ErrorList {
		if e.GetExpression() == "" {
			return field.ErrorList{field.Required(ep, "")}
		}
		return c.compile(e, e.GetExpression(), decls, ep)
	}
	var errs field.ErrorList
	switch m.PatchType {
	case "":
		return field.ErrorList{field.Required(p.Child("patchType"), "")}
	case admissionregistrationv1.PatchTypeJSONPatch:
		if m.JSONPatch == nil {
			errs = append(errs, field.Required(p.Child("jsonPatch"), "must be specified when patchType is JSONPatch"))
		} else {
			errs = append(errs, compile(&patch.JSONPatchCondition{Expression: strings.TrimSpace(m.JSONPatch.Expression)},
				p.Child("jsonPatch", "expression"))...)
		}
		if m.ApplyConfiguration != nil {
			errs = append(errs, field.Invalid(p.Child("applyConfiguration"), "{applyConfiguration}", "must not be specified when patchType is JSONPatch"))
		}
	case admissionregistrationv1.PatchTypeApplyConfiguration:
		if m.ApplyConfiguration == nil {
			errs = append(errs, field.Required(p.Child("applyConfiguration"), "must be specified when patchType is ApplyConfiguration"))
		} else {
			errs = append(errs, compile(&patch.ApplyConfigurationCondition{Expression: strings.TrimSpace(m.ApplyConfiguration.Expression)},
				p.Child("applyConfiguration", "expression"))...)
		}
		if m.JSONPatch != nil {
			errs = append(errs, field.Invalid(p.Child("jsonPatch"), "{jsonPatch}", "must not be specified when patchType is ApplyConfiguration"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("patchType"), m.PatchType, patchTypes))
	}
	return errs
}

func mutatingPolicyCore(s *admissionregistrationv1.MutatingAdmissionPolicySpec) policyCore {
	return policyCore{failurePolicy: s.FailurePolicy, paramKind: s.ParamKind, matchConstraints: s.MatchConstraints,
		matchConditions: s.MatchConditions, variables: s.Variables}
}

// mutatingPolicyExpressions are the expressions of a stored policy, for policyCompiler.
func mutatingPolicyExpressions(spec *admissionregistrationv1.MutatingAdmissionPolicySpec) sets.Set[string] {
	s := sets.New[string]()
	for _, v := range spec.Variables {
		s.Insert(v.Expression)
	}
	for _, m := range spec.Mutations {
		if m.JSONPatch != nil {
			s.Insert(strings.TrimSpace(m.JSONPatch.Expression))
		}
		if m.ApplyConfiguration != nil {
			s.Insert(strings.TrimSpace(m.ApplyConfiguration.Expression))
		}
	}
	return s
}

// checkMutatingPolicy checks a policy on create (old nil) or update.
func checkMutatingPolicy(pol, old *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
	spec, p := &pol.Spec, field.NewPath("spec")
	c := &policyCompiler{hasVariables: len(spec.Variables) > 0}
	var oldCore *policyCore
	if old != nil {
		c.stored = mutatingPolicyExpressions(&old.Spec)
		core := mutatingPolicyCore(&old.Spec)
		oldCore = &core
	}
	errs := mutatingPolicyCore(spec).check(c, oldCore, p)
	errs = append(errs, checkMutatingOperations(spec.MatchConstraints, p.Child("matchConstraints"))...)
	if len(spec.Mutations) == 0 {
		errs = append(errs, field.Required(p.Child("mutations"), "mutations must contain at least one item"))
	}
	for i := range spec.Mutations {
		errs = append(errs, checkMutation(c, &spec.Mutations[i], spec.ParamKind != nil, p.Child("mutations").Index(i))...)
	}
	switch rp := spec.ReinvocationPolicy; {
	case rp == "":
		errs = append(errs, field.Required(p.Child("reinvocationPolicy"), ""))
	case !slices.Contains(reinvocations, string(rp)):
		errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), rp, reinvocations))
	}
	return errs
}

var mutatingAdmissionPolicyRules = policyStrategy[*admissionregistrationv1.MutatingAdmissionPolicy]{
	kindRules: kindRules[*admissionregistrationv1.MutatingAdmissionPolicy]{
		// reinvocationPolicy has no default: upstream requires the author to choose.
		defaults: func(pol *admissionregistrationv1.MutatingAdmissionPolicy) {
			defaultFailurePolicy(&pol.Spec.FailurePolicy)
			defaultMatchResources(pol.Spec.MatchConstraints)
		},
		columns: []metav1.TableColumnDefinition{nameColumn(),
			{Name: "Mutations", Type: "integer", Description: "Mutation indicates the number of mutations rules defined in this configuration"},
			paramKindColumn, ageColumn()},
		row: func(pol *admissionregistrationv1.MutatingAdmissionPolicy, now time.Time) []any {
			return []any{pol.Name, int64(len(pol.Spec.Mutations)), paramKindCell(pol.Spec.ParamKind), age(pol.CreationTimestamp, now)}
		},
	},
	checkPolicy: checkMutatingPolicy,
}

var mutatingAdmissionPolicyBindingRules = kindRules[*admissionregistrationv1.MutatingAdmissionPolicyBinding]{
	defaults: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
		defaultMatchResources(b.Spec.MatchResources)
	},
	check: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) field.ErrorList {
		p := field.NewPath("spec")
		errs := checkBinding(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, p)
		return append(errs, checkMutatingOperations(b.Spec.MatchResources, p.Child("matchResources"))...)
	},
	columns: policyBindingColumns,
	row: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding, now time.Time) []any {
		return []any{b.Name, b.Spec.PolicyName, paramRefCell(b.Spec.ParamRef), age(b.CreationTimestamp, now)}
	},
}
