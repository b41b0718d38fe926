package apiserver

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// PriorityClass values and names as kube-apiserver fixes them.
const (
	// highestUserDefinablePriority is the largest value a user's PriorityClass may have;
	// higher values are the system's.
	highestUserDefinablePriority = int32(1000000000)
	systemPriorityClassPrefix    = "system-"
)

// systemPriorityClasses exist in every cluster: created on start, never deleted.
var systemPriorityClasses = []schedulingv1.PriorityClass{
	{
		ObjectMeta:  metav1.ObjectMeta{Name: "system-node-critical"},
		Value:       2000001000,
		Description: "Used for system critical pods that must not be moved from their current node.",
	},
	{
		ObjectMeta:  metav1.ObjectMeta{Name: "system-cluster-critical"},
		Value:       2000000000,
		Description: "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
	},
}

// knownSystemPriorityClass reports whether pc is one of systemPriorityClasses, unchanged.
func knownSystemPriorityClass(pc *schedulingv1.PriorityClass) error {
	for _, sys := range systemPriorityClasses {
		if sys.Name != pc.Name {
			continue
		}
		if sys.Value != pc.Value {
			return fmt.Errorf("value of %v PriorityClass must be %v", sys.Name, sys.Value)
		}
		if pc.GlobalDefault {
			return fmt.Errorf("globalDefault of %v PriorityClass must be %v", sys.Name, false)
		}
		return nil
	}
	return fmt.Errorf("%v is not a known system priority class", pc.Name)
}

// priorityClassRules: a value above a billion is the system's, the value is fixed once
// set, and the two system classes cannot be deleted (see protectedFromDeletion).
var priorityClassRules = kindRules[*schedulingv1.PriorityClass]{
	defaults: func(pc *schedulingv1.PriorityClass) {
		if pc.PreemptionPolicy == nil {
			p := corev1.PreemptLowerPriority
			pc.PreemptionPolicy = &p
		}
	},
	check: func(pc *schedulingv1.PriorityClass) field.ErrorList {
		var errs field.ErrorList
		if strings.HasPrefix(pc.Name, systemPriorityClassPrefix) {
			if err := knownSystemPriorityClass(pc); err != nil {
				errs = append(errs, field.Forbidden(field.NewPath("metadata", "name"),
					"priority class names with '"+systemPriorityClassPrefix+"' prefix are reserved for system use only. error: "+err.Error()))
			}
		} else if pc.Value > highestUserDefinablePriority {
			errs = append(errs, field.Forbidden(field.NewPath("value"),
				fmt.Sprintf("maximum allowed value of a user defined priority is %v", highestUserDefinablePriority)))
		}
		if p := pc.PreemptionPolicy; p != nil && *p != corev1.PreemptLowerPriority && *p != corev1.PreemptNever {
			errs = append(errs, field.NotSupported(field.NewPath("preemptionPolicy"), *p, []string{string(corev1.PreemptLowerPriority), string(corev1.PreemptNever)}))
		}
		return errs
	},
	checkUpdate: func(pc, old *schedulingv1.PriorityClass) field.ErrorList {
		var errs field.ErrorList
		if pc.Value != old.Value {
			errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
		}
		if pc.PreemptionPolicy != nil && old.PreemptionPolicy != nil && *pc.PreemptionPolicy != *old.PreemptionPolicy {
			errs = append(errs, immutable(true, *pc.PreemptionPolicy, field.NewPath("preemptionPolicy"))...)
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Value", Type: "integer", Description: "The value of this priority class."},
		{Name: "Global-Default", Type: "boolean", Description: "Whether this priority class should be used as the default priority."},
		ageColumn(),
		{Name: "PreemptionPolicy", Type: "string", Description: "The policy for preempting pods with lower priority."},
	},
	row: func(pc *schedulingv1.PriorityClass, now time.Time) []any {
		policy := ""
		if pc.PreemptionPolicy != nil {
			policy = string(*pc.PreemptionPolicy)
		}
		return []any{pc.Name, int64(pc.Value), pc.GlobalDefault, age(pc.CreationTimestamp, now), policy}
	},
}

// priorityClassDeletion forbids deleting the system classes, as kube-apiserver does.
func priorityClassDeletion(obj any) error {
	pc := obj.(*schedulingv1.PriorityClass)
	if knownSystemPriorityClass(pc) == nil {
		return fmt.Errorf("this is a system priority class and cannot be deleted")
	}
	return nil
}

var podDisruptionBudgetRules = kindRules[*policyv1.PodDisruptionBudget]{
	hasStatus: true,
	check: func(pdb *policyv1.PodDisruptionBudget) field.ErrorList {
		p := field.NewPath("spec")
		var errs field.ErrorList
		if pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable != nil {
			errs = append(errs, field.Invalid(p, pdb.Spec, "minAvailable and maxUnavailable cannot be both set"))
		}
		errs = append(errs, validatePositiveIntOrPercent(pdb.Spec.MinAvailable, p.Child("minAvailable"))...)
		errs = append(errs, validatePositiveIntOrPercent(pdb.Spec.MaxUnavailable, p.Child("maxUnavailable"))...)
		errs = append(errs, metav1validation.ValidateLabelSelector(pdb.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		if policy := pdb.Spec.UnhealthyPodEvictionPolicy; policy != nil &&
			*policy != policyv1.IfHealthyBudget && *policy != policyv1.AlwaysAllow {
			errs = append(errs, field.NotSupported(p.Child("unhealthyPodEvictionPolicy"), *policy,
				[]string{string(policyv1.AlwaysAllow), string(policyv1.IfHealthyBudget)}))
		}
		return errs
	},
	checkStatus: func(pdb, _ *policyv1.PodDisruptionBudget) field.ErrorList {
		p := field.NewPath("status")
		var errs field.ErrorList
		for name, v := range map[string]int32{
			"disruptionsAllowed": pdb.Status.DisruptionsAllowed, "currentHealthy": pdb.Status.CurrentHealthy,
			"desiredHealthy": pdb.Status.DesiredHealthy, "expectedPods": pdb.Status.ExpectedPods,
		} {
			errs = append(errs, apivalidation.ValidateNonnegativeField(int64(v), p.Child(name))...)
		}
		return sortErrors(errs)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Min Available", Type: "string", Description: "The minimum number of pods that must be available."},
		{Name: "Max Unavailable", Type: "string", Description: "The maximum number of pods that may be unavailable."},
		{Name: "Allowed Disruptions", Type: "integer", Description: "Calculated number of pods that may be disrupted at this time."},
		ageColumn()},
	row: func(pdb *policyv1.PodDisruptionBudget, now time.Time) []any {
		orNA := func(v *intstr.IntOrString) string {
			if v == nil {
				return "N/A"
			}
			return v.String()
		}
		return []any{pdb.Name, orNA(pdb.Spec.MinAvailable), orNA(pdb.Spec.MaxUnavailable),
			int64(pdb.Status.DisruptionsAllowed), age(pdb.CreationTimestamp, now)}
	},
}

// validatePositiveIntOrPercent is apps validation's IntOrPercent rule: a non-negative
// integer, or a percentage up to 100%.
func validatePositiveIntOrPercent(v *intstr.IntOrString, p *field.Path) field.ErrorList {
	errs := validateIntOrPercent(v, p)
	if v != nil && v.Type == intstr.Int && len(errs) == 0 {
		return apivalidation.ValidateNonnegativeField(int64(v.IntVal), p)
	}
	return errs
}

// resourceQuotaRules: the quota's status (hard as enforced, used) is the server's, kept
// current by the quota admission and recalculation (quota.go).
var resourceQuotaRules = kindRules[*corev1.ResourceQuota]{
	hasStatus: true,
	check: func(q *corev1.ResourceQuota) field.ErrorList {
		var errs field.ErrorList
		p := field.NewPath("spec", "hard")
		for _, name := range sortedResourceNames(q.Spec.Hard) {
			errs = append(errs, validateQuotaResource(name, q.Spec.Hard[name], p.Key(string(name)))...)
		}
		for i, scope := range q.Spec.Scopes {
			switch scope {
			case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
				corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
				corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
			default:
				errs = append(errs, field.Invalid(field.NewPath("spec", "scopes").Index(i), scope, "unsupported scope"))
			}
		}
		return errs
	},
	checkStatus: func(q, _ *corev1.ResourceQuota) field.ErrorList {
		var errs field.ErrorList
		for _, list := range []struct {
			name string
			l    corev1.ResourceList
		}{{"hard", q.Status.Hard}, {"used", q.Status.Used}} {
			for _, name := range sortedResourceNames(list.l) {
				errs = append(errs, validateQuotaResource(name, list.l[name], field.NewPath("status", list.name).Key(string(name)))...)
			}
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(), ageColumn(),
		{Name: "Request", Type: "string", Description: "Request represents a minimum amount of cpu/memory that a container may consume."},
		{Name: "Limit", Type: "string", Description: "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."},
	},
	row: func(q *corev1.ResourceQuota, now time.Time) []any {
		var requests, limits []string
		for _, name := range sortedResourceNames(q.Status.Hard) {
			hard := q.Status.Hard[name]
			used := q.Status.Used[name]
			entry := fmt.Sprintf("%s: %s/%s", name, used.String(), hard.String())
			if strings.HasPrefix(string(name), "limits.") {
				limits = append(limits, entry)
			} else {
				requests = append(requests, entry)
			}
		}
		return []any{q.Name, age(q.CreationTimestamp, now), strings.Join(requests, ", "), strings.Join(limits, ", ")}
	},
}

func validateQuotaResource(name corev1.ResourceName, q apiresource.Quantity, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(name)) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	if q.Sign() < 0 {
		errs = append(errs, field.Invalid(p, q.String(), "must be greater than or equal to 0"))
	}
	if quotaCountsObjects(name) && q.MilliValue()%1000 != 0 {
		errs = append(errs, field.Invalid(p, q.String(), "must be an integer"))
	}
	return errs
}

// quotaCountsObjects reports whether a quota resource counts objects (pods, count/…),
// whose amounts must be whole numbers.
func quotaCountsObjects(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourcePods, corev1.ResourceServices, corev1.ResourceConfigMaps, corev1.ResourceSecrets,
		corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers, corev1.ResourceQuotas,
		corev1.ResourcePersistentVolumeClaims, corev1.ResourceReplicationControllers:
		return true
	}
	return strings.HasPrefix(string(name), "count/")
}
