package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/miniplane/miniplane/test/testenv"
)

// newStyleEvent is an events.k8s.io/v1 Event about pod web-0, as client-go's events
// package writes one.
func newStyleEvent(name string) *eventsv1.Event {
	return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "example.com/web-controller", ReportingInstance: "web-controller-host-1",
		Action: "Restart", Reason: "Restarted", Type: corev1.EventTypeWarning, Note: "restarted web-0",
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0", APIVersion: "v1", UID: "uid-web-0"},
	}
}

// TestEventsInTwoGroups: an Event written through either group is read, listed, watched,
// selected, changed and deleted through the other, with the fields renamed as
// kube-apiserver renames them.
func TestEventsInTwoGroups(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns = "default"

	created, err := c.EventsV1().Events(ns).Create(ctx, newStyleEvent("web-0.restarted"), metav1.CreateOptions{})
	check(t, err)
	core, err := c.CoreV1().Events(ns).Get(ctx, "web-0.restarted", metav1.GetOptions{})
	check(t, err)
	if core.InvolvedObject.Name != "web-0" || core.Message != "restarted web-0" || core.ReportingController != "example.com/web-controller" ||
		core.Action != "Restart" || core.EventTime.IsZero() || core.ResourceVersion != created.ResourceVersion || core.UID != created.UID {
		t.Errorf("core/v1 form = %+v; want the events.k8s.io/v1 Event's fields under their core names", core)
	}

	old, err := c.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web-1.pulled"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-1"}, Reason: "Pulled", Message: "image pulled",
		Source: corev1.EventSource{Component: "kubelet", Host: "node-a"}, Count: 3, Type: corev1.EventTypeNormal,
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now()}, metav1.CreateOptions{})
	check(t, err)
	v1ev, err := c.EventsV1().Events(ns).Get(ctx, "web-1.pulled", metav1.GetOptions{ResourceVersion: old.ResourceVersion})
	check(t, err)
	if v1ev.Regarding.Name != "web-1" || v1ev.Note != "image pulled" || v1ev.DeprecatedCount != 3 ||
		v1ev.DeprecatedSource.Host != "node-a" || v1ev.DeprecatedFirstTimestamp.IsZero() {
		t.Errorf("events.k8s.io/v1 form = %+v; want the core/v1 Event's fields under their new names", v1ev)
	}

	// Lists and field selectors: each group selects on its own field names, as the e2e
	// suite's Events API spec does (reportingController here, source in core/v1).
	list, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=web-0"})
	check(t, err)
	if len(list.Items) != 1 || list.Items[0].Name != "web-0.restarted" {
		t.Errorf("events.k8s.io list by regarding.name = %d items, want web-0.restarted", len(list.Items))
	}
	list, err = c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reportingController=example.com/web-controller", Limit: 10})
	check(t, err)
	if len(list.Items) != 1 || list.Items[0].Name != "web-0.restarted" {
		t.Errorf("events.k8s.io list by reportingController from etcd = %d items, want web-0.restarted", len(list.Items))
	}
	coreList, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "source=example.com/web-controller"})
	check(t, err)
	if len(coreList.Items) != 1 || coreList.Items[0].Name != "web-0.restarted" {
		t.Errorf("core/v1 list by source = %d items, want web-0.restarted (its reporter)", len(coreList.Items))
	}
	for _, sel := range []string{"involvedObject.name=web-0", "source=kubelet"} {
		_, err = c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		expectStatus(t, err, 400, metav1.StatusReasonBadRequest)
	}

	// A watch through events.k8s.io sees a core/v1 write, in its own form.
	w, err := c.EventsV1().Events(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, FieldSelector: "regarding.name=web-2"})
	check(t, err)
	defer w.Stop()
	_, err = c.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web-2.killed"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-2"}, Reason: "Killing", Message: "stopping", Type: corev1.EventTypeNormal}, metav1.CreateOptions{})
	check(t, err)
	select {
	case got := <-w.ResultChan():
		ev, ok := got.Object.(*eventsv1.Event)
		if got.Type != watch.Added || !ok || ev.Name != "web-2.killed" || ev.Note != "stopping" {
			t.Errorf("watch event = %s %#v, want ADDED web-2.killed with note \"stopping\"", got.Type, got.Object)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no watch event through events.k8s.io for a core/v1 create")
	}

	// A series, as client-go's events package records a repeated event: a patch.
	patch := fmt.Sprintf(`{"series":{"count":2,"lastObservedTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
	_, err = c.EventsV1().Events(ns).Patch(ctx, "web-0.restarted", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	check(t, err)
	core, err = c.CoreV1().Events(ns).Get(ctx, "web-0.restarted", metav1.GetOptions{})
	check(t, err)
	if core.Series == nil || core.Series.Count != 2 || core.Message != "restarted web-0" {
		t.Errorf("after the series patch, core/v1 form = series %+v message %q; want count 2 and the note kept", core.Series, core.Message)
	}

	// Only the series and metadata change through events.k8s.io; core/v1 is lenient.
	v1ev, err = c.EventsV1().Events(ns).Get(ctx, "web-0.restarted", metav1.GetOptions{})
	check(t, err)
	v1ev.Note, v1ev.Action = "rewritten", "Other"
	_, err = c.EventsV1().Events(ns).Update(ctx, v1ev, metav1.UpdateOptions{})
	if got := strings.Join(causeFields(t, err), " "); got != "action message" {
		t.Errorf("immutable fields named %q, want \"action message\"", got)
	}
	core.Message = "rewritten through core"
	_, err = c.CoreV1().Events(ns).Update(ctx, core, metav1.UpdateOptions{})
	check(t, err)

	// Server-side apply through events.k8s.io, with its own field manager.
	apply := `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"web-0.restarted","namespace":"default","labels":{"team":"web"}}}`
	applied, err := c.EventsV1().Events(ns).Patch(ctx, "web-0.restarted", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "labeller"})
	check(t, err)
	if applied.Labels["team"] != "web" || applied.Note != "rewritten through core" {
		t.Errorf("applied = labels %v note %q", applied.Labels, applied.Note)
	}

	// Deleting through one group deletes the one object.
	check(t, c.EventsV1().Events(ns).Delete(ctx, "web-1.pulled", metav1.DeleteOptions{}))
	if _, err := c.CoreV1().Events(ns).Get(ctx, "web-1.pulled", metav1.GetOptions{}); err == nil {
		t.Error("an Event deleted through events.k8s.io is still there through core/v1")
	}
	all, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	check(t, err)
	coreAll, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{ResourceVersion: all.ResourceVersion})
	check(t, err)
	if len(all.Items) != len(coreAll.Items) {
		t.Errorf("events.k8s.io lists %d events, core/v1 %d", len(all.Items), len(coreAll.Items))
	}

	// kubectl get events.events.k8s.io shows the core columns.
	raw, err := c.EventsV1().RESTClient().Get().Namespace(ns).Resource("events").Name("web-0.restarted").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	check(t, err)
	rows := rowsOf(t, raw)
	if len(rows) != 1 || !strings.Contains(rows[0], "Warning Restarted pod/web-0 rewritten through core") {
		t.Errorf("table rows = %q", rows)
	}
}

// TestEventsV1Invalid: events.k8s.io/v1 writes get upstream's strict rules, and core/v1
// writes of new-style events (with eventTime) the rules every event meets.
func TestEventsV1Invalid(t *testing.T) {
	env := newEnv(t)
	const ns = "default"
	eventsV1 := func(change func(*eventsv1.Event)) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, c kubernetes.Interface) error {
			ev := newStyleEvent("bad")
			change(ev)
			_, err := c.EventsV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
			return err
		}
	}
	runInvalid(t, env.Client, []invalidCreate{
		// Without eventTime the reporter is not asked for: the rules every event meets take
		// an event without one for an old-style event, as upstream's do.
		{"no reporter, action, time or type", eventsV1(func(ev *eventsv1.Event) {
			ev.EventTime, ev.ReportingController, ev.ReportingInstance, ev.Action, ev.Type = metav1.MicroTime{}, "", "", "", "Info"
		}), []string{"eventTime", "type"}},
		{"deprecated fields set", eventsV1(func(ev *eventsv1.Event) {
			ev.DeprecatedCount, ev.DeprecatedFirstTimestamp, ev.DeprecatedLastTimestamp = 2, metav1.Now(), metav1.Now()
			ev.DeprecatedSource = corev1.EventSource{Component: "kubelet"}
		}), []string{"count", "firstTimestamp", "lastTimestamp", "source"}},
		{"too long, a series of one, a cluster-scoped object outside default", eventsV1(func(ev *eventsv1.Event) {
			ev.Note, ev.Reason, ev.ReportingInstance = strings.Repeat("n", 1025), strings.Repeat("r", 129), strings.Repeat("i", 129)
			ev.ReportingController = "not a name!"
			ev.Series = &eventsv1.EventSeries{Count: 1}
			ev.Namespace, ev.Regarding = metav1.NamespacePublic, corev1.ObjectReference{Kind: "Node", Name: "node-a"}
		}), []string{"involvedObject.namespace", "message", "reason", "reportingController", "reportingInstance", "series.count", "series.lastObservedTime"}},
		{"core/v1 event with eventTime but no reporter", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-0"}, Reason: "Started",
				EventTime: metav1.NewMicroTime(time.Now())}, metav1.CreateOptions{})
			return err
			// Required, and not a qualified name twice over (empty, and not matching), as
			// kube-apiserver reports it, under the name core/v1 selects it by.
		}, []string{"action", "reportingComponent", "reportingComponent", "reportingComponent", "reportingInstance"}},
		{"core/v1 event about a node outside default", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Events("kube-system").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-a"}, Reason: "Rebooted"}, metav1.CreateOptions{})
			return err
		}, []string{"involvedObject.namespace"}},
	})
}

// TestEventsRecorder: client-go's events package (what kube-scheduler and
// controller-runtime's GetEventRecorder use) records against miniplane, a repeated event
// becomes a series, and the result is what core/v1 readers (kubectl describe) find.
func TestEventsRecorder(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}}
	pod, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	check(t, err)

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.EventsV1()})
	check(t, broadcaster.StartRecordingToSinkWithContext(ctx))
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, "example.com/web-controller")

	recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Synced", "Sync", "synced %s", pod.Name)
	findEvent := func() (*corev1.Event, error) {
		list, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web-0,reason=Synced"})
		if err != nil || len(list.Items) == 0 {
			return nil, err
		}
		return &list.Items[0], nil
	}
	eventually(t, "the recorded event through core/v1", func() (bool, error) {
		ev, err := findEvent()
		return ev != nil && ev.Message == "synced web-0" && ev.ReportingController == "example.com/web-controller" && ev.Action == "Sync", err
	})
	recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Synced", "Sync", "synced %s", pod.Name)
	eventually(t, "the repeated event to become a series", func() (bool, error) {
		ev, err := findEvent()
		return ev != nil && ev.Series != nil && ev.Series.Count == 2, err
	})
}

// TestEventsV1CacheStartsOnFirstRead: the events.k8s.io view keeps no second cached copy
// of every Event until something reads through it; writes through it need none.
func TestEventsV1CacheStartsOnFirstRead(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	raw := newRawClient(t, env)
	cacheRV := func() string {
		t.Helper()
		resp := raw.do(t, request{method: "GET", path: "/metrics", token: env.Token(testenv.AdminUser)})
		const series = `apiserver_watch_cache_resource_version{group="events.k8s.io",resource="events"} `
		for _, line := range strings.Split(string(resp.body), "\n") {
			if v, ok := strings.CutPrefix(line, series); ok {
				return v
			}
		}
		t.Fatalf("/metrics lacks %s", series)
		return ""
	}
	_, err := env.Client.EventsV1().Events("default").Create(ctx, newStyleEvent("first"), metav1.CreateOptions{})
	check(t, err)
	if rv := cacheRV(); rv != "0" {
		t.Errorf("after a write through events.k8s.io its cache is at revision %s, want 0 (not started)", rv)
	}
	list, err := env.Client.EventsV1().Events("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	check(t, err)
	if len(list.Items) != 1 || list.Items[0].Name != "first" {
		t.Errorf("the first list, from the cache that starts for it, has %d items, want the Event written before", len(list.Items))
	}
	if rv := cacheRV(); rv == "0" {
		t.Error("after a list through events.k8s.io its cache has not started")
	}
}
