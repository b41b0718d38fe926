package apiserver_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

// requestLog records the requests a client makes, to tell how an informer synced.
type requestLog struct {
	mu   sync.Mutex
	reqs []url.URL
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.reqs = append(l.reqs, *r.URL)
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// podRequests splits the recorded pod requests into lists, plain watches and
// watch-list requests (watches that stream the initial state).
func (l *requestLog) podRequests() (lists, watches, watchLists []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range l.reqs {
		if u.Path != "/api/v1/pods" {
			continue
		}
		q := u.Query()
		switch {
		case q.Get("watch") != "true" && q.Get("watch") != "1":
			lists = append(lists, u.RequestURI())
		case q.Get("sendInitialEvents") == "true":
			watchLists = append(watchLists, u.RequestURI())
		default:
			watches = append(watches, u.RequestURI())
		}
	}
	return lists, watches, watchLists
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// informerEvents collects what a pod informer's handler sees, as "TYPE name".
type informerEvents struct {
	mu     sync.Mutex
	events []string
}

func (e *informerEvents) add(s string) {
	e.mu.Lock()
	e.events = append(e.events, s)
	e.mu.Unlock()
}

func (e *informerEvents) has(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		if ev == s {
			return true
		}
	}
	return false
}

// runInformer starts a pod informer on a client that records its requests and checks
// that it syncs and then sees an add, an update and a delete. consistentSync: the synced
// cache must already hold every pod created before the informer started.
func runInformer(t *testing.T, env *testenv.Env, consistentSync bool) *requestLog {
	ctx := testCtx(t)
	pods := env.Client.CoreV1().Pods("default")
	for i := 0; i < 3; i++ {
		_, err := pods.Create(ctx, podOn("default", fmt.Sprintf("pre-%d", i), ""), metav1.CreateOptions{})
		check(t, err)
	}

	log := &requestLog{}
	cfg := env.ConfigFor(testenv.AdminUser)
	cfg.WrapTransport = log.wrap
	client, err := kubernetes.NewForConfig(cfg)
	check(t, err)
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Pods()
	seen := &informerEvents{}
	_, err = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { seen.add("ADD " + obj.(*corev1.Pod).Name) },
		UpdateFunc: func(old, cur any) {
			if old.(*corev1.Pod).ResourceVersion != cur.(*corev1.Pod).ResourceVersion {
				seen.add("UPDATE " + cur.(*corev1.Pod).Name + " " + cur.(*corev1.Pod).Labels["v"])
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			seen.add("DELETE " + obj.(*corev1.Pod).Name)
		},
	})
	check(t, err)
	stop := make(chan struct{})
	factory.Start(stop)
	t.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("pre-%d", i)
		if consistentSync {
			if _, err := informer.Lister().Pods("default").Get(name); err != nil {
				t.Fatalf("synced lister lacks %s: %v", name, err)
			}
		} else {
			// client-go lists at resourceVersion 0, which the watch cache may answer
			// from a moment ago; the watch that follows brings the rest.
			eventually(t, "lister to hold "+name, func() (bool, error) {
				_, err := informer.Lister().Pods("default").Get(name)
				return err == nil, err
			})
		}
		// Handlers are notified after the store is filled: the ADD may lag the sync.
		eventually(t, "informer ADD "+name, func() (bool, error) { return seen.has("ADD " + name), nil })
	}

	created, err := pods.Create(ctx, podOn("default", "live", ""), metav1.CreateOptions{})
	check(t, err)
	eventually(t, "informer ADD live", func() (bool, error) { return seen.has("ADD live"), nil })
	created.Labels["v"] = "2"
	_, err = pods.Update(ctx, created, metav1.UpdateOptions{})
	check(t, err)
	eventually(t, "informer UPDATE live", func() (bool, error) { return seen.has("UPDATE live 2"), nil })
	check(t, pods.Delete(ctx, "live", metav1.DeleteOptions{}))
	eventually(t, "informer DELETE live", func() (bool, error) { return seen.has("DELETE live"), nil })
	if _, err := informer.Lister().Pods("default").Get("live"); !apierrors.IsNotFound(err) {
		t.Fatalf("lister still has the deleted pod: %v", err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	order := map[string]int{}
	for i, ev := range seen.events {
		order[ev] = i
	}
	if !(order["ADD live"] < order["UPDATE live 2"] && order["UPDATE live 2"] < order["DELETE live"]) {
		t.Fatalf("events out of order: %v", seen.events)
	}
	return log
}

// TestInformerWatchList: client-go's default informer streams its initial state with a
// watch (sendInitialEvents) instead of listing, and must not fall back to a list.
func TestInformerWatchList(t *testing.T) {
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Skip("WatchListClient is disabled in this environment")
	}
	env := newEnv(t)
	log := runInformer(t, env, true)
	lists, _, watchLists := log.podRequests()
	if len(watchLists) == 0 {
		t.Fatalf("no watch-list request; the informer listed instead: %v", lists)
	}
	if len(lists) > 0 {
		t.Fatalf("the informer fell back to listing: %v (after %v)", lists, watchLists)
	}
}

// TestInformerListWatch: with the watch-list feature off, client-go lists and then
// watches from the list's resourceVersion.
func TestInformerListWatch(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	env := newEnv(t)
	log := runInformer(t, env, false)
	lists, watches, watchLists := log.podRequests()
	if len(lists) == 0 || len(watches) == 0 || len(watchLists) > 0 {
		t.Fatalf("want list then watch: lists %v watches %v watch-lists %v", lists, watches, watchLists)
	}
}

// TestWatchExpired: a watch from a resourceVersion the watch cache no longer holds, and a
// list or continuation at a compacted revision, get 410 Expired.
func TestWatchExpired(t *testing.T) {
	t.Parallel()
	cfg := configs.DefaultAPIServer()
	cfg.WatchCacheEvents = 100
	cfg.CompactionInterval = 200 * time.Millisecond
	env := testenv.New(t, testenv.Config{APIServer: &cfg})
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)

	p, err := pods.Create(ctx, podOn("default", "churn", ""), metav1.CreateOptions{})
	check(t, err)
	_, err = pods.Create(ctx, podOn("default", "other", ""), metav1.CreateOptions{})
	check(t, err)
	old := p.ResourceVersion
	page, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
	check(t, err)
	if page.Continue == "" {
		t.Fatal("no continue token")
	}
	for i := 0; i < 150; i++ {
		p.Labels["i"] = strconv.Itoa(i)
		p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
		check(t, err)
	}

	// A list not older than the last update waits until the watch cache has applied every
	// update, so its 100-event window has moved past old before the watch asks for it.
	_, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: p.ResourceVersion})
	check(t, err)
	_, err = pods.Watch(ctx, metav1.ListOptions{ResourceVersion: old})
	se := expectStatus(t, err, 410, metav1.StatusReasonExpired)
	if !apierrors.IsResourceExpired(err) || se.ErrStatus.Message == "" {
		t.Fatalf("watch from an evicted resourceVersion: %v", err)
	}

	// The continue token holds the first page's revision, which is old or newer: a compaction
	// may land between the two, so wait for the newer one to be compacted away.
	eventually(t, "compaction to pass the first page's revision", func() (bool, error) {
		_, err := pods.List(ctx, metav1.ListOptions{Limit: 1, Continue: page.Continue})
		return apierrors.IsResourceExpired(err), err
	})
	_, err = pods.List(ctx, metav1.ListOptions{Limit: 1, Continue: page.Continue})
	expectStatus(t, err, 410, metav1.StatusReasonExpired)
	_, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: old, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	expectStatus(t, err, 410, metav1.StatusReasonExpired)

	// A watch from a recent version still works.
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: p.ResourceVersion})
	check(t, err)
	defer w.Stop()
	check(t, pods.Delete(ctx, "churn", metav1.DeleteOptions{}))
	expectWatch(t, w, watch.Deleted, "churn")
}

// TestWatchInitialEvents: sendInitialEvents streams the current state and ends it with a
// bookmark annotated k8s.io/initial-events-end; it requires bookmarks and NotOlderThan.
func TestWatchInitialEvents(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)
	var last string
	for _, name := range []string{"a", "b", "c"} {
		p, err := pods.Create(ctx, podOn("default", name, ""), metav1.CreateOptions{})
		check(t, err)
		last = p.ResourceVersion
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptrTo(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	check(t, err)
	defer w.Stop()
	for _, name := range []string{"a", "b", "c"} {
		expectWatch(t, w, watch.Added, name)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Bookmark {
			t.Fatalf("after the initial state: %s, want BOOKMARK", ev.Type)
		}
		m := ev.Object.(metav1.Object)
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			t.Fatalf("bookmark annotations %v, want %s", m.GetAnnotations(), metav1.InitialEventsAnnotationKey)
		}
		if rvNum(t, m.GetResourceVersion()) < rvNum(t, last) {
			t.Fatalf("initial-events bookmark at %s, older than the last write %s", m.GetResourceVersion(), last)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no initial-events-end bookmark")
	}
	_, err = pods.Create(ctx, podOn("default", "d", ""), metav1.CreateOptions{})
	check(t, err)
	expectWatch(t, w, watch.Added, "d")

	// Without a resourceVersion (or with "0") a watch starts with the current state too,
	// without a bookmark.
	for _, rv := range []string{"", "0"} {
		w2, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		check(t, err)
		for _, name := range []string{"a", "b", "c", "d"} {
			expectWatch(t, w2, watch.Added, name)
		}
		check(t, pods.Delete(ctx, "d", metav1.DeleteOptions{}))
		expectWatch(t, w2, watch.Deleted, "d")
		w2.Stop()
		_, err = pods.Create(ctx, podOn("default", "d", ""), metav1.CreateOptions{})
		check(t, err)
	}

	_, err = pods.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptrTo(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	expectStatus(t, err, 422, metav1.StatusReasonInvalid)
	_, err = pods.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptrTo(true), AllowWatchBookmarks: true})
	expectStatus(t, err, 422, metav1.StatusReasonInvalid)

	// timeoutSeconds ends a watch.
	d, err := pods.Get(ctx, "d", metav1.GetOptions{})
	check(t, err)
	short, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: d.ResourceVersion, TimeoutSeconds: ptrTo(int64(1))})
	check(t, err)
	select {
	case _, ok := <-short.ResultChan():
		if ok {
			t.Fatal("unexpected event on a quiet watch")
		}
	case <-time.After(waitTimeout):
		t.Fatal("watch with timeoutSeconds=1 did not end")
	}
}

// TestWatchBookmarks: a watch that allows bookmarks gets one periodically even when
// nothing it selects changes, at a resourceVersion covering the changes it was sent. It
// waits for the server's bookmark interval (30s), so it runs in parallel with the others.
func TestWatchBookmarks(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)
	p, err := pods.Create(ctx, podOn("default", "a", ""), metav1.CreateOptions{})
	check(t, err)
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: p.ResourceVersion, AllowWatchBookmarks: true, LabelSelector: "app=web"})
	check(t, err)
	defer w.Stop()
	quiet, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: p.ResourceVersion, LabelSelector: "app=none"})
	check(t, err)
	defer quiet.Stop()
	b, err := pods.Create(ctx, podOn("default", "b", ""), metav1.CreateOptions{})
	check(t, err)
	expectWatch(t, w, watch.Added, "b")
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before a bookmark")
			}
			if ev.Type != watch.Bookmark {
				t.Fatalf("unexpected %s", ev.Type)
			}
			got := ev.Object.(metav1.Object).GetResourceVersion()
			if rvNum(t, got) < rvNum(t, b.ResourceVersion) {
				t.Fatalf("bookmark at %s, older than the event sent at %s", got, b.ResourceVersion)
			}
			// A watch that did not ask for bookmarks gets none.
			select {
			case ev := <-quiet.ResultChan():
				t.Fatalf("watch without allowWatchBookmarks got %s", ev.Type)
			default:
			}
			return
		case <-timeout:
			t.Fatal("no bookmark within 2 minutes")
		}
	}
}

func rvNum(t *testing.T, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

// TestWatchDeletedLastState: a DELETED event carries the object's last state at the
// revision of its deletion, and reaches a watch whose label selector that state matches,
// also when the cache holds that state only encoded (compacted, after 500 other changes).
func TestWatchDeletedLastState(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	cms := env.Client.CoreV1().ConfigMaps("default")
	for _, tc := range []struct {
		name  string
		churn int // changes to other ConfigMaps between the last update and the delete
	}{
		{"decoded", 0},
		{"compacted", 520},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "last-state-" + tc.name
			cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
			check(t, err)
			cm.Labels = map[string]string{"kept": tc.name}
			cm.Data["v"] = "2"
			cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			check(t, err)
			for i := range tc.churn {
				_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%s-%d", tc.name, i)}}, metav1.CreateOptions{})
				check(t, err)
			}
			list, err := cms.List(ctx, metav1.ListOptions{Limit: 1})
			check(t, err)
			w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: "kept=" + tc.name})
			check(t, err)
			defer w.Stop()
			check(t, cms.Delete(ctx, name, metav1.DeleteOptions{}))
			ev := expectWatch(t, w, watch.Deleted, name)
			got := ev.Object.(*corev1.ConfigMap)
			if got.Data["v"] != "2" || got.Labels["kept"] != tc.name || got.UID != cm.UID {
				t.Errorf("DELETED carries %v %v (uid %s), want the last state: v=2, kept=%s, uid %s", got.Data, got.Labels, got.UID, tc.name, cm.UID)
			}
			deletedAt, _ := strconv.ParseInt(got.ResourceVersion, 10, 64)
			listedAt, _ := strconv.ParseInt(list.ResourceVersion, 10, 64)
			after, err := cms.List(ctx, metav1.ListOptions{Limit: 1})
			check(t, err)
			now, _ := strconv.ParseInt(after.ResourceVersion, 10, 64)
			if deletedAt <= listedAt || deletedAt > now {
				t.Errorf("DELETED at resourceVersion %d, want the deletion's: after %d, at most %d", deletedAt, listedAt, now)
			}
		})
	}
}
