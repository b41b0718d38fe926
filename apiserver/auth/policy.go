package auth

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The bootstrap policy: the ClusterRoles and ClusterRoleBindings every cluster starts
// with, those of kube-apiserver's bootstrap policy that miniplane has a use for, under
// the same names and with the same rules (so that a manifest's RBAC means here what it
// means on a real cluster), plus miniplane's viewer. The API server reconciles them on
// every start (see docs/rbac.md).

// Well-known names of the bootstrap policy.
const (
	// BootstrapLabel marks every bootstrap object, as upstream marks its own.
	BootstrapLabel = "kubernetes.io/bootstrapping"
	// ViewerRole is miniplane's read-only role: get, list and watch everything, and read
	// /metrics; ViewerBinding binds it to the configured read-only groups.
	ViewerRole    = "miniplane:viewer"
	ViewerBinding = "miniplane:viewers"
	// ControllerRolePrefix starts the name of each controller's role, and of the
	// binding of that role to the controller's ServiceAccount in kube-system.
	ControllerRolePrefix = "system:controller:"
	// ControllerManagerUser and SchedulerUser are the components' user names.
	ControllerManagerUser = user.KubeControllerManager
	SchedulerUser         = user.KubeScheduler
)

// ControllerServiceAccounts are the ServiceAccounts in kube-system that the
// controller-manager's controllers act as (with --use-service-account-credentials), each
// bound to the role system:controller:<name>.
var ControllerServiceAccounts = []string{"daemon-set-controller", "generic-garbage-collector", "node-controller",
	"root-ca-cert-publisher", "pod-garbage-collector"}

// Verb sets of the bootstrap roles.
var (
	readVerbsList  = []string{"get", "list", "watch"}
	writeVerbsList = []string{"create", "update", "patch", "delete", "deletecollection"}
	allVerbsList   = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)

// core is a rule over resources of the core group.
func core(verbs []string, resources ...string) rbacv1.PolicyRule {
	return rule(verbs, []string{""}, resources...)
}

func verbs(v ...string) []string { return v }

// urls is a rule over paths outside the resource tree.
func urls(verbs []string, paths ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: paths}
}

// eventsRule lets a component record events, in both event APIs.
func eventsRule() rbacv1.PolicyRule {
	return rule(verbs("create", "update", "patch"), []string{"", "events.k8s.io"}, "events")
}

// aggregateTo labels a role into the aggregated role named to (admin, edit, view).
func aggregateTo(to string) map[string]string {
	return map[string]string{"rbac.authorization.k8s.io/aggregate-to-" + to: "true"}
}

func aggregationOf(to string) *rbacv1.AggregationRule {
	return &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: aggregateTo(to)}}}
}

// viewRules are what `view` grants: reading what a namespace holds, except secrets and
// what leads to them.
func viewRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		core(readVerbsList, "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
			"services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps"),
		core(readVerbsList, "limitranges", "resourcequotas", "bindings", "pods/status", "resourcequotas/status",
			"namespaces/status", "replicationcontrollers/status", "pods/log"),
		core(readVerbsList, "namespaces"),
		rule(readVerbsList, []string{"", "events.k8s.io"}, "events"),
		rule(readVerbsList, []string{"discovery.k8s.io"}, "endpointslices"),
		rule(readVerbsList, []string{"apps"}, "controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale",
			"daemonsets", "daemonsets/status", "deployments", "deployments/status", "deployments/scale",
			"replicasets", "replicasets/status", "replicasets/scale"),
		rule(readVerbsList, []string{"autoscaling"}, "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
		rule(readVerbsList, []string{"batch"}, "jobs", "cronjobs", "cronjobs/status", "jobs/status"),
		rule(readVerbsList, []string{"policy"}, "poddisruptionbudgets", "poddisruptionbudgets/status"),
		rule(readVerbsList, []string{"networking.k8s.io"}, "networkpolicies", "ingresses", "ingresses/status"),
	}
}

// editRules are what `edit` adds to `view`: changing what a namespace holds, secrets
// included, but not its RBAC, quotas or limits.
func editRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		core(readVerbsList, "pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"),
		core(verbs("impersonate"), "serviceaccounts"),
		core(writeVerbsList, "pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"),
		core(verbs("create"), "pods/eviction"),
		core(writeVerbsList, "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
			"services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets"),
		core(verbs("create"), "serviceaccounts/token"),
		rule(writeVerbsList, []string{"", "events.k8s.io"}, "events"),
		rule(writeVerbsList, []string{"apps"}, "statefulsets", "statefulsets/scale", "daemonsets",
			"deployments", "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale"),
		rule(writeVerbsList, []string{"autoscaling"}, "horizontalpodautoscalers"),
		rule(writeVerbsList, []string{"batch"}, "jobs", "cronjobs"),
		rule(writeVerbsList, []string{"policy"}, "poddisruptionbudgets"),
		rule(writeVerbsList, []string{"networking.k8s.io"}, "networkpolicies", "ingresses"),
		rule(allVerbsList, []string{"coordination.k8s.io"}, "leases"),
	}
}

// BootstrapClusterRoles are the ClusterRoles of the bootstrap policy. The aggregated
// roles (admin, edit, view) have no rules of their own: the API server fills them from
// the roles their aggregation rule selects.
func BootstrapClusterRoles() []rbacv1.ClusterRole {
	readOnly := readVerbsList
	roles := []rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"}, Rules: []rbacv1.PolicyRule{
			rule(verbs("*"), []string{"*"}, "*"),
			urls(verbs("*"), "*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"}, Rules: []rbacv1.PolicyRule{
			urls(verbs("get"), "/livez", "/readyz", "/healthz", "/version", "/version/",
				"/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:monitoring"}, Rules: []rbacv1.PolicyRule{
			urls(verbs("get"), "/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"}, Rules: []rbacv1.PolicyRule{
			rule(verbs("create"), []string{"authorization.k8s.io"}, "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			rule(verbs("create"), []string{"authentication.k8s.io"}, "selfsubjectreviews"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"}, Rules: []rbacv1.PolicyRule{
			urls(verbs("get"), "/livez", "/readyz", "/healthz", "/version", "/version/"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "admin"}, AggregationRule: aggregationOf("admin")},
		{ObjectMeta: metav1.ObjectMeta{Name: "edit", Labels: aggregateTo("admin")}, AggregationRule: aggregationOf("edit")},
		{ObjectMeta: metav1.ObjectMeta{Name: "view", Labels: aggregateTo("edit")}, AggregationRule: aggregationOf("view")},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-admin", Labels: aggregateTo("admin")}, Rules: []rbacv1.PolicyRule{
			rule(verbs("create"), []string{"authorization.k8s.io"}, "localsubjectaccessreviews"),
			rule(allVerbsList, []string{rbacv1.GroupName}, "roles", "rolebindings"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-edit", Labels: aggregateTo("edit")}, Rules: editRules()},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-view", Labels: aggregateTo("view")}, Rules: viewRules()},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:node"}, Rules: NodeRules()},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:auth-delegator"}, Rules: []rbacv1.PolicyRule{
			rule(verbs("create"), []string{"authentication.k8s.io"}, "tokenreviews"),
			rule(verbs("create"), []string{"authorization.k8s.io"}, "subjectaccessreviews"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:service-account-issuer-discovery"}, Rules: []rbacv1.PolicyRule{
			urls(verbs("get"), "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
				"/openid/v1/jwks", "/openid/v1/jwks/"),
		}},
		// The controller-manager itself only runs leader election, the shared informers
		// and hands out the tokens its controllers act with.
		{ObjectMeta: metav1.ObjectMeta{Name: "system:kube-controller-manager"}, Rules: []rbacv1.PolicyRule{
			eventsRule(),
			rule(verbs("create"), []string{"coordination.k8s.io"}, "leases"),
			{Verbs: verbs("get", "update"), APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
				ResourceNames: []string{"kube-controller-manager"}},
			core(verbs("create"), "secrets", "serviceaccounts"),
			core(verbs("delete"), "secrets"),
			core(verbs("get"), "namespaces", "secrets", "serviceaccounts", "configmaps"),
			core(verbs("update"), "secrets", "serviceaccounts"),
			rule(verbs("create"), []string{"authentication.k8s.io"}, "tokenreviews"),
			rule(verbs("create"), []string{"authorization.k8s.io"}, "subjectaccessreviews"),
			rule(verbs("list", "watch"), []string{"*"}, "*"),
			core(verbs("create"), "serviceaccounts/token"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:kube-scheduler"}, Rules: []rbacv1.PolicyRule{
			eventsRule(),
			rule(verbs("create"), []string{"coordination.k8s.io"}, "leases"),
			{Verbs: verbs("get", "update", "list", "watch"), APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
				ResourceNames: []string{"kube-scheduler"}},
			rule(allVerbsList, []string{"coordination.k8s.io"}, "leasecandidates"),
			core(readOnly, "nodes"),
			core(verbs("get", "list", "watch", "delete"), "pods"),
			core(verbs("create"), "pods/binding", "bindings"),
			core(verbs("patch", "update"), "pods/status"),
			core(readOnly, "services", "replicationcontrollers"),
			rule(readOnly, []string{"apps", "extensions"}, "replicasets"),
			rule(readOnly, []string{"apps"}, "statefulsets"),
			rule(readOnly, []string{"policy"}, "poddisruptionbudgets"),
			core(readOnly, "persistentvolumeclaims", "persistentvolumes"),
			rule(verbs("create"), []string{"authentication.k8s.io"}, "tokenreviews"),
			rule(verbs("create"), []string{"authorization.k8s.io"}, "subjectaccessreviews"),
			rule(readOnly, []string{"storage.k8s.io"}, "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"),
			core(readOnly, "namespaces"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: ViewerRole}, Rules: []rbacv1.PolicyRule{
			rule(readOnly, []string{"*"}, "*"),
			urls(verbs("get"), "/metrics"),
		}},
	}
	roles = append(roles, controllerRoles()...)
	for i := range roles {
		markBootstrap(&roles[i].ObjectMeta)
	}
	return roles
}

// controllerRoles are the roles of the controllers miniplane's controller-manager runs,
// upstream's rules for those controllers.
func controllerRoles() []rbacv1.ClusterRole {
	role := func(name string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
		return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ControllerRolePrefix + name}, Rules: rules}
	}
	apps := []string{"extensions", "apps"}
	return []rbacv1.ClusterRole{
		role("daemon-set-controller",
			rule(readVerbsList, apps, "daemonsets"),
			rule(verbs("update"), apps, "daemonsets/status"),
			rule(verbs("update"), apps, "daemonsets/finalizers"),
			core(verbs("list", "watch"), "nodes"),
			core(verbs("list", "watch", "create", "delete", "patch"), "pods"),
			core(verbs("create"), "pods/binding"),
			rule(verbs("get", "list", "watch", "create", "delete", "update", "patch"), []string{"apps"}, "controllerrevisions"),
			eventsRule()),
		role("generic-garbage-collector",
			rule(verbs("get", "list", "watch", "patch", "update", "delete"), []string{"*"}, "*"),
			eventsRule()),
		role("node-controller",
			core(verbs("get", "list", "watch", "update", "delete", "patch"), "nodes"),
			core(verbs("patch", "update"), "nodes/status"),
			core(verbs("patch", "update"), "pods/status"),
			core(verbs("list", "watch", "get", "delete"), "pods"),
			rule(readVerbsList, []string{"coordination.k8s.io"}, "leases"),
			eventsRule()),
		role("root-ca-cert-publisher",
			core(verbs("create", "update"), "configmaps"),
			eventsRule()),
		role("pod-garbage-collector",
			core(verbs("list", "watch", "delete"), "pods"),
			core(verbs("get", "list"), "nodes"),
			core(verbs("patch"), "pods/status")),
	}
}

// BootstrapClusterRoleBindings are the ClusterRoleBindings of the bootstrap policy:
// adminGroups get cluster-admin, viewerGroups miniplane:viewer.
func BootstrapClusterRoleBindings(adminGroups, viewerGroups []string) []rbacv1.ClusterRoleBinding {
	groups := func(names ...string) []rbacv1.Subject {
		var out []rbacv1.Subject
		for _, n := range names {
			out = append(out, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: n})
		}
		return out
	}
	users := func(names ...string) []rbacv1.Subject {
		var out []rbacv1.Subject
		for _, n := range names {
			out = append(out, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: n})
		}
		return out
	}
	bind := func(role string, subjects []rbacv1.Subject) rbacv1.ClusterRoleBinding {
		return rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects}
	}
	bindings := []rbacv1.ClusterRoleBinding{
		bind("cluster-admin", groups(adminGroups...)),
		bind("system:monitoring", groups(user.MonitoringGroup)),
		bind("system:discovery", groups(user.AllAuthenticated)),
		bind("system:basic-user", groups(user.AllAuthenticated)),
		bind("system:public-info-viewer", groups(user.AllAuthenticated, user.AllUnauthenticated)),
		bind("system:kube-controller-manager", users(ControllerManagerUser)),
		bind("system:kube-scheduler", users(SchedulerUser)),
		// As upstream: the node authorizer grants nodes what system:node lists, and the
		// binding stays empty so that the role is there to read and to bind elsewhere.
		bind("system:node", nil),
		bind("system:service-account-issuer-discovery", groups(serviceaccount.AllServiceAccountsGroup)),
	}
	viewers := bind(ViewerRole, groups(viewerGroups...))
	viewers.Name = ViewerBinding
	bindings = append(bindings, viewers)
	for _, sa := range ControllerServiceAccounts {
		bindings = append(bindings, bind(ControllerRolePrefix+sa,
			[]rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: metav1.NamespaceSystem, Name: sa}}))
	}
	for i := range bindings {
		markBootstrap(&bindings[i].ObjectMeta)
	}
	return bindings
}

// markBootstrap gives a bootstrap object upstream's label and the annotation that lets
// reconciliation update it.
func markBootstrap(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[BootstrapLabel] = "rbac-defaults"
	m.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
}
