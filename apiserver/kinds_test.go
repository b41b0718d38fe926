package apiserver_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// causeFields returns the field of every cause of a 422, sorted.
func causeFields(t testing.TB, err error) []string {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != 422 {
		t.Fatalf("got %v, want a 422 Invalid", err)
	}
	var out []string
	for _, c := range se.ErrStatus.Details.Causes {
		out = append(out, c.Field)
	}
	sort.Strings(out)
	return out
}

func labelled(name string) map[string]string { return map[string]string{"app": name} }

func podTemplate(name string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labelled(name)},
		Spec: corev1.PodSpec{RestartPolicy: restart,
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1.0"}}},
	}
}

// TestKindsInvalid creates one invalid object of each kind and checks that the 422
// names every problem, as kube-apiserver's validation reports them all at once.
func TestKindsInvalid(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	const ns = "default"
	two := intstr.FromInt32(2)
	zero := intstr.FromInt32(0)
	tests := []invalidCreate{
		{"configmap keys", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
				Data: map[string]string{"bad key": "x", "ok": "y"}, BinaryData: map[string][]byte{"ok": []byte("z")}}, metav1.CreateOptions{})
			return err
		}, []string{"binaryData[ok]", "data[bad key]"}},
		{"tls secret without its keys", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
				Type: corev1.SecretTypeTLS}, metav1.CreateOptions{})
			return err
		}, []string{"data[tls.crt]", "data[tls.key]"}},
		{"service", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{
					{Port: 70000, NodePort: 30001}, {Name: "b", Port: 80, Protocol: "ICMP"}}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.ports[0].name", "spec.ports[0].nodePort", "spec.ports[0].port", "spec.ports[0].targetPort", "spec.ports[1].protocol"}},
		{"rbac role", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "system:r"},
				Rules: []rbacv1.PolicyRule{{Resources: []string{"pods"}}, {Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}}}, metav1.CreateOptions{})
			return err
		}, []string{"rules[0].apiGroups", "rules[0].verbs", "rules[1].nonResourceURLs"}},
		{"cluster role binding", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "crb"},
				RoleRef:  rbacv1.RoleRef{Kind: "Role", Name: "x"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sa"}, {Kind: "Robot", Name: "r"}}}, metav1.CreateOptions{})
			return err
		}, []string{"roleRef.kind", "subjects[0].namespace", "subjects[1].kind"}},
		{"priority class over a billion", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "too-high"},
				Value: 2000000000}, metav1.CreateOptions{})
			return err
		}, []string{"value"}},
		{"disruption budget", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "pdb"},
				Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, MaxUnavailable: &two}}, metav1.CreateOptions{})
			return err
		}, []string{"spec"}},
		{"deployment", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"},
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labelled("other")},
					Template: podTemplate("d", corev1.RestartPolicyNever),
					Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
						RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &zero}}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.strategy.rollingUpdate.maxUnavailable", "spec.template.metadata.labels", "spec.template.spec.restartPolicy"}},
		{"job", func(ctx context.Context, c kubernetes.Interface) error {
			neg := int32(-1)
			_, err := c.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"},
				Spec: batchv1.JobSpec{Parallelism: &neg, Template: podTemplate("j", corev1.RestartPolicyAlways)}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.parallelism", "spec.template.spec.restartPolicy"}},
		{"cronjob", func(ctx context.Context, c kubernetes.Interface) error {
			tz := "Mars/Olympus"
			_, err := c.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "cj"},
				Spec: batchv1.CronJobSpec{Schedule: "every minute", TimeZone: &tz,
					JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: podTemplate("cj", corev1.RestartPolicyOnFailure)}}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.schedule", "spec.timeZone"}},
		{"network policy", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.NetworkingV1().NetworkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "np"},
				Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Sideways"},
					Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{}}}}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.ingress[0].from[0]", "spec.policyTypes[0]"}},
		{"endpoint slice", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "es"},
				AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fe80::1"}}}}, metav1.CreateOptions{})
			return err
		}, []string{"endpoints[0].addresses[0]"}},
	}
	runInvalid(t, c, tests)
}

// invalidCreate is one create that must be refused with a 422 naming the fields in want.
type invalidCreate struct {
	name   string
	create func(ctx context.Context, c kubernetes.Interface) error
	want   []string
}

// runInvalid runs each create as a subtest: the 422's causes must name exactly the wanted
// fields, and nothing stored may change.
func runInvalid(t *testing.T, c kubernetes.Interface, tests []invalidCreate) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			before := snapshot(t, c)
			got := causeFields(t, tc.create(ctx, c))
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("causes %v, want %v", got, tc.want)
			}
			if d := diffSnapshots(before, snapshot(t, c)); d != "" {
				t.Errorf("a refused create changed what is stored: %s", d)
			}
		})
	}
}

func TestKindsDefaults(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns = "default"

	sec, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data: map[string][]byte{"user": []byte("old")}, StringData: map[string]string{"user": "admin", "pass": "s3cret"}}, metav1.CreateOptions{})
	check(t, err)
	if sec.Type != corev1.SecretTypeOpaque || string(sec.Data["user"]) != "admin" || string(sec.Data["pass"]) != "s3cret" || sec.StringData != nil {
		t.Errorf("secret = type %q data %q stringData %v; want Opaque with stringData folded into data", sec.Type, sec.Data, sec.StringData)
	}

	d, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labelled("web")},
			Template: podTemplate("web", "")}}, metav1.CreateOptions{})
	check(t, err)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" || *d.Spec.RevisionHistoryLimit != 10 ||
		*d.Spec.ProgressDeadlineSeconds != 600 || d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || d.Generation != 1 {
		t.Errorf("deployment defaults: %+v", d.Spec)
	}

	job, err := c.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once"},
		Spec: batchv1.JobSpec{Template: podTemplate("once", corev1.RestartPolicyNever)}}, metav1.CreateOptions{})
	check(t, err)
	uid := string(job.UID)
	if *job.Spec.Completions != 1 || *job.Spec.Parallelism != 1 || *job.Spec.BackoffLimit != 6 ||
		job.Spec.Selector.MatchLabels["batch.kubernetes.io/controller-uid"] != uid ||
		job.Spec.Template.Labels["job-name"] != "once" || job.Spec.Template.Labels["controller-uid"] != uid {
		t.Errorf("job defaults: selector %v, template labels %v", job.Spec.Selector, job.Spec.Template.Labels)
	}

	crb, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:readers"},
		RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"}, Subjects: []rbacv1.Subject{{Kind: "Group", Name: "readers"}}}, metav1.CreateOptions{})
	check(t, err)
	if crb.RoleRef.APIGroup != rbacv1.GroupName || crb.Subjects[0].APIGroup != rbacv1.GroupName {
		t.Errorf("binding defaults: roleRef %+v subjects %+v", crb.RoleRef, crb.Subjects)
	}

	np, err := c.NetworkingV1().NetworkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny"},
		Spec: networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}, metav1.CreateOptions{})
	check(t, err)
	if len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("network policy types %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}

	// Immutable objects refuse changes and stay as stored.
	yes := true
	cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "frozen"},
		Data: map[string]string{"k": "v"}, Immutable: &yes}, metav1.CreateOptions{})
	check(t, err)
	cm.Data["k"] = "changed"
	_, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "data" {
		t.Errorf("update of an immutable configmap: causes %v, want data", got)
	}

	// Kinds without a controller say so.
	eventually(t, "the NoController event of the deployment", func() (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=NoController"})
		return err == nil && len(evs.Items) == 1 && strings.Contains(evs.Items[0].Message, "no deployment controller"), err
	})
}

func TestOversizedConfigRefused(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	big := strings.Repeat("x", 1<<20+1)
	_, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Data: map[string]string{"blob": big}}, metav1.CreateOptions{})
	se := expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	if !strings.Contains(se.ErrStatus.Message, "Too long: may not be more than 1048576 bytes") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	_, err = env.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Data: map[string][]byte{"blob": []byte(big)}}, metav1.CreateOptions{})
	expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	if _, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, "big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused configmap is stored: %v", err)
	}
}

func TestSystemPriorityClasses(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	for name, value := range map[string]int32{"system-node-critical": 2000001000, "system-cluster-critical": 2000000000} {
		pc, err := env.Client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
		check(t, err)
		if pc.Value != value {
			t.Errorf("%s value %d, want %d", name, pc.Value, value)
		}
		err = env.Client.SchedulingV1().PriorityClasses().Delete(ctx, name, metav1.DeleteOptions{})
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
	}
}

// TestNoControllerWarning: a write of an object no controller of miniplane acts on is
// answered with a warning saying so, which kubectl and Helm print (a chart's Deployment would
// otherwise wait for pods in silence); reads, deletes, writes of its status and writes of
// kinds that do run are not.
func TestNoControllerWarning(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c, seen := warnedClient(t, env)
	const ns = "default"
	expect := func(what, want string) {
		t.Helper()
		got := seen.take()
		if want == "" && len(got) > 0 || want != "" && (len(got) != 1 || !strings.Contains(got[0], want)) {
			t.Errorf("%s: warnings %q, want %q", what, got, want)
		}
	}
	const noDeployments = "miniplane runs no deployment controller: this Deployment is stored and served, but nothing acts on it (no pods are created for it)"

	d, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "warned"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labelled("warned")},
			Template: podTemplate("warned", "")}}, metav1.CreateOptions{})
	check(t, err)
	expect("deployment create", noDeployments)
	d.Spec.Replicas = ptr.To[int32](3)
	_, err = c.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
	check(t, err)
	expect("deployment update", noDeployments)
	d, err = c.AppsV1().Deployments(ns).Patch(ctx, "warned", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"web"}}}`), metav1.PatchOptions{})
	check(t, err)
	expect("deployment patch", noDeployments)
	d.Status.ObservedGeneration = d.Generation
	_, err = c.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	check(t, err)
	expect("deployment status update", "")
	_, err = c.AppsV1().Deployments(ns).Get(ctx, "warned", metav1.GetOptions{})
	check(t, err)
	expect("deployment get", "")
	check(t, c.AppsV1().Deployments(ns).Delete(ctx, "warned", metav1.DeleteOptions{}))
	expect("deployment delete", "")

	_, err = c.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: batchv1.JobSpec{Template: podTemplate("hook", corev1.RestartPolicyNever)}}, metav1.CreateOptions{})
	check(t, err)
	expect("job create", "miniplane runs no job controller")

	_, err = c.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labelled("agent")},
			Template: podTemplate("agent", "")}}, metav1.CreateOptions{})
	check(t, err)
	expect("daemonset create", "")
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{})
	check(t, err)
	expect("configmap create", "")
}
