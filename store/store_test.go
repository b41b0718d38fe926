package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/miniplane/miniplane/store"
)

// backend is a Store under test plus the few hooks the contract needs that the Store
// interface does not offer: discarding history, and ending a TTL now instead of waiting
// for it.
type backend struct {
	store.Store
	// compact discards the history before rev.
	compact func(ctx context.Context, rev int64) error
	// expire makes the TTL of key run out now.
	expire func(ctx context.Context, key string) error
	// ttlOf reports the time key has left to live (0: no TTL).
	ttlOf func(ctx context.Context, key string) (time.Duration, error)
}

// runContract is the one contract test suite every Store implementation must pass. Each
// subtest gets a fresh, empty backend.
func runContract(t *testing.T, newBackend func(t *testing.T) backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b backend)
	}{
		{"CreateGet", testCreateGet},
		{"GuaranteedUpdate", testGuaranteedUpdate},
		{"StaleSuggestion", testStaleSuggestion},
		{"SuggestionIsOnlyRead", testSuggestionIsOnlyRead},
		{"ConcurrentUpdatesLoseNothing", testConcurrentUpdates},
		{"NoopUpdateKeepsResourceVersion", testNoopUpdate},
		{"DeletePreconditions", testDeletePreconditions},
		{"ListPagination", testListPagination},
		{"ListPredicate", testListPredicate},
		{"ListAtRevision", testListAtRevision},
		{"WatchOrderExactlyOnce", testWatchOrder},
		{"WatchFromRevision", testWatchFromRevision},
		{"WatchProgress", testWatchProgress},
		{"CompactionExpires", testCompaction},
		{"TTL", testTTL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newBackend(t)) })
	}
}

const prefix = "/registry/configmaps/"

func key(ns, name string) string { return prefix + ns + "/" + name }

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Data:       data,
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func rvOf(t *testing.T, obj runtime.Object) int64 {
	t.Helper()
	rv, err := strconv.ParseInt(obj.(metav1.Object).GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", obj.(metav1.Object).GetResourceVersion(), err)
	}
	return rv
}

// parseRV is rvOf for goroutines, which must not call t.Fatal: 0 when unparsable.
func parseRV(obj runtime.Object) int64 {
	rv, _ := strconv.ParseInt(obj.(metav1.Object).GetResourceVersion(), 10, 64)
	return rv
}

func mustCreate(t *testing.T, b backend, cm *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	out, err := b.Create(testCtx(t), key(cm.Namespace, cm.Name), cm, 0)
	if err != nil {
		t.Fatalf("create %s/%s: %v", cm.Namespace, cm.Name, err)
	}
	return out.(*corev1.ConfigMap)
}

func currentRevision(t *testing.T, b backend) int64 {
	t.Helper()
	rev, err := b.CurrentRevision(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func expectErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func testCreateGet(t *testing.T, b backend) {
	ctx := testCtx(t)
	before := currentRevision(t, b)
	created := mustCreate(t, b, configMap("a", "one", map[string]string{"k": "v"}))
	rv := rvOf(t, created)
	if rv <= before {
		t.Fatalf("created resourceVersion %d not after revision %d", rv, before)
	}
	if got := currentRevision(t, b); got != rv {
		t.Fatalf("store revision %d after create, object says %d", got, rv)
	}
	got, err := b.Get(ctx, key("a", "one"))
	if err != nil {
		t.Fatal(err)
	}
	cm := got.(*corev1.ConfigMap)
	if rvOf(t, cm) != rv || cm.Data["k"] != "v" || cm.UID != "uid-a-one" {
		t.Fatalf("get returned %+v, want rv %d and the created data", cm, rv)
	}

	// Creating over an existing key fails and leaves the stored object alone.
	_, err = b.Create(ctx, key("a", "one"), configMap("a", "one", map[string]string{"k": "other"}), 0)
	expectErr(t, err, store.ErrAlreadyExists)
	got, _ = b.Get(ctx, key("a", "one"))
	if got.(*corev1.ConfigMap).Data["k"] != "v" || rvOf(t, got) != rv {
		t.Fatalf("failed create changed the object: %+v", got)
	}

	withRV := configMap("a", "two", nil)
	withRV.ResourceVersion = "5"
	_, err = b.Create(ctx, key("a", "two"), withRV, 0)
	expectErr(t, err, store.ErrInvalidObject)

	_, err = b.Get(ctx, key("a", "missing"))
	expectErr(t, err, store.ErrNotFound)

	n, err := b.Count(ctx, prefix)
	if err != nil || n != 1 {
		t.Fatalf("count = %d, %v; want 1", n, err)
	}
}

func testGuaranteedUpdate(t *testing.T, b backend) {
	ctx := testCtx(t)
	created := mustCreate(t, b, configMap("a", "one", map[string]string{"n": "0"}))
	out, err := b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) {
		cm := cur.(*corev1.ConfigMap)
		if rvOf(t, cm) != rvOf(t, created) {
			t.Errorf("update saw resourceVersion %s, want %s", cm.ResourceVersion, created.ResourceVersion)
		}
		cm.Data["n"] = "1"
		return cm, nil
	}, store.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rvOf(t, out) <= rvOf(t, created) || out.(*corev1.ConfigMap).Data["n"] != "1" {
		t.Fatalf("update returned %+v", out)
	}
	got, _ := b.Get(ctx, key("a", "one"))
	if rvOf(t, got) != rvOf(t, out) || got.(*corev1.ConfigMap).Data["n"] != "1" {
		t.Fatalf("stored %+v, update returned %+v", got, out)
	}

	// An error from the update function aborts without writing.
	boom := errors.New("boom")
	rev := currentRevision(t, b)
	_, err = b.GuaranteedUpdate(ctx, key("a", "one"), func(runtime.Object) (runtime.Object, error) { return nil, boom }, store.UpdateOptions{})
	expectErr(t, err, boom)
	if currentRevision(t, b) != rev {
		t.Fatal("a failed update wrote")
	}

	_, err = b.GuaranteedUpdate(ctx, key("a", "missing"), func(cur runtime.Object) (runtime.Object, error) { return cur, nil }, store.UpdateOptions{})
	expectErr(t, err, store.ErrNotFound)

	// Returning nil deletes the key.
	if _, err := b.GuaranteedUpdate(ctx, key("a", "one"), func(runtime.Object) (runtime.Object, error) { return nil, nil }, store.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = b.Get(ctx, key("a", "one"))
	expectErr(t, err, store.ErrNotFound)
}

// testStaleSuggestion: a stale cached copy costs a retry on the current state, and a CAS
// precondition written the way the API server writes it turns into a conflict.
func testStaleSuggestion(t *testing.T, b backend) {
	ctx := testCtx(t)
	stale := mustCreate(t, b, configMap("a", "one", map[string]string{"n": "0"}))
	fresh, err := b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) {
		cur.(*corev1.ConfigMap).Data["n"] = "1"
		return cur, nil
	}, store.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var seen []string
	out, err := b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) {
		cm := cur.(*corev1.ConfigMap)
		seen = append(seen, cm.ResourceVersion+"/"+cm.Data["n"])
		cm.Data["extra"] = "x"
		return cm, nil
	}, store.UpdateOptions{Suggestion: stale})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{stale.ResourceVersion + "/0", fresh.(metav1.Object).GetResourceVersion() + "/1"}
	if !slices.Equal(seen, want) {
		t.Fatalf("update function saw %v, want %v (stale suggestion, then the stored state)", seen, want)
	}
	if cm := out.(*corev1.ConfigMap); cm.Data["n"] != "1" || cm.Data["extra"] != "x" {
		t.Fatalf("stale suggestion lost the intervening update: %v", cm.Data)
	}

	// An update conditioned on the current resourceVersion succeeds even though the
	// suggestion is stale: an error against a cached copy is retried on the stored state.
	freshRV := out.(metav1.Object).GetResourceVersion()
	out, err = b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) {
		if cur.(metav1.Object).GetResourceVersion() != freshRV {
			return nil, &store.Error{Err: store.ErrConflict, Message: "stale"}
		}
		cur.(*corev1.ConfigMap).Data["n"] = "2"
		return cur, nil
	}, store.UpdateOptions{Suggestion: stale})
	if err != nil {
		t.Fatalf("update conditioned on the current resourceVersion, with a stale suggestion: %v", err)
	}
	if out.(*corev1.ConfigMap).Data["n"] != "2" {
		t.Fatalf("conditioned update returned %v", out)
	}

	// An update conditioned on a resourceVersion the client read earlier: the store
	// retries, the condition fails, nothing is written.
	rev := currentRevision(t, b)
	_, err = b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) {
		if cur.(metav1.Object).GetResourceVersion() != stale.ResourceVersion {
			return nil, &store.Error{Err: store.ErrConflict, Message: "stale"}
		}
		return cur, nil
	}, store.UpdateOptions{Suggestion: stale})
	expectErr(t, err, store.ErrConflict)
	if currentRevision(t, b) != rev {
		t.Fatal("a conflicting update wrote")
	}
}

// testSuggestionIsOnlyRead: a suggestion is shared (the watch cache hands the same copy to
// every request), so neither an update from it, nor a no-op from it, nor one after it went
// stale may change it. Create and GuaranteedUpdate return the object they were given (by
// the caller, by tryUpdate) with its new resourceVersion.
func testSuggestionIsOnlyRead(t *testing.T, b backend) {
	ctx := testCtx(t)
	cm := configMap("a", "one", map[string]string{"n": "0"})
	created, err := b.Create(ctx, key("a", "one"), cm, 0)
	if err != nil {
		t.Fatal(err)
	}
	if created != runtime.Object(cm) || cm.ResourceVersion == "" {
		t.Fatalf("Create returned %p with resourceVersion %q, want the object given (%p) with one", created, cm.ResourceVersion, cm)
	}
	suggestion := cm
	want := suggestion.DeepCopy()
	steps := []struct {
		name string
		fn   store.UpdateFunc
	}{
		{"update", func(cur runtime.Object) (runtime.Object, error) {
			c := cur.(*corev1.ConfigMap)
			c.Data["n"] = "1"
			c.Labels = map[string]string{"changed": "yes"}
			c.ResourceVersion = ""
			return c, nil
		}},
		// The suggestion is stale from here on.
		{"stale no-op", func(cur runtime.Object) (runtime.Object, error) { return cur, nil }},
		{"stale update", func(cur runtime.Object) (runtime.Object, error) {
			c := cur.(*corev1.ConfigMap)
			c.Data["n"] = "2"
			return c, nil
		}},
	}
	for _, step := range steps {
		var returned runtime.Object
		out, err := b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) {
			next, err := step.fn(cur)
			returned = next
			return next, err
		}, store.UpdateOptions{Suggestion: suggestion})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if out != returned || out.(metav1.Object).GetResourceVersion() == "" {
			t.Errorf("%s: returned %p with resourceVersion %q, want what tryUpdate returned (%p) with one",
				step.name, out, out.(metav1.Object).GetResourceVersion(), returned)
		}
		if !reflect.DeepEqual(suggestion, want) {
			t.Fatalf("%s changed the suggestion:\n got %+v\nwant %+v", step.name, suggestion, want)
		}
	}
}

// testConcurrentUpdates: writers racing on one key through GuaranteedUpdate each see the
// others' writes: no increment is lost.
func testConcurrentUpdates(t *testing.T, b backend) {
	ctx := testCtx(t)
	mustCreate(t, b, configMap("a", "counter", map[string]string{"n": "0"}))
	const writers, increments = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for i := 0; i < increments; i++ {
				out, err := b.GuaranteedUpdate(ctx, key("a", "counter"), func(cur runtime.Object) (runtime.Object, error) {
					cm := cur.(*corev1.ConfigMap)
					n, _ := strconv.Atoi(cm.Data["n"])
					cm.Data["n"] = strconv.Itoa(n + 1)
					return cm, nil
				}, store.UpdateOptions{})
				if err != nil {
					errs <- err
					return
				}
				rv, _ := strconv.ParseInt(out.(metav1.Object).GetResourceVersion(), 10, 64)
				if rv <= last {
					errs <- fmt.Errorf("resourceVersion went from %d to %d", last, rv)
					return
				}
				last = rv
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := b.Get(ctx, key("a", "counter"))
	if err != nil {
		t.Fatal(err)
	}
	if n := got.(*corev1.ConfigMap).Data["n"]; n != strconv.Itoa(writers*increments) {
		t.Fatalf("counter = %s, want %d: updates were lost", n, writers*increments)
	}
}

func testNoopUpdate(t *testing.T, b backend) {
	ctx := testCtx(t)
	created := mustCreate(t, b, configMap("a", "one", map[string]string{"k": "v"}))
	rev := currentRevision(t, b)
	for _, opts := range []store.UpdateOptions{{}, {Suggestion: created}} {
		out, err := b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) { return cur, nil }, opts)
		if err != nil {
			t.Fatal(err)
		}
		if out.(metav1.Object).GetResourceVersion() != created.ResourceVersion {
			t.Fatalf("no-op update changed resourceVersion %s → %s", created.ResourceVersion, out.(metav1.Object).GetResourceVersion())
		}
		if got := currentRevision(t, b); got != rev {
			t.Fatalf("no-op update wrote: revision %d → %d", rev, got)
		}
	}
	// Setting the resourceVersion field in the new state is not a change either: it is
	// not part of what is stored.
	out, err := b.GuaranteedUpdate(ctx, key("a", "one"), func(cur runtime.Object) (runtime.Object, error) {
		cur.(metav1.Object).SetResourceVersion("12345")
		return cur, nil
	}, store.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out.(metav1.Object).GetResourceVersion() != created.ResourceVersion || currentRevision(t, b) != rev {
		t.Fatal("an update that only set resourceVersion wrote")
	}
}

func testDeletePreconditions(t *testing.T, b backend) {
	ctx := testCtx(t)
	created := mustCreate(t, b, configMap("a", "one", map[string]string{"k": "v"}))
	wrongUID := types.UID("someone-else")
	staleRV := strconv.FormatInt(rvOf(t, created)-1, 10)
	goodUID, goodRV := created.UID, created.ResourceVersion
	for _, tc := range []struct {
		name string
		p    *store.Preconditions
	}{
		{"uid", &store.Preconditions{UID: &wrongUID}},
		{"resourceVersion", &store.Preconditions{ResourceVersion: &staleRV}},
		{"uid ok, resourceVersion stale", &store.Preconditions{UID: &goodUID, ResourceVersion: &staleRV}},
	} {
		_, err := b.Delete(ctx, key("a", "one"), tc.p, nil)
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("%s: delete with failing precondition: %v, want ErrConflict", tc.name, err)
		}
	}
	refuse := errors.New("refused")
	_, err := b.Delete(ctx, key("a", "one"), nil, func(runtime.Object) error { return refuse })
	expectErr(t, err, refuse)
	if got, err := b.Get(ctx, key("a", "one")); err != nil || got.(metav1.Object).GetResourceVersion() != goodRV {
		t.Fatalf("object changed by refused deletes: %v %v", got, err)
	}

	last, err := b.Delete(ctx, key("a", "one"), &store.Preconditions{UID: &goodUID, ResourceVersion: &goodRV}, func(cur runtime.Object) error {
		if cur.(metav1.Object).GetResourceVersion() != goodRV {
			return fmt.Errorf("validate saw %s", cur.(metav1.Object).GetResourceVersion())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cm := last.(*corev1.ConfigMap); cm.Data["k"] != "v" || cm.ResourceVersion != goodRV {
		t.Fatalf("delete returned %+v, want the last state", cm)
	}
	_, err = b.Get(ctx, key("a", "one"))
	expectErr(t, err, store.ErrNotFound)
	_, err = b.Delete(ctx, key("a", "one"), nil, nil)
	expectErr(t, err, store.ErrNotFound)
}

func names(items []runtime.Object) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.(metav1.Object).GetName()
	}
	return out
}

func seed(t *testing.T, b backend, ns string, n int) []string {
	t.Helper()
	var want []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("cm-%02d", i)
		mustCreate(t, b, configMap(ns, name, map[string]string{"i": strconv.Itoa(i)}))
		want = append(want, name)
	}
	return want
}

func testListPagination(t *testing.T, b backend) {
	ctx := testCtx(t)
	want := seed(t, b, "a", 25)
	seed(t, b, "ab", 3) // shares a prefix string with "a" but not the "a/" prefix
	seed(t, b, "b", 4)

	all, err := b.List(ctx, key("a", ""), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(all.Items), want) || all.Continue != "" || all.Revision != currentRevision(t, b) {
		t.Fatalf("list = %v continue %q revision %d", names(all.Items), all.Continue, all.Revision)
	}

	var got []string
	var pages int
	opts := store.ListOptions{Limit: 10}
	for {
		page, err := b.List(ctx, key("a", ""), opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if page.Revision != all.Revision {
			t.Fatalf("page %d at revision %d, first page at %d: pages must be one snapshot", pages, page.Revision, all.Revision)
		}
		got = append(got, names(page.Items)...)
		if pages == 1 {
			if page.RemainingItemCount == nil || *page.RemainingItemCount != 15 {
				t.Fatalf("remainingItemCount after the first page = %v, want 15", page.RemainingItemCount)
			}
			// Changes after the first page must not show in later pages.
			mustCreate(t, b, configMap("a", "cm-99", nil))
			if _, err := b.Delete(ctx, key("a", "cm-20"), nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		if page.Continue == "" {
			break
		}
		opts = store.ListOptions{Limit: 10, Continue: page.Continue}
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("paginated list: %d pages, items %v; want 3 pages of %v", pages, got, want)
	}

	// An exact multiple of the limit ends without a continue token.
	page, err := b.List(ctx, key("b", ""), store.ListOptions{Limit: 4})
	if err != nil || len(page.Items) != 4 || page.Continue != "" {
		t.Fatalf("list of 4 with limit 4: %v items, continue %q, %v", len(page.Items), page.Continue, err)
	}

	for _, bad := range []string{"not base64!", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MCwic3RhcnQiOiJ4In0"} {
		if _, err := b.List(ctx, key("a", ""), store.ListOptions{Continue: bad}); !errors.Is(err, store.ErrInvalidObject) {
			t.Fatalf("continue %q: %v, want ErrInvalidObject", bad, err)
		}
	}
}

func testListPredicate(t *testing.T, b backend) {
	ctx := testCtx(t)
	seed(t, b, "a", 30)
	even := func(obj runtime.Object) bool {
		i, _ := strconv.Atoi(obj.(*corev1.ConfigMap).Data["i"])
		return i%2 == 0
	}
	var want []string
	for i := 0; i < 30; i += 2 {
		want = append(want, fmt.Sprintf("cm-%02d", i))
	}
	all, err := b.List(ctx, key("a", ""), store.ListOptions{Predicate: even})
	if err != nil || !slices.Equal(names(all.Items), want) {
		t.Fatalf("filtered list = %v, %v; want %v", names(all.Items), err, want)
	}
	var got []string
	opts := store.ListOptions{Limit: 4, Predicate: even}
	for pages := 1; ; pages++ {
		page, err := b.List(ctx, key("a", ""), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) > 4 {
			t.Fatalf("page of %d items with limit 4", len(page.Items))
		}
		got = append(got, names(page.Items)...)
		if page.Continue == "" {
			break
		}
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		opts.Continue = page.Continue
	}
	if !slices.Equal(got, want) {
		t.Fatalf("filtered pages = %v, want %v", got, want)
	}
}

func testListAtRevision(t *testing.T, b backend) {
	ctx := testCtx(t)
	seed(t, b, "a", 3)
	rev := currentRevision(t, b)
	if _, err := b.Delete(ctx, key("a", "cm-00"), nil, nil); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, b, configMap("a", "cm-03", nil))
	old, err := b.List(ctx, key("a", ""), store.ListOptions{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(old.Items); !slices.Equal(got, []string{"cm-00", "cm-01", "cm-02"}) || old.Revision != rev {
		t.Fatalf("list at revision %d = %v at %d", rev, got, old.Revision)
	}
	now, _ := b.List(ctx, key("a", ""), store.ListOptions{})
	if got := names(now.Items); !slices.Equal(got, []string{"cm-01", "cm-02", "cm-03"}) {
		t.Fatalf("list now = %v", got)
	}
}

// collect reads n events (or fails at the deadline).
func collect(t *testing.T, ch <-chan store.Event, n int) []store.Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	var out []store.Event
	for len(out) < n {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(out), n)
			}
			if ev.Type == store.Progress {
				continue
			}
			if ev.Type == store.ErrorEvent {
				t.Fatalf("watch error after %d events: %v", len(out), ev.Err)
			}
			out = append(out, ev)
		case <-deadline:
			t.Fatalf("got %d of %d events before the deadline", len(out), n)
		}
	}
	return out
}

// expectQuiet checks that nothing but progress reports arrives until a change written
// after the call is seen: the sentinel write bounds the wait without sleeping.
func expectQuiet(t *testing.T, b backend, ch <-chan store.Event, ns string) {
	t.Helper()
	name := fmt.Sprintf("zz-sentinel-%d", sentinels.Add(1))
	mustCreate(t, b, configMap(ns, name, nil))
	ev := collect(t, ch, 1)[0]
	if ev.Key != key(ns, name) {
		t.Fatalf("unexpected extra event %s %s at %d", ev.Type, ev.Key, ev.Revision)
	}
}

var sentinels atomic.Int64

// change is one write, as a watch should report it.
type change struct {
	typ store.EventType
	key string
	rev int64
}

func testWatchOrder(t *testing.T, b backend) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	start := currentRevision(t, b)
	ch, err := b.Watch(ctx, key("a", ""), start)
	if err != nil {
		t.Fatal(err)
	}

	// Several writers interleave creates, updates and deletes on their own keys, and
	// write to a neighbouring prefix that must not show up.
	const writers, perWriter = 4, 10
	var mu sync.Mutex
	var written []change
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				k := key("a", name)
				out, err := b.Create(ctx, k, configMap("a", name, map[string]string{"v": "0"}), 0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				written = append(written, change{store.Added, k, parseRV(out)})
				mu.Unlock()
				if _, err := b.Create(ctx, key("ab", name), configMap("ab", name, nil), 0); err != nil {
					t.Error(err)
					return
				}
				upd, err := b.GuaranteedUpdate(ctx, k, func(cur runtime.Object) (runtime.Object, error) {
					cur.(*corev1.ConfigMap).Data["v"] = "1"
					return cur, nil
				}, store.UpdateOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				written = append(written, change{store.Modified, k, parseRV(upd)})
				mu.Unlock()
				if i%2 == 0 {
					if _, err := b.Delete(ctx, k, nil, nil); err != nil {
						t.Error(err)
						return
					}
					// The delete's revision is not returned; the watch must report one
					// DELETED for this key after its update.
					mu.Lock()
					written = append(written, change{store.Deleted, k, 0})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	events := collect(t, ch, len(written))
	last := start
	seen := map[change]int{}
	for _, ev := range events {
		if ev.Revision <= last {
			t.Fatalf("event %s %s at revision %d after revision %d: out of order", ev.Type, ev.Key, ev.Revision, last)
		}
		last = ev.Revision
		switch ev.Type {
		case store.Added, store.Modified:
			if got := rvOf(t, ev.Object); got != ev.Revision {
				t.Fatalf("%s %s: object resourceVersion %d, event revision %d", ev.Type, ev.Key, got, ev.Revision)
			}
			want := map[store.EventType]string{store.Added: "0", store.Modified: "1"}[ev.Type]
			if got := ev.Object.(*corev1.ConfigMap).Data["v"]; got != want {
				t.Fatalf("%s %s: data v=%q, want %q", ev.Type, ev.Key, got, want)
			}
		case store.Deleted:
			if ev.Object != nil {
				t.Fatalf("DELETED %s carries an object; the store does not read the last state back", ev.Key)
			}
		}
		c := change{ev.Type, ev.Key, ev.Revision}
		if ev.Type == store.Deleted {
			c.rev = 0
		}
		seen[c]++
	}
	for _, c := range written {
		if seen[c] != 1 {
			t.Fatalf("write %v seen %d times, want exactly once", c, seen[c])
		}
	}
	expectQuiet(t, b, ch, "a")
}

func testWatchFromRevision(t *testing.T, b backend) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var revs []int64
	for i := 0; i < 6; i++ {
		revs = append(revs, rvOf(t, mustCreate(t, b, configMap("a", fmt.Sprintf("cm-%d", i), nil))))
	}
	// From the revision of the third write: exactly the later three, replayed from history.
	ch, err := b.Watch(ctx, key("a", ""), revs[2])
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, ch, 3)
	for i, ev := range events {
		if ev.Revision != revs[3+i] || ev.Type != store.Added {
			t.Fatalf("event %d: %s at %d, want ADDED at %d", i, ev.Type, ev.Revision, revs[3+i])
		}
	}
	expectQuiet(t, b, ch, "a")

	// From 0: only what happens after the call.
	ch0, err := b.Watch(ctx, key("a", ""), 0)
	if err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, b, ch0, "a")
}

// testWatchProgress: a progress request for a prefix makes its quiet watches report the
// store's revision (moved on by writes elsewhere) soon, after every change of their own
// up to it; it is harmless for a prefix nobody watches.
func testWatchProgress(t *testing.T, b backend) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	mustCreate(t, b, configMap("other", "x", nil))
	from := currentRevision(t, b)
	watchPrefix := key("a", "")
	// Two watches of the prefix: a request reaches every one of them.
	chans := make([]<-chan store.Event, 2)
	for i := range chans {
		ch, err := b.Watch(ctx, watchPrefix, from)
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	own := rvOf(t, mustCreate(t, b, configMap("a", "mine", nil)))
	mustCreate(t, b, configMap("other", "y", nil)) // outside the watched prefix
	want := currentRevision(t, b)
	if err := b.RequestProgress(ctx, key("nobody-watches", "")); err != nil {
		t.Fatalf("progress request for an unwatched prefix: %v", err)
	}

	for i, ch := range chans {
		deadline := time.After(30 * time.Second)
		// A request may go unanswered while the watch catches up (it was opened at a
		// revision already written); the contract says to ask again.
		ticker := time.NewTicker(25 * time.Millisecond)
		sawOwn := false
		for done := false; !done; {
			if err := b.RequestProgress(ctx, watchPrefix); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-ch:
				switch {
				case ev.Type == store.Added && ev.Revision == own && !sawOwn:
					sawOwn = true
				case ev.Type != store.Progress:
					t.Fatalf("watch %d: got %s %s at %d, want only ADDED %s at %d and progress", i, ev.Type, ev.Key, ev.Revision, key("a", "mine"), own)
				case ev.Revision >= own && !sawOwn:
					t.Fatalf("watch %d: progress at %d before the change at %d", i, ev.Revision, own)
				case ev.Revision >= want:
					done = true
				}
			case <-ticker.C:
			case <-deadline:
				t.Fatalf("watch %d: no progress report at revision %d", i, want)
			}
		}
		ticker.Stop()
	}

	// Once the watches are in step, an answer comes within milliseconds of the request.
	mustCreate(t, b, configMap("other", "z", nil))
	want = currentRevision(t, b)
	if err := b.RequestProgress(ctx, watchPrefix); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(time.Second)
	for {
		select {
		case ev := <-chans[0]:
			if ev.Type != store.Progress {
				t.Fatalf("got %s %s at %d, want only progress", ev.Type, ev.Key, ev.Revision)
			}
			if ev.Revision < want {
				continue // an answer to one of the requests above
			}
			return
		case <-timeout:
			t.Fatalf("no progress report at %d within a second of the request", want)
		}
	}
}

func testCompaction(t *testing.T, b backend) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	seed(t, b, "a", 5)
	old := currentRevision(t, b)
	page, err := b.List(ctx, key("a", ""), store.ListOptions{Limit: 2})
	if err != nil || page.Continue == "" {
		t.Fatalf("first page: %v (continue %q)", err, page.Continue)
	}
	mustCreate(t, b, configMap("a", "later", nil))
	mustCreate(t, b, configMap("a", "later2", nil))
	if err := b.compact(ctx, currentRevision(t, b)); err != nil {
		t.Fatal(err)
	}

	ch, err := b.Watch(ctx, key("a", ""), old)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-ch:
		if !ok || ev.Type != store.ErrorEvent || !errors.Is(ev.Err, store.ErrExpired) {
			t.Fatalf("watch from compacted revision: %v %+v, want an ErrExpired error event", ok, ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no error from a watch at a compacted revision")
	}
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("watch went on after its error: %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch channel not closed after the error")
	}

	_, err = b.List(ctx, key("a", ""), store.ListOptions{Revision: old})
	expectErr(t, err, store.ErrExpired)
	_, err = b.List(ctx, key("a", ""), store.ListOptions{Limit: 2, Continue: page.Continue})
	expectErr(t, err, store.ErrExpired)
	// The expired answer carries a token that continues, inconsistently, at the newest
	// revision from where the first page ended: the 3 seeded objects left and the 2 later.
	var expired *store.Error
	if !errors.As(err, &expired) || expired.Continue == "" {
		t.Fatalf("the expired continue answer carries no token to go on with: %v", err)
	}
	rest, err := b.List(ctx, key("a", ""), store.ListOptions{Limit: 2, Continue: expired.Continue})
	if err != nil || len(rest.Items) != 2 || rest.RemainingItemCount == nil || *rest.RemainingItemCount != 3 || rest.Revision <= old {
		t.Fatalf("inconsistent continue: %v items, remaining %v, revision %d (was %d), err %v", names(rest.Items), rest.RemainingItemCount, rest.Revision, old, err)
	}

	// The current state and new watches are unaffected.
	all, err := b.List(ctx, key("a", ""), store.ListOptions{})
	if err != nil || len(all.Items) != 7 {
		t.Fatalf("list after compaction: %d items, %v", len(all.Items), err)
	}
	ch2, err := b.Watch(ctx, key("a", ""), currentRevision(t, b))
	if err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, b, ch2, "a")
}

func testTTL(t *testing.T, b backend) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	const ttl = 10 * time.Second
	if _, err := b.Create(ctx, key("a", "ev"), configMap("a", "ev", map[string]string{"n": "0"}), ttl); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, b, configMap("a", "forever", nil))
	left, err := b.ttlOf(ctx, key("a", "ev"))
	if err != nil {
		t.Fatal(err)
	}
	if left < ttl-time.Second {
		t.Fatalf("object with TTL %v has %v left", ttl, left)
	}
	if left, _ := b.ttlOf(ctx, key("a", "forever")); left != 0 {
		t.Fatalf("object without TTL has %v left", left)
	}
	// An update keeps the TTL.
	if _, err := b.GuaranteedUpdate(ctx, key("a", "ev"), func(cur runtime.Object) (runtime.Object, error) {
		cur.(*corev1.ConfigMap).Data["n"] = "1"
		return cur, nil
	}, store.UpdateOptions{TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if left, _ := b.ttlOf(ctx, key("a", "ev")); left < ttl-time.Second {
		t.Fatalf("updated object has %v left, want at least %v", left, ttl-time.Second)
	}

	ch, err := b.Watch(ctx, key("a", ""), currentRevision(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.expire(ctx, key("a", "ev")); err != nil {
		t.Fatal(err)
	}
	ev := collect(t, ch, 1)[0]
	if ev.Type != store.Deleted || ev.Key != key("a", "ev") {
		t.Fatalf("expiry reported as %s %s, want DELETED", ev.Type, ev.Key)
	}
	_, err = b.Get(ctx, key("a", "ev"))
	expectErr(t, err, store.ErrNotFound)
	if _, err := b.Get(ctx, key("a", "forever")); err != nil {
		t.Fatalf("object without TTL went with the expired one: %v", err)
	}
}
