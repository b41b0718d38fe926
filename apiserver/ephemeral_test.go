package apiserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPodEphemeralContainers: `kubectl debug POD --image=...` adds an ephemeral container
// through pods/ephemeralcontainers, which changes nothing else of the pod; ephemeral
// containers cannot be changed, removed, created with a pod, put in a template or added
// through the pod itself; the subresource is authorized on its own, as upstream's edit role
// does not grant it; and logs and attach know the container.
func TestPodEphemeralContainers(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	k := newKubectl(t, env)
	pods := env.Client.CoreV1().Pods("default")
	web := podOn("default", "web", "n1")
	web.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	_, err := pods.Create(ctx, web, metav1.CreateOptions{})
	check(t, err)

	_, stderr := k.run("debug", "web", "--image=busybox:1.36", "-c", "dbg", "--target=c", "--", "sleep", "3600")
	if strings.Contains(stderr, "panic") {
		t.Fatalf("kubectl debug: %s", stderr)
	}
	got, err := pods.Get(ctx, "web", metav1.GetOptions{})
	check(t, err)
	if n := len(got.Spec.EphemeralContainers); n != 1 {
		t.Fatalf("ephemeral containers %+v", got.Spec.EphemeralContainers)
	}
	ec := got.Spec.EphemeralContainers[0]
	if ec.Name != "dbg" || ec.TargetContainerName != "c" || ec.Image != "busybox:1.36" ||
		ec.ImagePullPolicy != corev1.PullIfNotPresent || ec.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("ephemeral container as stored: %+v", ec)
	}
	if got.Generation != 2 {
		t.Errorf("generation %d after an ephemeral container was added, want 2", got.Generation)
	}
	var entry *metav1.ManagedFieldsEntry
	for i, m := range got.ManagedFields {
		if m.Subresource == "ephemeralcontainers" {
			entry = &got.ManagedFields[i]
		}
	}
	if entry == nil {
		t.Fatalf("no managedFields entry of the subresource: %+v", got.ManagedFields)
	}
	var owned map[string]any
	check(t, json.Unmarshal(entry.FieldsV1.GetRawBytes(), &owned))
	if spec, _ := owned["f:spec"].(map[string]any); len(owned) != 1 || len(spec) != 1 || spec["f:ephemeralContainers"] == nil {
		t.Errorf("%s owns %s, want spec.ephemeralContainers alone", entry.Manager, entry.FieldsV1.GetRawString())
	}

	// What a write through the subresource may not do.
	patch := func(pt types.PatchType, body string) error {
		_, err := pods.Patch(ctx, "web", pt, []byte(body), metav1.PatchOptions{}, "ephemeralcontainers")
		return err
	}
	for _, tc := range []struct {
		name, body string
		pt         types.PatchType
		want       []string
	}{
		{"change one", `[{"op":"replace","path":"/spec/ephemeralContainers/0/image","value":"alpine"}]`, types.JSONPatchType,
			[]string{`spec.ephemeralContainers[dbg]: Forbidden: existing ephemeral containers "dbg" may not be changed`}},
		{"remove one", `[{"op":"remove","path":"/spec/ephemeralContainers/0"}]`, types.JSONPatchType,
			[]string{`spec.ephemeralContainers: Forbidden: existing ephemeral containers "dbg" may not be removed`}},
		{"what an ephemeral container may not hold", `{"spec":{"ephemeralContainers":[{"name":"x","image":" ","targetContainerName":"nope",
			"ports":[{"containerPort":80}],"readinessProbe":{"exec":{"command":["true"]}},"resources":{"limits":{"cpu":"1"}},
			"volumeMounts":[{"name":"data","mountPath":"/d","subPath":"s"},{"name":"nope","mountPath":"/n"}]}]}}`, types.StrategicMergePatchType,
			[]string{
				"spec.ephemeralContainers[0].image: Required value",
				`spec.ephemeralContainers[0].targetContainerName: Not found: "nope"`,
				"spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
				"spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
				"spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container",
				"spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container",
				`spec.ephemeralContainers[0].volumeMounts[1].name: Not found: "nope"`,
			}},
		{"a name taken", `{"spec":{"ephemeralContainers":[{"name":"c","image":"busybox"}]}}`, types.StrategicMergePatchType,
			[]string{`spec.ephemeralContainers[0].name: Duplicate value: "c"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := expectStatus(t, patch(tc.pt, tc.body), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid)
			for _, w := range tc.want {
				if !strings.Contains(se.ErrStatus.Message, w) {
					t.Errorf("message %q lacks %q", se.ErrStatus.Message, w)
				}
			}
		})
	}
	// The rest of the pod is kept as stored.
	two := append(got.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "two", Image: "busybox:1.36", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/d"}}}})
	both, err := json.Marshal(two)
	check(t, err)
	check(t, patch(types.MergePatchType, `{"metadata":{"labels":{"app":"other"}},"spec":{"activeDeadlineSeconds":5,
		"ephemeralContainers":`+string(both)+`},"status":{"phase":"Failed"}}`))
	got, err = pods.Get(ctx, "web", metav1.GetOptions{})
	check(t, err)
	if got.Labels["app"] != "web" || got.Spec.ActiveDeadlineSeconds != nil || got.Status.Phase != corev1.PodPending ||
		len(got.Spec.EphemeralContainers) != 2 || got.Generation != 3 {
		t.Errorf("after a write through the subresource: labels %v, activeDeadlineSeconds %v, phase %s, %d ephemeral containers, generation %d",
			got.Labels, got.Spec.ActiveDeadlineSeconds, got.Status.Phase, len(got.Spec.EphemeralContainers), got.Generation)
	}

	// Nowhere else.
	created := podOn("default", "born-with-one", "n1")
	created.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "d", Image: "busybox"}}}
	_, err = pods.Create(ctx, created, metav1.CreateOptions{})
	if se := expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message, "spec.ephemeralContainers: Forbidden: cannot be set on create") {
		t.Errorf("create: %s", se.ErrStatus.Message)
	}
	_, err = pods.Patch(ctx, "web", types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/ephemeralContainers/-","value":{"name":"e","image":"busybox"}}]`), metav1.PatchOptions{})
	if se := expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message, "pod updates may not change fields") {
		t.Errorf("patch of the pod: %s", se.ErrStatus.Message)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ds"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ds"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "ds"}}, Spec: created.Spec}}}
	_, err = env.Client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{})
	if se := expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message,
		"spec.template.spec.ephemeralContainers: Forbidden: ephemeral containers not allowed in pod template") {
		t.Errorf("DaemonSet: %s", se.ErrStatus.Message)
	}
	mirror := podOn("default", "static", "n1")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	_, err = pods.Create(ctx, mirror, metav1.CreateOptions{})
	check(t, err)
	_, err = pods.Patch(ctx, "static", types.StrategicMergePatchType, []byte(`{"spec":{"ephemeralContainers":[{"name":"d","image":"busybox"}]}}`),
		metav1.PatchOptions{}, "ephemeralcontainers")
	if se := expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message, "static pods do not support ephemeral containers") {
		t.Errorf("static pod: %s", se.ErrStatus.Message)
	}

	// edit may change pods, not add ephemeral containers to them; a rule naming the
	// subresource may.
	_, err = env.Client.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "erin-edits"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "erin"}}}, metav1.CreateOptions{})
	check(t, err)
	erin := impersonating(t, env, "erin").CoreV1().Pods("default")
	addThree := []byte(`{"spec":{"ephemeralContainers":[{"name":"three","image":"busybox"}]}}`)
	eventually(t, "erin's binding", func() (bool, error) {
		_, err := erin.Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"seen":"yes"}}}`), metav1.PatchOptions{})
		return err == nil, err
	})
	_, err = erin.Patch(ctx, "web", types.StrategicMergePatchType, addThree, metav1.PatchOptions{}, "ephemeralcontainers")
	expectStatus(t, err, http.StatusForbidden, metav1.StatusReasonForbidden)
	_, err = env.Client.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "debugger"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"patch"}}}}, metav1.CreateOptions{})
	check(t, err)
	_, err = env.Client.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "erin-debugs"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "debugger"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "erin"}}}, metav1.CreateOptions{})
	check(t, err)
	eventually(t, "erin's second binding", func() (bool, error) {
		_, err := erin.Patch(ctx, "web", types.StrategicMergePatchType, addThree, metav1.PatchOptions{}, "ephemeralcontainers")
		return err == nil, err
	})

	// Logs and attach know the container (the stub runs none of them).
	got, err = pods.Get(ctx, "web", metav1.GetOptions{})
	check(t, err)
	got.Status.Phase = corev1.PodRunning
	got.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "dbg",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	_, err = pods.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	check(t, err)
	if out, _ := k.run("logs", "web", "-c", "dbg"); !strings.Contains(out, `container "dbg" of pod default/web runs on the stub node n1`) {
		t.Errorf("kubectl logs -c dbg: %q", out)
	}
	if _, stderr, err := k.try("attach", "web", "-c", "dbg"); err == nil || !strings.Contains(stderr, `cannot attach to container "dbg" of pod web`) {
		t.Errorf("kubectl attach -c dbg: %v: %s", err, stderr)
	}

	res, err := env.Client.Discovery().ServerResourcesForGroupVersion("v1")
	check(t, err)
	found := false
	for _, r := range res.APIResources {
		found = found || (r.Name == "pods/ephemeralcontainers" && r.Kind == "Pod" && strings.Join(r.Verbs, ",") == "get,patch,update")
	}
	if !found {
		t.Error("discovery lacks pods/ephemeralcontainers (Pod; get, patch, update)")
	}
}
