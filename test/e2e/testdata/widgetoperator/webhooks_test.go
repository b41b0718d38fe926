package widgetoperator_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/miniplane/miniplane/test/testenv"

	"example.com/widgetoperator"
)

// servingCert writes a self-signed certificate for 127.0.0.1 as tls.crt and tls.key into
// dir, where controller-runtime's webhook server looks for them, and returns its PEM.
func servingCert(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "widget-webhooks"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for name, data := range map[string][]byte{
		"tls.crt": certPEM,
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certPEM
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestWidgetWebhooks: the operator's admission webhooks, served by controller-runtime's
// webhook server on loopback and registered by url as envtest registers them, are called
// by miniplane for its custom resource: a Widget without a size is stored with the
// defaulted one, and a Widget too large is refused, on create and on patch, with the
// webhook's message.
func TestWidgetWebhooks(t *testing.T) {
	ctrl.SetLogger(testr.New(t))
	env := testenv.New(t, testenv.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, scheme := installWidgets(ctx, t, env)

	certDir := t.TempDir()
	caBundle := servingCert(t, certDir)
	port := freePort(t)
	mgr, err := ctrl.NewManager(env.AdminConfig, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})})
	if err != nil {
		t.Fatal(err)
	}
	widgetoperator.SetupWebhooks(mgr)
	startManager(ctx, t, cancel, mgr)
	until(t, "the webhook server to serve", func() bool { return mgr.GetWebhookServer().StartedChecker()(nil) == nil })

	url := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, path)), CABundle: caBundle}
	}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}}}
	if err := c.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "widget-defaults"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "default.widgets.example.com", ClientConfig: url("/default-widget"),
			Rules: rules, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "widget-validation"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "validate.widgets.example.com", ClientConfig: url("/validate-widget"),
			Rules: rules, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}},
	}); err != nil {
		t.Fatal(err)
	}

	widget := func(name string, size ...int64) *unstructured.Unstructured {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec":     map[string]any{},
		}}
		if len(size) > 0 {
			_ = unstructured.SetNestedField(w.Object, size[0], "spec", "size")
		}
		return w
	}
	// The configurations reach the API server's informers a moment after they are written;
	// until then a Widget is admitted as it is.
	attempt := 0
	var defaulted *unstructured.Unstructured
	until(t, "a Widget without a size to be defaulted", func() bool {
		attempt++
		w := widget(fmt.Sprintf("plain-%d", attempt))
		if err := c.Create(ctx, w); err != nil {
			t.Logf("create: %v", err)
			return false
		}
		size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
		defaulted = w
		return size == 1
	})
	stored := widget("")
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: defaulted.GetName()}, stored); err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(stored.Object, "spec", "size"); size != 1 {
		t.Errorf("stored Widget %s has size %d, want the defaulted 1", stored.GetName(), size)
	}

	// The validating configuration reaches its informer on its own schedule too.
	want := fmt.Sprintf(`admission webhook "validate.widgets.example.com" denied the request: spec.size 50 is above %d`, widgetoperator.MaxSize)
	attempt = 0
	until(t, "a Widget of size 50 to be refused", func() bool {
		attempt++
		err := c.Create(ctx, widget(fmt.Sprintf("huge-%d", attempt), 50))
		if err == nil {
			return false
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("creating a Widget of size 50: %v, want 403 with %q", err, want)
		}
		return true
	})
	err = c.Patch(ctx, stored, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":50}}`)))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("patching a Widget to size 50: %v, want 403 with %q", err, want)
	}
	if err := c.Patch(ctx, stored, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":7}}`))); err != nil {
		t.Errorf("patching a Widget to size 7: %v", err)
	}
}
