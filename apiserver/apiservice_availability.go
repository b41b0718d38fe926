package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiservicehelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
)

var (
	servicesResource       = corev1.Resource("services")
	endpointSlicesResource = discoveryv1.Resource("endpointslices")
)

// apiServiceAvailability keeps every APIService's Available condition, as kube-aggregator's
// two status controllers do: a local one (no service) is available; a Service-backed one
// is checked as the aggregator checks it (the Service, its port, its EndpointSlices'
// ready addresses), and where the aggregator would then call the service's discovery
// endpoint miniplane, which proxies nothing, reports the check failed. It runs whenever
// an APIService, a Service or an EndpointSlice changes; every API server of a cluster runs
// one and they compute the same condition, so the first write leaves nothing for the rest.
type apiServiceAvailability struct {
	*passLoop
	s *Server
}

func newAPIServiceAvailability(s *Server) *apiServiceAvailability {
	a := &apiServiceAvailability{s: s}
	a.passLoop = newPassLoop(s, "apiservice availability", a.check)
	return a
}

// check writes the Available condition of every APIService whose condition is not what
// the cache's Services and EndpointSlices say it is.
func (a *apiServiceAvailability) check(ctx context.Context) error {
	res := a.s.reg.lookupGroupResource(apiServicesResource)
	if res == nil {
		return nil
	}
	var errs []error
	for _, o := range a.s.cached(apiServicesResource, "") {
		svc := o.(*apiregistrationv1.APIService)
		want := a.availability(svc)
		if cur := apiservicehelper.GetAPIServiceConditionByType(svc, apiregistrationv1.Available); cur != nil &&
			cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message {
			continue
		}
		err := a.s.rewrite(ctx, res.key(a.s.cfg.EtcdPrefix, "", svc.Name), func(cur runtime.Object) (runtime.Object, error) {
			next := cur.(*apiregistrationv1.APIService)
			// Computed from another version of the spec: the change will trigger a pass.
			if !apiequality.Semantic.DeepEqual(next.Spec, svc.Spec) {
				return nil, errDryRun{}
			}
			before := next.Status.DeepCopy()
			apiservicehelper.SetAPIServiceCondition(next, want)
			if apiequality.Semantic.DeepEqual(before, &next.Status) {
				return nil, errDryRun{}
			}
			return next, nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// availability is the Available condition svc should have now.
func (a *apiServiceAvailability) availability(svc *apiregistrationv1.APIService) apiregistrationv1.APIServiceCondition {
	ref := svc.Spec.Service
	cond := apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available,
		Status: apiregistrationv1.ConditionFalse, LastTransitionTime: metav1.NewTime(a.s.clock.Now())}
	if ref == nil {
		cond.Status, cond.Reason, cond.Message = apiregistrationv1.ConditionTrue, "Local", "Local APIServices are always available"
		return cond
	}
	var service *corev1.Service
	for _, o := range a.s.cached(servicesResource, ref.Namespace) {
		if s := o.(*corev1.Service); s.Name == ref.Name {
			service = s
		}
	}
	if service == nil {
		cond.Reason, cond.Message = "ServiceNotFound", fmt.Sprintf("service/%s in %q is not present", ref.Name, ref.Namespace)
		return cond
	}
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	if service.Spec.Type == corev1.ServiceTypeClusterIP {
		i := slices.IndexFunc(service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == port })
		if i < 0 {
			cond.Reason, cond.Message = "ServicePortError", fmt.Sprintf("service/%s in %q is not listening on port %d", ref.Name, ref.Namespace, port)
			return cond
		}
		portName := service.Spec.Ports[i].Name
		var sliceList []*discoveryv1.EndpointSlice
		for _, o := range a.s.cached(endpointSlicesResource, ref.Namespace) {
			if es := o.(*discoveryv1.EndpointSlice); es.Labels[discoveryv1.LabelServiceName] == ref.Name {
				sliceList = append(sliceList, es)
			}
		}
		if len(sliceList) == 0 {
			cond.Reason, cond.Message = "EndpointsNotFound", fmt.Sprintf("cannot find endpointslices for service/%s in %q", ref.Name, ref.Namespace)
			return cond
		}
		if !slices.ContainsFunc(sliceList, func(es *discoveryv1.EndpointSlice) bool { return readyOnPort(es, portName) }) {
			cond.Reason, cond.Message = "MissingEndpoints",
				fmt.Sprintf("endpointslices for service/%s in %q have no addresses with port name %q", ref.Name, ref.Namespace, portName)
			return cond
		}
	}
	cond.Reason = "FailedDiscoveryCheck"
	cond.Message = fmt.Sprintf("miniplane does not proxy aggregated APIs: no discovery request was sent to service/%s in %q for %s/%s",
		ref.Name, ref.Namespace, svc.Spec.Group, svc.Spec.Version)
	return cond
}

// readyOnPort reports whether es has a ready endpoint and a port of that name, which is
// where the aggregator would send its requests.
func readyOnPort(es *discoveryv1.EndpointSlice, portName string) bool {
	ready := slices.ContainsFunc(es.Endpoints, func(e discoveryv1.Endpoint) bool {
		return e.Conditions.Ready == nil || *e.Conditions.Ready
	})
	return ready && slices.ContainsFunc(es.Ports, func(p discoveryv1.EndpointPort) bool {
		return p.Name != nil && *p.Name == portName && p.Port != nil
	})
}
