package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
