package apiserver_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

func metricsAPIService() *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1",
			GroupPriorityMinimum: 100, VersionPriority: 100, InsecureSkipTLSVerify: true,
			Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}}}
}

// TestAPIServiceInvalid: APIServices are refused as kube-aggregator refuses them, with
// its validation, and nothing is stored.
func TestAPIServiceInvalid(t *testing.T) {
	env := newEnv(t)
	agg := aggregator.NewForConfigOrDie(env.AdminConfig)
	create := func(mutate func(*apiregistrationv1.APIService)) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, _ kubernetes.Interface) error {
			svc := metricsAPIService()
			mutate(svc)
			_, err := agg.ApiregistrationV1().APIServices().Create(ctx, svc, metav1.CreateOptions{})
			return err
		}
	}
	runInvalid(t, env.Client, []invalidCreate{
		{"name that is not version.group, priorities out of range", create(func(s *apiregistrationv1.APIService) {
			s.Name = "metrics"
			s.Spec.GroupPriorityMinimum, s.Spec.VersionPriority = 0, 1001
		}), []string{"metadata.name", "spec.groupPriorityMinimum", "spec.versionPriority"}},
		{"service without a name, both a CA and no verification", create(func(s *apiregistrationv1.APIService) {
			s.Spec.Service.Name = ""
			s.Spec.CABundle = []byte("-----BEGIN CERTIFICATE-----")
		}), []string{"spec.insecureSkipTLSVerify", "spec.service.name"}},
		{"local service with a CA", create(func(s *apiregistrationv1.APIService) {
			s.Spec.Service, s.Spec.InsecureSkipTLSVerify = nil, false
			s.Spec.CABundle = []byte("x")
		}), []string{"spec.caBundle"}},
	})
}

// TestAPIServiceAvailability: an APIService's Available condition says what kube-
// aggregator's status controllers would say as its Service and endpoints come and go,
// and `kubectl get apiservices` shows it.
func TestAPIServiceAvailability(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	agg := aggregator.NewForConfigOrDie(env.AdminConfig).ApiregistrationV1().APIServices()

	svc, err := agg.Create(ctx, metricsAPIService(), metav1.CreateOptions{})
	check(t, err)
	if p := svc.Spec.Service.Port; p == nil || *p != 443 {
		t.Errorf("service port %v, want the default 443", p)
	}
	local, err := agg.Create(ctx, &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "example.com", Version: "v1", GroupPriorityMinimum: 1000, VersionPriority: 15}},
		metav1.CreateOptions{})
	check(t, err)

	waitFor := func(name, status, reason string) {
		t.Helper()
		eventually(t, name+" "+reason, func() (bool, error) {
			got, err := agg.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiregistrationv1.Available && string(c.Status) == status && c.Reason == reason {
					return true, nil
				}
			}
			return false, nil
		})
	}
	waitFor(local.Name, "True", "Local")
	waitFor(svc.Name, "False", "ServiceNotFound")

	services := env.Client.CoreV1().Services("kube-system")
	_, err = services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 8443}}}}, metav1.CreateOptions{})
	check(t, err)
	waitFor(svc.Name, "False", "ServicePortError")

	svc, err = agg.Get(ctx, svc.Name, metav1.GetOptions{})
	check(t, err)
	port := int32(8443)
	svc.Spec.Service.Port = &port
	_, err = agg.Update(ctx, svc, metav1.UpdateOptions{})
	check(t, err)
	waitFor(svc.Name, "False", "EndpointsNotFound")

	name, ready, no := "https", true, false
	slices := env.Client.DiscoveryV1().EndpointSlices("kube-system")
	slice, err := slices.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-abcde",
		Labels: map[string]string{discoveryv1.LabelServiceName: "metrics-server"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}}},
		Ports:     []discoveryv1.EndpointPort{{Name: &name, Port: &port}}}, metav1.CreateOptions{})
	check(t, err)
	waitFor(svc.Name, "False", "MissingEndpoints")

	slice.Endpoints[0].Conditions.Ready = &ready
	_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	check(t, err)
	waitFor(svc.Name, "False", "FailedDiscoveryCheck") // miniplane proxies nothing

	// A client's status write is refused when it is invalid, kept otherwise (until the
	// next change makes the server check again).
	got, err := agg.Get(ctx, svc.Name, metav1.GetOptions{})
	check(t, err)
	got.Status.Conditions[0].Status = "Maybe"
	_, err = agg.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if fields := causeFields(t, err); strings.Join(fields, ",") != "status.conditions[0].status" {
		t.Errorf("an invalid condition status: causes %v", fields)
	}

	rows := apiServiceRows(t, env.Client)
	want := []string{"v1.example.com Local True", "v1beta1.metrics.k8s.io kube-system/metrics-server False (FailedDiscoveryCheck)"}
	if len(rows) != 2 || !strings.HasPrefix(rows[0], want[0]) || !strings.HasPrefix(rows[1], want[1]) {
		t.Errorf("kubectl get apiservices rows %q, want them to start %q", rows, want)
	}
}

func apiServiceRows(t *testing.T, c kubernetes.Interface) []string {
	t.Helper()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(testCtx(t))
	check(t, err)
	return rowsOf(t, raw)
}
