package auth

import (
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// AggregatedRules are the rules an aggregated ClusterRole must hold, as the
// clusterrole-aggregation controller computes them: the rules of every other ClusterRole
// that one of its selectors matches, in the order of the matched roles' names, each rule
// once. ok is false when role has no aggregation rule. A selector that does not parse
// matches nothing (validation refuses such selectors on write).
func AggregatedRules(role *rbacv1.ClusterRole, all []*rbacv1.ClusterRole) (rules []rbacv1.PolicyRule, ok bool) {
	if role.AggregationRule == nil {
		return nil, false
	}
	var selectors []labels.Selector
	for i := range role.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err == nil {
			selectors = append(selectors, sel)
		}
	}
	matched := map[string]*rbacv1.ClusterRole{}
	for _, other := range all {
		if other.Name == role.Name {
			continue
		}
		for _, sel := range selectors {
			if sel.Matches(labels.Set(other.Labels)) {
				matched[other.Name] = other
				break
			}
		}
	}
	names := make([]string, 0, len(matched))
	for n := range matched {
		names = append(names, n)
	}
	sort.Strings(names)
	rules = []rbacv1.PolicyRule{}
	for _, n := range names {
		for _, rule := range matched[n].Rules {
			if !containsRule(rules, rule) {
				rules = append(rules, rule)
			}
		}
	}
	return rules, true
}

func containsRule(rules []rbacv1.PolicyRule, rule rbacv1.PolicyRule) bool {
	for i := range rules {
		if equality.Semantic.DeepEqual(rules[i], rule) {
			return true
		}
	}
	return false
}
