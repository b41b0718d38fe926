package apiserver

import (
	"context"
	"errors"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"

	"github.com/miniplane/miniplane/apiserver/internal/openapidefs"
)

var validatingPoliciesResource = admissionregistrationv1.Resource("validatingadmissionpolicies")

// policyTypeChecking writes each ValidatingAdmissionPolicy's status.typeChecking and
// observedGeneration, as kube-controller-manager's type-checking controller does: the
// policy's expressions are checked against the schemas of the kinds it matches (at most ten),
// and what would fail at run time (a field the kind does not have) is reported as a warning.
// It runs whenever a policy changes. Built-in kinds' schemas come from the compiled-in
// OpenAPI definitions, custom resources' from the server's own OpenAPI v3 documents.
type policyTypeChecking struct {
	*passLoop
	s *Server
	// checker is built when the first policy needs checking.
	checker *validatingpolicy.TypeChecker
}

func newPolicyTypeChecking(s *Server) *policyTypeChecking {
	c := &policyTypeChecking{s: s}
	c.passLoop = newPassLoop(s, "admission policies' type checking", c.check)
	return c
}

// check type-checks every policy whose status does not describe its generation.
func (c *policyTypeChecking) check(ctx context.Context) error {
	res := c.s.reg.lookupGroupResource(validatingPoliciesResource)
	if res == nil {
		return nil
	}
	var errs []error
	for _, o := range c.s.cached(validatingPoliciesResource, "") {
		policy := o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if policy.Status.ObservedGeneration == policy.Generation && policy.Status.TypeChecking != nil {
			continue
		}
		// Built for the first policy to check: its schemas of the built-in kinds hold
		// 3.5 MB that a cluster without policies has no use for.
		if c.checker == nil {
			builtin := resolver.NewDefinitionsSchemaResolver(openapidefs.GetOpenAPIDefinitions, Scheme)
			c.checker = &validatingpolicy.TypeChecker{
				SchemaResolver: builtin.Combine(&resolver.ClientDiscoveryResolver{Discovery: openAPIDiscovery{s: c.s}}),
				RestMapper:     &registryRESTMapper{reg: c.s.reg},
			}
		}
		want := admissionregistrationv1.TypeChecking{ExpressionWarnings: c.checker.Check(policy)}
		err := c.s.rewrite(ctx, res.key(c.s.cfg.EtcdPrefix, "", policy.Name), func(cur runtime.Object) (runtime.Object, error) {
			next := cur.(*admissionregistrationv1.ValidatingAdmissionPolicy)
			// Checked from another generation: the change will trigger a pass.
			if next.Generation != policy.Generation {
				return nil, errDryRun{}
			}
			if next.Status.ObservedGeneration == next.Generation && apiequality.Semantic.DeepEqual(next.Status.TypeChecking, &want) {
				return nil, errDryRun{}
			}
			next.Status.ObservedGeneration = next.Generation
			next.Status.TypeChecking = &want
			return next, nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
