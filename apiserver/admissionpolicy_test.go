package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

// configMapPolicy is a ValidatingAdmissionPolicy over ConfigMaps, for the operations given,
// with one validation.
func configMapPolicy(name, expression, message string, ops ...admissionregistrationv1.OperationType) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: message}},
		},
	}
}

// policyBinding binds policy in the namespaces labelled scope=<name of the binding>.
func policyBinding(name, policy string, actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: actions,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"scope": name}}}},
	}
}

// scopedNamespace creates a namespace the binding of that name selects, and one it does not.
func scopedNamespace(t *testing.T, ctx context.Context, c kubernetes.Interface, binding string) (in, out string) {
	t.Helper()
	in, out = binding+"-in", binding+"-out"
	for name, labels := range map[string]map[string]string{in: {"scope": binding}, out: nil} {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		check(t, err)
	}
	return in, out
}

func configMap(namespace, name string, labels, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}, Data: data}
}

// waitEnforced polls with a dry-run create until the policy refuses it (the plugin compiles
// policies about once a second).
func waitEnforced(t *testing.T, ctx context.Context, c kubernetes.Interface, cm *corev1.ConfigMap) {
	t.Helper()
	eventually(t, "the policy refuses ConfigMap "+cm.Name, func() (bool, error) {
		_, err := c.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, err
	})
}

// TestValidatingAdmissionPolicies: policies bound with Deny refuse writes in the namespaces
// their binding selects, on create, update and delete; params come from a ConfigMap and
// follow its changes; Warn and Audit answer with a warning and an audit annotation.
func TestValidatingAdmissionPolicies(t *testing.T) {
	t.Parallel()
	api := configs.DefaultAPIServer()
	api.AuditLogPath = t.TempDir() + "/audit.log"
	env := testenv.New(t, testenv.Config{APIServer: &api})
	ctx := testCtx(t)
	c, seen := warnedClient(t, env)
	policies := c.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()

	t.Run("deny on create and update, in the selected namespaces only", func(t *testing.T) {
		_, err := policies.Create(ctx, configMapPolicy("small", "!has(object.data) || object.data.size() <= 1", "at most one key",
			admissionregistrationv1.Create, admissionregistrationv1.Update), metav1.CreateOptions{})
		check(t, err)
		_, err = bindings.Create(ctx, policyBinding("small", "small", admissionregistrationv1.Deny), metav1.CreateOptions{})
		check(t, err)
		in, out := scopedNamespace(t, ctx, c, "small")
		big := map[string]string{"a": "1", "b": "2"}
		waitEnforced(t, ctx, c, configMap(in, "probe", nil, big))

		_, err = c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "big", nil, big), metav1.CreateOptions{})
		se := expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid)
		if want := `ValidatingAdmissionPolicy 'small' with binding 'small' denied request: at most one key`; !strings.Contains(se.ErrStatus.Message, want) {
			t.Errorf("message %q, want it to contain %q", se.ErrStatus.Message, want)
		}
		if _, err := c.CoreV1().ConfigMaps(out).Create(ctx, configMap(out, "big", nil, big), metav1.CreateOptions{}); err != nil {
			t.Errorf("create outside the binding's namespaces: %v", err)
		}
		cm, err := c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "one", nil, map[string]string{"a": "1"}), metav1.CreateOptions{})
		check(t, err)
		cm.Data["b"] = "2"
		_, err = c.CoreV1().ConfigMaps(in).Update(ctx, cm, metav1.UpdateOptions{})
		expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid)
		stored, err := c.CoreV1().ConfigMaps(in).Get(ctx, "one", metav1.GetOptions{})
		check(t, err)
		if len(stored.Data) != 1 {
			t.Errorf("refused update was stored: %v", stored.Data)
		}
	})

	t.Run("reason Forbidden and deletes of protected objects", func(t *testing.T) {
		p := configMapPolicy("keep", "!has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels) || oldObject.metadata.labels['protected'] != 'true'", "protected", admissionregistrationv1.Delete)
		p.Spec.Validations[0].Reason = ptr.To(metav1.StatusReasonForbidden)
		_, err := policies.Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
		_, err = bindings.Create(ctx, policyBinding("keep", "keep", admissionregistrationv1.Deny), metav1.CreateOptions{})
		check(t, err)
		in, _ := scopedNamespace(t, ctx, c, "keep")
		for _, name := range []string{"kept", "free"} {
			labels := map[string]string{"protected": map[string]string{"kept": "true", "free": "false"}[name]}
			_, err := c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, name, labels, nil), metav1.CreateOptions{})
			check(t, err)
		}
		eventually(t, "the policy refuses the delete", func() (bool, error) {
			err := c.CoreV1().ConfigMaps(in).Delete(ctx, "kept", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return apierrors.IsForbidden(err), err
		})
		err = c.CoreV1().ConfigMaps(in).Delete(ctx, "kept", metav1.DeleteOptions{})
		expectStatus(t, err, http.StatusForbidden, metav1.StatusReasonForbidden)
		check(t, c.CoreV1().ConfigMaps(in).Delete(ctx, "free", metav1.DeleteOptions{}))
		if _, err := c.CoreV1().ConfigMaps(in).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
			t.Errorf("protected ConfigMap after a refused delete: %v", err)
		}
	})

	t.Run("params from a ConfigMap", func(t *testing.T) {
		p := configMapPolicy("prefixed", "object.metadata.name.startsWith(params.data.prefix)", "", admissionregistrationv1.Create)
		p.Spec.Validations[0].MessageExpression = "'name must start with ' + params.data.prefix"
		p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		_, err := policies.Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
		_, err = c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "policy-params"}}, metav1.CreateOptions{})
		check(t, err)
		params, err := c.CoreV1().ConfigMaps("policy-params").Create(ctx, configMap("policy-params", "prefix", nil, map[string]string{"prefix": "team-a-"}), metav1.CreateOptions{})
		check(t, err)
		b := policyBinding("prefixed", "prefixed", admissionregistrationv1.Deny)
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Namespace: "policy-params", Name: "prefix",
			ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
		_, err = bindings.Create(ctx, b, metav1.CreateOptions{})
		check(t, err)
		in, _ := scopedNamespace(t, ctx, c, "prefixed")
		waitEnforced(t, ctx, c, configMap(in, "team-b-x", nil, nil))
		_, err = c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "team-b-x", nil, nil), metav1.CreateOptions{})
		if se := expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message, "name must start with team-a-") {
			t.Errorf("message %q, want the message expression's", se.ErrStatus.Message)
		}
		_, err = c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "team-a-x", nil, nil), metav1.CreateOptions{})
		check(t, err)

		params.Data["prefix"] = "team-b-"
		_, err = c.CoreV1().ConfigMaps("policy-params").Update(ctx, params, metav1.UpdateOptions{})
		check(t, err)
		waitEnforced(t, ctx, c, configMap(in, "team-a-y", nil, nil))
		_, err = c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "team-b-y", nil, nil), metav1.CreateOptions{})
		check(t, err)

		check(t, c.CoreV1().ConfigMaps("policy-params").Delete(ctx, "prefix", metav1.DeleteOptions{}))
		eventually(t, "a deleted param to deny", func() (bool, error) {
			_, err := c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "team-b-z", nil, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), "no params found"), err
		})
	})

	t.Run("type checking", func(t *testing.T) {
		installCRD(t, env, widgetCRD())
		typo := func(name, group, resource, expression string) {
			p := configMapPolicy(name, expression, "", admissionregistrationv1.Create)
			p.Spec.MatchConstraints.ResourceRules[0].APIGroups = []string{group}
			p.Spec.MatchConstraints.ResourceRules[0].Resources = []string{resource}
			_, err := policies.Create(ctx, p, metav1.CreateOptions{})
			check(t, err)
		}
		typo("typo-builtin", "", "configmaps", "object.spec.replicas > 1")
		typo("typo-custom", "example.com", "widgets", "object.spec.colour == 'red'")
		typo("no-typo", "example.com", "widgets", "object.spec.color == 'red'")
		for name, want := range map[string]string{"typo-builtin": "undefined field 'spec'", "typo-custom": "undefined field 'colour'", "no-typo": ""} {
			eventually(t, "the type checking of "+name, func() (bool, error) {
				p, err := policies.Get(ctx, name, metav1.GetOptions{})
				if err != nil || p.Status.TypeChecking == nil {
					return false, err
				}
				ws := p.Status.TypeChecking.ExpressionWarnings
				if p.Status.ObservedGeneration != p.Generation {
					return false, fmt.Errorf("observedGeneration %d of %d", p.Status.ObservedGeneration, p.Generation)
				}
				if want == "" {
					return len(ws) == 0, fmt.Errorf("warnings %+v, want none", ws)
				}
				return len(ws) == 1 && ws[0].FieldRef == "spec.validations[0].expression" && strings.Contains(ws[0].Warning, want),
					fmt.Errorf("warnings %+v, want one on the expression containing %q", ws, want)
			})
		}
	})

	t.Run("warn and audit", func(t *testing.T) {
		_, err := policies.Create(ctx, configMapPolicy("labelled", "has(object.metadata.labels) && 'owner' in object.metadata.labels",
			"needs an owner label", admissionregistrationv1.Create), metav1.CreateOptions{})
		check(t, err)
		_, err = bindings.Create(ctx, policyBinding("labelled", "labelled", admissionregistrationv1.Warn, admissionregistrationv1.Audit), metav1.CreateOptions{})
		check(t, err)
		in, _ := scopedNamespace(t, ctx, c, "labelled")
		const want = "Validation failed for ValidatingAdmissionPolicy 'labelled' with binding 'labelled': needs an owner label"
		seen.take()
		eventually(t, "the policy's warning", func() (bool, error) {
			_, err := c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "probe", nil, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			got := seen.take()
			return len(got) == 1 && got[0] == want, err
		})
		_, err = c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "unowned", nil, nil), metav1.CreateOptions{})
		check(t, err)
		if got := seen.take(); len(got) != 1 || got[0] != want {
			t.Errorf("warnings %q, want %q", got, want)
		}
		var audited string
		for _, ev := range readAudit(t, api.AuditLogPath) {
			if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Name == "unowned" {
				audited = ev.Annotations["validation.policy.admission.k8s.io/validation_failure"]
			}
		}
		if !strings.Contains(audited, `"message":"needs an owner label"`) || !strings.Contains(audited, `"policy":"labelled"`) {
			t.Errorf("audit annotation validation_failure = %q, want the policy's failure", audited)
		}
	})
}

// mutatingPolicy is a MutatingAdmissionPolicy over resources of group/resource, for the
// operations given, with one mutation.
func mutatingPolicy(name, group, resource string, mutation admissionregistrationv1.Mutation, ops ...admissionregistrationv1.OperationType) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}}}}}},
			Mutations:          []admissionregistrationv1.Mutation{mutation},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
}

func applyConfiguration(expression string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
		ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expression}}
}

// mutatingBinding binds policy in the namespaces labelled scope=<name of the binding>.
func mutatingBinding(name, policy string) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"scope": name}}}},
	}
}

// TestMutatingAdmissionPolicies: policies change objects on create (an apply configuration, a
// JSON patch) before the validating policies see them, and on update; the kind's defaults
// apply to what they produce; custom resources are mutated by their schema.
func TestMutatingAdmissionPolicies(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client
	v1 := c.AdmissionregistrationV1()

	t.Run("create, before the validating policies", func(t *testing.T) {
		_, err := v1.MutatingAdmissionPolicies().Create(ctx, mutatingPolicy("owner", "", "configmaps",
			applyConfiguration(`Object{metadata: Object.metadata{labels: {"owner": "platform"}}}`), admissionregistrationv1.Create), metav1.CreateOptions{})
		check(t, err)
		_, err = v1.MutatingAdmissionPolicyBindings().Create(ctx, mutatingBinding("owner", "owner"), metav1.CreateOptions{})
		check(t, err)
		_, err = v1.ValidatingAdmissionPolicies().Create(ctx, configMapPolicy("owned", "has(object.metadata.labels) && 'owner' in object.metadata.labels && object.metadata.labels['owner'] == 'platform'",
			"needs owner=platform", admissionregistrationv1.Create), metav1.CreateOptions{})
		check(t, err)
		_, err = v1.ValidatingAdmissionPolicyBindings().Create(ctx, policyBinding("owner", "owned", admissionregistrationv1.Deny), metav1.CreateOptions{})
		check(t, err)
		in, out := scopedNamespace(t, ctx, c, "owner")
		eventually(t, "the label added", func() (bool, error) {
			cm, err := c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "probe", nil, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil && cm.Labels["owner"] == "platform", err
		})
		cm, err := c.CoreV1().ConfigMaps(in).Create(ctx, configMap(in, "cm", map[string]string{"app": "a"}, nil), metav1.CreateOptions{})
		check(t, err)
		if cm.Labels["owner"] != "platform" || cm.Labels["app"] != "a" {
			t.Errorf("labels %v, want owner=platform added to app=a", cm.Labels)
		}
		cm, err = c.CoreV1().ConfigMaps(out).Create(ctx, configMap(out, "cm", nil, nil), metav1.CreateOptions{})
		check(t, err)
		if _, labelled := cm.Labels["owner"]; labelled {
			t.Errorf("labelled outside the binding's namespaces: %v", cm.Labels)
		}
	})

	t.Run("JSON patch on update, defaults after it", func(t *testing.T) {
		p := mutatingPolicy("restart", "apps", "daemonsets", admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeJSONPatch,
			JSONPatch: &admissionregistrationv1.JSONPatch{Expression: `[JSONPatch{op: "add", path: "/spec/template/spec/containers/-",
				value: Object.spec.template.spec.containers{name: "sidecar", image: "registry.example/sidecar:1"}}]`}},
			admissionregistrationv1.Update)
		p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "no-sidecar",
			Expression: "!object.spec.template.spec.containers.exists(c, c.name == 'sidecar')"}}
		_, err := v1.MutatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
		_, err = v1.MutatingAdmissionPolicyBindings().Create(ctx, mutatingBinding("restart", "restart"), metav1.CreateOptions{})
		check(t, err)
		in, _ := scopedNamespace(t, ctx, c, "restart")
		ds, err := c.AppsV1().DaemonSets(in).Create(ctx, daemonSet(in, "agent"), metav1.CreateOptions{})
		check(t, err)
		if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
			t.Fatalf("%d containers after create, want the policy to leave creates alone", n)
		}
		eventually(t, "the sidecar added on update", func() (bool, error) {
			ds.Spec.Template.Annotations = map[string]string{"restartedAt": time.Now().String()}
			got, err := c.AppsV1().DaemonSets(in).Update(ctx, ds, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil && len(got.Spec.Template.Spec.Containers) == 2, err
		})
		ds.Spec.Template.Annotations = map[string]string{"restartedAt": "now"}
		got, err := c.AppsV1().DaemonSets(in).Update(ctx, ds, metav1.UpdateOptions{})
		check(t, err)
		cs := got.Spec.Template.Spec.Containers
		if len(cs) != 2 || cs[1].Name != "sidecar" || cs[1].ImagePullPolicy != corev1.PullIfNotPresent || cs[1].TerminationMessagePath == "" {
			t.Errorf("containers %+v, want a defaulted sidecar", cs)
		}
		if got.Generation != ds.Generation+1 {
			t.Errorf("generation %d, want %d: the template changed", got.Generation, ds.Generation+1)
		}
	})

	t.Run("custom resource", func(t *testing.T) {
		installCRD(t, env, widgetCRD())
		_, err := v1.MutatingAdmissionPolicies().Create(ctx, mutatingPolicy("blue", "example.com", "widgets",
			applyConfiguration(`Object{spec: Object.spec{color: "blue"}}`), admissionregistrationv1.Create), metav1.CreateOptions{})
		check(t, err)
		_, err = v1.MutatingAdmissionPolicyBindings().Create(ctx, mutatingBinding("blue", "blue"), metav1.CreateOptions{})
		check(t, err)
		in, _ := scopedNamespace(t, ctx, c, "blue")
		dyn, err := dynamic.NewForConfig(env.AdminConfig)
		check(t, err)
		widgetsIn := dyn.Resource(widgets).Namespace(in)
		eventually(t, "widgets painted blue", func() (bool, error) {
			got, err := widgetsIn.Create(ctx, widget("probe", "red", 0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, err
			}
			color, _, _ := unstructured.NestedString(got.Object, "spec", "color")
			size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size")
			return color == "blue" && size == 3, fmt.Errorf("color %q size %d", color, size)
		})
	})
}
