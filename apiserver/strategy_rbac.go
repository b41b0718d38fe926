package apiserver

import (
	"fmt"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RBAC objects are stored and validated as kube-apiserver does; enforcing them is the
// authorizer's business. Their names are path segments, so "system:node" is valid.

// validateRBACName is RBAC's name rule: any path segment name (so "system:node" is valid).
var validateRBACName apivalidation.ValidateNameFunc = func(name string, _ bool) []string {
	return content.IsPathSegmentName(name)
}

func validatePolicyRules(rules []rbacv1.PolicyRule, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, rule := range rules {
		rp := p.Index(i)
		if len(rule.Verbs) == 0 {
			errs = append(errs, field.Required(rp.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(rule.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(rp.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(rp.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(rule.APIGroups) == 0 {
			errs = append(errs, field.Required(rp.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(rule.Resources) == 0 {
			errs = append(errs, field.Required(rp.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

var roleRules = kindRules[*rbacv1.Role]{
	check: func(r *rbacv1.Role) field.ErrorList {
		return validatePolicyRules(r.Rules, true, field.NewPath("rules"))
	},
	columns: createdAtColumns(),
	row:     func(r *rbacv1.Role, _ time.Time) []any { return []any{r.Name, createdAt(r.CreationTimestamp)} },
}

var clusterRoleRules = kindRules[*rbacv1.ClusterRole]{
	check: func(r *rbacv1.ClusterRole) field.ErrorList {
		errs := validatePolicyRules(r.Rules, false, field.NewPath("rules"))
		if a := r.AggregationRule; a != nil {
			p := field.NewPath("aggregationRule", "clusterRoleSelectors")
			if len(a.ClusterRoleSelectors) == 0 {
				errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
			}
			for i := range a.ClusterRoleSelectors {
				errs = append(errs, metav1validation.ValidateLabelSelector(&a.ClusterRoleSelectors[i], metav1validation.LabelSelectorValidationOptions{}, p.Index(i))...)
			}
		}
		return errs
	},
	columns: createdAtColumns(),
	row:     func(r *rbacv1.ClusterRole, _ time.Time) []any { return []any{r.Name, createdAt(r.CreationTimestamp)} },
}

func createdAtColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Created At", Type: "date", Description: "CreationTimestamp is when the object was created."}}
}

func createdAt(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

// defaultBinding applies SetDefaults_Subject and the roleRef default: users and groups,
// and the role, belong to the RBAC API group unless said otherwise.
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	rp := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(rp.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !slices.Contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(rp.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(rp.Child("name"), ""))
	} else {
		for _, msg := range validateRBACName(ref.Name, false) {
			errs = append(errs, field.Invalid(rp.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		sp := field.NewPath("subjects").Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.Name != "" {
				for _, msg := range apivalidation.NameIsDNSSubdomain(s.Name, false) {
					errs = append(errs, field.Invalid(sp.Child("name"), s.Name, msg))
				}
			}
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, field.Required(sp.Child("namespace"), ""))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != rbacv1.GroupName {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
			}
		default:
			errs = append(errs, field.NotSupported(sp.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
		}
	}
	return errs
}

func roleRefImmutable(ref, old rbacv1.RoleRef) field.ErrorList {
	if apiequality.Semantic.DeepEqual(ref, old) {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("roleRef"), ref, "cannot change roleRef")}
}

var roleBindingRules = kindRules[*rbacv1.RoleBinding]{
	defaults: func(b *rbacv1.RoleBinding) { defaultBinding(&b.RoleRef, b.Subjects) },
	check:    func(b *rbacv1.RoleBinding) field.ErrorList { return validateBinding(b.RoleRef, b.Subjects, true) },
	checkUpdate: func(b, old *rbacv1.RoleBinding) field.ErrorList {
		return roleRefImmutable(b.RoleRef, old.RoleRef)
	},
	columns: bindingColumns(),
	row: func(b *rbacv1.RoleBinding, now time.Time) []any {
		return bindingRow(b.Name, b.RoleRef, b.Subjects, b.CreationTimestamp, now)
	},
}

var clusterRoleBindingRules = kindRules[*rbacv1.ClusterRoleBinding]{
	defaults: func(b *rbacv1.ClusterRoleBinding) { defaultBinding(&b.RoleRef, b.Subjects) },
	check: func(b *rbacv1.ClusterRoleBinding) field.ErrorList {
		return validateBinding(b.RoleRef, b.Subjects, false)
	},
	checkUpdate: func(b, old *rbacv1.ClusterRoleBinding) field.ErrorList {
		return roleRefImmutable(b.RoleRef, old.RoleRef)
	},
	columns: bindingColumns(),
	row: func(b *rbacv1.ClusterRoleBinding, now time.Time) []any {
		return bindingRow(b.Name, b.RoleRef, b.Subjects, b.CreationTimestamp, now)
	},
}

func bindingColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Role", Type: "string", Description: "Role to which the binding refers."},
		ageColumn(),
		{Name: "Users", Type: "string", Priority: 1, Description: "Users in the binding."},
		{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the binding."},
		{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the binding."},
	}
}

func bindingRow(name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, created metav1.Time, now time.Time) []any {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	return []any{name, fmt.Sprintf("%s/%s", ref.Kind, ref.Name), age(created, now),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}
