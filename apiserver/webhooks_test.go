package apiserver_test

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/internal/credentials"
)

// hookServer is an admission webhook server a test runs on loopback, as envtest setups
// run a controller's webhooks: /mutate labels what it sees and gives a pod a sidecar,
// /validate refuses names starting with "forbidden-", objects labelled reject=yes and the
// deletion of objects labelled lock=on. It records every review it is sent.
type hookServer struct {
	srv      *httptest.Server
	caBundle []byte

	mu      sync.Mutex
	reviews []admissionv1.AdmissionRequest
}

func newHookServer(t *testing.T) *hookServer {
	t.Helper()
	h := &hookServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", h.serve(mutateReview))
	mux.HandleFunc("/validate", h.serve(validateReview))
	h.srv = httptest.NewUnstartedServer(mux)
	h.srv.StartTLS()
	t.Cleanup(h.srv.Close)
	h.caBundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw})
	return h
}

func (h *hookServer) serve(decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.reviews = append(h.reviews, *review.Request)
		h.mu.Unlock()
		resp := decide(review.Request)
		resp.UID = review.Request.UID
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(&review)
	}
}

// seen returns the reviews of the named object sent so far, in order.
func (h *hookServer) seen(name string) []admissionv1.AdmissionRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []admissionv1.AdmissionRequest
	for _, r := range h.reviews {
		if r.Name == name {
			out = append(out, r)
		}
	}
	return out
}

// reviewed is the object of a review, or its old object for a delete.
func reviewed(req *admissionv1.AdmissionRequest) metav1.PartialObjectMetadata {
	raw := req.Object.Raw
	if req.Operation == admissionv1.Delete {
		raw = req.OldObject.Raw
	}
	var m metav1.PartialObjectMetadata
	_ = json.Unmarshal(raw, &m)
	return m
}

func mutateReview(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	m := reviewed(req)
	var patch []map[string]any
	if m.Labels == nil {
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{}})
	}
	patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels/mutated-by", "value": "hook"})
	if req.Kind.Kind == "Pod" {
		patch = append(patch, map[string]any{"op": "add", "path": "/spec/containers/-",
			"value": map[string]string{"name": "sidecar", "image": "registry.example.io/sidecar:1"}})
	}
	raw, _ := json.Marshal(patch)
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: raw, PatchType: ptr.To(admissionv1.PatchTypeJSONPatch)}
}

func validateReview(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	m := reviewed(req)
	// As controller-runtime's admission.Denied answers: 403 Forbidden.
	deny := func(why string) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: why}}
	}
	switch {
	case req.Operation == admissionv1.Delete && m.Labels["lock"] == "on":
		return deny("locked objects stay")
	case req.Operation != admissionv1.Delete && strings.HasPrefix(m.Name, "forbidden-"):
		return deny("names starting with forbidden- are reserved")
	case req.Operation != admissionv1.Delete && m.Labels["reject"] == "yes":
		// A refusal with no code: the plugin makes it a 400.
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "labelled reject=yes"}}
	case req.Operation != admissionv1.Delete && m.Labels["warn"] == "yes":
		return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"labelled warn=yes"}}
	}
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func urlHook(h *hookServer, path string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(h.srv.URL + path), CABundle: h.caBundle}
}

func rule(resources []string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources}}}
}

// downURL is an https URL on loopback where nothing listens.
func downURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(t, err)
	addr := ln.Addr().String()
	check(t, ln.Close())
	return "https://" + addr + "/validate"
}

// TestAdmissionWebhooks: the webhooks of both kinds reached by url are called on create,
// update and delete, with the caller's identity; what a mutating webhook adds is defaulted
// and stored, a validating webhook's refusal is the client's 403 and nothing is stored;
// namespace selectors, match conditions (with the authorizer), failure policies and dry runs
// are honoured; a webhook that names a
// Service is not called; a deleted configuration stops being called. Evictions and bindings
// are sent as the Eviction and Binding they create.
func TestAdmissionWebhooks(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client
	hooks := newHookServer(t)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "hooked", Labels: map[string]string{"webhooks": "on"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
	} {
		_, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		check(t, err)
	}
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "mutate"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "mutate.hooks.example.io", ClientConfig: urlHook(hooks, "/mutate"),
			Rules:                   rule([]string{"pods", "configmaps"}, admissionregistrationv1.Create, admissionregistrationv1.Update),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"webhooks": "on"}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}}}, metav1.CreateOptions{})
	check(t, err)
	_, err = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(
		admissionregistrationv1.ValidatingWebhook{
			Name: "validate.hooks.example.io", ClientConfig: urlHook(hooks, "/validate"),
			Rules: append(rule([]string{"configmaps"}, all...),
				rule([]string{"pods"}, admissionregistrationv1.Delete)...),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		},
		// Named by a Service, failing closed, matching everything: a cluster would refuse
		// every write until the webhook's pod is up. It is not called here.
		func() admissionregistrationv1.ValidatingWebhook {
			h := serviceWebhook("in-cluster.hooks.example.io")
			h.Rules = rule([]string{"*"}, all...)
			return h
		}()), metav1.CreateOptions{})
	check(t, err)

	configMap := func(ns, name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	}
	// The informers follow the configurations a moment after they are written, each kind
	// on its own.
	probe := 0
	eventually(t, "the mutating webhook to label a configmap", func() (bool, error) {
		probe++
		cm, err := c.CoreV1().ConfigMaps("hooked").Create(ctx, configMap("hooked", fmt.Sprintf("probe-%d", probe), nil), metav1.CreateOptions{})
		return err == nil && cm.Labels["mutated-by"] == "hook", err
	})
	eventually(t, "the validating webhook to refuse a reserved name", func() (bool, error) {
		_, err := c.CoreV1().ConfigMaps("plain").Create(ctx, configMap("plain", "forbidden-probe", nil), metav1.CreateOptions{})
		return apierrors.IsForbidden(err), err
	})

	t.Run("create", func(t *testing.T) {
		pod := podOn("hooked", "web", "")
		pod.Labels = nil
		created, err := c.CoreV1().Pods("hooked").Create(ctx, pod, metav1.CreateOptions{})
		check(t, err)
		if created.Labels["mutated-by"] != "hook" || len(created.Spec.Containers) != 2 {
			t.Fatalf("mutated pod: labels %v, %d containers", created.Labels, len(created.Spec.Containers))
		}
		// The sidecar was added after the pod's defaults were applied, and got them too.
		if sc := created.Spec.Containers[1]; sc.TerminationMessagePath != corev1.TerminationMessagePathDefault ||
			sc.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("the webhook's sidecar was not defaulted: %+v", sc)
		}
		reviews := hooks.seen("web")
		if len(reviews) != 1 {
			t.Fatalf("%d reviews of the pod, want 1", len(reviews))
		}
		r := reviews[0]
		if r.Operation != admissionv1.Create || r.Kind.Kind != "Pod" || r.Resource.Resource != "pods" || r.Namespace != "hooked" ||
			r.UserInfo.Username != credentials.AdminUser || ptr.Deref(r.DryRun, true) {
			t.Errorf("review of the pod: %+v", r)
		}

		// No label on the namespace, no mutation.
		plain, err := c.CoreV1().Pods("plain").Create(ctx, podOn("plain", "web", ""), metav1.CreateOptions{})
		check(t, err)
		if _, ok := plain.Labels["mutated-by"]; ok || len(plain.Spec.Containers) != 1 {
			t.Errorf("a pod outside the selected namespaces was mutated: %v, %d containers", plain.Labels, len(plain.Spec.Containers))
		}

		_, err = c.CoreV1().ConfigMaps("hooked").Create(ctx, configMap("hooked", "forbidden-settings", nil), metav1.CreateOptions{})
		se := expectStatus(t, err, 403, metav1.StatusReasonForbidden)
		if want := `admission webhook "validate.hooks.example.io" denied the request: names starting with forbidden- are reserved`; !strings.Contains(se.ErrStatus.Message, want) {
			t.Errorf("refusal %q, want it to say %q", se.ErrStatus.Message, want)
		}
		if _, err := c.CoreV1().ConfigMaps("hooked").Get(ctx, "forbidden-settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a refused configmap: %v, want NotFound", err)
		}
	})

	t.Run("warnings", func(t *testing.T) {
		warned, seen := warnedClient(t, env)
		_, err := warned.CoreV1().ConfigMaps("hooked").Create(ctx, configMap("hooked", "noted", map[string]string{"warn": "yes"}), metav1.CreateOptions{})
		check(t, err)
		if w := seen.take(); !slices.Equal(w, []string{"labelled warn=yes"}) {
			t.Errorf("warnings %q, want the webhook's", w)
		}
	})

	t.Run("update", func(t *testing.T) {
		cm, err := c.CoreV1().ConfigMaps("hooked").Create(ctx, configMap("hooked", "settings", map[string]string{"tier": "a"}), metav1.CreateOptions{})
		check(t, err)
		delete(cm.Labels, "mutated-by")
		cm.Data = map[string]string{"k": "v"}
		cm, err = c.CoreV1().ConfigMaps("hooked").Update(ctx, cm, metav1.UpdateOptions{})
		check(t, err)
		if cm.Labels["mutated-by"] != "hook" || cm.Data["k"] != "v" {
			t.Errorf("updated configmap: labels %v, data %v", cm.Labels, cm.Data)
		}
		if ops := hooks.seen("settings"); len(ops) < 2 || ops[len(ops)-1].Operation != admissionv1.Update || len(ops[len(ops)-1].OldObject.Raw) == 0 {
			t.Errorf("reviews of the update: %+v", ops)
		}

		patch := []byte(`{"metadata":{"labels":{"reject":"yes"}},"data":{"k":"changed"}}`)
		_, err = c.CoreV1().ConfigMaps("hooked").Patch(ctx, "settings", "application/merge-patch+json", patch, metav1.PatchOptions{})
		expectStatus(t, err, 400, "")
		got, err := c.CoreV1().ConfigMaps("hooked").Get(ctx, "settings", metav1.GetOptions{})
		check(t, err)
		if got.Data["k"] != "v" || got.ResourceVersion != cm.ResourceVersion {
			t.Errorf("a refused patch changed the configmap: %v at %s, was %s", got.Data, got.ResourceVersion, cm.ResourceVersion)
		}
	})

	t.Run("delete", func(t *testing.T) {
		_, err := c.CoreV1().ConfigMaps("plain").Create(ctx, configMap("plain", "locked", map[string]string{"lock": "on"}), metav1.CreateOptions{})
		check(t, err)
		for _, dryRun := range [][]string{{metav1.DryRunAll}, nil} {
			err = c.CoreV1().ConfigMaps("plain").Delete(ctx, "locked", metav1.DeleteOptions{DryRun: dryRun})
			expectStatus(t, err, 403, metav1.StatusReasonForbidden)
		}
		reviews := hooks.seen("locked")
		last := reviews[len(reviews)-1]
		if last.Operation != admissionv1.Delete || len(last.OldObject.Raw) == 0 || len(last.Object.Raw) != 0 || ptr.Deref(last.DryRun, true) {
			t.Errorf("review of the delete: %+v", last)
		}
		// A delete may be reviewed twice: the first attempt may meet a cached copy older
		// than the stored object.
		dryRuns := 0
		for _, r := range reviews {
			if r.Operation == admissionv1.Delete && ptr.Deref(r.DryRun, false) {
				dryRuns++
			}
		}
		if dryRuns == 0 {
			t.Errorf("no review of the dry-run delete says dryRun: %+v", reviews)
		}
		_, err = c.CoreV1().ConfigMaps("plain").Patch(ctx, "locked", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"lock":null}}}`), metav1.PatchOptions{})
		check(t, err)
		check(t, c.CoreV1().ConfigMaps("plain").Delete(ctx, "locked", metav1.DeleteOptions{}))

		// A locked pod is not deleted by a client, but an eviction's delete is not sent to
		// the webhooks, as kube-apiserver does not send it.
		pod := podOn("plain", "locked", "")
		pod.Labels = map[string]string{"lock": "on"}
		_, err = c.CoreV1().Pods("plain").Create(ctx, pod, metav1.CreateOptions{})
		check(t, err)
		err = c.CoreV1().Pods("plain").Delete(ctx, "locked", metav1.DeleteOptions{})
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
		check(t, c.PolicyV1().Evictions("plain").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: "locked"}}))
		if _, err := c.CoreV1().Pods("plain").Get(ctx, "locked", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the evicted pod: %v, want NotFound", err)
		}
	})

	// The namespace controller's deletes are sent as its ServiceAccount's; one refused keeps
	// the namespace Terminating, its condition saying why, until the object may go.
	t.Run("namespace deletion", func(t *testing.T) {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
		check(t, err)
		_, err = c.CoreV1().ConfigMaps("doomed").Create(ctx, configMap("doomed", "vault", map[string]string{"lock": "on"}), metav1.CreateOptions{})
		check(t, err)
		check(t, c.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}))
		eventually(t, "the namespace to report the refused delete", func() (bool, error) {
			ns, err := c.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cond := range ns.Status.Conditions {
				if cond.Type == corev1.NamespaceDeletionContentFailure && cond.Status == corev1.ConditionTrue &&
					strings.Contains(cond.Message, "locked objects stay") {
					return true, nil
				}
			}
			return false, fmt.Errorf("conditions %+v", ns.Status.Conditions)
		})
		var users []string
		for _, r := range hooks.seen("vault") {
			if r.Operation == admissionv1.Delete {
				users = append(users, r.UserInfo.Username)
			}
		}
		if len(users) == 0 || users[0] != "system:serviceaccount:kube-system:namespace-controller" {
			t.Errorf("the deletes of the locked configmap were sent as %v, want the namespace controller", users)
		}
		_, err = c.CoreV1().ConfigMaps("doomed").Patch(ctx, "vault", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"lock":null}}}`), metav1.PatchOptions{})
		check(t, err)
		eventually(t, "the namespace to go once its configmap may", func() (bool, error) {
			_, err := c.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
	})

	t.Run("subresources", func(t *testing.T) {
		hook := admissionregistrationv1.ValidatingWebhook{
			Name: "subresources.hooks.example.io", ClientConfig: urlHook(hooks, "/validate"),
			Rules:                   rule([]string{"pods/eviction", "pods/binding"}, admissionregistrationv1.Create),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}
		cfg := validatingConfig(hook)
		cfg.Name = "subresources"
		_, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
		check(t, err)
		for _, name := range []string{"forbidden-evict", "forbidden-bind"} {
			_, err := c.CoreV1().Pods("plain").Create(ctx, podOn("plain", name, ""), metav1.CreateOptions{})
			check(t, err)
		}
		// Until the webhook's configuration reaches the plugin an eviction goes through, so
		// the wait spends pods of its own.
		probe := 0
		eventually(t, "the webhook to refuse an eviction", func() (bool, error) {
			probe++
			name := fmt.Sprintf("forbidden-probe-%d", probe)
			if _, err := c.CoreV1().Pods("plain").Create(ctx, podOn("plain", name, ""), metav1.CreateOptions{}); err != nil {
				return false, err
			}
			err := c.PolicyV1().Evictions("plain").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: name}})
			return apierrors.IsForbidden(err), err
		})
		err = c.PolicyV1().Evictions("plain").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: "forbidden-evict"}})
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
		err = c.CoreV1().Pods("plain").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "forbidden-bind"},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}, metav1.CreateOptions{})
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
		for _, name := range []string{"forbidden-evict", "forbidden-bind"} {
			pod, err := c.CoreV1().Pods("plain").Get(ctx, name, metav1.GetOptions{})
			check(t, err)
			if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
				t.Errorf("pod %s was changed by a refused subresource create: node %q, deletion %v", name, pod.Spec.NodeName, pod.DeletionTimestamp)
			}
		}
		kinds := map[string]string{}
		for _, r := range append(hooks.seen("forbidden-evict"), hooks.seen("forbidden-bind")...) {
			kinds[r.SubResource] = r.Kind.Group + "/" + r.Kind.Version + "/" + r.Kind.Kind
		}
		if kinds["eviction"] != "policy/v1/Eviction" || kinds["binding"] != "/v1/Binding" {
			t.Errorf("the reviews' kinds by subresource: %v", kinds)
		}
		check(t, c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "subresources", metav1.DeleteOptions{}))
	})

	t.Run("match conditions", func(t *testing.T) {
		// Called only for writers who may list secrets: the administrator, not jane, who
		// may only create ServiceAccounts in "plain".
		hook := admissionregistrationv1.ValidatingWebhook{
			Name: "trusted.hooks.example.io", ClientConfig: urlHook(hooks, "/validate"),
			Rules: rule([]string{"serviceaccounts"}, admissionregistrationv1.Create),
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "may-list-secrets",
				Expression: `authorizer.group('').resource('secrets').namespace('plain').check('list').allowed()`}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}
		cfg := validatingConfig(hook)
		cfg.Name = "trusted"
		_, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
		check(t, err)
		_, err = c.RbacV1().Roles("plain").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "sa-maker"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{})
		check(t, err)
		_, err = c.RbacV1().RoleBindings("plain").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "jane"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "sa-maker"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}}}, metav1.CreateOptions{})
		check(t, err)
		asJane := rest.CopyConfig(env.AdminConfig)
		asJane.Impersonate = rest.ImpersonationConfig{UserName: "jane"}
		jane, err := kubernetes.NewForConfig(asJane)
		check(t, err)

		sa := func(name string) *corev1.ServiceAccount {
			return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: name}}
		}
		i := 0
		eventually(t, "the webhook to refuse the administrator's reserved name", func() (bool, error) {
			i++
			_, err := c.CoreV1().ServiceAccounts("plain").Create(ctx, sa(fmt.Sprintf("forbidden-admin-%d", i)), metav1.CreateOptions{})
			return apierrors.IsForbidden(err), err
		})
		// The authorizer reads the new RoleBinding from its cache, which may lag the write:
		// only its refusal is retried; the webhook's would fail the test.
		eventually(t, "jane's create, once RBAC allows it", func() (bool, error) {
			_, err := jane.CoreV1().ServiceAccounts("plain").Create(ctx, sa("forbidden-jane"), metav1.CreateOptions{})
			if err != nil && !strings.Contains(err.Error(), `User "jane" cannot create resource`) {
				t.Fatal(err)
			}
			return err == nil, err
		})
		if got := hooks.seen("forbidden-jane"); len(got) != 0 {
			t.Errorf("the webhook was called for jane, whose writes its condition excludes: %+v", got)
		}
		check(t, c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "trusted", metav1.DeleteOptions{}))
	})

	t.Run("failure policy", func(t *testing.T) {
		down := admissionregistrationv1.ValidatingWebhook{
			Name:                    "down.hooks.example.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(downURL(t)), CABundle: hooks.caBundle},
			Rules:                   rule([]string{"secrets"}, admissionregistrationv1.Create),
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](2),
		}
		cfg := validatingConfig(down)
		cfg.Name = "down"
		cfg, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
		check(t, err)
		secret := func(name string) *corev1.Secret {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: name}}
		}
		_, err = c.CoreV1().Secrets("plain").Create(ctx, secret("ignored"), metav1.CreateOptions{})
		check(t, err)

		cfg.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		_, err = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{})
		check(t, err)
		i := 0
		eventually(t, "a webhook that is down and fails closed to refuse a secret", func() (bool, error) {
			i++
			_, err := c.CoreV1().Secrets("plain").Create(ctx, secret(fmt.Sprintf("closed-%d", i)), metav1.CreateOptions{})
			return apierrors.IsInternalError(err) && strings.Contains(err.Error(), `failed calling webhook "down.hooks.example.io"`), err
		})

		// Without its configuration, the webhook is no longer called.
		check(t, c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "down", metav1.DeleteOptions{}))
		eventually(t, "secrets to be admitted again", func() (bool, error) {
			i++
			_, err := c.CoreV1().Secrets("plain").Create(ctx, secret(fmt.Sprintf("open-%d", i)), metav1.CreateOptions{})
			return err == nil, err
		})
	})
}
