package apiserver_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// managers returns "manager/operation[/subresource]" of each managedFields entry, sorted.
func managers(m metav1.Object) []string {
	var out []string
	for _, e := range m.GetManagedFields() {
		s := e.Manager + "/" + string(e.Operation)
		if e.Subresource != "" {
			s += "/" + e.Subresource
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// TestServerSideApply drives server-side apply through client-go's typed Apply methods:
// apply creates, a second manager conflicts on a field the first owns (409 naming both),
// force takes it over, and a field its manager stops applying goes.
func TestServerSideApply(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	cms := env.Client.CoreV1().ConfigMaps("default")

	teamA := corev1ac.ConfigMap("shared", "default").WithData(map[string]string{"owner": "team-a", "a-only": "1"})
	cm, err := cms.Apply(ctx, teamA, metav1.ApplyOptions{FieldManager: "team-a"})
	check(t, err)
	if cm.Data["owner"] != "team-a" || strings.Join(managers(cm), ",") != "team-a/Apply" {
		t.Fatalf("after the first apply: data %v managers %v", cm.Data, managers(cm))
	}

	teamB := corev1ac.ConfigMap("shared", "default").WithData(map[string]string{"owner": "team-b"})
	_, err = cms.Apply(ctx, teamB, metav1.ApplyOptions{FieldManager: "team-b"})
	se := expectStatus(t, err, 409, metav1.StatusReasonConflict)
	if !strings.Contains(se.ErrStatus.Message, `conflict with "team-a"`) || len(se.ErrStatus.Details.Causes) != 1 ||
		se.ErrStatus.Details.Causes[0].Field != ".data.owner" {
		t.Errorf("conflict %q causes %+v", se.ErrStatus.Message, se.ErrStatus.Details.Causes)
	}
	cm, err = cms.Apply(ctx, teamB, metav1.ApplyOptions{FieldManager: "team-b", Force: true})
	check(t, err)
	if cm.Data["owner"] != "team-b" || cm.Data["a-only"] != "1" {
		t.Errorf("after the forced apply: %v", cm.Data)
	}

	// team-a no longer applies a-only (and lost owner to team-b): both leave its ownership,
	// and a-only, owned by nobody else, goes.
	cm, err = cms.Apply(ctx, corev1ac.ConfigMap("shared", "default").WithData(map[string]string{}), metav1.ApplyOptions{FieldManager: "team-a"})
	check(t, err)
	if _, ok := cm.Data["a-only"]; ok || cm.Data["owner"] != "team-b" {
		t.Errorf("after team-a dropped its fields: %v", cm.Data)
	}

	// Dry run changes nothing.
	_, err = cms.Apply(ctx, corev1ac.ConfigMap("shared", "default").WithData(map[string]string{"owner": "dry"}),
		metav1.ApplyOptions{FieldManager: "team-b", DryRun: []string{metav1.DryRunAll}})
	check(t, err)
	got, err := cms.Get(ctx, "shared", metav1.GetOptions{})
	check(t, err)
	if got.Data["owner"] != "team-b" || got.ResourceVersion != cm.ResourceVersion {
		t.Errorf("a dry-run apply changed the object: %v rv %s → %s", got.Data, cm.ResourceVersion, got.ResourceVersion)
	}
}

// TestManagedFieldsOnEveryWrite checks that creates, updates, patches and status writes
// record their manager (the fieldManager parameter, else the User-Agent's first word), so
// a later apply knows who owns what.
func TestManagedFieldsOnEveryWrite(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	cfg := rest.CopyConfig(env.AdminConfig)
	cfg.UserAgent = "deployer/1.0 (linux/amd64)"
	c, err := kubernetes.NewForConfig(cfg)
	check(t, err)
	ds := daemonSet("default", "agent")
	created, err := c.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{})
	check(t, err)
	created.Labels = map[string]string{"tier": "node"}
	updated, err := c.AppsV1().DaemonSets("default").Update(ctx, created, metav1.UpdateOptions{FieldManager: "editor"})
	check(t, err)
	patched, err := c.AppsV1().DaemonSets("default").Patch(ctx, "agent", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"note":"x"}}}`), metav1.PatchOptions{FieldManager: "annotator"})
	check(t, err)
	patched.Status.DesiredNumberScheduled = 3
	status, err := c.AppsV1().DaemonSets("default").UpdateStatus(ctx, patched, metav1.UpdateOptions{FieldManager: "controller"})
	check(t, err)
	if got, want := strings.Join(managers(status), ","), "annotator/Update,controller/Update/status,deployer/Update,editor/Update"; got != want {
		t.Errorf("managers %s, want %s", got, want)
	}
	if len(updated.ManagedFields) != 2 {
		t.Errorf("after the update: managers %v", managers(updated))
	}

	// A status write is not recorded as owning the spec, nor a main write the status.
	_, err = c.AppsV1().DaemonSets("default").Apply(ctx,
		appsv1ac.DaemonSet("agent", "default").WithSpec(appsv1ac.DaemonSetSpec().WithMinReadySeconds(5)),
		metav1.ApplyOptions{FieldManager: "tuner"})
	check(t, err)

	// A field manager name kube-apiserver would refuse.
	_, err = c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		metav1.CreateOptions{FieldManager: strings.Repeat("m", 129)})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a 129-character field manager: %v, want 422", err)
	}
}

// TestApplyStatusAndLabels applies to the status subresource and to metadata only.
func TestApplyStatusAndLabels(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client.CoreV1().Nodes()
	_, err := c.Apply(ctx, corev1ac.Node("n1").WithLabels(map[string]string{"zone": "a"}), metav1.ApplyOptions{FieldManager: "labeler"})
	check(t, err)
	n, err := c.ApplyStatus(ctx, corev1ac.Node("n1").WithStatus(corev1ac.NodeStatus().
		WithConditions(corev1ac.NodeCondition().WithType(corev1.NodeReady).WithStatus(corev1.ConditionTrue))),
		metav1.ApplyOptions{FieldManager: "kubelet", Force: true})
	check(t, err)
	if n.Labels["zone"] != "a" || len(n.Status.Conditions) != 1 {
		t.Errorf("node after applies: labels %v conditions %v", n.Labels, n.Status.Conditions)
	}
	if got := strings.Join(managers(n), ","); got != "kubelet/Apply/status,labeler/Apply" {
		t.Errorf("managers %s", got)
	}
}

// TestApplyStrictFieldValidation: under fieldValidation=Strict an applied configuration
// with a field its schema does not declare is refused by the field manager, naming the
// field as kube-apiserver does (custom resources and built-in kinds alike), and one with a
// key given twice is refused by a strict reading of the YAML, naming the line.
func TestApplyStrictFieldValidation(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	installCRD(t, env, widgetCRD())
	rc := env.Client.Discovery().RESTClient()
	tests := []struct {
		name, path, body, want string
	}{
		{"custom resource, unknown field", "/apis/example.com/v1/namespaces/default/widgets/w1",
			"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  color: red\n  bogus: 1\n",
			".spec.bogus: field not declared in schema"},
		{"custom resource, unknown metadata field", "/apis/example.com/v1/namespaces/default/widgets/w2",
			"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\n  unknownMeta: x\nspec:\n  color: red\n",
			".metadata.unknownMeta: field not declared in schema"},
		{"custom resource, duplicate key", "/apis/example.com/v1/namespaces/default/widgets/w3",
			"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w3\nspec:\n  color: red\n  color: blue\n",
			`line 7: key "color" already set in map`},
		{"config map, unknown field", "/api/v1/namespaces/default/configmaps/c1",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\nbogus: 1\ndata:\n  a: b\n",
			".bogus: field not declared in schema"},
		{"config map, duplicate key", "/api/v1/namespaces/default/configmaps/c2",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c2\ndata:\n  a: b\n  a: c\n",
			`line 7: key "a" already set in map`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			body, err := rc.Patch(types.ApplyPatchType).AbsPath(tc.path).Param("fieldManager", "test").
				Param("fieldValidation", "Strict").Body([]byte(tc.body)).DoRaw(ctx)
			var status metav1.Status
			if err == nil || json.Unmarshal(body, &status) != nil || !strings.Contains(status.Message, tc.want) {
				t.Fatalf("error %v (%s), want a Status with a message containing %q", err, body, tc.want)
			}
			// The client's mistake: 400, not the 500 kube-apiserver 1.37 answers a schema
			// error with.
			if status.Code != http.StatusBadRequest || status.Reason != metav1.StatusReasonBadRequest {
				t.Fatalf("code %d reason %q, want 400 BadRequest", status.Code, status.Reason)
			}
			// Nothing was created.
			if err := rc.Get().AbsPath(tc.path).Do(ctx).Error(); !apierrors.IsNotFound(err) {
				t.Fatalf("after the refused apply: %v, want NotFound", err)
			}
			// Without the problem the same apply succeeds.
			clean := strings.NewReplacer("  bogus: 1\n", "", "bogus: 1\n", "", "  unknownMeta: x\n", "", "  color: blue\n", "", "  a: c\n", "").Replace(tc.body)
			if _, err := rc.Patch(types.ApplyPatchType).AbsPath(tc.path).Param("fieldManager", "test").
				Param("fieldValidation", "Strict").Body([]byte(clean)).DoRaw(ctx); err != nil {
				t.Fatalf("clean apply: %v", err)
			}
		})
	}
}
