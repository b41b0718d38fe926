package apiserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	apiregistrationinstall "k8s.io/kube-aggregator/pkg/apis/apiregistration/install"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiservicevalidation "k8s.io/kube-aggregator/pkg/apis/apiregistration/validation"
)

// APIServices register an aggregated API: a group/version that kube-apiserver's aggregator
// serves by proxying to a Service (metrics-server's v1beta1.metrics.k8s.io, an adapter's
// custom metrics). miniplane stores them with kube-aggregator's defaults and validation and
// reports their availability as the aggregator's status controllers do
// (apiServiceAvailability), but proxies nothing: a Service-backed APIService is never
// Available, and its group is not added to discovery. docs/kinds-and-admission.md says more.

var apiServicesResource = apiregistrationv1.Resource("apiservices")

// apiServiceScheme knows apiregistration's internal types and their conversions from v1:
// kube-aggregator's validation works on the internal types.
var apiServiceScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiregistrationinstall.Install(s)
	return s
}()

// apiServiceErrors runs one of kube-aggregator's validations on the internal form of svc.
// The validations check the object's metadata too; the server's own metadata checks
// already cover all of it but the name, whose rule (version.group) only the kind knows, so
// only the name's errors are kept from the library's.
func apiServiceErrors(svc *apiregistrationv1.APIService, validate func(*apiregistration.APIService) field.ErrorList) field.ErrorList {
	in := &apiregistration.APIService{}
	if err := apiServiceScheme.Convert(svc, in, nil); err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	var errs field.ErrorList
	for _, e := range validate(in) {
		if e.Field == "metadata.name" || !strings.HasPrefix(e.Field, "metadata") {
			errs = append(errs, e)
		}
	}
	return errs
}

// anyAPIServiceName leaves an APIService's name to kube-aggregator's validation, which
// checks it against the spec.
func anyAPIServiceName(string, bool) []string { return nil }

var apiServiceRules = kindRules[*apiregistrationv1.APIService]{
	hasStatus: true,
	defaults:  apiregistrationv1.SetObjectDefaults_APIService,
	check: func(svc *apiregistrationv1.APIService) field.ErrorList {
		return apiServiceErrors(svc, func(in *apiregistration.APIService) field.ErrorList {
			return apiservicevalidation.ValidateAPIService(context.Background(), in)
		})
	},
	checkStatus: func(svc, _ *apiregistrationv1.APIService) field.ErrorList {
		return apiServiceErrors(svc, func(in *apiregistration.APIService) field.ErrorList {
			return apiservicevalidation.ValidateAPIServiceStatus(&in.Status, field.NewPath("status"))
		})
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Service", Type: "string", Description: "The reference to the service that hosts this API endpoint."},
		{Name: "Available", Type: "string", Description: "Whether this service is available."},
		ageColumn(),
	},
	row: func(svc *apiregistrationv1.APIService, now time.Time) []any {
		service := "Local"
		if ref := svc.Spec.Service; ref != nil {
			service = ref.Namespace + "/" + ref.Name
		}
		available := string(apiregistrationv1.ConditionUnknown)
		for _, c := range svc.Status.Conditions {
			if c.Type != apiregistrationv1.Available {
				continue
			}
			available = string(c.Status)
			if c.Status != apiregistrationv1.ConditionTrue && c.Reason != "" {
				available = fmt.Sprintf("%s (%s)", c.Status, c.Reason)
			}
		}
		return []any{svc.Name, service, available, age(svc.CreationTimestamp, now)}
	},
}
