package e2e

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDaemonSetRefusedByAdmissionPolicy: a cluster's ValidatingAdmissionPolicy requires memory
// limits on every pod; a DaemonSet whose template has none gets no pods (FailedCreate events
// carry the policy's message, desired stays above current) until its template is fixed, and
// then rolls out on every node.
func TestDaemonSetRefusedByAdmissionPolicy(t *testing.T) {
	t.Parallel()
	env := dsStart(t, dsModes[0], 2)
	c := env.Client
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "memory-limits"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.spec.containers.all(c, has(c.resources.limits) && 'memory' in c.resources.limits)",
				Message:    "every container needs a memory limit"}},
		},
	}
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "memory-limits"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "memory-limits",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The plugin compiles policies about once a second: the DaemonSet comes once a pod
	// without limits is refused.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: dsNS},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: dsImage1}}}}
	dsEventually(t, dsTimeout, "the policy in force", func() (string, bool) {
		_, err := c.CoreV1().Pods(dsNS).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return "a pod without limits was admitted", false
		}
		return err.Error(), true
	})

	dsCreate(t, c, dsNewDaemonSet("agent"))
	dsWaitRefused(t, c, "agent", 2, `ValidatingAdmissionPolicy 'memory-limits' with binding 'memory-limits' denied request: every container needs a memory limit`)

	dsUpdate(t, c, "agent", func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	})
	dsWaitOnePodPerNode(t, c, "agent", dsNodeNames(2))
}
