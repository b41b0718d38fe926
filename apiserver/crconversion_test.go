package apiserver_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/miniplane/miniplane/test/testenv"
)

// converter is a conversion webhook a test runs on loopback, as envtest runs a controller's:
// Gadget v1 has spec.color, v2 spec.paint.colour. It counts the objects it converts, by
// request, and fails every request while down is set.
type converter struct {
	srv      *httptest.Server
	caBundle []byte
	down     atomic.Bool
	refused  atomic.Int32 // requests answered with an error while down

	mu       sync.Mutex
	requests []int // objects per request
}

func newConverter(t *testing.T) *converter {
	t.Helper()
	c := &converter{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(c.convert))
	c.srv.StartTLS()
	t.Cleanup(c.srv.Close)
	c.caBundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.srv.Certificate().Raw})
	return c
}

func (c *converter) convert(w http.ResponseWriter, r *http.Request) {
	if c.down.Load() {
		c.refused.Add(1)
		http.Error(w, "converter is down", http.StatusServiceUnavailable)
		return
	}
	var review apiextensionsv1.ConversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.requests = append(c.requests, len(review.Request.Objects))
	c.mu.Unlock()
	resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, raw := range review.Request.Objects {
		var obj map[string]any
		if err := json.Unmarshal(raw.Raw, &obj); err != nil {
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			break
		}
		spec, _ := obj["spec"].(map[string]any)
		if spec == nil {
			spec = map[string]any{}
		}
		switch review.Request.DesiredAPIVersion {
		case "example.com/v2":
			if color, ok := spec["color"]; ok {
				spec["paint"] = map[string]any{"colour": color}
				delete(spec, "color")
			}
		case "example.com/v1":
			if paint, ok := spec["paint"].(map[string]any); ok {
				spec["color"] = paint["colour"]
				delete(spec, "paint")
			}
		}
		obj["spec"] = spec
		obj["apiVersion"] = review.Request.DesiredAPIVersion
		out, _ := json.Marshal(obj)
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	review.Response, review.Request = resp, nil
	_ = json.NewEncoder(w).Encode(&review)
}

// sent is how many objects each request so far asked the webhook to convert.
func (c *converter) sent() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.requests)
}

// gadgetCRD serves Gadget in v1 (stored) and v2, converted by clientConfig's webhook, or
// with the None strategy when clientConfig is nil.
func gadgetCRD(clientConfig *apiextensionsv1.WebhookClientConfig) *apiextensionsv1.CustomResourceDefinition {
	open := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
		}}}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gadget", Plural: "gadgets", Singular: "gadget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: open},
				{Name: "v2", Served: true, Schema: open},
			},
		},
	}
	if clientConfig != nil {
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"}, ClientConfig: clientConfig}}
	}
	return crd
}

func gadget(version, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/" + version, "kind": "Gadget",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     spec,
	}}
}

// gadgetVersions is an administrator's client of the default namespace's gadgets in each
// version.
func gadgetVersions(t *testing.T, env *testenv.Env) (v1, v2 dynamic.ResourceInterface) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	in := func(version string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: version, Resource: "gadgets"}).Namespace("default")
	}
	return in("v1"), in("v2")
}

// webhookConfig is the client config of conv's conversion endpoint.
func (c *converter) webhookConfig() *apiextensionsv1.WebhookClientConfig {
	return &apiextensionsv1.WebhookClientConfig{URL: ptr.To(c.srv.URL + "/convert"), CABundle: c.caBundle}
}

// storedAPIVersion is the apiVersion of the gadget's bytes in etcd.
func storedAPIVersion(t *testing.T, env *testenv.Env, name string) string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: env.EtcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	check(t, err)
	defer cli.Close()
	resp, err := cli.Get(testCtx(t), "/registry/example.com/gadgets/default/"+name)
	check(t, err)
	if len(resp.Kvs) != 1 {
		t.Fatalf("etcd holds %d objects for gadget %s", len(resp.Kvs), name)
	}
	var stored struct {
		APIVersion string `json:"apiVersion"`
	}
	check(t, json.Unmarshal(resp.Kvs[0].Value, &stored))
	return stored.APIVersion
}

// TestConversionWebhook: a definition whose versions a conversion webhook (reached by url)
// converts is served in both; objects are stored in the storage version whatever version
// they were written in, and every read, list and watch converts them to the version asked
// for, a list with one call for all its objects. While the webhook fails, reads that need
// it fail with 500 and reads in the stored version go on.
func TestConversionWebhook(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	conv := newConverter(t)
	installCRD(t, env, gadgetCRD(conv.webhookConfig()))
	v1, v2 := gadgetVersions(t, env)

	// Written in v1, read in v2.
	_, err := v1.Create(ctx, gadget("v1", "red", map[string]any{"color": "red"}), metav1.CreateOptions{})
	check(t, err)
	got, err := v2.Get(ctx, "red", metav1.GetOptions{})
	check(t, err)
	if colour, _, _ := unstructured.NestedString(got.Object, "spec", "paint", "colour"); colour != "red" || got.GetAPIVersion() != "example.com/v2" {
		t.Errorf("v2 read of a v1 gadget: %v", got.Object)
	}

	// Written in v2: stored in v1, answered in v2.
	created, err := v2.Create(ctx, gadget("v2", "blue", map[string]any{"paint": map[string]any{"colour": "blue"}}), metav1.CreateOptions{})
	check(t, err)
	if colour, _, _ := unstructured.NestedString(created.Object, "spec", "paint", "colour"); colour != "blue" || created.GetAPIVersion() != "example.com/v2" {
		t.Errorf("v2 create answered %v", created.Object)
	}
	if got := storedAPIVersion(t, env, "blue"); got != "example.com/v1" {
		t.Errorf("a gadget written in v2 is stored as %s, want the storage version example.com/v1", got)
	}
	got, err = v1.Get(ctx, "blue", metav1.GetOptions{})
	check(t, err)
	if color, _, _ := unstructured.NestedString(got.Object, "spec", "color"); color != "blue" {
		t.Errorf("v1 read of a v2 gadget: %v", got.Object)
	}

	// A merge patch in v2 changes the v1 field.
	_, err = v2.Patch(ctx, "blue", types.MergePatchType, []byte(`{"spec":{"paint":{"colour":"green"}}}`), metav1.PatchOptions{})
	check(t, err)
	got, err = v1.Get(ctx, "blue", metav1.GetOptions{})
	check(t, err)
	if color, _, _ := unstructured.NestedString(got.Object, "spec", "color"); color != "green" {
		t.Errorf("v1 read after a v2 patch: %v", got.Object)
	}

	// Server-side apply in v2 sees the field a v1 writer owns, under its v2 name.
	_, err = v2.Apply(ctx, "red", gadget("v2", "red", map[string]any{"paint": map[string]any{"colour": "pink"}}), metav1.ApplyOptions{FieldManager: "two"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), ".spec.color") {
		t.Errorf("v2 apply over a field a v1 writer owns: %v, want a conflict on .spec.color", err)
	}

	// A list from etcd converts its objects in one request. (The v2 watch cache sends one
	// object a request, each change as it comes.)
	before := len(conv.sent())
	list, err := v2.List(ctx, metav1.ListOptions{Limit: 10}) // a page: etcd answers it
	check(t, err)
	if sent := conv.sent()[before:]; !slices.Contains(sent, len(list.Items)) {
		t.Errorf("a list of %d gadgets (all stored in v1) was converted in requests of %v objects, want one of them all", len(list.Items), sent)
	}
	for _, item := range list.Items {
		if _, found, _ := unstructured.NestedString(item.Object, "spec", "paint", "colour"); !found || item.GetAPIVersion() != "example.com/v2" {
			t.Errorf("listed in v2: %v", item.Object)
		}
	}

	// A watch in v2 (from the watch cache) sees a v1 write converted.
	w, err := v2.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	check(t, err)
	defer w.Stop()
	_, err = v1.Patch(ctx, "red", types.MergePatchType, []byte(`{"spec":{"color":"purple"}}`), metav1.PatchOptions{})
	check(t, err)
	select {
	case ev := <-w.ResultChan():
		u, ok := ev.Object.(*unstructured.Unstructured)
		colour, _, _ := unstructured.NestedString(u.Object, "spec", "paint", "colour")
		if !ok || ev.Type != watch.Modified || colour != "purple" || u.GetAPIVersion() != "example.com/v2" {
			t.Errorf("v2 watch event: %s %v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no v2 watch event for a v1 patch")
	}

	// The webhook down: a read that needs it fails with 500 and its message; one that does
	// not is answered.
	conv.down.Store(true)
	_, err = v2.Get(ctx, "red", metav1.GetOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "conversion webhook for example.com/v1, Kind=Gadget failed") {
		t.Errorf("v2 read with the webhook down: %v, want a 500 naming the conversion webhook", err)
	}
	_, err = v2.Create(ctx, gadget("v2", "lost", map[string]any{"paint": map[string]any{"colour": "grey"}}), metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) {
		t.Errorf("v2 create with the webhook down: %v, want a 500", err)
	}
	if _, err := v1.Get(ctx, "lost", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a create whose conversion failed left an object: %v", err)
	}
	if _, err := v1.Get(ctx, "red", metav1.GetOptions{}); err != nil {
		t.Errorf("v1 read with the webhook down: %v", err)
	}
	// A write in v1 needs no conversion; the v2 cache cannot take it in until the webhook
	// is back, and then its watchers start again.
	refused := conv.refused.Load()
	_, err = v1.Patch(ctx, "red", types.MergePatchType, []byte(`{"spec":{"color":"orange"}}`), metav1.PatchOptions{})
	check(t, err)
	eventually(t, "the v2 cache to try converting the v1 write", func() (bool, error) {
		return conv.refused.Load() > refused, nil
	})
	conv.down.Store(false)
	eventually(t, "the v2 cache to take in what was written while the webhook was down", func() (bool, error) {
		got, err := v2.Get(ctx, "red", metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		colour, _, _ := unstructured.NestedString(got.Object, "spec", "paint", "colour")
		return colour == "orange", fmt.Errorf("colour %q", colour)
	})
	ended := time.After(30 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-ended:
			t.Fatal("the v2 watch from before the webhook failed was not ended")
		}
	}

	// A namespace goes, with its gadgets, even while the webhook is down: they are deleted
	// in the version they are stored in.
	_, err = env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
	check(t, err)
	inDoomed := gadget("v1", "inside", map[string]any{"color": "red"})
	inDoomed.SetNamespace("doomed")
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	_, err = dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}).Namespace("doomed").Create(ctx, inDoomed, metav1.CreateOptions{})
	check(t, err)
	conv.down.Store(true)
	check(t, env.Client.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}))
	eventually(t, "the namespace to go with its gadget while the webhook is down", func() (bool, error) {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// TestConversionNone: with the None strategy a write in another version is stored in the
// storage version too, and only apiVersion differs between the versions' reads.
func TestConversionNone(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	installCRD(t, env, gadgetCRD(nil))
	v1, v2 := gadgetVersions(t, env)
	_, err := v2.Create(ctx, gadget("v2", "plain", map[string]any{"paint": map[string]any{"colour": "blue"}}), metav1.CreateOptions{})
	check(t, err)
	if got := storedAPIVersion(t, env, "plain"); got != "example.com/v1" {
		t.Errorf("stored as %s, want example.com/v1", got)
	}
	got, err := v1.Get(ctx, "plain", metav1.GetOptions{})
	check(t, err)
	if colour, _, _ := unstructured.NestedString(got.Object, "spec", "paint", "colour"); colour != "blue" || got.GetAPIVersion() != "example.com/v1" {
		t.Errorf("v1 read: %v", got.Object)
	}
}

// TestConversionWebhookByService: a definition whose conversion webhook names a Service is
// accepted with a warning; its objects are served in the stored version, and a read in
// another version fails as it would with the webhook down.
func TestConversionWebhookByService(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	seen := &warnings{}
	cfg := rest.CopyConfig(env.AdminConfig)
	cfg.WarningHandler = seen
	c, err := apiextensionsclient.NewForConfig(cfg)
	check(t, err)
	crd := gadgetCRD(&apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: "system", Name: "webhook-service", Path: ptr.To("/convert")}})
	_, err = c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	check(t, err)
	if got := strings.Join(seen.take(), "\n"); !strings.Contains(got, "conversion webhooks reached by url only") || !strings.Contains(got, "(versions v2)") {
		t.Errorf("warnings %q, want one saying the Service is not called for v2", got)
	}
	// Serving one version, the same definition needs no conversion and gets no warning.
	single := crd.DeepCopy()
	single.Name, single.Spec.Names.Plural, single.Spec.Names.Singular, single.Spec.Names.Kind = "widgets.example.com", "widgets", "widget", "Widget"
	single.Spec.Versions = single.Spec.Versions[:1]
	_, err = c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, single, metav1.CreateOptions{})
	check(t, err)
	if got := seen.take(); len(got) != 0 {
		t.Errorf("a definition of one version warned %q", got)
	}
	v1, v2 := gadgetVersions(t, env)
	eventually(t, "v1 gadgets to be served", func() (bool, error) {
		_, err := v1.Create(ctx, gadget("v1", "stored", map[string]any{"color": "red"}), metav1.CreateOptions{})
		return err == nil, err
	})
	if _, err := v1.Get(ctx, "stored", metav1.GetOptions{}); err != nil {
		t.Errorf("v1 read: %v", err)
	}
	_, err = v2.Get(ctx, "stored", metav1.GetOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "reached by url only") {
		t.Errorf("v2 read: %v, want a 500 saying the Service is not called", err)
	}
	// The watch cache of v2 cannot hold the object: its consistent list fails, not hangs.
	listCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := v2.List(listCtx, metav1.ListOptions{}); err == nil {
		t.Error("a v2 list succeeded without conversion")
	}
}

// TestConversionAfterStorageVersionChange: when the storage version moves from v1 to v2,
// objects stored in v1 stay as they are and are converted when read in v2 (from etcd and
// from the watch cache); what is written from then on is stored in v2.
func TestConversionAfterStorageVersionChange(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	conv := newConverter(t)
	crd := installCRD(t, env, gadgetCRD(conv.webhookConfig()))
	v1, v2 := gadgetVersions(t, env)
	_, err := v1.Create(ctx, gadget("v1", "before", map[string]any{"color": "red"}), metav1.CreateOptions{})
	check(t, err)

	c, err := apiextensionsclient.NewForConfig(env.AdminConfig)
	check(t, err)
	crd.Spec.Versions[0].Storage, crd.Spec.Versions[1].Storage = false, true
	crd, err = c.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
	check(t, err)
	eventually(t, "v2 to be the storage version", func() (bool, error) {
		got, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !slices.Equal(got.Status.StoredVersions, []string{"v1", "v2"}) {
			return false, fmt.Errorf("storedVersions %v", got.Status.StoredVersions)
		}
		// A write through v1 shows which storage version the server now uses.
		probe := gadget("v1", fmt.Sprintf("probe-%d", time.Now().UnixNano()), map[string]any{"color": "blue"})
		if _, err := v1.Create(ctx, probe, metav1.CreateOptions{}); err != nil {
			return false, err
		}
		return storedAPIVersion(t, env, probe.GetName()) == "example.com/v2", nil
	})
	if got := storedAPIVersion(t, env, "before"); got != "example.com/v1" {
		t.Errorf("the object stored before the change is now %s, want it left in example.com/v1", got)
	}
	for _, rv := range []string{"", "0"} { // from etcd, from the watch cache
		got, err := v2.Get(ctx, "before", metav1.GetOptions{ResourceVersion: rv})
		check(t, err)
		if colour, _, _ := unstructured.NestedString(got.Object, "spec", "paint", "colour"); colour != "red" || got.GetAPIVersion() != "example.com/v2" {
			t.Errorf("v2 read (resourceVersion %q) of a gadget stored in v1: %v", rv, got.Object)
		}
	}
}

// TestConversionForAdmissionWebhooks: an admission webhook whose rule names v1 of a
// definition (matchPolicy Equivalent, the default) is called for a write in v2, with the
// object converted to v1; what a mutating one changes is converted back. With matchPolicy
// Exact it is not called for v2.
func TestConversionForAdmissionWebhooks(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	conv := newConverter(t)
	hooks := newHookServer(t)
	installCRD(t, env, gadgetCRD(conv.webhookConfig()))
	v1Gadgets := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"gadgets"}}}}
	_, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "gadget-labels"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutate.gadgets.example.io", ClientConfig: urlHook(hooks, "/mutate"),
			Rules: v1Gadgets, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{})
	check(t, err)
	_, err = env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(
		admissionregistrationv1.ValidatingWebhook{Name: "validate.gadgets.example.io", ClientConfig: urlHook(hooks, "/validate"),
			Rules: v1Gadgets, ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "reject", Operator: metav1.LabelSelectorOpDoesNotExist}}},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}},
		admissionregistrationv1.ValidatingWebhook{Name: "exact.gadgets.example.io", ClientConfig: urlHook(hooks, "/validate"),
			Rules: v1Gadgets, MatchPolicy: ptr.To(admissionregistrationv1.Exact), ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"reject": "yes"}},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}},
	), metav1.CreateOptions{})
	check(t, err)
	v1, v2 := gadgetVersions(t, env)
	probe := 0
	eventually(t, "both webhooks to be called for v1 gadgets", func() (bool, error) {
		probe++
		created, err := v1.Create(ctx, gadget("v1", fmt.Sprintf("probe-%d", probe), map[string]any{"color": "red"}), metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		_, err = v1.Create(ctx, gadget("v1", fmt.Sprintf("forbidden-%d", probe), map[string]any{"color": "red"}), metav1.CreateOptions{})
		return created.GetLabels()["mutated-by"] == "hook" && apierrors.IsForbidden(err), err
	})

	// Refused in v2 by the v1 webhook, which was sent the v1 form.
	_, err = v2.Create(ctx, gadget("v2", "forbidden-v2", map[string]any{"paint": map[string]any{"colour": "blue"}}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("a v2 create the v1 webhook refuses: %v, want its 403", err)
	}
	reviews := hooks.seen("forbidden-v2")
	if len(reviews) == 0 {
		t.Fatal("no review of the v2 create")
	}
	for _, r := range reviews {
		var sent map[string]any
		check(t, json.Unmarshal(r.Object.Raw, &sent))
		spec, _ := sent["spec"].(map[string]any)
		if r.Kind.Version != "v1" || r.Resource.Version != "v1" || r.RequestKind.Version != "v2" || sent["apiVersion"] != "example.com/v1" || spec["color"] != "blue" {
			t.Errorf("review of a v2 create: kind %v, resource %v, request kind %v, object %v", r.Kind, r.Resource, r.RequestKind, sent)
		}
	}

	// Labelled in v2 by the v1 mutating webhook; its change comes back converted.
	created, err := v2.Create(ctx, gadget("v2", "labelled", map[string]any{"paint": map[string]any{"colour": "green"}}), metav1.CreateOptions{})
	check(t, err)
	if colour, _, _ := unstructured.NestedString(created.Object, "spec", "paint", "colour"); created.GetLabels()["mutated-by"] != "hook" || colour != "green" || created.GetAPIVersion() != "example.com/v2" {
		t.Errorf("a v2 create the v1 mutating webhook labels: %v", created.Object)
	}

	// matchPolicy Exact: the webhook for reject=yes v1 gadgets refuses them in v1, and does
	// not see them in v2.
	rejected := gadget("v1", "exact-v1", map[string]any{"color": "grey"})
	rejected.SetLabels(map[string]string{"reject": "yes"})
	if _, err := v1.Create(ctx, rejected, metav1.CreateOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("a v1 create the Exact webhook refuses: %v, want its 400", err)
	}
	rejected = gadget("v2", "exact-v2", map[string]any{"paint": map[string]any{"colour": "grey"}})
	rejected.SetLabels(map[string]string{"reject": "yes"})
	if _, err := v2.Create(ctx, rejected, metav1.CreateOptions{}); err != nil {
		t.Errorf("a v2 create only the Exact v1 webhook would refuse: %v", err)
	}
}
