package apiserver

import (
	"context"
	"errors"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/store"
)

// aggregationRetry is how long the aggregator waits before trying again after a failed
// write; a change in the meantime tries at once.
const aggregationRetry = time.Second

// roleAggregator is the clusterrole-aggregation controller inside the API server: every
// ClusterRole with an aggregationRule gets the rules of the ClusterRoles it selects,
// whenever a ClusterRole changes. Every API server of a cluster runs one; they compute the
// same rules, so whichever writes first leaves nothing for the others to do.
type roleAggregator struct {
	s    *Server
	kick chan struct{}
}

func newRoleAggregator(s *Server) *roleAggregator {
	return &roleAggregator{s: s, kick: make(chan struct{}, 1)}
}

// trigger asks for a pass; it never blocks (the ClusterRole cache calls it under its lock).
func (a *roleAggregator) trigger() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *roleAggregator) run(ctx context.Context) {
	a.trigger()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		if err := a.aggregate(ctx); err != nil && ctx.Err() == nil {
			a.s.log.Warn("aggregated clusterroles not updated", "err", err)
			go func() {
				select {
				case <-ctx.Done():
				case <-a.s.clock.After(aggregationRetry):
					a.trigger()
				}
			}()
		}
	}
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
		_, err := a.s.store.GuaranteedUpdate(ctx, res.key(a.s.cfg.EtcdPrefix, "", role.Name), func(cur runtime.Object) (runtime.Object, error) {
			cr := cur.(*rbacv1.ClusterRole)
			// Computed from another version of the role: the change will trigger a pass.
			if !apiequality.Semantic.DeepEqual(cr.AggregationRule, selectors) || apiequality.Semantic.DeepEqual(cr.Rules, rules) {
				return nil, errDryRun{}
			}
			cr.Rules = rules
			return cr, nil
		}, store.UpdateOptions{})
		var dr errDryRun
		if err != nil && !errors.As(err, &dr) && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
