package apiserver_test

import (
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestStatusSubresource: a write to the main resource keeps the stored status, a write
// to status keeps the spec and may change the client's metadata (but a pod's owners and a
// Deployment's labels), for nodes, pods, DaemonSets, Deployments and CronJobs.
func TestStatusSubresource(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)

	t.Run("nodes", func(t *testing.T) {
		nodes := c.CoreV1().Nodes()
		n, err := nodes.Create(ctx, node("n1"), metav1.CreateOptions{})
		check(t, err)
		if len(n.Status.Conditions) != 1 {
			t.Fatalf("a node may register with its status; got %+v", n.Status)
		}
		// Main resource: spec and labels change, status does not.
		n.Spec.Unschedulable = true
		n.Labels["role"] = "worker"
		n.Status.Conditions[0].Status = corev1.ConditionFalse
		n, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		check(t, err)
		if !n.Spec.Unschedulable || n.Labels["role"] != "worker" || n.Status.Conditions[0].Status != corev1.ConditionTrue {
			t.Fatalf("main update: unschedulable %v labels %v ready %s", n.Spec.Unschedulable, n.Labels, n.Status.Conditions[0].Status)
		}
		// Status: status changes, spec does not; labels do, as kube-apiserver lets a
		// node's status write change them.
		n.Spec.Unschedulable = false
		n.Labels["role"] = "changed-by-status"
		n.Status.Conditions[0].Status = corev1.ConditionFalse
		n, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		check(t, err)
		if !n.Spec.Unschedulable || n.Labels["role"] != "changed-by-status" || n.Status.Conditions[0].Status != corev1.ConditionFalse {
			t.Fatalf("status update: unschedulable %v labels %v ready %s", n.Spec.Unschedulable, n.Labels, n.Status.Conditions[0].Status)
		}
		stored, err := nodes.Get(ctx, "n1", metav1.GetOptions{})
		check(t, err)
		if stored.ResourceVersion != n.ResourceVersion || stored.Status.Conditions[0].Status != corev1.ConditionFalse {
			t.Fatal("the response does not match what was stored")
		}
	})

	t.Run("pods", func(t *testing.T) {
		pods := c.CoreV1().Pods("default")
		created := podOn("default", "p", "n1")
		created.Status.Phase = corev1.PodRunning // ignored on create
		p, err := pods.Create(ctx, created, metav1.CreateOptions{})
		check(t, err)
		if p.Status.Phase != corev1.PodPending {
			t.Fatalf("create kept client status phase %q", p.Status.Phase)
		}
		p.Status.Phase = corev1.PodRunning
		p.Labels["touched"] = "yes"
		p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
		check(t, err)
		if p.Status.Phase != corev1.PodPending || p.Labels["touched"] != "yes" {
			t.Fatalf("main update: phase %s labels %v", p.Status.Phase, p.Labels)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = "10.0.0.5"
		p.Spec.Containers[0].Image = "registry.example/app:9"
		p.Labels["touched"] = "by-status"
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}}
		p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		check(t, err)
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP != "10.0.0.5" {
			t.Fatalf("status update: phase %s ip %s", p.Status.Phase, p.Status.PodIP)
		}
		// Labels may change through pods/status, spec and owners may not (as kube-apiserver).
		if p.Spec.Containers[0].Image != "registry.example/app:1.0" || p.Labels["touched"] != "by-status" || len(p.OwnerReferences) != 0 {
			t.Fatalf("status update: image %s labels %v owners %v", p.Spec.Containers[0].Image, p.Labels, p.OwnerReferences)
		}
		// Terminal phases are final.
		p.Status.Phase = corev1.PodSucceeded
		p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		check(t, err)
		p.Status.Phase = corev1.PodRunning
		_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	})

	t.Run("daemonsets", func(t *testing.T) {
		dss := c.AppsV1().DaemonSets("default")
		in := daemonSet("default", "ds")
		in.Status.NumberReady = 5 // cleared on create
		ds, err := dss.Create(ctx, in, metav1.CreateOptions{})
		check(t, err)
		if !reflect.DeepEqual(ds.Status, appsv1.DaemonSetStatus{}) {
			t.Fatalf("create kept client status %+v", ds.Status)
		}
		ds.Status.DesiredNumberScheduled = 3
		ds.Spec.MinReadySeconds = 4
		ds, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		check(t, err)
		if ds.Status.DesiredNumberScheduled != 0 || ds.Spec.MinReadySeconds != 4 || ds.Generation != 2 {
			t.Fatalf("main update: status %+v minReadySeconds %d generation %d", ds.Status, ds.Spec.MinReadySeconds, ds.Generation)
		}
		ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 2, NumberReady: 1, ObservedGeneration: 2, CollisionCount: ptrTo(int32(1))}
		ds.Spec.MinReadySeconds = 9
		ds.Labels = map[string]string{"set": "by-status"}
		ds.Spec.Template.Spec.Containers[0].Image = "registry.example/agent:9"
		ds, err = dss.UpdateStatus(ctx, ds, metav1.UpdateOptions{})
		check(t, err)
		if ds.Status.DesiredNumberScheduled != 3 || ds.Status.ObservedGeneration != 2 {
			t.Fatalf("status update lost status: %+v", ds.Status)
		}
		if ds.Spec.MinReadySeconds != 4 || ds.Spec.Template.Spec.Containers[0].Image != "registry.example/agent:1.0" || ds.Generation != 2 {
			t.Fatalf("status update changed spec or generation: minReadySeconds %d image %s generation %d",
				ds.Spec.MinReadySeconds, ds.Spec.Template.Spec.Containers[0].Image, ds.Generation)
		}
		if ds.Labels["set"] != "by-status" {
			t.Fatalf("labels after a DaemonSet's status write: %v, want them changed (as kube-apiserver)", ds.Labels)
		}
		if ds.Annotations["deprecated.daemonset.template.generation"] != "1" {
			t.Fatalf("status update changed the template generation: %v", ds.Annotations)
		}

		for _, tc := range []struct {
			name   string
			mutate func(*appsv1.DaemonSetStatus)
			field  string
		}{
			{"negative count", func(s *appsv1.DaemonSetStatus) { s.NumberReady = -1 }, "status.numberReady"},
			{"collisionCount decremented", func(s *appsv1.DaemonSetStatus) { s.CollisionCount = ptrTo(int32(0)) }, "status.collisionCount"},
			{"collisionCount removed", func(s *appsv1.DaemonSetStatus) { s.CollisionCount = nil }, "status.collisionCount"},
		} {
			bad := ds.DeepCopy()
			tc.mutate(&bad.Status)
			_, err := dss.UpdateStatus(ctx, bad, metav1.UpdateOptions{})
			se := expectStatus(t, err, 422, metav1.StatusReasonInvalid)
			if !hasCause(se.ErrStatus, tc.field, "") {
				t.Errorf("%s: causes %+v lack %s", tc.name, se.ErrStatus.Details.Causes, tc.field)
			}
		}
	})
	t.Run("deployments and cronjobs", func(t *testing.T) {
		_, err := c.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
		}, metav1.CreateOptions{})
		check(t, err)
		d, err := c.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"app":"changed"},"annotations":{"patched":"yes"}},"status":{"replicas":2}}`), metav1.PatchOptions{}, "status")
		check(t, err)
		if d.Status.Replicas != 2 || d.Labels["app"] != "web" || d.Annotations["patched"] != "yes" {
			t.Fatalf("deployment status patch: replicas %d labels %v annotations %v, want 2, labels kept, annotation set",
				d.Status.Replicas, d.Labels, d.Annotations)
		}
		cj, err := c.BatchV1().CronJobs("default").Create(ctx, &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: "nightly"},
			Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure,
					Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}},
		}, metav1.CreateOptions{})
		check(t, err)
		cj, err = c.BatchV1().CronJobs("default").Patch(ctx, cj.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"patchedstatus":"true"}},"status":{"lastScheduleTime":"2026-01-02T03:04:05Z"}}`), metav1.PatchOptions{}, "status")
		check(t, err)
		if cj.Status.LastScheduleTime == nil || cj.Annotations["patchedstatus"] != "true" {
			t.Fatalf("cronjob status patch: lastScheduleTime %v annotations %v", cj.Status.LastScheduleTime, cj.Annotations)
		}
	})
}

// hasCause reports whether status has a cause for field whose message contains msg.
func hasCause(status metav1.Status, field, msg string) bool {
	if status.Details == nil {
		return false
	}
	for _, c := range status.Details.Causes {
		if c.Field == field && strings.Contains(c.Message, msg) {
			return true
		}
	}
	return false
}
