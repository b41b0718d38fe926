package apiserver

import (
	"context"
	"errors"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// roleAggregator is the clusterrole-aggregation controller inside the API server: every
// ClusterRole with an aggregationRule gets the rules of the ClusterRoles it selects,
// whenever a ClusterRole changes. Every API server of a cluster runs one; they compute the
// same rules, so whichever writes first leaves nothing for the others to do.
type roleAggregator struct {
	*passLoop
	s *Server
}

func newRoleAggregator(s *Server) *roleAggregator {
	a := &roleAggregator{s: s}
	a.passLoop = newPassLoop(s, "aggregated clusterroles", a.aggregate)
	return a
}

// aggregate brings every aggregated ClusterRole in line with what it selects, as the cache
// holds them. Writing one changes a ClusterRole and so triggers another pass, which picks
// up roles that aggregate that one (admin selects edit, which selects view).
func (a *roleAggregator) aggregate(ctx context.Context) error {
	objs := a.s.cached(clusterRolesResource, "")
	all := make([]*rbacv1.ClusterRole, len(objs))
	for i, o := range objs {
		all[i] = o.(*rbacv1.ClusterRole)
	}
	res := a.s.reg.lookupGroupResource(clusterRolesResource)
	var errs []error
	for _, role := range all {
		rules, ok := auth.AggregatedRules(role, all)
		if !ok || apiequality.Semantic.DeepEqual(rules, role.Rules) {
			continue
		}
		selectors := role.AggregationRule
		err := a.s.rewrite(ctx, res.key(a.s.cfg.EtcdPrefix, "", role.Name), func(cur runtime.Object) (runtime.Object, error) {
			cr := cur.(*rbacv1.ClusterRole)
			// Computed from another version of the role: the change will trigger a pass.
			if !apiequality.Semantic.DeepEqual(cr.AggregationRule, selectors) || apiequality.Semantic.DeepEqual(cr.Rules, rules) {
				return nil, errDryRun{}
			}
			cr.Rules = rules
			return cr, nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
