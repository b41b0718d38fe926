package apiserver_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestSelectors lists pods and events with label and field selectors, from the watch
// cache (no limit), from etcd (with a limit) and at resourceVersion 0, which must all
// give the same answer.
func TestSelectors(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{})
	check(t, err)

	type fixture struct {
		ns, name, node string
		labels         map[string]string
		phase          corev1.PodPhase
	}
	fixtures := []fixture{
		{"default", "a", "n1", map[string]string{"app": "web", "tier": "front"}, corev1.PodRunning},
		{"default", "b", "n1", map[string]string{"app": "web", "tier": "back"}, corev1.PodPending},
		{"default", "c", "n2", map[string]string{"app": "db"}, corev1.PodRunning},
		{"default", "d", "", map[string]string{"app": "db"}, ""},
		{"other", "a", "n2", map[string]string{"app": "web"}, corev1.PodSucceeded},
	}
	pods := map[string]*corev1.Pod{}
	for _, f := range fixtures {
		p := podOn(f.ns, f.name, f.node)
		p.Labels = f.labels
		created, err := c.CoreV1().Pods(f.ns).Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
		if f.phase != "" && f.phase != corev1.PodPending {
			created.Status.Phase = f.phase
			created, err = c.CoreV1().Pods(f.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
			check(t, err)
		}
		pods[f.ns+"/"+f.name] = created
	}

	for _, tc := range []struct {
		name, ns, label, field string
		want                   []string
	}{
		{"all namespaces", "", "", "", []string{"default/a", "default/b", "default/c", "default/d", "other/a"}},
		{"one namespace", "other", "", "", []string{"other/a"}},
		{"label equality", "", "app=web", "", []string{"default/a", "default/b", "other/a"}},
		{"label set", "default", "tier in (front,back)", "", []string{"default/a", "default/b"}},
		{"label not", "default", "app!=web", "", []string{"default/c", "default/d"}},
		{"label exists", "", "tier", "", []string{"default/a", "default/b"}},
		{"label does not exist", "default", "!tier", "", []string{"default/c", "default/d"}},
		{"metadata.name", "", "", "metadata.name=a", []string{"default/a", "other/a"}},
		{"metadata.namespace", "", "", "metadata.namespace=other", []string{"other/a"}},
		{"spec.nodeName", "", "", "spec.nodeName=n1", []string{"default/a", "default/b"}},
		{"unscheduled", "", "", "spec.nodeName=", []string{"default/d"}},
		{"spec.nodeName not", "default", "", "spec.nodeName!=n1", []string{"default/c", "default/d"}},
		{"status.phase", "", "", "status.phase=Running", []string{"default/a", "default/c"}},
		{"not terminal", "", "", "status.phase!=Succeeded,status.phase!=Failed", []string{"default/a", "default/b", "default/c", "default/d"}},
		{"label and field", "", "app=web", "spec.nodeName=n2", []string{"other/a"}},
		{"no match", "", "app=none", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, variant := range []struct {
				name string
				opts metav1.ListOptions
			}{
				{"cache", metav1.ListOptions{}},
				{"etcd", metav1.ListOptions{Limit: 100}},
				{"rv0", metav1.ListOptions{ResourceVersion: "0"}},
			} {
				opts := variant.opts
				opts.LabelSelector, opts.FieldSelector = tc.label, tc.field
				list, err := c.CoreV1().Pods(tc.ns).List(ctx, opts)
				if err != nil {
					t.Fatalf("%s: %v", variant.name, err)
				}
				if got := namesOf(list); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
					t.Fatalf("%s: got %v, want %v", variant.name, got, tc.want)
				}
			}
		})
	}

	// Events select by the object they are about.
	for _, ev := range []*corev1.Event{
		event("default", "e-a", pods["default/a"]),
		event("default", "e-b", pods["default/b"]),
		event("other", "e-oa", pods["other/a"]),
	} {
		_, err := c.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
		check(t, err)
	}
	node := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e-node"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1", UID: "n1"}, Reason: "NodeReady", Type: corev1.EventTypeNormal}
	_, err = c.CoreV1().Events("default").Create(ctx, node, metav1.CreateOptions{})
	check(t, err)
	for _, tc := range []struct {
		ns, field string
		want      []string
	}{
		{"", "involvedObject.kind=Pod", []string{"default/e-a", "default/e-b", "other/e-oa"}},
		{"", "involvedObject.name=a", []string{"default/e-a", "other/e-oa"}},
		{"default", "involvedObject.name=a,involvedObject.namespace=default", []string{"default/e-a"}},
		{"", "involvedObject.uid=" + string(pods["default/b"].UID), []string{"default/e-b"}},
		{"", "involvedObject.kind=Node,involvedObject.name=n1", []string{"default/e-node"}},
		{"", "reason=NodeReady", []string{"default/e-node"}},
	} {
		list, err := c.CoreV1().Events(tc.ns).List(ctx, metav1.ListOptions{FieldSelector: tc.field})
		check(t, err)
		if got := namesOf(list); !slices.Equal(got, tc.want) {
			t.Errorf("events %q: got %v, want %v", tc.field, got, tc.want)
		}
	}

	// Fields a resource does not index are refused, as kube-apiserver refuses them.
	_, err = c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.containers=x"})
	expectStatus(t, err, 400, metav1.StatusReasonBadRequest)
	_, err = c.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	expectStatus(t, err, 400, metav1.StatusReasonBadRequest)
	_, err = c.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app in (a"})
	expectStatus(t, err, 400, metav1.StatusReasonBadRequest)
}

// TestWatchSelectors: a watch with a selector sees an object entering the selection as
// ADDED and leaving it as DELETED, the way kube-apiserver filters watches.
func TestWatchSelectors(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)
	p, err := pods.Create(ctx, podOn("default", "mover", ""), metav1.CreateOptions{})
	check(t, err)

	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1", ResourceVersion: p.ResourceVersion})
	check(t, err)
	defer w.Stop()
	lw, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "stage=canary", ResourceVersion: p.ResourceVersion})
	check(t, err)
	defer lw.Stop()

	// Not selected yet: an unrelated pod on n2 must not show either.
	_, err = pods.Create(ctx, podOn("default", "elsewhere", "n2"), metav1.CreateOptions{})
	check(t, err)
	// Binding moves it into the spec.nodeName=n1 selection.
	check(t, pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "mover"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}))
	expectWatch(t, w, watch.Added, "mover")

	p, err = pods.Get(ctx, "mover", metav1.GetOptions{})
	check(t, err)
	p.Labels["stage"] = "canary"
	p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	check(t, err)
	expectWatch(t, w, watch.Modified, "mover")
	expectWatch(t, lw, watch.Added, "mover")

	delete(p.Labels, "stage")
	_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	check(t, err)
	expectWatch(t, w, watch.Modified, "mover")
	expectWatch(t, lw, watch.Deleted, "mover")

	check(t, pods.Delete(ctx, "mover", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}))
	expectWatch(t, w, watch.Deleted, "mover")
}

// expectWatch reads the next non-bookmark event of w and checks its type and name.
func expectWatch(t *testing.T, w watch.Interface, typ watch.EventType, name string) watch.Event {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed while waiting for %s %s", typ, name)
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			m, ok := ev.Object.(metav1.Object)
			if !ok {
				t.Fatalf("watch event %s with %T, want %s %s", ev.Type, ev.Object, typ, name)
			}
			if ev.Type != typ || m.GetName() != name {
				t.Fatalf("watch event %s %s, want %s %s", ev.Type, m.GetName(), typ, name)
			}
			return ev
		case <-timeout:
			t.Fatalf("no %s %s event", typ, name)
		}
	}
}
