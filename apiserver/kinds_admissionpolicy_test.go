package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// deploymentRule matches creates and updates of Deployments.
func deploymentRule() admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}}
}

// replicaPolicy is a policy that passes validation, using each kind of expression: a
// variable, a validation with a message expression, an audit annotation, a match condition.
func replicaPolicy(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules:        []admissionregistrationv1.NamedRuleWithOperations{deploymentRule()},
				ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{deploymentRule()},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "not-kube-system", Expression: `request.namespace != "kube-system"`}},
			Variables: []admissionregistrationv1.Variable{{Name: "replicas", Expression: "object.spec.replicas"},
				{Name: "tooMany", Expression: "variables.replicas > 5"}},
			Validations: []admissionregistrationv1.Validation{{Expression: "!variables.tooMany", Message: "at most five replicas",
				MessageExpression: "'replicas: ' + string(variables.replicas)", Reason: ptr.To(metav1.StatusReasonForbidden)}},
			AuditAnnotations: []admissionregistrationv1.AuditAnnotation{{Key: "replicas", ValueExpression: "string(object.spec.replicas)"}},
		}}
}

// vapBinding binds the policy named policy, denying what it refuses.
func vapBinding(name, policy string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
}

// TestValidatingAdmissionPolicyDefaults: a valid policy and binding are stored with
// upstream's defaults, a policy with params may read them everywhere, and a policy starts
// at generation 1 with no status whatever the client sent.
func TestValidatingAdmissionPolicyDefaults(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client.AdmissionregistrationV1()

	pol := replicaPolicy("replicas.example.com")
	pol.Status.ObservedGeneration = 7
	got, err := c.ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{})
	check(t, err)
	mc := got.Spec.MatchConstraints
	if got.Spec.FailurePolicy == nil || *got.Spec.FailurePolicy != admissionregistrationv1.Fail ||
		mc.MatchPolicy == nil || *mc.MatchPolicy != admissionregistrationv1.Equivalent ||
		mc.NamespaceSelector == nil || mc.ObjectSelector == nil || mc.NamespaceSelector.Size() != 0 || mc.ObjectSelector.Size() != 0 ||
		mc.ResourceRules[0].Scope == nil || *mc.ResourceRules[0].Scope != admissionregistrationv1.AllScopes ||
		mc.ExcludeResourceRules[0].Scope == nil || *mc.ExcludeResourceRules[0].Scope != admissionregistrationv1.AllScopes {
		t.Errorf("policy defaults: failurePolicy %v, matchConstraints %+v", got.Spec.FailurePolicy, mc)
	}
	if got.Generation != 1 || got.Status.ObservedGeneration != 0 {
		t.Errorf("new policy: generation %d, status %+v; want 1 and an empty status", got.Generation, got.Status)
	}

	withParams := replicaPolicy("params.example.com")
	withParams.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	withParams.Spec.MatchConditions = append(withParams.Spec.MatchConditions,
		admissionregistrationv1.MatchCondition{Name: "enabled", Expression: `params.data.enabled == "true"`})
	withParams.Spec.Variables = append(withParams.Spec.Variables, admissionregistrationv1.Variable{Name: "limit", Expression: "int(params.data.max)"})
	withParams.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "variables.replicas <= variables.limit",
		MessageExpression: "'more than ' + params.data.max + ' replicas'"}}
	_, err = c.ValidatingAdmissionPolicies().Create(ctx, withParams, metav1.CreateOptions{})
	check(t, err)

	b := vapBinding("replicas-binding", pol.Name)
	b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{deploymentRule()}}
	b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "default",
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	gotB, err := c.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
	check(t, err)
	mr := gotB.Spec.MatchResources
	if mr.MatchPolicy == nil || *mr.MatchPolicy != admissionregistrationv1.Equivalent || mr.NamespaceSelector == nil ||
		mr.ObjectSelector == nil || *mr.ResourceRules[0].Scope != admissionregistrationv1.AllScopes || gotB.Generation != 1 {
		t.Errorf("binding defaults: matchResources %+v, generation %d", mr, gotB.Generation)
	}
	bare, err := c.ValidatingAdmissionPolicyBindings().Create(ctx, vapBinding("bare", pol.Name), metav1.CreateOptions{})
	check(t, err)
	if bare.Spec.MatchResources != nil {
		t.Errorf("a binding without matchResources got %+v", bare.Spec.MatchResources)
	}
}

// invalidPolicy returns a create of replicaPolicy changed by mutate.
func invalidPolicy(mutate func(p *admissionregistrationv1.ValidatingAdmissionPolicySpec)) func(context.Context, kubernetes.Interface) error {
	return func(ctx context.Context, c kubernetes.Interface) error {
		p := replicaPolicy("invalid.example.com")
		mutate(&p.Spec)
		_, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{})
		return err
	}
}

// invalidBinding returns a create of a binding of the policy "replicas" changed by mutate.
func invalidBinding(mutate func(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec)) func(context.Context, kubernetes.Interface) error {
	return func(ctx context.Context, c kubernetes.Interface) error {
		b := vapBinding("invalid", "replicas")
		mutate(&b.Spec)
		_, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
		return err
	}
}

// TestValidatingAdmissionPoliciesInvalid: policies and bindings are refused with every
// problem named by the field kube-apiserver names, and nothing is stored.
func TestValidatingAdmissionPoliciesInvalid(t *testing.T) {
	env := newEnv(t)
	tests := []invalidCreate{
		{"empty spec", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			*s = admissionregistrationv1.ValidatingAdmissionPolicySpec{}
		}), []string{"spec.auditAnnotations", "spec.matchConstraints", "spec.validations"}},
		{"expressions that do not compile or yield the wrong type", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.Validations = []admissionregistrationv1.Validation{{Expression: "object.metadata.name =="},
				{Expression: "'not a bool'"}, {Expression: "true", MessageExpression: "1"}, {Expression: "  "}}
		}), []string{"spec.validations[0].expression", "spec.validations[1].expression", "spec.validations[2].messageExpression",
			"spec.validations[3].expression"}},
		{"params without a paramKind", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "enabled", Expression: "params != null"}}
			s.Variables = []admissionregistrationv1.Variable{{Name: "limit", Expression: "params.max"}}
			s.Validations = []admissionregistrationv1.Validation{{Expression: "params.max > 1", MessageExpression: "string(params.max)"}}
			s.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "max", ValueExpression: "string(params.max)"}}
		}), []string{"spec.auditAnnotations[0].valueExpression", "spec.matchConditions[0].expression", "spec.validations[0].expression",
			"spec.validations[0].messageExpression", "spec.variables[0].expression"}},
		{"unknown and later variables, names that are not identifiers", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.Variables = []admissionregistrationv1.Variable{{Name: "first", Expression: "variables.second > 1"},
				{Name: "second", Expression: "1"}, {Name: "4ever", Expression: "true"}, {Name: "while", Expression: "true"},
				{Name: " ", Expression: " "}}
			s.Validations = []admissionregistrationv1.Validation{{Expression: "variables.unknown"}}
		}), []string{"spec.validations[0].expression", "spec.variables[0].expression", "spec.variables[2].name",
			"spec.variables[3].name", "spec.variables[4].expression", "spec.variables[4].name"}},
		{"Unauthorized reason, message with a line break, unknown failure policy", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Retry"))
			s.Validations = []admissionregistrationv1.Validation{{Expression: "true", Message: "line one\nline two",
				Reason: ptr.To(metav1.StatusReasonUnauthorized)}, {Expression: "true", Message: "   "}}
		}), []string{"spec.failurePolicy", "spec.validations[0].message", "spec.validations[0].reason", "spec.validations[1].message"}},
		{"audit annotations", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.Validations = nil
			s.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "bad key", ValueExpression: "'x'"},
				{Key: "count", ValueExpression: "1"}, {Key: "count", ValueExpression: "  "},
				{Key: strings.Repeat("k", 64), ValueExpression: "'long key'"}}
		}), []string{"spec.auditAnnotations[0].key", "spec.auditAnnotations[1].valueExpression", "spec.auditAnnotations[2].key",
			"spec.auditAnnotations[2].valueExpression", "spec.auditAnnotations[3].key"}},
		{"paramKind", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "example.com/v1/extra"}
		}), []string{"spec.paramKind.apiVersion", "spec.paramKind.kind"}},
		{"paramKind without a version, kind not a label", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "Example_Group/", Kind: "Config.Map"}
		}), []string{"spec.paramKind.apiVersion", "spec.paramKind.apiVersion", "spec.paramKind.kind"}},
		{"match constraints", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			exclude := deploymentRule()
			exclude.ResourceNames = []string{"a/b", "x", "x"}
			exclude.Operations = []admissionregistrationv1.OperationType{"PATCH"}
			s.MatchConstraints = &admissionregistrationv1.MatchResources{
				MatchPolicy:          ptr.To(admissionregistrationv1.MatchPolicyType("Fuzzy")),
				NamespaceSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}},
				ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{exclude},
			}
		}), []string{"spec.matchConstraints.excludeResourceRules[0].operations[0]", "spec.matchConstraints.excludeResourceRules[0].resourceNames[0]",
			"spec.matchConstraints.excludeResourceRules[0].resourceNames[2]", "spec.matchConstraints.matchPolicy",
			"spec.matchConstraints.namespaceSelector.matchLabels", "spec.matchConstraints.resourceRules"}},
		{"match conditions", invalidPolicy(func(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) {
			s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "dup", Expression: "true"},
				{Name: "dup", Expression: "request.name =="}, {Name: "bad name!", Expression: "'a'"}}
		}), []string{"spec.matchConditions[1].expression", "spec.matchConditions[1].name", "spec.matchConditions[2].expression",
			"spec.matchConditions[2].name"}},

		{"binding with an empty spec", invalidBinding(func(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			*s = admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{}
		}), []string{"spec.policyName", "spec.validationActions"}},
		{"binding that denies and warns", invalidBinding(func(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			s.PolicyName = "Not_A_Name"
			s.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny, admissionregistrationv1.Warn, "Block",
				admissionregistrationv1.Deny}
		}), []string{"spec.policyName", "spec.validationActions", "spec.validationActions[2]", "spec.validationActions[3]"}},
		{"binding paramRef by name and selector, without an action", invalidBinding(func(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			s.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", Selector: &metav1.LabelSelector{}}
		}), []string{"spec.paramRef.name", "spec.paramRef.parameterNotFoundAction", "spec.paramRef.selector"}},
		{"binding paramRef by neither, unknown action", invalidBinding(func(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			s.ParamRef = &admissionregistrationv1.ParamRef{ParameterNotFoundAction: ptr.To(admissionregistrationv1.ParameterNotFoundActionType("Ignore"))}
		}), []string{"spec.paramRef", "spec.paramRef.parameterNotFoundAction"}},
		{"binding matchResources rules", invalidBinding(func(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			s.MatchResources = &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{"*", admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"*", "apps"}, APIVersions: []string{"v1"},
						Resources: []string{"*/*", "pods"}, Scope: ptr.To(admissionregistrationv1.ScopeType("Node"))}}}},
				ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIVersions: []string{""}}}}},
			}
		}), []string{"spec.matchResources.excludeResourceRules[0].apiGroups", "spec.matchResources.excludeResourceRules[0].apiVersions[0]",
			"spec.matchResources.excludeResourceRules[0].resources", "spec.matchResources.resourceRules[0].apiGroups",
			"spec.matchResources.resourceRules[0].operations", "spec.matchResources.resourceRules[0].resources",
			"spec.matchResources.resourceRules[0].scope"}},
	}
	runInvalid(t, env.Client, tests)
	ctx := testCtx(t)
	pols, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	check(t, err)
	bindings, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	check(t, err)
	if len(pols.Items)+len(bindings.Items) != 0 {
		t.Errorf("refused creates stored %d policies and %d bindings", len(pols.Items), len(bindings.Items))
	}
}

// TestValidatingAdmissionPolicyGenerationAndStatus: generation counts spec changes only;
// status is written through /status only, and a status write changes nothing else; a
// binding's generation counts its spec changes too.
func TestValidatingAdmissionPolicyGenerationAndStatus(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	pol, err := c.Create(ctx, replicaPolicy("replicas.example.com"), metav1.CreateOptions{})
	check(t, err)
	// The server type-checks every new generation into the status (admissionpolicy_status.go),
	// so each write here starts from the object as it is now, and the test waits for the
	// checker where its own status writes must not race with it.
	write := func(status bool, mutate func(*admissionregistrationv1.ValidatingAdmissionPolicy)) *admissionregistrationv1.ValidatingAdmissionPolicy {
		t.Helper()
		var out *admissionregistrationv1.ValidatingAdmissionPolicy
		check(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := c.Get(ctx, pol.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(cur)
			if status {
				out, err = c.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			} else {
				out, err = c.Update(ctx, cur, metav1.UpdateOptions{})
			}
			return err
		}))
		return out
	}
	waitChecked := func(generation int64) {
		t.Helper()
		eventually(t, fmt.Sprintf("the type checker to observe generation %d", generation), func() (bool, error) {
			cur, err := c.Get(ctx, pol.Name, metav1.GetOptions{})
			return err == nil && cur.Status.ObservedGeneration == generation, err
		})
	}

	pol = write(false, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Labels = map[string]string{"owner": "team-a"}
	})
	if pol.Generation != 1 {
		t.Errorf("a label change made generation %d, want 1", pol.Generation)
	}
	pol = write(false, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: "object.metadata.name != 'forbidden'"})
	})
	if pol.Generation != 2 {
		t.Errorf("a spec change made generation %d, want 2", pol.Generation)
	}
	waitChecked(2)

	// A status write (what the type checker makes): status only, the spec it carries is
	// ignored. It claims generation 2, so the checker leaves it alone.
	pol = write(true, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{ObservedGeneration: 2,
			TypeChecking: &admissionregistrationv1.TypeChecking{ExpressionWarnings: []admissionregistrationv1.ExpressionWarning{
				{FieldRef: "spec.validations[0].expression", Warning: "apps/v1, Kind=Deployment: no such key: tooMany"}}},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Checked", LastTransitionTime: metav1.Now()}}}
		p.Spec.Validations = nil
	})
	if pol.Generation != 2 || pol.Status.ObservedGeneration != 2 || pol.Status.TypeChecking == nil || len(pol.Spec.Validations) != 2 {
		t.Errorf("after a status write: generation %d, status %+v, %d validations; want 2, the status written, 2",
			pol.Generation, pol.Status, len(pol.Spec.Validations))
	}

	// A write of the main resource keeps the stored status.
	pol = write(false, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{ObservedGeneration: 9}
		p.Spec.Validations = p.Spec.Validations[:1]
	})
	if pol.Status.ObservedGeneration != 2 || pol.Status.TypeChecking == nil || pol.Generation != 3 {
		t.Errorf("after a spec write: status %+v, generation %d; want the status kept, generation 3", pol.Status, pol.Generation)
	}
	waitChecked(3)

	pol, err = c.Get(ctx, pol.Name, metav1.GetOptions{})
	check(t, err)
	pol.Status.Conditions[0].Status = "Maybe"
	pol.Status.TypeChecking.ExpressionWarnings = append(pol.Status.TypeChecking.ExpressionWarnings,
		admissionregistrationv1.ExpressionWarning{FieldRef: "spec.validations[", Warning: ""})
	_, err = c.UpdateStatus(ctx, pol, metav1.UpdateOptions{})
	want := []string{"status.conditions[0].status", "status.typeChecking.expressionWarnings[0].fieldRef",
		"status.typeChecking.expressionWarnings[0].warning"}
	if got := causeFields(t, err); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("an invalid status: causes %v, want %v", got, want)
	}

	bc := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	b, err := bc.Create(ctx, vapBinding("replicas", pol.Name), metav1.CreateOptions{})
	check(t, err)
	b.Annotations = map[string]string{"note": "x"}
	b, err = bc.Update(ctx, b, metav1.UpdateOptions{})
	check(t, err)
	if b.Generation != 1 {
		t.Errorf("an annotation change made the binding's generation %d, want 1", b.Generation)
	}
	b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
	b, err = bc.Update(ctx, b, metav1.UpdateOptions{})
	check(t, err)
	if b.Generation != 2 {
		t.Errorf("a spec change made the binding's generation %d, want 2", b.Generation)
	}
}

// tableOf returns the column names and the rows, cells joined by spaces, that `kubectl get`
// prints for a resource of admissionregistration.k8s.io/v1.
func tableOf(t *testing.T, c kubernetes.Interface, resource string) (columns, rows []string) {
	t.Helper()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/apis/admissionregistration.k8s.io/v1/"+resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(testCtx(t))
	check(t, err)
	var table metav1.Table
	check(t, json.Unmarshal(raw, &table))
	for _, col := range table.ColumnDefinitions {
		columns = append(columns, col.Name)
	}
	for _, r := range table.Rows {
		var cells []string
		// The last cell is the age, which the test cannot know.
		for _, cell := range r.Cells[:len(r.Cells)-1] {
			cells = append(cells, fmt.Sprint(cell))
		}
		rows = append(rows, strings.Join(cells, " "))
	}
	return columns, rows
}

// TestValidatingAdmissionPolicyTable: `kubectl get` shows the columns kube-apiserver's
// printers do, with their way of writing an unset paramKind and each form of paramRef.
func TestValidatingAdmissionPolicyTable(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client.AdmissionregistrationV1()
	_, err := c.ValidatingAdmissionPolicies().Create(ctx, replicaPolicy("a.example.com"), metav1.CreateOptions{})
	check(t, err)
	withParams := replicaPolicy("b.example.com")
	withParams.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "example.com/v1", Kind: "ReplicaLimit"}
	withParams.Spec.Validations = append(withParams.Spec.Validations, admissionregistrationv1.Validation{Expression: "true"})
	_, err = c.ValidatingAdmissionPolicies().Create(ctx, withParams, metav1.CreateOptions{})
	check(t, err)

	deny := ptr.To(admissionregistrationv1.DenyAction)
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}
	for name, ref := range map[string]*admissionregistrationv1.ParamRef{
		"a-none":      nil,
		"b-namespace": {Namespace: "limits", Name: "prod", ParameterNotFoundAction: deny},
		"c-name":      {Name: "prod", ParameterNotFoundAction: deny},
		"d-selector":  {Selector: selector, ParameterNotFoundAction: deny},
	} {
		b := vapBinding(name, "b.example.com")
		b.Spec.ParamRef = ref
		_, err := c.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
		check(t, err)
	}

	columns, rows := tableOf(t, env.Client, "validatingadmissionpolicies")
	wantColumns := []string{"Name", "Validations", "ParamKind", "Age"}
	wantRows := []string{"a.example.com 1 <unset>", "b.example.com 2 example.com/v1/ReplicaLimit"}
	if strings.Join(columns, ",") != strings.Join(wantColumns, ",") || strings.Join(rows, "|") != strings.Join(wantRows, "|") {
		t.Errorf("kubectl get validatingadmissionpolicies: columns %q rows %q, want %q %q", columns, rows, wantColumns, wantRows)
	}
	columns, rows = tableOf(t, env.Client, "validatingadmissionpolicybindings")
	wantColumns = []string{"Name", "PolicyName", "ParamRef", "Age"}
	wantRows = []string{"a-none b.example.com <unset>", "b-namespace b.example.com limits/prod", "c-name b.example.com */prod",
		"d-selector b.example.com " + selector.String()}
	if strings.Join(columns, ",") != strings.Join(wantColumns, ",") || strings.Join(rows, "|") != strings.Join(wantRows, "|") {
		t.Errorf("kubectl get validatingadmissionpolicybindings: columns %q rows %q, want %q %q", columns, rows, wantColumns, wantRows)
	}
}
