package apiserver_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const templateGeneration = "deprecated.daemonset.template.generation"

// TestDaemonSetDefaulting: SetDefaults_DaemonSet and the pod template defaults
// (docs/daemonset-controller.md#api-rules).
func TestDaemonSetDefaulting(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	dss := env.Client.AppsV1().DaemonSets("default")
	ctx := testCtx(t)

	in := daemonSet("default", "defaults")
	in.Spec.Template.Spec.Containers[0].Image = "registry.example/agent" // untagged: Always
	in.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9100}}
	ds, err := dss.Create(ctx, in, metav1.CreateOptions{})
	check(t, err)
	s := ds.Spec
	if s.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.UpdateStrategy.RollingUpdate == nil ||
		s.UpdateStrategy.RollingUpdate.MaxUnavailable == nil || *s.UpdateStrategy.RollingUpdate.MaxUnavailable != intstr.FromInt32(1) ||
		s.UpdateStrategy.RollingUpdate.MaxSurge == nil || *s.UpdateStrategy.RollingUpdate.MaxSurge != intstr.FromInt32(0) {
		t.Fatalf("updateStrategy defaults: %+v", s.UpdateStrategy)
	}
	if s.RevisionHistoryLimit == nil || *s.RevisionHistoryLimit != 10 {
		t.Fatalf("revisionHistoryLimit = %v, want 10", s.RevisionHistoryLimit)
	}
	ps := s.Template.Spec
	if ps.RestartPolicy != corev1.RestartPolicyAlways || ps.DNSPolicy != corev1.DNSClusterFirst || ps.SchedulerName != "default-scheduler" ||
		ps.TerminationGracePeriodSeconds == nil || *ps.TerminationGracePeriodSeconds != 30 || ps.SecurityContext == nil {
		t.Fatalf("pod template defaults: %+v", ps)
	}
	// Pod-only defaults stay off templates, as upstream stores them: otherwise the same
	// manifest would hash to another controller-revision-hash than on a real cluster.
	if ps.EnableServiceLinks != nil {
		t.Fatalf("template enableServiceLinks = %v, want unset (a Pod-only default)", *ps.EnableServiceLinks)
	}
	c := ps.Containers[0]
	if c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile ||
		c.ImagePullPolicy != corev1.PullAlways || c.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Fatalf("container defaults: %+v", c)
	}
	if ds.Generation != 1 || ds.Annotations[templateGeneration] != "1" {
		t.Fatalf("generation %d, template generation %q; want 1 and \"1\"", ds.Generation, ds.Annotations[templateGeneration])
	}
	if ds.Spec.Selector == nil || ds.Spec.Selector.MatchLabels["app"] != "defaults" {
		t.Fatalf("selector changed: %+v", ds.Spec.Selector)
	}

	// OnDelete gets no rollingUpdate.
	od := daemonSet("default", "ondelete")
	od.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	got, err := dss.Create(ctx, od, metav1.CreateOptions{})
	check(t, err)
	if got.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Fatalf("OnDelete got rollingUpdate %+v", got.Spec.UpdateStrategy.RollingUpdate)
	}

	// Explicit values are kept: maxSurge with maxUnavailable 0, revisionHistoryLimit 0.
	surge := daemonSet("default", "surge")
	zero, one := intstr.FromInt32(0), intstr.FromString("25%")
	surge.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}}
	surge.Spec.RevisionHistoryLimit = ptrTo(int32(0))
	got, err = dss.Create(ctx, surge, metav1.CreateOptions{})
	check(t, err)
	if got.Spec.UpdateStrategy.RollingUpdate.MaxSurge.String() != "25%" || *got.Spec.RevisionHistoryLimit != 0 {
		t.Fatalf("explicit values changed: %+v %d", got.Spec.UpdateStrategy.RollingUpdate, *got.Spec.RevisionHistoryLimit)
	}

	// A template generation given on create (≥ 1) is kept.
	tg := daemonSet("default", "tg")
	tg.Annotations = map[string]string{templateGeneration: "5"}
	got, err = dss.Create(ctx, tg, metav1.CreateOptions{})
	check(t, err)
	if got.Annotations[templateGeneration] != "5" {
		t.Fatalf("template generation %q, want the given 5", got.Annotations[templateGeneration])
	}
}

// TestDaemonSetUpdateRules: generation and template generation, immutable selector,
// status kept by the main resource.
func TestDaemonSetUpdateRules(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	dss := env.Client.AppsV1().DaemonSets("default")
	ctx := testCtx(t)
	ds, err := dss.Create(ctx, daemonSet("default", "u"), metav1.CreateOptions{})
	check(t, err)

	steps := []struct {
		name           string
		mutate         func(*appsv1.DaemonSet)
		wantGeneration int64
		wantTemplate   string
	}{
		{"metadata only", func(d *appsv1.DaemonSet) { d.Labels = map[string]string{"x": "y"} }, 1, "1"},
		{"template", func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.Containers[0].Image = "registry.example/agent:2" }, 2, "2"},
		{"spec outside the template", func(d *appsv1.DaemonSet) { d.Spec.MinReadySeconds = 3 }, 3, "2"},
		{"client sets the template generation", func(d *appsv1.DaemonSet) { d.Annotations[templateGeneration] = "77" }, 3, "2"},
		{"client removes the template generation", func(d *appsv1.DaemonSet) { delete(d.Annotations, templateGeneration) }, 3, "2"},
		{"template labels", func(d *appsv1.DaemonSet) { d.Spec.Template.Labels["extra"] = "1" }, 4, "3"},
		{"no change", func(*appsv1.DaemonSet) {}, 4, "3"},
	}
	for _, st := range steps {
		st.mutate(ds)
		ds, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if ds.Generation != st.wantGeneration || ds.Annotations[templateGeneration] != st.wantTemplate {
			t.Fatalf("%s: generation %d template generation %q, want %d %q", st.name, ds.Generation, ds.Annotations[templateGeneration], st.wantGeneration, st.wantTemplate)
		}
	}

	// The selector is immutable, even to one that still matches the template.
	bad := ds.DeepCopy()
	bad.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "u", "extra": "1"}}
	_, err = dss.Update(ctx, bad, metav1.UpdateOptions{})
	se := expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	if !hasCause(se.ErrStatus, "spec.selector", "field is immutable") {
		t.Fatalf("causes %+v, want spec.selector: field is immutable", se.ErrStatus.Details.Causes)
	}
	if !strings.HasPrefix(se.ErrStatus.Message, `DaemonSet.apps "u" is invalid: spec.selector: Invalid value: `) {
		t.Fatalf("message %q", se.ErrStatus.Message)
	}
	stored, err := dss.Get(ctx, "u", metav1.GetOptions{})
	check(t, err)
	if stored.ResourceVersion != ds.ResourceVersion {
		t.Fatal("a refused update wrote")
	}
}

// TestDaemonSetValidation: each rule of docs/daemonset-controller.md#api-rules gets 422 Invalid with
// the field cause and message Kubernetes gives.
func TestDaemonSetValidation(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	dss := env.Client.AppsV1().DaemonSets("default")
	ctx := testCtx(t)
	intOrStr := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	rolling := func(maxUnavailable, maxSurge *intstr.IntOrString) func(*appsv1.DaemonSet) {
		return func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: maxUnavailable, MaxSurge: maxSurge}}
		}
	}
	for _, tc := range []struct {
		rule   string
		mutate func(*appsv1.DaemonSet)
		field  string
		msg    string
	}{
		{"V1 name", func(d *appsv1.DaemonSet) { d.Name = "Bad_Name" }, "metadata.name", "a lowercase RFC 1123 subdomain"},
		{"V2 selector syntax", func(d *appsv1.DaemonSet) {
			d.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}
		}, "spec.selector.matchExpressions[0].values", "Required value"},
		{"V3 selector does not match", func(d *appsv1.DaemonSet) { d.Spec.Template.Labels = map[string]string{"app": "other"} },
			"spec.template.metadata.labels", "`selector` does not match template `labels`"},
		{"V3 nil selector", func(d *appsv1.DaemonSet) { d.Spec.Selector = nil },
			"spec.template.metadata.labels", "`selector` does not match template `labels`"},
		{"V4 empty selector", func(d *appsv1.DaemonSet) { d.Spec.Selector = &metav1.LabelSelector{} },
			"spec.selector", "empty selector is invalid for daemonset"},
		{"V5 no containers", func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.Containers = nil },
			"spec.template.spec.containers", "Required value"},
		{"V5 no image", func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.Containers[0].Image = "" },
			"spec.template.spec.containers[0].image", "Required value"},
		{"V6 restartPolicy", func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
			"spec.template.spec.restartPolicy", `Unsupported value: "OnFailure": supported values: "Always"`},
		{"V7 activeDeadlineSeconds", func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.ActiveDeadlineSeconds = ptrTo(int64(5)) },
			"spec.template.spec.activeDeadlineSeconds", "Forbidden: activeDeadlineSeconds in DaemonSet is not Supported"},
		{"V8 minReadySeconds", func(d *appsv1.DaemonSet) { d.Spec.MinReadySeconds = -1 },
			"spec.minReadySeconds", "Invalid value: -1: must be greater than or equal to 0"},
		{"V10 strategy type", func(d *appsv1.DaemonSet) { d.Spec.UpdateStrategy.Type = "Sometimes" },
			"spec.updateStrategy", `supported values: "RollingUpdate", "OnDelete"`},
		{"V12 maxUnavailable negative", rolling(intOrStr(intstr.FromInt32(-1)), nil),
			"spec.updateStrategy.rollingUpdate.maxUnavailable", "must be greater than or equal to 0"},
		{"V12 maxUnavailable not a percent", rolling(intOrStr(intstr.FromString("abc")), nil),
			"spec.updateStrategy.rollingUpdate.maxUnavailable", "a valid percent string must be a numeric string followed by an ending '%'"},
		{"V13 maxUnavailable over 100%", rolling(intOrStr(intstr.FromString("150%")), nil),
			"spec.updateStrategy.rollingUpdate.maxUnavailable", "must not be greater than 100%"},
		{"V14 both non-zero", rolling(intOrStr(intstr.FromInt32(1)), intOrStr(intstr.FromInt32(1))),
			"spec.updateStrategy.rollingUpdate.maxSurge", "may not be set when maxUnavailable is non-zero"},
		{"V14 both zero", rolling(intOrStr(intstr.FromString("0%")), intOrStr(intstr.FromInt32(0))),
			"spec.updateStrategy.rollingUpdate.maxUnavailable", "Required value: cannot be 0 when maxSurge is 0"},
		{"V15 revisionHistoryLimit", func(d *appsv1.DaemonSet) { d.Spec.RevisionHistoryLimit = ptrTo(int32(-1)) },
			"spec.revisionHistoryLimit", "must be greater than or equal to 0"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			ds := daemonSet("default", "v")
			tc.mutate(ds)
			_, err := dss.Create(ctx, ds, metav1.CreateOptions{})
			se := expectStatus(t, err, 422, metav1.StatusReasonInvalid)
			if !hasCause(se.ErrStatus, tc.field, tc.msg) {
				t.Fatalf("causes %+v lack %s: ...%s", se.ErrStatus.Details.Causes, tc.field, tc.msg)
			}
			prefix := `DaemonSet.apps "` + ds.Name + `" is invalid: `
			if !strings.HasPrefix(se.ErrStatus.Message, prefix) || !strings.Contains(se.ErrStatus.Message, tc.field+": ") {
				t.Fatalf("message %q, want %s... naming %s", se.ErrStatus.Message, prefix, tc.field)
			}
			if se.ErrStatus.Details.Kind != "DaemonSet" || se.ErrStatus.Details.Group != "apps" {
				t.Fatalf("details %+v, want kind DaemonSet group apps", se.ErrStatus.Details)
			}
			if _, err := dss.Get(ctx, ds.Name, metav1.GetOptions{}); err == nil {
				t.Fatal("an invalid DaemonSet was stored")
			}
		})
	}

	// The same rules apply on update.
	ds, err := dss.Create(ctx, daemonSet("default", "valid"), metav1.CreateOptions{})
	check(t, err)
	ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
	se := expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	if !hasCause(se.ErrStatus, "spec.template.spec.restartPolicy", `Unsupported value: "Never"`) {
		t.Fatalf("update causes %+v", se.ErrStatus.Details.Causes)
	}
}
