package apiserver_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// labelPolicy is a mutating policy that passes validation, with a mutation of each patch
// type, a variable and a match condition.
func labelPolicy(name string) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{deploymentRule()}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "not-kube-system", Expression: `request.namespace != "kube-system"`}},
			Variables:       []admissionregistrationv1.Variable{{Name: "team", Expression: "'team-a'"}},
			Mutations: []admissionregistrationv1.Mutation{
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: `Object{metadata: Object.metadata{labels: {"team": variables.team}}}`}},
				{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
					Expression: `[JSONPatch{op: "add", path: "/metadata/annotations/mutated", value: "true"}]`}},
			},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		}}
}

func mapBinding(name, policy string) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy}}
}

// TestMutatingAdmissionPolicyDefaults: a valid policy and binding are stored with upstream's
// defaults (none for reinvocationPolicy), and metadata.generation counts spec changes only.
func TestMutatingAdmissionPolicyDefaults(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client.AdmissionregistrationV1()

	pol, err := c.MutatingAdmissionPolicies().Create(ctx, labelPolicy("labels.example.com"), metav1.CreateOptions{})
	check(t, err)
	mc := pol.Spec.MatchConstraints
	if pol.Spec.FailurePolicy == nil || *pol.Spec.FailurePolicy != admissionregistrationv1.Fail ||
		mc.MatchPolicy == nil || *mc.MatchPolicy != admissionregistrationv1.Equivalent || mc.NamespaceSelector == nil ||
		mc.ObjectSelector == nil || *mc.ResourceRules[0].Scope != admissionregistrationv1.AllScopes ||
		pol.Spec.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || pol.Generation != 1 {
		t.Errorf("policy defaults: failurePolicy %v, matchConstraints %+v, reinvocation %q, generation %d",
			pol.Spec.FailurePolicy, mc, pol.Spec.ReinvocationPolicy, pol.Generation)
	}

	withParams := labelPolicy("params.example.com")
	withParams.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	withParams.Spec.Mutations[0].ApplyConfiguration.Expression = `Object{metadata: Object.metadata{labels: {"team": params.data.team}}}`
	_, err = c.MutatingAdmissionPolicies().Create(ctx, withParams, metav1.CreateOptions{})
	check(t, err)

	pol.Labels = map[string]string{"owner": "team-a"}
	pol, err = c.MutatingAdmissionPolicies().Update(ctx, pol, metav1.UpdateOptions{})
	check(t, err)
	if pol.Generation != 1 {
		t.Errorf("a label change made generation %d, want 1", pol.Generation)
	}
	pol.Spec.ReinvocationPolicy = admissionregistrationv1.IfNeededReinvocationPolicy
	pol, err = c.MutatingAdmissionPolicies().Update(ctx, pol, metav1.UpdateOptions{})
	check(t, err)
	if pol.Generation != 2 {
		t.Errorf("a spec change made generation %d, want 2", pol.Generation)
	}

	b := mapBinding("labels", pol.Name)
	b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{deploymentRule()}}
	gotB, err := c.MutatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
	check(t, err)
	mr := gotB.Spec.MatchResources
	if mr.MatchPolicy == nil || *mr.MatchPolicy != admissionregistrationv1.Equivalent || mr.NamespaceSelector == nil ||
		mr.ObjectSelector == nil || *mr.ResourceRules[0].Scope != admissionregistrationv1.AllScopes || gotB.Generation != 1 {
		t.Errorf("binding defaults: matchResources %+v, generation %d", mr, gotB.Generation)
	}
	gotB.Spec.PolicyName = withParams.Name
	gotB, err = c.MutatingAdmissionPolicyBindings().Update(ctx, gotB, metav1.UpdateOptions{})
	check(t, err)
	if gotB.Generation != 2 {
		t.Errorf("a spec change made the binding's generation %d, want 2", gotB.Generation)
	}
}

func invalidMutatingPolicy(mutate func(s *admissionregistrationv1.MutatingAdmissionPolicySpec)) func(context.Context, kubernetes.Interface) error {
	return func(ctx context.Context, c kubernetes.Interface) error {
		p := labelPolicy("invalid.example.com")
		mutate(&p.Spec)
		_, err := c.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{})
		return err
	}
}

func invalidMutatingBinding(mutate func(s *admissionregistrationv1.MutatingAdmissionPolicyBindingSpec)) func(context.Context, kubernetes.Interface) error {
	return func(ctx context.Context, c kubernetes.Interface) error {
		b := mapBinding("invalid", "labels")
		mutate(&b.Spec)
		_, err := c.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
		return err
	}
}

// TestMutatingAdmissionPoliciesInvalid: mutating policies and bindings are refused with
// every problem named by the field kube-apiserver names, and nothing is stored.
func TestMutatingAdmissionPoliciesInvalid(t *testing.T) {
	env := newEnv(t)
	deleteRule := deploymentRule()
	deleteRule.Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Delete}
	tests := []invalidCreate{
		{"empty spec", invalidMutatingPolicy(func(s *admissionregistrationv1.MutatingAdmissionPolicySpec) {
			*s = admissionregistrationv1.MutatingAdmissionPolicySpec{}
		}), []string{"spec.matchConstraints", "spec.mutations", "spec.reinvocationPolicy"}},
		{"DELETE matched, though it may be excluded", invalidMutatingPolicy(func(s *admissionregistrationv1.MutatingAdmissionPolicySpec) {
			s.MatchConstraints.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{deleteRule}
			s.MatchConstraints.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{deleteRule}
		}), []string{"spec.matchConstraints.resourceRules.operations"}},
		{"patch types and their expressions", invalidMutatingPolicy(func(s *admissionregistrationv1.MutatingAdmissionPolicySpec) {
			s.Mutations = []admissionregistrationv1.Mutation{
				{},
				{PatchType: "StrategicMerge"},
				{PatchType: admissionregistrationv1.PatchTypeJSONPatch},
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "  "},
					JSONPatch:          &admissionregistrationv1.JSONPatch{Expression: "[]"}},
				{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "Object{}"}},
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{metadata: "}},
			}
		}), []string{"spec.mutations[0].patchType", "spec.mutations[1].patchType", "spec.mutations[2].jsonPatch",
			"spec.mutations[3].applyConfiguration.expression", "spec.mutations[3].jsonPatch", "spec.mutations[4].jsonPatch.expression",
			"spec.mutations[5].applyConfiguration.expression"}},
		{"params without a paramKind, unknown variable", invalidMutatingPolicy(func(s *admissionregistrationv1.MutatingAdmissionPolicySpec) {
			s.Mutations[0].ApplyConfiguration.Expression = `Object{metadata: Object.metadata{labels: {"team": params.data.team}}}`
			s.Mutations[1].JSONPatch.Expression = `[JSONPatch{op: "add", path: "/metadata/labels/x", value: variables.nope}]`
			s.Variables = append(s.Variables, admissionregistrationv1.Variable{Name: "max", Expression: "params.max"})
		}), []string{"spec.mutations[0].applyConfiguration.expression", "spec.mutations[1].jsonPatch.expression", "spec.variables[1].expression"}},
		{"reinvocation, failure policy, paramKind, match conditions", invalidMutatingPolicy(func(s *admissionregistrationv1.MutatingAdmissionPolicySpec) {
			s.ReinvocationPolicy = "Always"
			s.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Retry"))
			s.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1"}
			s.MatchConditions = append(s.MatchConditions, s.MatchConditions[0])
		}), []string{"spec.failurePolicy", "spec.matchConditions[1].name", "spec.paramKind.kind", "spec.reinvocationPolicy"}},

		{"binding with an empty spec", invalidMutatingBinding(func(s *admissionregistrationv1.MutatingAdmissionPolicyBindingSpec) {
			*s = admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{}
		}), []string{"spec.policyName"}},
		{"binding matching DELETE, paramRef without an action", invalidMutatingBinding(func(s *admissionregistrationv1.MutatingAdmissionPolicyBindingSpec) {
			s.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{deleteRule}}
			s.ParamRef = &admissionregistrationv1.ParamRef{Name: "team", Namespace: "default"}
		}), []string{"spec.matchResources.resourceRules.operations", "spec.paramRef.parameterNotFoundAction"}},
	}
	runInvalid(t, env.Client, tests)
	ctx := testCtx(t)
	pols, err := env.Client.AdmissionregistrationV1().MutatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	check(t, err)
	bindings, err := env.Client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	check(t, err)
	if len(pols.Items)+len(bindings.Items) != 0 {
		t.Errorf("refused creates stored %d policies and %d bindings", len(pols.Items), len(bindings.Items))
	}
}

// TestMutatingAdmissionPolicyTable: `kubectl get` shows the columns kube-apiserver's
// printers do.
func TestMutatingAdmissionPolicyTable(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client.AdmissionregistrationV1()
	_, err := c.MutatingAdmissionPolicies().Create(ctx, labelPolicy("a.example.com"), metav1.CreateOptions{})
	check(t, err)
	withParams := labelPolicy("b.example.com")
	withParams.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	withParams.Spec.Mutations = withParams.Spec.Mutations[:1]
	_, err = c.MutatingAdmissionPolicies().Create(ctx, withParams, metav1.CreateOptions{})
	check(t, err)
	b := mapBinding("a-team", "b.example.com")
	b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Namespace: "default", Name: "team",
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction)}
	_, err = c.MutatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
	check(t, err)
	_, err = c.MutatingAdmissionPolicyBindings().Create(ctx, mapBinding("b-plain", "a.example.com"), metav1.CreateOptions{})
	check(t, err)

	columns, rows := tableOf(t, env.Client, "mutatingadmissionpolicies")
	wantColumns := []string{"Name", "Mutations", "ParamKind", "Age"}
	wantRows := []string{"a.example.com 2 <unset>", "b.example.com 1 v1/ConfigMap"}
	if strings.Join(columns, ",") != strings.Join(wantColumns, ",") || strings.Join(rows, "|") != strings.Join(wantRows, "|") {
		t.Errorf("kubectl get mutatingadmissionpolicies: columns %q rows %q, want %q %q", columns, rows, wantColumns, wantRows)
	}
	columns, rows = tableOf(t, env.Client, "mutatingadmissionpolicybindings")
	wantColumns = []string{"Name", "PolicyName", "ParamRef", "Age"}
	wantRows = []string{"a-team b.example.com default/team", "b-plain a.example.com <unset>"}
	if strings.Join(columns, ",") != strings.Join(wantColumns, ",") || strings.Join(rows, "|") != strings.Join(wantRows, "|") {
		t.Errorf("kubectl get mutatingadmissionpolicybindings: columns %q rows %q, want %q %q", columns, rows, wantColumns, wantRows)
	}
}
