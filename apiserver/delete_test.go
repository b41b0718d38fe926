package apiserver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/miniplane/miniplane/test/testenv"
)

// TestGracefulPodDeletion: a pod bound to a node is only marked for deletion (its kubelet
// must stop it); a second delete with grace period 0 removes it. Unbound and finished
// pods go at once.
func TestGracefulPodDeletion(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)

	bound, err := pods.Create(ctx, podOn("default", "bound", "n1"), metav1.CreateOptions{})
	check(t, err)
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: bound.ResourceVersion, FieldSelector: "metadata.name=bound"})
	check(t, err)
	defer w.Stop()

	check(t, pods.Delete(ctx, "bound", metav1.DeleteOptions{}))
	got, err := pods.Get(ctx, "bound", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a bound pod vanished on delete: %v", err)
	}
	if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("deletionTimestamp %v grace %v, want set with the pod's 30s", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
	}
	if d := got.DeletionTimestamp.Sub(got.CreationTimestamp.Time); d < 25*time.Second || d > 2*time.Minute {
		t.Fatalf("deletionTimestamp %v is not about 30s after now (created %v)", got.DeletionTimestamp, got.CreationTimestamp)
	}
	ev := expectWatch(t, w, watch.Modified, "bound")
	if ev.Object.(*corev1.Pod).DeletionTimestamp == nil {
		t.Fatal("watch MODIFIED without deletionTimestamp")
	}

	// A longer grace period does not extend the deletion; a shorter one shortens it.
	check(t, pods.Delete(ctx, "bound", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(60))}))
	got, err = pods.Get(ctx, "bound", metav1.GetOptions{})
	check(t, err)
	if *got.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("a longer grace period changed it to %d", *got.DeletionGracePeriodSeconds)
	}
	check(t, pods.Delete(ctx, "bound", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(5))}))
	got, err = pods.Get(ctx, "bound", metav1.GetOptions{})
	check(t, err)
	if *got.DeletionGracePeriodSeconds != 5 {
		t.Fatalf("a shorter grace period gave %d, want 5", *got.DeletionGracePeriodSeconds)
	}
	expectWatch(t, w, watch.Modified, "bound")

	// The kubelet's final delete.
	check(t, pods.Delete(ctx, "bound", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}))
	if _, err := pods.Get(ctx, "bound", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod still there after delete with grace 0: %v", err)
	}
	expectWatch(t, w, watch.Deleted, "bound")

	_, err = pods.Create(ctx, podOn("default", "unbound", ""), metav1.CreateOptions{})
	check(t, err)
	check(t, pods.Delete(ctx, "unbound", metav1.DeleteOptions{}))
	if _, err := pods.Get(ctx, "unbound", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("unbound pod still there after delete: %v", err)
	}

	done, err := pods.Create(ctx, podOn("default", "done", "n1"), metav1.CreateOptions{})
	check(t, err)
	done.Status.Phase = corev1.PodSucceeded
	_, err = pods.UpdateStatus(ctx, done, metav1.UpdateOptions{})
	check(t, err)
	check(t, pods.Delete(ctx, "done", metav1.DeleteOptions{}))
	if _, err := pods.Get(ctx, "done", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("finished pod still there after delete: %v", err)
	}

	// A bound pod deleted with grace period 0 goes at once.
	_, err = pods.Create(ctx, podOn("default", "zero-grace", "n1"), metav1.CreateOptions{})
	check(t, err)
	check(t, pods.Delete(ctx, "zero-grace", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}))
	if _, err := pods.Get(ctx, "zero-grace", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("bound pod deleted with grace 0 at once is still there: %v", err)
	}
}

// TestFinalizers: an object with finalizers stays, marked, until they are removed; the
// propagation policy adds the garbage collector's finalizers.
func TestFinalizers(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	c := env.Client
	dss := c.AppsV1().DaemonSets("default")
	ctx := testCtx(t)

	held := daemonSet("default", "held")
	held.Finalizers = []string{"example.com/hold"}
	_, err := dss.Create(ctx, held, metav1.CreateOptions{})
	check(t, err)
	check(t, dss.Delete(ctx, "held", metav1.DeleteOptions{}))
	got, err := dss.Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("object with a finalizer vanished: %v", err)
	}
	if got.DeletionTimestamp == nil {
		t.Fatal("deleted object with a finalizer has no deletionTimestamp")
	}
	// Deleting again changes nothing.
	check(t, dss.Delete(ctx, "held", metav1.DeleteOptions{}))
	again, err := dss.Get(ctx, "held", metav1.GetOptions{})
	check(t, err)
	if again.ResourceVersion != got.ResourceVersion {
		t.Fatal("a repeated delete wrote")
	}
	// No new finalizers once deletion started.
	more := got.DeepCopy()
	more.Finalizers = append(more.Finalizers, "example.com/another")
	_, err = dss.Update(ctx, more, metav1.UpdateOptions{})
	expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	// Other updates still work, and deletionTimestamp cannot be cleared.
	got.Labels = map[string]string{"still": "editable"}
	got.DeletionTimestamp = nil
	got, err = dss.Update(ctx, got, metav1.UpdateOptions{})
	check(t, err)
	if got.DeletionTimestamp == nil || got.Labels["still"] != "editable" {
		t.Fatalf("update of a deleting object: deletionTimestamp %v labels %v", got.DeletionTimestamp, got.Labels)
	}
	// Removing the last finalizer removes the object.
	got.Finalizers = nil
	_, err = dss.Update(ctx, got, metav1.UpdateOptions{})
	check(t, err)
	if _, err := dss.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("object still there after its last finalizer went: %v", err)
	}

	for _, tc := range []struct {
		policy    metav1.DeletionPropagation
		finalizer string
	}{
		{metav1.DeletePropagationForeground, metav1.FinalizerDeleteDependents},
		{metav1.DeletePropagationOrphan, metav1.FinalizerOrphanDependents},
		{metav1.DeletePropagationBackground, ""},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			name := "prop-" + map[metav1.DeletionPropagation]string{"Foreground": "fg", "Orphan": "orphan", "Background": "bg"}[tc.policy]
			_, err := dss.Create(ctx, daemonSet("default", name), metav1.CreateOptions{})
			check(t, err)
			check(t, dss.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &tc.policy}))
			got, err := dss.Get(ctx, name, metav1.GetOptions{})
			if tc.finalizer == "" {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("background delete left the object: %v", err)
				}
				return
			}
			check(t, err)
			if got.DeletionTimestamp == nil || !slices.Equal(got.Finalizers, []string{tc.finalizer}) {
				t.Fatalf("deletionTimestamp %v finalizers %v, want set and [%s]", got.DeletionTimestamp, got.Finalizers, tc.finalizer)
			}
			// The garbage collector removes its finalizer when done: the object goes.
			got.Finalizers = nil
			_, err = dss.Update(ctx, got, metav1.UpdateOptions{})
			check(t, err)
			if _, err := dss.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("still there after the GC finalizer went: %v", err)
			}
		})
	}

	// A bound pod with a finalizer, deleted with grace 0, waits for its finalizer.
	pods := c.CoreV1().Pods("default")
	p := podOn("default", "fin", "n1")
	p.Finalizers = []string{"example.com/hold"}
	_, err = pods.Create(ctx, p, metav1.CreateOptions{})
	check(t, err)
	check(t, pods.Delete(ctx, "fin", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}))
	gotPod, err := pods.Get(ctx, "fin", metav1.GetOptions{})
	if err != nil || gotPod.DeletionTimestamp == nil {
		t.Fatalf("pod with a finalizer after delete: %v %v", gotPod, err)
	}
	gotPod.Finalizers = nil
	_, err = pods.Update(ctx, gotPod, metav1.UpdateOptions{})
	check(t, err)
	if _, err := pods.Get(ctx, "fin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod still there after its finalizer went: %v", err)
	}

	// deletecollection applies the same rules to each selected object.
	for _, name := range []string{"dc-1", "dc-2"} {
		d := daemonSet("default", name)
		d.Labels = map[string]string{"batch": "dc"}
		if name == "dc-2" {
			d.Finalizers = []string{"example.com/hold"}
		}
		_, err := dss.Create(ctx, d, metav1.CreateOptions{})
		check(t, err)
	}
	check(t, dss.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "batch=dc"}))
	if _, err := dss.Get(ctx, "dc-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dc-1 after deletecollection: %v", err)
	}
	dc2, err := dss.Get(ctx, "dc-2", metav1.GetOptions{})
	if err != nil || dc2.DeletionTimestamp == nil {
		t.Fatalf("dc-2 (with finalizer) after deletecollection: %v %v", dc2, err)
	}
}

// TestPodBinding: pods/binding sets spec.nodeName once.
func TestPodBinding(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)
	_, err := pods.Create(ctx, podOn("default", "p", ""), metav1.CreateOptions{})
	check(t, err)
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"scheduled-by": "test"}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	check(t, pods.Bind(ctx, binding, metav1.CreateOptions{}))
	got, err := pods.Get(ctx, "p", metav1.GetOptions{})
	check(t, err)
	if got.Spec.NodeName != "n1" || got.Annotations["scheduled-by"] != "test" {
		t.Fatalf("after binding: nodeName %q annotations %v", got.Spec.NodeName, got.Annotations)
	}
	scheduled := false
	for _, c := range got.Status.Conditions {
		scheduled = scheduled || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue)
	}
	if !scheduled {
		t.Fatalf("no PodScheduled=True condition: %+v", got.Status.Conditions)
	}

	binding.Target.Name = "n2"
	expectStatus(t, pods.Bind(ctx, binding, metav1.CreateOptions{}), 409, metav1.StatusReasonConflict)
	binding.Name = "missing"
	expectStatus(t, pods.Bind(ctx, binding, metav1.CreateOptions{}), 404, metav1.StatusReasonNotFound)
	_, err = pods.Create(ctx, podOn("default", "q", ""), metav1.CreateOptions{})
	check(t, err)
	noTarget := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "q"}}
	expectStatus(t, pods.Bind(ctx, noTarget, metav1.CreateOptions{}), 422, metav1.StatusReasonInvalid)
	uid := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "q", UID: "wrong"}, Target: corev1.ObjectReference{Name: "n1"}}
	expectStatus(t, pods.Bind(ctx, uid, metav1.CreateOptions{}), 409, metav1.StatusReasonConflict)
	q, err := pods.Get(ctx, "q", metav1.GetOptions{})
	check(t, err)
	if q.Spec.NodeName != "" {
		t.Fatalf("refused bindings bound the pod to %q", q.Spec.NodeName)
	}
}

// TestNamespaces: objects need an existing, active namespace; deleting a namespace
// empties it and then removes it.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)

	_, err := c.CoreV1().Pods("missing").Create(ctx, podOn("missing", "p", ""), metav1.CreateOptions{})
	se := expectStatus(t, err, 404, metav1.StatusReasonNotFound)
	if se.ErrStatus.Details == nil || se.ErrStatus.Details.Kind != "namespaces" || se.ErrStatus.Details.Name != "missing" {
		t.Fatalf("details %+v, want the namespace named", se.ErrStatus.Details)
	}
	_, err = c.AppsV1().DaemonSets("missing").Create(ctx, daemonSet("missing", "d"), metav1.CreateOptions{})
	expectStatus(t, err, 404, metav1.StatusReasonNotFound)

	for _, name := range []string{"default", "kube-system", "kube-node-lease", "kube-public"} {
		err := c.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		expectStatus(t, err, 403, metav1.StatusReasonForbidden)
	}

	ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
	check(t, err)
	if ns.Status.Phase != corev1.NamespaceActive || ns.Labels[corev1.LabelMetadataName] != "doomed" {
		t.Fatalf("new namespace: phase %q labels %v", ns.Status.Phase, ns.Labels)
	}
	_, err = c.CoreV1().Pods("doomed").Create(ctx, podOn("doomed", "unbound", ""), metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().Pods("doomed").Create(ctx, podOn("doomed", "bound", "n1"), metav1.CreateOptions{})
	check(t, err)
	_, err = c.AppsV1().DaemonSets("doomed").Create(ctx, daemonSet("doomed", "ds"), metav1.CreateOptions{})
	check(t, err)
	_, err = c.AppsV1().ControllerRevisions("doomed").Create(ctx, controllerRevision("doomed", "ds-1", 1), metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoordinationV1().Leases("doomed").Create(ctx, lease("doomed", "l", "x"), metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().Events("doomed").Create(ctx, event("doomed", "e", podOn("doomed", "bound", "n1")), metav1.CreateOptions{})
	check(t, err)
	// A finalizer holds one pod, and with it the namespace.
	held := podOn("doomed", "held", "n1")
	held.Finalizers = []string{"example.com/hold"}
	_, err = c.CoreV1().Pods("doomed").Create(ctx, held, metav1.CreateOptions{})
	check(t, err)
	// An object in another namespace must survive.
	_, err = c.CoreV1().Pods("default").Create(ctx, podOn("default", "survivor", "n1"), metav1.CreateOptions{})
	check(t, err)

	check(t, c.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}))
	ns, err = c.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
	if err == nil {
		if ns.Status.Phase != corev1.NamespaceTerminating || ns.DeletionTimestamp == nil {
			t.Fatalf("deleted namespace: phase %q deletionTimestamp %v", ns.Status.Phase, ns.DeletionTimestamp)
		}
		// New content is refused while it terminates.
		_, err = c.CoreV1().Pods("doomed").Create(ctx, podOn("doomed", "late", ""), metav1.CreateOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			expectStatus(t, err, 403, metav1.StatusReasonForbidden)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// Pods go first, and while one remains nothing else is deleted; the namespace's
	// conditions say what holds it, with the namespace controller's messages.
	eventually(t, "the pods of doomed deleted but for the held one, and the conditions to say so", func() (bool, error) {
		l, err := c.CoreV1().Pods("doomed").List(ctx, metav1.ListOptions{})
		if err != nil || !slices.Equal(namesOf(l), []string{"doomed/held"}) {
			return false, fmt.Errorf("pods %v (%w)", namesOf(l), err)
		}
		ns, err := c.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := map[corev1.NamespaceConditionType]string{
			corev1.NamespaceDeletionDiscoveryFailure: "False ResourcesDiscovered",
			corev1.NamespaceDeletionGVParsingFailure: "False ParsedGroupVersions",
			corev1.NamespaceDeletionContentFailure:   "False ContentDeleted",
			corev1.NamespaceContentRemaining:         "True SomeResourcesRemain Some resources are remaining: pods. has 1 resource instances",
			corev1.NamespaceFinalizersRemaining:      "True SomeFinalizersRemain Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances",
		}
		for _, cond := range ns.Status.Conditions {
			got := string(cond.Status) + " " + cond.Reason
			if cond.Status == corev1.ConditionTrue {
				got += " " + cond.Message
			}
			if w, ok := want[cond.Type]; ok && w == got && !cond.LastTransitionTime.IsZero() {
				delete(want, cond.Type)
			}
		}
		if len(want) > 0 {
			return false, fmt.Errorf("conditions %+v, missing %v", ns.Status.Conditions, want)
		}
		return true, nil
	})
	heldPod, err := c.CoreV1().Pods("doomed").Get(ctx, "held", metav1.GetOptions{})
	check(t, err)
	if heldPod.DeletionTimestamp == nil {
		t.Fatal("the held pod was not marked for deletion")
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace removed while a pod in it waits for its finalizer: %v", err)
	}
	if _, err := c.AppsV1().DaemonSets("doomed").Get(ctx, "ds", metav1.GetOptions{}); err != nil {
		t.Fatalf("a DaemonSet was deleted while a pod of the namespace remains: %v", err)
	}
	if _, err := c.CoordinationV1().Leases("doomed").Get(ctx, "l", metav1.GetOptions{}); err != nil {
		t.Fatalf("a Lease was deleted while a pod of the namespace remains: %v", err)
	}
	heldPod.Finalizers = nil
	_, err = c.CoreV1().Pods("doomed").Update(ctx, heldPod, metav1.UpdateOptions{})
	check(t, err)
	eventually(t, "namespace doomed to be removed", func() (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	for what, list := range map[string]func() (runtime.Object, error){
		"pods":       func() (runtime.Object, error) { return c.CoreV1().Pods("doomed").List(ctx, metav1.ListOptions{}) },
		"daemonsets": func() (runtime.Object, error) { return c.AppsV1().DaemonSets("doomed").List(ctx, metav1.ListOptions{}) },
		"controllerrevisions": func() (runtime.Object, error) {
			return c.AppsV1().ControllerRevisions("doomed").List(ctx, metav1.ListOptions{})
		},
		"leases": func() (runtime.Object, error) {
			return c.CoordinationV1().Leases("doomed").List(ctx, metav1.ListOptions{})
		},
		"events": func() (runtime.Object, error) { return c.CoreV1().Events("doomed").List(ctx, metav1.ListOptions{}) },
	} {
		l, err := list()
		check(t, err)
		if n := meta.LenList(l); n != 0 {
			t.Errorf("%s left in the removed namespace: %v", what, namesOf(l))
		}
	}
	if _, err := c.CoreV1().Pods("default").Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod in another namespace: %v", err)
	}
	// The name can be used again.
	_, err = c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
	check(t, err)
}

// TestDeleteOptionsUnderAnyServedGroupVersion: clients send DeleteOptions under the group
// version they like, not the resource's — the metadata client (kube's garbage collector)
// under v1 for every resource. Each served one is read; an unknown one is refused.
func TestDeleteOptionsUnderAnyServedGroupVersion(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	raw := newRawClient(t, env)
	admin := env.Token(testenv.AdminUser)
	dss := env.Client.AppsV1().DaemonSets("default")
	ctx := testCtx(t)
	for i, apiVersion := range []string{"v1", "meta.k8s.io/v1", "apps/v1"} {
		name := fmt.Sprintf("ds-%d", i)
		_, err := dss.Create(ctx, daemonSet("default", name), metav1.CreateOptions{})
		check(t, err)
		resp := raw.do(t, request{method: "DELETE", path: "/apis/apps/v1/namespaces/default/daemonsets/" + name, token: admin,
			contentType: "application/json",
			body:        strings.NewReader(`{"kind":"DeleteOptions","apiVersion":"` + apiVersion + `","propagationPolicy":"Orphan"}`)})
		if resp.code != 200 {
			t.Fatalf("DeleteOptions under %s: HTTP %d %s", apiVersion, resp.code, resp.body)
		}
		got, err := dss.Get(ctx, name, metav1.GetOptions{})
		check(t, err)
		if !slices.Contains(got.Finalizers, metav1.FinalizerOrphanDependents) {
			t.Fatalf("DeleteOptions under %s: propagationPolicy not read (finalizers %v)", apiVersion, got.Finalizers)
		}
	}
	_, err := dss.Create(ctx, daemonSet("default", "kept"), metav1.CreateOptions{})
	check(t, err)
	resp := raw.do(t, request{method: "DELETE", path: "/apis/apps/v1/namespaces/default/daemonsets/kept", token: admin,
		contentType: "application/json", body: strings.NewReader(`{"kind":"DeleteOptions","apiVersion":"nope.example/v9"}`)})
	if resp.code != 400 || resp.status == nil || resp.status.Reason != metav1.StatusReasonBadRequest {
		t.Fatalf("DeleteOptions under an unknown group version: HTTP %d %s", resp.code, resp.body)
	}
	if _, err := dss.Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("a refused delete deleted: %v", err)
	}
}

// TestNamespaceFinalize: namespaces/finalize writes spec.finalizers (which the main
// resource keeps as stored) and metadata, never status; finalizer names must be qualified
// or standard; a Terminating namespace whose last finalizer it removes is gone at once.
func TestNamespaceFinalize(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	nss := env.Client.CoreV1().Namespaces()
	ctx := testCtx(t)
	ns, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fin"}}, metav1.CreateOptions{})
	check(t, err)

	// The main resource does not change spec.finalizers.
	ns.Spec.Finalizers = append(ns.Spec.Finalizers, "example.com/main")
	ns, err = nss.Update(ctx, ns, metav1.UpdateOptions{})
	check(t, err)
	if !slices.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{corev1.FinalizerKubernetes}) {
		t.Fatalf("update through the main resource: finalizers %v", ns.Spec.Finalizers)
	}

	tests := []struct {
		name       string
		finalizers []corev1.FinalizerName
		wantCode   int32 // 0: accepted
	}{
		{"add a qualified one", []corev1.FinalizerName{corev1.FinalizerKubernetes, "e2e.example.com/fake"}, 0},
		{"unqualified, not standard", []corev1.FinalizerName{corev1.FinalizerKubernetes, "bogus"}, 422},
		{"invalid qualified name", []corev1.FinalizerName{"example.com/-bad-"}, 422},
		{"back to the standard one", []corev1.FinalizerName{corev1.FinalizerKubernetes}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur, err := nss.Get(ctx, "fin", metav1.GetOptions{})
			check(t, err)
			cur.Spec.Finalizers = tc.finalizers
			cur.Status.Phase = corev1.NamespaceTerminating // ignored: status is not finalize's
			cur.Labels["touched"] = tc.name[:3]
			got, err := nss.Finalize(ctx, cur, metav1.UpdateOptions{})
			if tc.wantCode != 0 {
				expectStatus(t, err, tc.wantCode, metav1.StatusReasonInvalid)
				return
			}
			check(t, err)
			if !slices.Equal(got.Spec.Finalizers, tc.finalizers) || got.Status.Phase != corev1.NamespaceActive || got.Labels["touched"] != tc.name[:3] {
				t.Fatalf("finalizers %v phase %q labels %v", got.Spec.Finalizers, got.Status.Phase, got.Labels)
			}
		})
	}

	// A Terminating namespace whose finalizers are all removed is removed by that write.
	_, err = env.Client.CoreV1().ConfigMaps("fin").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
	check(t, err)
	check(t, nss.Delete(ctx, "fin", metav1.DeleteOptions{}))
	cur, err := nss.Get(ctx, "fin", metav1.GetOptions{})
	check(t, err)
	cur.Spec.Finalizers = nil
	_, err = nss.Finalize(ctx, cur, metav1.UpdateOptions{})
	check(t, err)
	if _, err := nss.Get(ctx, "fin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace after its last finalizer was removed: %v, want NotFound", err)
	}
}
