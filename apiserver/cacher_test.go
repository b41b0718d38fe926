package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/store"
)

// fakeSource is a cacheSource the test drives: List answers the current list, and the
// open Watch delivers what is sent on events.
type fakeSource struct {
	events chan store.Event

	mu       sync.Mutex
	list     *store.ListResult
	watches  []int64 // fromRevision of every Watch call
	rev      int64   // what CurrentRevision answers
	progress int     // RequestProgress calls
	// progressPrefixes is the prefix of every RequestProgress call.
	progressPrefixes []string
}

var _ cacheSource = (*fakeSource)(nil)

func (f *fakeSource) List(context.Context, string, store.ListOptions) (*store.ListResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items := make([]runtime.Object, len(f.list.Items))
	for i, obj := range f.list.Items {
		items[i] = obj.DeepCopyObject()
	}
	return &store.ListResult{Items: items, Revision: f.list.Revision}, nil
}

// Watch forwards what is sent on events until ctx ends or after an error event, then
// closes its channel, as the store's watch does. An event sent while no watch is open
// waits for the next one.
func (f *fakeSource) Watch(ctx context.Context, _ string, from int64) (<-chan store.Event, error) {
	f.mu.Lock()
	f.watches = append(f.watches, from)
	f.mu.Unlock()
	out := make(chan store.Event)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-f.events:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				if ev.Type == store.ErrorEvent {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (f *fakeSource) RequestProgress(_ context.Context, prefix string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.progress++
	f.progressPrefixes = append(f.progressPrefixes, prefix)
	return nil
}

func (f *fakeSource) CurrentRevision(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev, nil
}

func (f *fakeSource) progressRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.progress
}

func (f *fakeSource) watchCalls() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.watches...)
}

// cacheTest is a pods watch cache fed from a fakeSource, on a fake clock.
type cacheTest struct {
	t     *testing.T
	ctx   context.Context
	src   *fakeSource
	clock *clocktesting.FakeClock
	c     *cacher
}

// cacheStartRV is the revision of the list every test cache starts from.
const cacheStartRV = 10

// newCacheTest starts a pods cache whose initial list holds objs at cacheStartRV.
func newCacheTest(t *testing.T, historySize int, objs ...*corev1.Pod) *cacheTest {
	t.Helper()
	reg := builtinRegistry(t)
	src := &fakeSource{events: make(chan store.Event), list: &store.ListResult{Revision: cacheStartRV}, rev: cacheStartRV}
	for _, p := range objs {
		src.list.Items = append(src.list.Items, p)
	}
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	ct := &cacheTest{t: t, ctx: ctx, src: src, clock: clk,
		c: newCacher(reg.lookup("", "v1", "pods"), src, "/registry", historySize, clk, slog.New(slog.DiscardHandler))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ct.c.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	ct.waitRV(cacheStartRV)
	return ct
}

// waitRV waits until the cache has applied every change up to rv, and so has queued
// them for every watcher.
func (ct *cacheTest) waitRV(rv int64) {
	ct.t.Helper()
	ctx, cancel := context.WithTimeout(ct.ctx, 10*time.Second)
	defer cancel()
	// The fake clock never fires the timeout; the context bounds the wait instead.
	if err := ct.c.waitForRV(ctx, rv, time.Hour); err != nil {
		ct.t.Fatalf("cache did not reach revision %d: %v", rv, err)
	}
}

// feed sends events through the store watch, in order, and waits until they are applied.
func (ct *cacheTest) feed(events ...store.Event) {
	ct.t.Helper()
	for _, ev := range events {
		select {
		case ct.src.events <- ev:
		case <-time.After(10 * time.Second):
			ct.t.Fatalf("the cache does not read its watch (event at %d)", ev.Revision)
		}
		if ev.Type != store.ErrorEvent {
			ct.waitRV(ev.Revision)
		}
	}
}

// testPod is a pod in namespace "default" unless name is "<ns>/<name>".
func testPod(name, node string, lbls map[string]string) *corev1.Pod {
	ns := "default"
	for i := range name {
		if name[i] == '/' {
			ns, name = name[:i], name[i+1:]
			break
		}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}, Spec: corev1.PodSpec{NodeName: node}}
}

func storeEvent(typ store.EventType, rv int64, p *corev1.Pod) store.Event {
	p = p.DeepCopy()
	p.ResourceVersion = strconv.FormatInt(rv, 10)
	return store.Event{Type: typ, Key: "/registry/pods/" + p.Namespace + "/" + p.Name, Object: p, Revision: rv}
}

func added(rv int64, p *corev1.Pod) store.Event    { return storeEvent(store.Added, rv, p) }
func modified(rv int64, p *corev1.Pod) store.Event { return storeEvent(store.Modified, rv, p) }
func deleted(rv int64, p *corev1.Pod) store.Event  { return storeEvent(store.Deleted, rv, p) }

func atRV(rv int64, p *corev1.Pod) *corev1.Pod {
	p.ResourceVersion = strconv.FormatInt(rv, 10)
	return p
}

// frames renders what a watcher has queued, one string per frame:
// "ADDED default/a@11", "BOOKMARK @12", "BOOKMARK @12 end".
func frames(w *cacheWatcher) []string {
	var out []string
	for _, it := range w.take() {
		if it.typ == watch.Bookmark {
			s := fmt.Sprintf("BOOKMARK @%d", it.rv)
			if it.initialEventsEnd {
				s += " end"
			}
			out = append(out, s)
			continue
		}
		out = append(out, fmt.Sprintf("%s %s/%s@%d", it.typ, it.obj.namespace, it.obj.name, it.obj.rv))
	}
	return out
}

// selector is the filter of a watch across namespaces with these selectors ("" for none).
func selector(label, field string) *watchFilter {
	l, err := labels.Parse(label)
	if err != nil {
		panic(err)
	}
	return &watchFilter{label: l, field: fields.ParseSelectorOrDie(field)}
}

var (
	web = map[string]string{"app": "web"}
	db  = map[string]string{"app": "db"}
)

// TestCacherWatch drives one cache per case: an initial list, changes before the watchers
// register (their history), the watchers, then live changes; each watcher must have
// queued exactly its frames.
func TestCacherWatch(t *testing.T) {
	type watcherCase struct {
		name    string
		filter  *watchFilter
		start   watchStart
		wantErr error
		want    []string
	}
	for _, tc := range []struct {
		name        string
		historySize int
		initial     []*corev1.Pod
		before      []store.Event
		watchers    []watcherCase
		after       []store.Event
	}{
		{
			name:    "initial state in key order, then live changes",
			initial: []*corev1.Pod{atRV(5, testPod("b", "n1", web)), atRV(7, testPod("a", "n1", web))},
			watchers: []watcherCase{{
				name: "rv 0", filter: selector("", ""), start: watchStart{initialState: true},
				want: []string{"ADDED default/a@7", "ADDED default/b@5", "MODIFIED default/a@11", "DELETED default/b@12"},
			}},
			after: []store.Event{modified(11, testPod("a", "n2", web)), deleted(12, testPod("b", "n1", web))},
		},
		{
			name:    "sendInitialEvents ends the initial state with a bookmark",
			initial: []*corev1.Pod{atRV(7, testPod("a", "n1", web))},
			before:  []store.Event{added(11, testPod("c", "n1", db))},
			watchers: []watcherCase{{
				name: "app=db", filter: selector("app=db", ""), start: watchStart{initialState: true, initialEventsEnd: true},
				want: []string{"ADDED default/c@11", "BOOKMARK @11 end", "ADDED default/d@12"},
			}},
			after: []store.Event{added(12, testPod("d", "", db)), added(13, testPod("e", "", web))},
		},
		{
			name:    "fan-out: each watcher gets its own selection of one stream",
			initial: []*corev1.Pod{atRV(7, testPod("a", "n1", web))},
			watchers: []watcherCase{
				{name: "everything", filter: selector("", ""), start: watchStart{},
					want: []string{"MODIFIED default/a@11", "ADDED other/b@12", "ADDED default/c@13", "DELETED default/a@14"}},
				{name: "app=web", filter: selector("app=web", ""), start: watchStart{},
					// a leaves the selection when it turns db: a DELETED, and nothing after.
					want: []string{"DELETED default/a@11", "ADDED other/b@12"}},
				{name: "app=db", filter: selector("app=db", ""), start: watchStart{},
					want: []string{"ADDED default/a@11", "ADDED default/c@13", "DELETED default/a@14"}},
				{name: "namespace other", filter: &watchFilter{namespace: "other"}, start: watchStart{},
					want: []string{"ADDED other/b@12"}},
				{name: "spec.nodeName=n2", filter: selector("", "spec.nodeName=n2"), start: watchStart{},
					want: []string{"ADDED default/c@13"}},
				{name: "spec.nodeName=n1 and app=db", filter: selector("app=db", "spec.nodeName=n1"), start: watchStart{},
					want: []string{"ADDED default/a@11", "DELETED default/a@14"}},
				{name: "metadata.name=a", filter: selector("", "metadata.name=a"), start: watchStart{},
					want: []string{"MODIFIED default/a@11", "DELETED default/a@14"}},
			},
			after: []store.Event{
				modified(11, testPod("a", "n1", db)),
				added(12, testPod("other/b", "n1", web)),
				added(13, testPod("c", "n2", db)),
				deleted(14, testPod("a", "n1", db)),
			},
		},
		{
			name: "resume from an older resourceVersion replays the history after it",
			before: []store.Event{
				added(11, testPod("a", "", web)), modified(12, testPod("a", "n1", web)), added(13, testPod("b", "", db)), deleted(14, testPod("a", "n1", web)),
			},
			watchers: []watcherCase{
				{name: "from 12", filter: selector("", ""), start: watchStart{fromRV: 12},
					want: []string{"ADDED default/b@13", "DELETED default/a@14", "ADDED default/c@15"}},
				{name: "from the list", filter: selector("", ""), start: watchStart{fromRV: cacheStartRV},
					want: []string{"ADDED default/a@11", "MODIFIED default/a@12", "ADDED default/b@13", "DELETED default/a@14", "ADDED default/c@15"}},
				{name: "from the current revision", filter: selector("", ""), start: watchStart{fromRV: 14},
					want: []string{"ADDED default/c@15"}},
				{name: "replay through a selector", filter: selector("", "spec.nodeName=n1"), start: watchStart{fromRV: 11},
					// a enters the selection when it is bound, and leaves it when deleted.
					want: []string{"ADDED default/a@12", "DELETED default/a@14"}},
			},
			after: []store.Event{added(15, testPod("c", "", db))},
		},
		{
			name:        "a resourceVersion older than the history is expired",
			historySize: 2,
			before:      []store.Event{added(11, testPod("a", "", web)), added(12, testPod("b", "", web)), added(13, testPod("c", "", web))},
			watchers: []watcherCase{
				{name: "from the list", filter: selector("", ""), start: watchStart{fromRV: cacheStartRV}, wantErr: store.ErrExpired},
				{name: "from the oldest kept change", filter: selector("", ""), start: watchStart{fromRV: 11},
					want: []string{"ADDED default/b@12", "ADDED default/c@13"}},
				{name: "from the current revision", filter: selector("", ""), start: watchStart{fromRV: 13}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.historySize
			if size == 0 {
				size = 100
			}
			ct := newCacheTest(t, size, tc.initial...)
			ct.feed(tc.before...)
			ws := make([]*cacheWatcher, len(tc.watchers))
			for i, wc := range tc.watchers {
				w, err := ct.c.watch(wc.filter, wc.start, 1000)
				if !errors.Is(err, wc.wantErr) {
					t.Fatalf("watcher %q: watch error %v, want %v", wc.name, err, wc.wantErr)
				}
				ws[i] = w
			}
			ct.feed(tc.after...)
			for i, wc := range tc.watchers {
				if ws[i] == nil {
					continue
				}
				if got := frames(ws[i]); !reflect.DeepEqual(got, wc.want) {
					t.Errorf("watcher %q:\n got %q\nwant %q", wc.name, got, wc.want)
				}
			}
		})
	}
}

// TestCacherListAndGet: reads see the initial list and every change applied since.
func TestCacherListAndGet(t *testing.T) {
	ct := newCacheTest(t, 10, atRV(5, testPod("b", "n1", web)), atRV(6, testPod("other/a", "n2", db)))
	ct.feed(added(11, testPod("a", "n1", db)), deleted(12, testPod("b", "n1", web)))
	for _, tc := range []struct {
		name   string
		filter *watchFilter
		want   []string
	}{
		{"everything, in key order", &watchFilter{}, []string{"default/a", "other/a"}},
		{"one namespace", &watchFilter{namespace: "other"}, []string{"other/a"}},
		{"by field", selector("", "spec.nodeName=n1"), []string{"default/a"}},
		{"by label", selector("app=web", ""), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, rv := ct.c.list(tc.filter)
			var got []string
			for _, it := range items {
				got = append(got, it.namespace+"/"+it.name)
			}
			if !reflect.DeepEqual(got, tc.want) || rv != 12 {
				t.Errorf("list = %v at %d, want %v at 12", got, rv, tc.want)
			}
		})
	}
	if _, ok := ct.c.get("/registry/pods/default/b"); ok {
		t.Error("get finds a deleted object")
	}
	if co, ok := ct.c.get("/registry/pods/default/a"); !ok || co.rv != 11 {
		t.Errorf("get default/a = %v, %v; want it at 11", co, ok)
	}
}

// TestCacherEndsSlowWatcher: a watcher whose queue is full is ended, so its client
// resumes from its last resourceVersion, and stops costing the dispatcher.
func TestCacherEndsSlowWatcher(t *testing.T) {
	ct := newCacheTest(t, 10)
	slow, err := ct.c.watch(selector("", ""), watchStart{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := ct.c.watch(selector("", ""), watchStart{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	ct.feed(added(11, testPod("a", "", nil)), added(12, testPod("b", "", nil)), added(13, testPod("c", "", nil)))
	select {
	case <-slow.done:
	default:
		t.Fatal("a watcher past its queue limit was not ended")
	}
	if n := ct.c.watcherCount(); n != 1 {
		t.Errorf("%d watchers registered, want only the one that kept up", n)
	}
	if got := frames(fast); len(got) != 3 {
		t.Errorf("the other watcher got %q, want all three events", got)
	}
}

// TestCacherHistoryGrows: the history ring starts small and grows as changes come, up to
// its size; at every step a watch from any revision it still holds replays every change
// after that revision in order, and one from before it is told the history is gone.
func TestCacherHistoryGrows(t *testing.T) {
	const size = 3*initialHistory + 5
	ct := newCacheTest(t, size)
	room := func() int {
		ct.c.mu.RLock()
		defer ct.c.mu.RUnlock()
		return len(ct.c.history)
	}
	if n := room(); n != initialHistory {
		t.Fatalf("a new cache's ring holds %d, want %d", n, initialHistory)
	}
	rv := int64(cacheStartRV)
	for _, total := range []int{initialHistory, initialHistory + 1, 2*initialHistory + 1, size, size + 7} {
		for ; rv < cacheStartRV+int64(total); rv++ {
			ct.feed(modified(rv+1, testPod(fmt.Sprintf("p%d", rv%5), "", nil)))
		}
		held := min(total, size)
		// Doubling keeps the ring under twice what it holds, and never over its size.
		if n := room(); n < held || n > min(size, max(initialHistory, 2*held)) {
			t.Fatalf("after %d changes the ring has room for %d, want %d to %d", total, n, held, min(size, max(initialHistory, 2*held)))
		}
		oldest := rv - int64(held) // the newest revision the history has forgotten, or the list's
		w, err := ct.c.watch(selector("", ""), watchStart{fromRV: oldest}, size+1)
		if err != nil {
			t.Fatalf("after %d changes, watch from %d: %v", total, oldest, err)
		}
		got := frames(w)
		if len(got) != held {
			t.Fatalf("after %d changes, a watch from %d replayed %d, want %d", total, oldest, len(got), held)
		}
		for i, f := range got {
			if want := fmt.Sprintf("@%d", oldest+1+int64(i)); !strings.HasSuffix(f, want) {
				t.Fatalf("after %d changes, frame %d is %q, want revision %s", total, i, f, want)
			}
		}
		ct.c.stopWatch(w)
		if total > size {
			if _, err := ct.c.watch(selector("", ""), watchStart{fromRV: oldest - 1}, size+1); !errors.Is(err, store.ErrExpired) {
				t.Errorf("after %d changes, watch from a forgotten revision: %v, want ErrExpired", total, err)
			}
		}
	}
}

// TestCacherHistoryExpires: changes older than historyWindow leave history, all but the
// newest minHistory; the ring gives back their room and does not grow for them, and the
// current versions they leave behind are compacted.
func TestCacherHistoryExpires(t *testing.T) {
	ct := newCacheTest(t, 1000)
	room := func() (held, size int) {
		ct.c.mu.RLock()
		defer ct.c.mu.RUnlock()
		return ct.c.hLen, len(ct.c.history)
	}
	rv := int64(cacheStartRV)
	add := func(prefix string, n int) {
		for i := range n {
			rv++
			ct.feed(added(rv, testPod(fmt.Sprintf("%s-%d", prefix, i), "", web)))
		}
	}
	add("a", 300) // at the start
	ct.clock.Step(historyWindow - 15*time.Second)
	add("b", 50)
	ct.c.expireHistory()
	if held, size := room(); held != 350 || size != 512 {
		t.Fatalf("within the window the ring holds %d of room for %d, want 350 of 512", held, size)
	}

	ct.clock.Step(20 * time.Second) // a-* are past the window, b-* are not
	ct.c.expireHistory()
	held, size := room()
	if held != minHistory || size != 256 {
		t.Fatalf("past the window the ring holds %d of room for %d, want %d of 256", held, size, minHistory)
	}
	forgotten := rv - minHistory // the newest revision history no longer holds
	if _, err := ct.c.watch(selector("", ""), watchStart{fromRV: forgotten - 1}, 1000); !errors.Is(err, store.ErrExpired) {
		t.Errorf("watch from %d, before what history holds: %v, want ErrExpired", forgotten-1, err)
	}
	w, err := ct.c.watch(selector("", ""), watchStart{fromRV: forgotten}, 1000)
	if err != nil {
		t.Fatalf("watch from %d: %v", forgotten, err)
	}
	if got := frames(w); len(got) != minHistory || !strings.HasSuffix(got[0], fmt.Sprintf("@%d", forgotten+1)) {
		t.Errorf("watch from %d replayed %v, want %d frames from revision %d", forgotten, got, minHistory, forgotten+1)
	}
	ct.c.stopWatch(w)

	// a-0..a-249 left history while current: compacted, and still read as written.
	for _, name := range []string{"a-0", "a-249", "a-250", "b-49"} {
		ct.c.mu.RLock()
		co := ct.c.objects[ct.c.res.key("/registry", "default", name)]
		ct.c.mu.RUnlock()
		wantCompacted := name == "a-0" || name == "a-249"
		if co == nil || (co.decoded.Load() == nil) != wantCompacted {
			t.Fatalf("%s: compacted %v, want %v", name, co != nil && co.decoded.Load() == nil, wantCompacted)
		}
		if p, ok := co.object().(*corev1.Pod); !ok || p.Name != name || p.ResourceVersion != strconv.FormatInt(co.rv, 10) {
			t.Errorf("%s reads as %#v", name, co.object())
		}
	}

	// A full ring whose oldest changes are past the window makes room by forgetting them.
	ct.clock.Step(historyWindow)
	add("c", size-held)
	if h, s := room(); h != size || s != size {
		t.Fatalf("the ring holds %d of room for %d, want it full at %d", h, s, size)
	}
	ct.clock.Step(historyWindow)
	add("d", 1)
	if h, s := room(); h != minHistory+1 || s != size {
		t.Errorf("after a change past the window the ring holds %d of room for %d, want %d of %d", h, s, minHistory+1, size)
	}
}

// TestCacherBookmark: a bookmark carries the revision the cache has reached, after every
// change up to it.
func TestCacherBookmark(t *testing.T) {
	ct := newCacheTest(t, 10)
	w, err := ct.c.watch(selector("app=web", ""), watchStart{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	ct.feed(added(11, testPod("a", "", web)), added(12, testPod("b", "", db)))
	ct.c.bookmark(w)
	if got, want := frames(w), []string{"ADDED default/a@11", "BOOKMARK @12"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestCacherRelistsAfterWatchError: when the store watch fails, the cache ends its
// watchers (their clients resume against the new state), waits a second on its clock and
// lists again.
func TestCacherRelistsAfterWatchError(t *testing.T) {
	ct := newCacheTest(t, 10, atRV(5, testPod("a", "", web)))
	w, err := ct.c.watch(selector("", ""), watchStart{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var told []string
	ct.c.mu.Lock()
	ct.c.onEvent = func(key, namespace string) { told = append(told, key) }
	ct.c.mu.Unlock()
	ct.src.mu.Lock()
	ct.src.list = &store.ListResult{Revision: 20, Items: []runtime.Object{atRV(18, testPod("b", "", web))}}
	ct.src.mu.Unlock()
	ct.feed(store.Event{Type: store.ErrorEvent, Err: errors.New("etcd went away")})

	waitFor(t, "the cache to wait before re-listing", ct.clock.HasWaiters)
	ct.clock.Step(time.Second)
	ct.waitRV(20)
	select {
	case <-w.done:
	default:
		t.Error("a watcher registered before the re-list was not ended")
	}
	items, _ := ct.c.list(&watchFilter{})
	if len(items) != 1 || items[0].name != "b" {
		t.Errorf("after the re-list the cache holds %v, want only b", items)
	}
	// What the lost watch would have told comes with the re-list: a went, b came.
	ct.c.mu.RLock()
	slices.Sort(told)
	if want := []string{"/registry/pods/default/a", "/registry/pods/default/b"}; !slices.Equal(told, want) {
		t.Errorf("onEvent after the re-list told %v, want %v", told, want)
	}
	ct.c.mu.RUnlock()
	// The cache reaches the list's revision before it opens the store watch that follows.
	waitFor(t, "a second store watch", func() bool { return len(ct.src.watchCalls()) == 2 })
	if got := ct.src.watchCalls(); !reflect.DeepEqual(got, []int64{cacheStartRV, 20}) {
		t.Errorf("store watches started at %v, want each list's revision", got)
	}
	if _, err := ct.c.watch(selector("", ""), watchStart{fromRV: 15}, 100); !errors.Is(err, store.ErrExpired) {
		t.Errorf("resuming from before the re-list: %v, want ErrExpired", err)
	}
}

// TestRelistDelay: after a lost watch the cache lists again a second later; while lists
// fail (a conversion webhook that is down) it waits twice as long each time, up to 30 s;
// once a list succeeds the next loss is retried after a second again.
func TestRelistDelay(t *testing.T) {
	var got []time.Duration
	delay := time.Duration(0)
	for _, listed := range []bool{true, false, false, false, false, false, false, false, true} {
		delay = relistDelay(delay, listed)
		got = append(got, delay)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		30 * time.Second, 30 * time.Second, 30 * time.Second, time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	if d := relistDelay(0, false); d != time.Second {
		t.Errorf("a first list that fails waits %v, want 1s", d)
	}
}

// TestCacherWaitForRV: a read at a revision the cache has not reached asks etcd for a
// progress report of the resource's watch and waits; a report or a change at that
// revision lets it go on, and it gives up with errTooLargeRV when its time is up.
func TestCacherWaitForRV(t *testing.T) {
	ct := newCacheTest(t, 10)
	waits := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_read_wait_seconds"})
	ct.c.readWait = waits
	result := make(chan error, 1)

	// Other resources changed up to 12: only a progress report can tell the cache.
	go func() { result <- ct.c.waitForRV(ct.ctx, 12, 3*time.Second) }()
	waitFor(t, "a progress request", func() bool { return ct.src.progressRequests() == 1 })
	select {
	case err := <-result:
		t.Fatalf("the read returned %v before the cache reached its revision", err)
	case <-time.After(20 * time.Millisecond):
	}
	ct.feed(store.Event{Type: store.Progress, Revision: 12})
	if err := <-result; err != nil {
		t.Fatalf("waitForRV(12) after a progress report at 12: %v", err)
	}
	ct.src.mu.Lock()
	prefixes := ct.src.progressPrefixes
	ct.src.mu.Unlock()
	if !reflect.DeepEqual(prefixes, []string{"/registry/pods/"}) {
		t.Errorf("progress requested for %q, want only the pods prefix", prefixes)
	}

	// A change of the resource itself at the revision does as well. (Past the retry
	// interval, the next read's request goes out at once.)
	ct.clock.Step(progressRetryInterval)
	go func() { result <- ct.c.waitForRV(ct.ctx, 13, 3*time.Second) }()
	waitFor(t, "a progress request", func() bool { return ct.src.progressRequests() == 2 })
	ct.feed(added(13, testPod("a", "", nil)))
	if err := <-result; err != nil {
		t.Fatalf("waitForRV(13) once the cache applied a change at 13: %v", err)
	}

	// A revision already reached costs etcd nothing, and is not a wait.
	waited, _ := histogramOf(t, waits)
	if err := ct.c.waitForRV(ct.ctx, 13, 3*time.Second); err != nil || ct.src.progressRequests() != 2 {
		t.Fatalf("waitForRV(13) at 13: %v, %d progress requests, want no error and no new request", err, ct.src.progressRequests())
	}
	if n, _ := histogramOf(t, waits); n != waited || n < 2 {
		t.Errorf("read waits observed: %d after a read at a reached revision, %d before; want the two waits above, and no more", n, waited)
	}

	go func() { result <- ct.c.waitForRV(ct.ctx, 14, 3*time.Second) }()
	// The read's deadline and the requester's retry timer.
	waitFor(t, "the read to wait", func() bool { return ct.clock.Waiters() >= 2 })
	ct.clock.Step(3 * time.Second)
	if err := <-result; !errors.Is(err, errTooLargeRV) {
		t.Fatalf("waitForRV(14) past its timeout: %v, want errTooLargeRV", err)
	}

	if n, sum := histogramOf(t, waits); n != waited+1 || sum < 3 {
		t.Errorf("read waits observed: %d totalling %vs, want %d with the 3s one", n, sum, waited+1)
	}
}

// histogramOf returns how many values h observed, and their sum.
func histogramOf(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestCacherWaitFresh: a consistent read waits for the store's current revision, asking
// etcd for progress when the cache is behind it, and asks nothing when it is not.
func TestCacherWaitFresh(t *testing.T) {
	ct := newCacheTest(t, 10)
	if err := ct.c.waitFresh(ct.ctx); err != nil || ct.src.progressRequests() != 0 {
		t.Fatalf("waitFresh on a current cache: %v, %d progress requests; want no error and none", err, ct.src.progressRequests())
	}
	ct.src.mu.Lock()
	ct.src.rev = 15 // other resources changed
	ct.src.mu.Unlock()
	result := make(chan error, 1)
	go func() { result <- ct.c.waitFresh(ct.ctx) }()
	waitFor(t, "a progress request", func() bool { return ct.src.progressRequests() == 1 })
	ct.feed(store.Event{Type: store.Progress, Revision: 15})
	if err := <-result; err != nil {
		t.Fatalf("waitFresh after the progress report: %v", err)
	}
}

// TestProgressRequester: nothing is asked while no read waits; a read that starts
// waiting gets a request at once, the request is repeated every progressRetryInterval
// while reads wait, a read arriving later gets one of its own no sooner than
// progressRequestGap after the last, and requests stop when no read waits.
func TestProgressRequester(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	requests := 0
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return requests
	}
	p := newProgressRequester(func(context.Context) error {
		mu.Lock()
		requests++
		mu.Unlock()
		return nil
	}, clk, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	clk.Step(time.Second)
	if n := count(); n != 0 {
		t.Fatalf("%d requests with no read waiting, want 0", n)
	}
	p.add()
	waitFor(t, "the first request", func() bool { return count() == 1 })
	waitFor(t, "the retry timer", clk.HasWaiters)
	clk.Step(progressRetryInterval)
	waitFor(t, "the retry", func() bool { return count() == 2 })

	p.add() // a second read, right after the last request
	waitFor(t, "the gap timer", func() bool { return clk.Waiters() == 1 && count() == 2 })
	clk.Step(progressRequestGap - time.Millisecond)
	select {
	case <-time.After(20 * time.Millisecond):
	case <-func() chan struct{} {
		ch := make(chan struct{})
		go func() {
			for count() == 2 {
				time.Sleep(time.Millisecond)
			}
			close(ch)
		}()
		return ch
	}():
		t.Fatal("a request within progressRequestGap of the last")
	}
	clk.Step(time.Millisecond)
	waitFor(t, "the second read's request", func() bool { return count() == 3 })

	p.done()
	p.done()
	waitFor(t, "the retry timer", clk.HasWaiters)
	clk.Step(progressRetryInterval) // the loop wakes, finds no read waiting and stops asking
	waitFor(t, "the requester to go idle", func() bool { return !clk.HasWaiters() })
	clk.Step(time.Minute)
	if n := count(); n != 3 {
		t.Errorf("%d requests after the reads stopped waiting, want 3", n)
	}
}

// waitFor polls cond in real time: it waits for another goroutine to get somewhere.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCacherCompactsOldVersions: a version compactLag changes behind the newest change
// keeps only its encoding: packed once another version replaced it, whole while it is
// current (and packed once it is replaced later); newer versions stay decoded. A watch
// replaying that history still gets every version as it was, decoded and encoded alike, and
// the cache's reads are unchanged.
func TestCacherCompactsOldVersions(t *testing.T) {
	ct := newCacheTest(t, 4*compactLag)
	rv := int64(cacheStartRV)
	var events []store.Event
	want := map[int64]*corev1.Pod{} // revision → the version written at it
	// Packing keeps only what it makes smaller.
	packable := func(p *corev1.Pod) *corev1.Pod {
		p.Annotations = map[string]string{"note": strings.Repeat("repetitive enough to pack ", 8)}
		return p
	}
	// "a" changes on every other revision; "b-i" are added and stay current.
	for i := range compactLag + 50 {
		rv++
		p := packable(testPod("a", fmt.Sprintf("n%d", i), web))
		ev := modified(rv, p)
		if i == 0 {
			ev = added(rv, p)
		}
		events = append(events, ev)
		want[rv] = ev.Object.(*corev1.Pod)
		rv++
		events = append(events, added(rv, packable(testPod(fmt.Sprintf("b-%d", i), "", db))))
	}
	rv++
	events = append(events, deleted(rv, packable(testPod("a", "gone", web))))
	ct.feed(events[:10]...)
	// A JSON reader's encoding is kept while the version is decoded (and dropped below).
	ct.c.mu.RLock()
	b0 := ct.c.objects[ct.c.res.key("/registry", "default", "b-0")]
	ct.c.mu.RUnlock()
	if b0 == nil {
		t.Fatal("b-0 is not in the cache")
	}
	if data, err := b0.json(); err != nil || b0.jsonData == nil || !json.Valid(data) {
		t.Fatalf("b-0's JSON %s (%v) is not kept", data, err)
	}
	ct.feed(events[10:]...)

	// b-0 was compacted and packed while current, and keeps no JSON; it reads as written.
	if e := b0.proto.Load(); b0.decoded.Load() != nil || e.raw != nil || len(e.packed) == 0 || b0.jsonData != nil {
		t.Fatalf("b-0, current and %d changes old, is not compacted and packed", 2*compactLag)
	}
	if p, ok := b0.object().(*corev1.Pod); !ok || p.Name != "b-0" || p.Annotations["note"] == "" {
		t.Fatalf("b-0 reads as %#v", b0.object())
	}
	events = []store.Event{modified(rv+1, testPod("b-0", "n1", db))}
	for i := range compactLag {
		events = append(events, added(rv+2+int64(i), testPod(fmt.Sprintf("c-%d", i), "", web)))
	}
	ct.feed(events...)
	if e := b0.proto.Load(); b0.decoded.Load() != nil || e.raw != nil || len(e.packed) == 0 {
		t.Errorf("b-0's replaced version keeps %d whole bytes, %d packed", len(e.raw), len(e.packed))
	}

	ct.c.mu.RLock()
	var packedOld, packedCurrent, decodedOld int
	for i := 0; i < ct.c.hLen; i++ {
		ev := ct.c.history[(ct.c.hStart+i)%len(ct.c.history)]
		current := ct.c.objects[ev.cur.key] == ev.cur
		old := i < ct.c.hLen-compactLag
		e := ev.cur.proto.Load()
		switch {
		case !old && ev.cur.decoded.Load() == nil:
			t.Errorf("%s@%d, %d changes old, was compacted", ev.cur.key, ev.cur.rv, ct.c.hLen-1-i)
		case old && ev.cur.decoded.Load() != nil:
			decodedOld++
		case old:
			if current {
				packedCurrent++
			} else {
				packedOld++
			}
			if e.raw != nil || len(e.packed) == 0 || ev.cur.jsonData != nil {
				t.Errorf("compacted %s@%d keeps %d whole bytes, %d packed", ev.cur.key, ev.cur.rv, len(e.raw), len(e.packed))
			}
		}
	}
	ct.c.mu.RUnlock()
	if packedOld == 0 || packedCurrent == 0 || decodedOld != 0 {
		t.Errorf("%d replaced versions packed, %d current ones, %d older than compactLag still decoded", packedOld, packedCurrent, decodedOld)
	}

	w, err := ct.c.watch(selector("", ""), watchStart{fromRV: cacheStartRV}, 10*compactLag)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, it := range w.take() {
		if it.obj.name != "a" || it.typ == watch.Deleted {
			continue
		}
		seen++
		got, ok := it.obj.object().(*corev1.Pod)
		if !ok || got.Spec.NodeName != want[it.obj.rv].Spec.NodeName || got.ResourceVersion != strconv.FormatInt(it.obj.rv, 10) ||
			got.Labels["app"] != "web" || got.Kind != "Pod" || got.APIVersion != "v1" {
			t.Fatalf("replayed a@%d = %#v, want %#v", it.obj.rv, got, want[it.obj.rv])
		}
		data, err := it.obj.json()
		if err != nil || !json.Valid(data) || !strings.Contains(string(data), `"nodeName":"`+want[it.obj.rv].Spec.NodeName+`"`) {
			t.Fatalf("replayed a@%d as JSON %s (%v)", it.obj.rv, data, err)
		}
		// What a protobuf watcher is sent: the whole encoding, unpacked if it was packed.
		raw, err := it.obj.protobuf()
		var fromWire corev1.Pod
		if err != nil || fromWire.Unmarshal(raw) != nil || fromWire.Spec.NodeName != want[it.obj.rv].Spec.NodeName ||
			fromWire.ResourceVersion != strconv.FormatInt(it.obj.rv, 10) {
			t.Fatalf("replayed a@%d as protobuf: node %q, resourceVersion %q (%v)", it.obj.rv, fromWire.Spec.NodeName, fromWire.ResourceVersion, err)
		}
	}
	if seen != compactLag+50 {
		t.Errorf("replayed %d versions of a, want %d", seen, compactLag+50)
	}
	got, _ := ct.c.list(selector("app=db", ""))
	if len(got) != compactLag+50 {
		t.Errorf("list app=db: %d objects, want %d", len(got), compactLag+50)
	}
	for _, co := range got {
		// Compacted or not, a current object reads as it was written.
		p, ok := co.object().(*corev1.Pod)
		if !ok || p.Name != co.name || p.Labels["app"] != "db" || p.ResourceVersion != strconv.FormatInt(co.rv, 10) || p.Kind != "Pod" {
			t.Fatalf("listed %s@%d reads as %#v", co.key, co.rv, co.object())
		}
	}
}

// TestCacherSharesUnchangedFields: a version whose labels and selectable fields are those
// of the version before shares their map and values; a change of either gets its own.
func TestCacherSharesUnchangedFields(t *testing.T) {
	ct := newCacheTest(t, 100)
	p := testPod("a", "n1", web)
	ready := p.DeepCopy()
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	moved := testPod("a", "n2", db)
	ct.feed(added(11, p), modified(12, ready), modified(13, moved))
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	sameValues := func(a, b fieldValues) bool { return &a.values[0] == &b.values[0] }
	ct.c.mu.RLock()
	defer ct.c.mu.RUnlock()
	v11, v12, v13 := ct.c.history[0].cur, ct.c.history[1].cur, ct.c.history[2].cur
	if !sameValues(v11.fields, v12.fields) || !same(v11.labels, v12.labels) {
		t.Error("a status change did not share the labels and fields of the version before")
	}
	if sameValues(v12.fields, v13.fields) || same(v12.labels, v13.labels) {
		t.Error("a change of node and labels shares the maps of the version before")
	}
	if v13.fields.Get("spec.nodeName") != "n2" || v13.labels["app"] != "db" || v12.fields.Get("spec.nodeName") != "n1" {
		t.Errorf("fields %v and labels %v after the move, %v before", v13.fields, v13.labels, v12.fields)
	}
}
