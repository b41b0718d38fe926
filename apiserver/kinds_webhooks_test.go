package apiserver_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/test/testenv"
)

// serviceWebhook is a validating webhook that passes validation: a service reference, no
// side effects, AdmissionReview v1, one rule.
func serviceWebhook(name string) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name: name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{Namespace: "hooks", Name: "hook", Path: ptr.To("/validate")}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func validatingConfig(hooks ...admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hooks"}, Webhooks: hooks}
}

// TestWebhookConfigurationsInvalid: webhook configurations are refused with every problem
// named by the field kube-apiserver names, and nothing is stored.
func TestWebhookConfigurationsInvalid(t *testing.T) {
	env := newEnv(t)
	createValidating := func(mutate func(h *admissionregistrationv1.ValidatingWebhook)) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, c kubernetes.Interface) error {
			h := serviceWebhook("check.hooks.example.io")
			mutate(&h)
			_, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(h), metav1.CreateOptions{})
			return err
		}
	}
	tests := []invalidCreate{
		{"nothing but a short name", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			*h = admissionregistrationv1.ValidatingWebhook{Name: "check.example"}
		}), []string{"webhooks[0].admissionReviewVersions", "webhooks[0].clientConfig", "webhooks[0].name", "webhooks[0].sideEffects"}},
		{"policies, side effects, timeout out of range", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Retry"))
			h.MatchPolicy = ptr.To(admissionregistrationv1.MatchPolicyType("Fuzzy"))
			h.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
			h.TimeoutSeconds = ptr.To[int32](31)
		}), []string{"webhooks[0].failurePolicy", "webhooks[0].matchPolicy", "webhooks[0].sideEffects", "webhooks[0].timeoutSeconds"}},
		{"both a url and a service", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig.URL = ptr.To("https://hooks.example.io/validate")
		}), []string{"webhooks[0].clientConfig"}},
		{"plain-HTTP url", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("http://hooks.example.io/validate")}
		}), []string{"webhooks[0].clientConfig.url"}},
		// kube-apiserver hands the service's name and namespace to the library's check in
		// the other order, so a missing namespace is reported as the name, and miniplane
		// reports it where kube-apiserver does.
		{"service without a namespace, bad port and path", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig.Service = &admissionregistrationv1.ServiceReference{Name: "hook", Path: ptr.To("validate"), Port: ptr.To[int32](70000)}
		}), []string{"webhooks[0].clientConfig.service.name", "webhooks[0].clientConfig.service.path", "webhooks[0].clientConfig.service.port"}},
		{"rules", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules = []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{"*", "PATCH"},
					Rule: admissionregistrationv1.Rule{APIVersions: []string{""}, Resources: []string{"*", "pods"},
						Scope: ptr.To(admissionregistrationv1.ScopeType("Node"))}},
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"},
						Resources: []string{"deployments/*", "deployments/scale"}}},
			}
		}), []string{"webhooks[0].rules[0].apiGroups", "webhooks[0].rules[0].apiVersions[0]", "webhooks[0].rules[0].operations",
			"webhooks[0].rules[0].operations[1]", "webhooks[0].rules[0].resources", "webhooks[0].rules[0].scope",
			"webhooks[0].rules[1].resources[1]"}},
		{"review versions none accepted, one repeated", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.AdmissionReviewVersions = []string{"v2", "v2"}
		}), []string{"webhooks[0].admissionReviewVersions", "webhooks[0].admissionReviewVersions[1]"}},
		{"selectors", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}
			h.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
		}), []string{"webhooks[0].namespaceSelector.matchLabels", "webhooks[0].objectSelector.matchExpressions[0].operator"}},
		{"match conditions that do not compile, unnamed, repeated", createValidating(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.MatchConditions = []admissionregistrationv1.MatchCondition{
				{Name: "syntax", Expression: "object.metadata.name =="},
				{Name: "not-a-bool", Expression: "object.metadata.name"},
				{Name: "syntax", Expression: "true"},
				{Expression: "  "},
			}
		}), []string{"webhooks[0].matchConditions[0].expression", "webhooks[0].matchConditions[1].expression",
			"webhooks[0].matchConditions[2].name", "webhooks[0].matchConditions[3].expression", "webhooks[0].matchConditions[3].name"}},
		{"two webhooks of one name", func(ctx context.Context, c kubernetes.Interface) error {
			h := serviceWebhook("check.hooks.example.io")
			_, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(h, h), metav1.CreateOptions{})
			return err
		}, []string{"webhooks[1].name"}},
		{"mutating webhook with an unknown reinvocation policy", func(ctx context.Context, c kubernetes.Interface) error {
			v := serviceWebhook("mutate.hooks.example.io")
			m := admissionregistrationv1.MutatingWebhook{Name: v.Name, ClientConfig: v.ClientConfig, Rules: v.Rules,
				SideEffects: v.SideEffects, AdmissionReviewVersions: v.AdmissionReviewVersions,
				ReinvocationPolicy: ptr.To(admissionregistrationv1.ReinvocationPolicyType("Always"))}
			_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "hooks"}, Webhooks: []admissionregistrationv1.MutatingWebhook{m}}, metav1.CreateOptions{})
			return err
		}, []string{"webhooks[0].reinvocationPolicy"}},
	}
	runInvalid(t, env.Client, tests)
}

// warnings collects the Warning headers a client is answered with.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

// warnedClient is an administrator's client whose Warning headers are collected.
func warnedClient(t *testing.T, env *testenv.Env) (kubernetes.Interface, *warnings) {
	t.Helper()
	seen := &warnings{}
	cfg := rest.CopyConfig(env.AdminConfig)
	cfg.WarningHandler = seen
	c, err := kubernetes.NewForConfig(cfg)
	check(t, err)
	return c, seen
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.got
	w.got = nil
	return got
}

// TestWebhookConfigurations: both kinds get upstream's defaults; metadata.generation counts
// changes of the webhooks only; every write of a configuration with a webhook that names a
// Service is answered with a warning that it is not called, and a new one gets that as an
// event; and indeed a write that webhook matches is admitted without it. A configuration
// whose webhooks are reached by url gets neither.
func TestWebhookConfigurations(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c, seen := warnedClient(t, env)
	wantWarning := func(what string, want bool) {
		t.Helper()
		got := seen.take()
		warned := len(got) == 1 && strings.Contains(got[0], "calls admission webhooks reached by url only: check.hooks.example.io names a Service")
		if warned != want || (!want && len(got) > 0) {
			t.Errorf("%s: warnings %q, want the webhook warning: %v", what, got, want)
		}
	}

	hook := serviceWebhook("check.hooks.example.io")
	hook.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	vwc, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(hook), metav1.CreateOptions{})
	check(t, err)
	wantWarning("create", true)
	h := vwc.Webhooks[0]
	if *h.FailurePolicy != admissionregistrationv1.Fail || *h.MatchPolicy != admissionregistrationv1.Equivalent ||
		h.NamespaceSelector == nil || h.ObjectSelector == nil || *h.TimeoutSeconds != 10 ||
		*h.Rules[0].Scope != admissionregistrationv1.AllScopes || *h.ClientConfig.Service.Port != 443 || vwc.Generation != 1 {
		t.Errorf("validating webhook defaults: %+v, generation %d", h, vwc.Generation)
	}

	vwc.Labels = map[string]string{"owner": "team-a"}
	vwc, err = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
	check(t, err)
	wantWarning("update of a label", true)
	if vwc.Generation != 1 {
		t.Errorf("a label change made generation %d, want 1", vwc.Generation)
	}
	vwc.Webhooks[0].TimeoutSeconds = ptr.To[int32](3)
	vwc, err = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
	check(t, err)
	if vwc.Generation != 2 {
		t.Errorf("a webhook change made generation %d, want 2", vwc.Generation)
	}
	seen.take()
	_, err = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "hooks", metav1.GetOptions{})
	check(t, err)
	wantWarning("get", false)

	m := admissionregistrationv1.MutatingWebhook{Name: "mutate.hooks.example.io",
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/mutate")},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		AdmissionReviewVersions: []string{"v1beta1", "v1"},
		MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "not-kube-system", Expression: `request.namespace != "kube-system"`}}}
	mwc, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "mutate"}, Webhooks: []admissionregistrationv1.MutatingWebhook{m}}, metav1.CreateOptions{})
	check(t, err)
	wantWarning("create of a mutating configuration reached by url", false)
	if got := mwc.Webhooks[0]; *got.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || *got.TimeoutSeconds != 10 {
		t.Errorf("mutating webhook defaults: %+v", got)
	}

	// The validating webhook matches every pod write and fails closed: a cluster whose
	// webhook server is down refuses the pod. miniplane does not call it and admits it.
	_, err = c.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "admitted"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.io/app:1"}}}}, metav1.CreateOptions{})
	check(t, err)
	wantWarning("create of a pod", false)

	eventually(t, "the NotEnforced event of "+vwc.Name, func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.name": vwc.Name, "reason": "NotEnforced"}.String()})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Type == corev1.EventTypeWarning, err
	})
	check(t, c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, vwc.Name, metav1.DeleteOptions{}))
	wantWarning("delete", false)
}
