package apiserver_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPagination: limit and continue give consistent pages of one snapshot.
func TestPagination(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)
	var want []string
	for i := 0; i < 25; i++ {
		p := podOn("default", fmt.Sprintf("p-%02d", i), "")
		if i%5 == 0 {
			p.Labels["every"] = "fifth"
		}
		_, err := pods.Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
		want = append(want, "default/"+p.Name)
	}

	var got []string
	var listRV string
	opts := metav1.ListOptions{Limit: 10}
	for page := 1; ; page++ {
		list, err := pods.List(ctx, opts)
		check(t, err)
		if len(list.Items) > 10 {
			t.Fatalf("page %d has %d items, limit 10", page, len(list.Items))
		}
		if page == 1 {
			if list.RemainingItemCount == nil || *list.RemainingItemCount != 15 {
				t.Fatalf("first page remainingItemCount = %v, want 15", list.RemainingItemCount)
			}
			listRV = list.ResourceVersion
			// Changes after the first page do not show in the next ones.
			_, err := pods.Create(ctx, podOn("default", "p-00a", ""), metav1.CreateOptions{})
			check(t, err)
			check(t, pods.Delete(ctx, "p-24", metav1.DeleteOptions{}))
		} else if list.ResourceVersion != listRV {
			t.Fatalf("page %d at resourceVersion %s, first page at %s", page, list.ResourceVersion, listRV)
		}
		got = append(got, namesOf(list)...)
		if list.Continue == "" {
			if page != 3 {
				t.Fatalf("%d pages, want 3", page)
			}
			break
		}
		opts.Continue = list.Continue
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages gave %v, want %v", got, want)
	}

	// Limits combine with selectors.
	list, err := pods.List(ctx, metav1.ListOptions{Limit: 2, LabelSelector: "every=fifth"})
	check(t, err)
	if !slices.Equal(namesOf(list), []string{"default/p-00", "default/p-05"}) || list.Continue == "" {
		t.Fatalf("selected first page %v continue %q", namesOf(list), list.Continue)
	}
	list, err = pods.List(ctx, metav1.ListOptions{Limit: 2, LabelSelector: "every=fifth", Continue: list.Continue})
	check(t, err)
	if !slices.Equal(namesOf(list), []string{"default/p-10", "default/p-15"}) {
		t.Fatalf("selected second page %v", namesOf(list))
	}

	_, err = pods.List(ctx, metav1.ListOptions{Limit: 2, Continue: "garbage"})
	expectStatus(t, err, 400, metav1.StatusReasonBadRequest)
	_, err = pods.List(ctx, metav1.ListOptions{Limit: 2, Continue: list.Continue, ResourceVersion: "5"})
	expectStatus(t, err, 400, metav1.StatusReasonBadRequest)
}

// TestResourceVersionSemantics: what resourceVersion means on get and list.
func TestResourceVersionSemantics(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)

	first, err := pods.Create(ctx, podOn("default", "first", ""), metav1.CreateOptions{})
	check(t, err)
	second, err := pods.Create(ctx, podOn("default", "second", ""), metav1.CreateOptions{})
	check(t, err)
	rv := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("resourceVersion %q: %v", s, err)
		}
		return n
	}
	if rv(second.ResourceVersion) <= rv(first.ResourceVersion) {
		t.Fatalf("resourceVersions not increasing: %s then %s", first.ResourceVersion, second.ResourceVersion)
	}

	// "" is the latest state; every item's version is at most the list's.
	list, err := pods.List(ctx, metav1.ListOptions{})
	check(t, err)
	if !slices.Equal(namesOf(list), []string{"default/first", "default/second"}) {
		t.Fatalf("consistent list %v", namesOf(list))
	}
	for _, it := range list.Items {
		if rv(it.ResourceVersion) > rv(list.ResourceVersion) {
			t.Fatalf("item %s at %s newer than its list at %s", it.Name, it.ResourceVersion, list.ResourceVersion)
		}
	}
	before := list.ResourceVersion

	check(t, pods.Delete(ctx, "first", metav1.DeleteOptions{}))
	third, err := pods.Create(ctx, podOn("default", "third", ""), metav1.CreateOptions{})
	check(t, err)

	// NotOlderThan: at least as new as the version given.
	list, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: third.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	check(t, err)
	if !slices.Equal(namesOf(list), []string{"default/second", "default/third"}) || rv(list.ResourceVersion) < rv(third.ResourceVersion) {
		t.Fatalf("not-older-than list %v at %s", namesOf(list), list.ResourceVersion)
	}
	// A version without a match is the same as NotOlderThan.
	list, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: third.ResourceVersion})
	check(t, err)
	if !slices.Contains(namesOf(list), "default/third") {
		t.Fatalf("list at %s lacks the pod written at that version: %v", third.ResourceVersion, namesOf(list))
	}
	// Exact: the state at that version, deleted pod included.
	list, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: before, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	check(t, err)
	if !slices.Equal(namesOf(list), []string{"default/first", "default/second"}) || list.ResourceVersion != before {
		t.Fatalf("exact list at %s: %v at %s", before, namesOf(list), list.ResourceVersion)
	}
	// "0": any version, served from the cache; it catches up.
	eventually(t, "resourceVersion 0 list to show the third pod", func() (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil && slices.Contains(namesOf(list), "default/third"), err
	})
	eventually(t, "resourceVersion 0 get to find the third pod", func() (bool, error) {
		got, err := pods.Get(ctx, "third", metav1.GetOptions{ResourceVersion: "0"})
		return err == nil && got.UID == third.UID, err
	})
	got, err := pods.Get(ctx, "third", metav1.GetOptions{ResourceVersion: third.ResourceVersion})
	check(t, err)
	if got.ResourceVersion != third.ResourceVersion {
		t.Fatalf("get at %s returned %s", third.ResourceVersion, got.ResourceVersion)
	}

	// A version from the future: the server waits briefly, then says so.
	start := time.Now()
	future := strconv.FormatInt(rv(third.ResourceVersion)+1000, 10)
	_, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: future})
	se := expectStatus(t, err, 504, metav1.StatusReasonTimeout)
	if !hasCause(se.ErrStatus, "", "Too large resource version") {
		t.Fatalf("causes %+v, want Too large resource version", se.ErrStatus.Details)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("too-large resourceVersion answered after %v", time.Since(start))
	}

	_, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: "abc"})
	expectStatus(t, err, 400, metav1.StatusReasonBadRequest)
	_, err = pods.List(ctx, metav1.ListOptions{ResourceVersion: before, ResourceVersionMatch: "Sometime"})
	expectStatus(t, err, 400, metav1.StatusReasonBadRequest)

	// Writes: a stale resourceVersion conflicts, the current one succeeds.
	stale := second.DeepCopy()
	stale.Labels["v"] = "1"
	updated, err := pods.Update(ctx, stale, metav1.UpdateOptions{})
	check(t, err)
	stale.Labels["v"] = "2"
	_, err = pods.Update(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("update with resourceVersion %s after it changed to %s: %v, want Conflict", stale.ResourceVersion, updated.ResourceVersion, err)
	}
}
