package apiserver_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPatchTypes applies JSON patch, JSON merge patch and strategic merge patch to
// DaemonSets, nodes and pods, including their status subresources.
func TestPatchTypes(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	dss := c.AppsV1().DaemonSets("default")
	ds := daemonSet("default", "p")
	ds.Spec.Template.Spec.Containers = append(ds.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "registry.example/sidecar:1"})
	created, err := dss.Create(ctx, ds, metav1.CreateOptions{})
	check(t, err)

	t.Run("strategic merge merges lists by key", func(t *testing.T) {
		patch := `{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"registry.example/agent:2.0"}]}}}}`
		got, err := dss.Patch(ctx, "p", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		check(t, err)
		cs := got.Spec.Template.Spec.Containers
		if len(cs) != 2 || cs[0].Image != "registry.example/agent:2.0" || cs[1].Name != "sidecar" {
			t.Fatalf("strategic merge patch gave containers %+v, want agent updated and sidecar kept", cs)
		}
		if got.Generation != created.Generation+1 || got.Annotations["deprecated.daemonset.template.generation"] != "2" {
			t.Fatalf("template change by patch: generation %d, template generation %q", got.Generation, got.Annotations["deprecated.daemonset.template.generation"])
		}
	})
	t.Run("merge patch replaces lists", func(t *testing.T) {
		patch := `{"metadata":{"labels":{"team":"infra"}},"spec":{"template":{"spec":{"containers":[{"name":"only","image":"registry.example/only:1"}]}}}}`
		got, err := dss.Patch(ctx, "p", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		check(t, err)
		cs := got.Spec.Template.Spec.Containers
		if len(cs) != 1 || cs[0].Name != "only" || got.Labels["team"] != "infra" {
			t.Fatalf("merge patch gave containers %+v labels %v", cs, got.Labels)
		}
		// Defaults are applied to what the patch brought in.
		if cs[0].TerminationMessagePath != corev1.TerminationMessagePathDefault || cs[0].ImagePullPolicy != corev1.PullIfNotPresent {
			t.Fatalf("patched container not defaulted: %+v", cs[0])
		}
		// null removes a key.
		got, err = dss.Patch(ctx, "p", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":null}}}`), metav1.PatchOptions{})
		check(t, err)
		if _, ok := got.Labels["team"]; ok {
			t.Fatalf("merge patch with null kept the label: %v", got.Labels)
		}
	})
	t.Run("json patch", func(t *testing.T) {
		cur, err := dss.Get(ctx, "p", metav1.GetOptions{})
		check(t, err)
		patch := `[{"op":"test","path":"/metadata/resourceVersion","value":"` + cur.ResourceVersion + `"},` +
			`{"op":"add","path":"/metadata/annotations/owner","value":"me"},` +
			`{"op":"replace","path":"/spec/minReadySeconds","value":7}]`
		got, err := dss.Patch(ctx, "p", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		check(t, err)
		if got.Annotations["owner"] != "me" || got.Spec.MinReadySeconds != 7 {
			t.Fatalf("json patch gave annotations %v minReadySeconds %d", got.Annotations, got.Spec.MinReadySeconds)
		}
		// The same test op now fails: 422, nothing written.
		_, err = dss.Patch(ctx, "p", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		expectStatus(t, err, 422, metav1.StatusReasonInvalid)
		after, err := dss.Get(ctx, "p", metav1.GetOptions{})
		check(t, err)
		if after.ResourceVersion != got.ResourceVersion {
			t.Fatal("a failed json patch wrote")
		}
	})
	t.Run("patch with a stale resourceVersion conflicts", func(t *testing.T) {
		patch := `{"metadata":{"resourceVersion":"` + created.ResourceVersion + `","labels":{"x":"y"}}}`
		_, err := dss.Patch(ctx, "p", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		expectStatus(t, err, 409, metav1.StatusReasonConflict)
	})
	t.Run("patch cannot change the selector", func(t *testing.T) {
		_, err := dss.Patch(ctx, "p", types.MergePatchType, []byte(`{"spec":{"selector":{"matchLabels":{"app":"other"}}}}`), metav1.PatchOptions{})
		expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	})
	t.Run("node status patch", func(t *testing.T) {
		_, err := c.CoreV1().Nodes().Create(ctx, node("n1"), metav1.CreateOptions{})
		check(t, err)
		patch := `{"spec":{"unschedulable":true},"status":{"conditions":[{"type":"Ready","status":"False","reason":"Down"}]}}`
		got, err := c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		check(t, err)
		if got.Spec.Unschedulable {
			t.Fatal("status patch changed spec")
		}
		if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Status != corev1.ConditionFalse {
			t.Fatalf("status patch gave conditions %+v", got.Status.Conditions)
		}
		got, err = c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		check(t, err)
		if !got.Spec.Unschedulable || got.Status.Conditions[0].Reason != "Down" {
			t.Fatalf("main patch: unschedulable %v, conditions %+v", got.Spec.Unschedulable, got.Status.Conditions)
		}
	})
	t.Run("pod label patch", func(t *testing.T) {
		_, err := c.CoreV1().Pods("default").Create(ctx, podOn("default", "pp", ""), metav1.CreateOptions{})
		check(t, err)
		got, err := c.CoreV1().Pods("default").Patch(ctx, "pp", types.JSONPatchType, []byte(`[{"op":"replace","path":"/metadata/labels/app","value":"api"}]`), metav1.PatchOptions{})
		check(t, err)
		if got.Labels["app"] != "api" {
			t.Fatalf("labels %v", got.Labels)
		}
		_, err = c.CoreV1().Pods("default").Patch(ctx, "missing", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
		expectStatus(t, err, 404, metav1.StatusReasonNotFound)
	})
}
