package garbagecollector

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/internal/worker"
	"github.com/miniplane/miniplane/internal/poll"
)

func TestBackgroundDeletesDependentsOfDeletedOwner(t *testing.T) {
	ds, other := object(dsKind, "ds"), object(dsKind, "other")
	secret := object(secretKind, "credentials")
	api := newFakeAPI(ds, other, object(podKind, "a", ds), object(podKind, "b", ds), object(revisionKind, "ds-1", ds),
		object(podKind, "shared", ds, other), object(podKind, "unrelated", other),
		secret, object(configMapKind, "settings", secret))
	startGC(t, api, nil)

	api.deleteWith(t, dsKind, "ds", metav1.DeletePropagationBackground)
	poll.Until(t, waitTimeout, "dependents to be deleted", func() bool {
		return !api.exists(podKind, "a") && !api.exists(podKind, "b") && !api.exists(revisionKind, "ds-1")
	})
	poll.Until(t, waitTimeout, "the shared pod to lose its reference to the deleted owner", func() bool {
		refs := api.get(t, podKind, "shared").OwnerReferences
		return len(refs) == 1 && refs[0].UID == other.UID
	})
	if !api.exists(podKind, "unrelated") {
		t.Fatal("pod of a living owner was deleted")
	}
	if api.log.index("delete pods a Background") < 0 {
		t.Fatalf("pods not deleted in the background: %v", api.log.snapshot())
	}

	// Kinds the collector once did not know are collected the same way.
	if !api.exists(configMapKind, "settings") {
		t.Fatal("the ConfigMap of a living Secret was deleted")
	}
	api.deleteWith(t, secretKind, "credentials", metav1.DeletePropagationBackground)
	poll.Until(t, waitTimeout, "the ConfigMap owned by the Secret to be deleted", func() bool {
		return !api.exists(configMapKind, "settings")
	})
}

func TestDependentOfOwnerGoneBeforeStartIsDeleted(t *testing.T) {
	gone := object(dsKind, "gone")
	api := newFakeAPI(object(podKind, "orphan-to-be", gone), object(configMapKind, "cm", object(secretKind, "never")))
	startGC(t, api, nil)
	poll.Until(t, waitTimeout, "the dangling dependents to be deleted", func() bool {
		return !api.exists(podKind, "orphan-to-be") && !api.exists(configMapKind, "cm")
	})
}

func TestOwnerReplacedUnderTheSameNameIsDangling(t *testing.T) {
	old := object(dsKind, "ds")
	replacement := object(dsKind, "ds")
	replacement.UID = "uid-ds-2"
	api := newFakeAPI(replacement, object(podKind, "a", old), object(podKind, "b", replacement))
	startGC(t, api, nil)
	poll.Until(t, waitTimeout, "the pod of the old owner to be deleted", func() bool { return !api.exists(podKind, "a") })
	if !api.exists(podKind, "b") {
		t.Fatal("pod of the replacement owner was deleted")
	}
}

// An owner the informer has not delivered yet must not be taken for absent: the collector
// confirms with a live GET.
func TestOwnerMissingFromCacheIsCheckedLive(t *testing.T) {
	ds := object(dsKind, "ds")
	api := newFakeAPI(ds, object(podKind, "a", ds))
	// The daemonset informer lags: its list and watch show nothing.
	api.client.PrependReactor("list", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &metav1.List{}, nil
	})
	api.client.PrependWatchReactor("daemonsets", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	gc, _ := startGC(t, api, nil)
	poll.Until(t, waitTimeout, "the pod to be checked", func() bool {
		return gc.attemptToDelete.Len() == 0 && gotLiveGet(api, dsKind, "ds")
	})
	if !api.exists(podKind, "a") {
		t.Fatal("pod deleted although its owner exists")
	}
}

func gotLiveGet(api *fakeAPI, k kindInfo, name string) bool {
	for _, a := range api.client.Actions() {
		if g, ok := a.(k8stesting.GetAction); ok && a.GetVerb() == "get" && a.GetResource() == k.gvr && g.GetName() == name {
			return true
		}
	}
	return false
}

func TestForegroundDeletesBlockingDependentsBeforeOwner(t *testing.T) {
	ds := object(dsKind, "ds")
	api := newFakeAPI(ds, object(podKind, "a", ds), object(podKind, "b", ds), object(revisionKind, "ds-1", ds))
	api.slow["a"] = true // a kubelet takes its time to finish this pod
	startGC(t, api, nil)

	api.deleteWith(t, dsKind, "ds", metav1.DeletePropagationForeground)
	poll.Until(t, waitTimeout, "dependents to be deleted", func() bool {
		return api.log.index("delete pods a Background") >= 0 && !api.exists(podKind, "b") && !api.exists(revisionKind, "ds-1")
	})
	// Pod a is still terminating and blocks its owner.
	if !api.exists(dsKind, "ds") {
		t.Fatalf("owner removed while a blocking dependent still exists: %v", api.log.snapshot())
	}
	if fs := api.get(t, dsKind, "ds").Finalizers; len(fs) != 1 || fs[0] != metav1.FinalizerDeleteDependents {
		t.Fatalf("owner finalizers = %v", fs)
	}
	api.finish(t, podKind, "a")
	poll.Until(t, waitTimeout, "the owner to be removed", func() bool { return !api.exists(dsKind, "ds") })
	if api.log.index("removed pods a") > api.log.index("removed daemonsets ds") {
		t.Fatalf("owner removed before its dependent: %v", api.log.snapshot())
	}
}

func TestForegroundDoesNotWaitForNonBlockingDependents(t *testing.T) {
	ds := object(dsKind, "ds")
	p := object(podKind, "a", ds)
	f := false
	p.OwnerReferences[0].BlockOwnerDeletion = &f
	api := newFakeAPI(ds, p)
	api.slow["a"] = true
	startGC(t, api, nil)
	api.deleteWith(t, dsKind, "ds", metav1.DeletePropagationForeground)
	poll.Until(t, waitTimeout, "the owner to be removed", func() bool { return !api.exists(dsKind, "ds") })
	// The owner did not wait: its dependent is still terminating (it is slow) or not yet
	// deleted at all; either way the collector deletes it, before or after the owner.
	if api.log.index("removed pods a") >= 0 {
		t.Fatalf("owner removed only after its non-blocking dependent: %v", api.log.snapshot())
	}
	poll.Until(t, waitTimeout, "the non-blocking dependent to be deleted", func() bool {
		return api.log.index("delete pods a Background") >= 0
	})
}

// A dependent that has dependents of its own, of an owner deleted in the foreground, is
// deleted in the foreground too: the whole chain goes bottom-up.
func TestForegroundChainGoesBottomUp(t *testing.T) {
	ds := object(dsKind, "ds")
	middle := object(secretKind, "middle", ds)
	api := newFakeAPI(ds, middle, object(configMapKind, "leaf", middle))
	api.slow["leaf"] = true
	startGC(t, api, nil)
	api.deleteWith(t, dsKind, "ds", metav1.DeletePropagationForeground)
	poll.Until(t, waitTimeout, "the middle object to be deleted in the foreground", func() bool {
		return api.log.index("delete secrets middle Foreground") >= 0 && api.log.index("delete configmaps leaf Background") >= 0
	})
	if !api.exists(secretKind, "middle") || !api.exists(dsKind, "ds") {
		t.Fatalf("an owner went before its terminating dependent: %v", api.log.snapshot())
	}
	api.finish(t, configMapKind, "leaf")
	poll.Until(t, waitTimeout, "the chain to be removed", func() bool {
		return !api.exists(secretKind, "middle") && !api.exists(dsKind, "ds")
	})
	if api.log.index("removed secrets middle") > api.log.index("removed daemonsets ds") {
		t.Fatalf("the top owner went before the middle one: %v", api.log.snapshot())
	}
}

// Objects that own each other would wait for each other for ever in the foreground: the
// collector breaks the cycle by unblocking, as kube's does, and both go.
func TestForegroundCycleIsBroken(t *testing.T) {
	a, b := object(secretKind, "a"), object(configMapKind, "b")
	a.OwnerReferences, b.OwnerReferences = ownedBy(b), ownedBy(a)
	api := newFakeAPI(a, b)
	startGC(t, api, nil)
	api.deleteWith(t, secretKind, "a", metav1.DeletePropagationForeground)
	poll.Until(t, waitTimeout, "both objects of the cycle to be removed", func() bool {
		return !api.exists(secretKind, "a") && !api.exists(configMapKind, "b")
	})
}

func TestOrphanRemovesOwnerReferencesThenFinalizer(t *testing.T) {
	ds, other := object(dsKind, "ds"), object(dsKind, "other")
	api := newFakeAPI(ds, other, object(podKind, "a", ds), object(podKind, "b", ds, other), object(revisionKind, "ds-1", ds))
	gc, _ := startGC(t, api, nil)

	api.deleteWith(t, dsKind, "ds", metav1.DeletePropagationOrphan)
	poll.Until(t, waitTimeout, "the owner to be removed", func() bool { return !api.exists(dsKind, "ds") })
	for _, name := range []string{"a", "b"} {
		for _, ref := range api.get(t, podKind, name).OwnerReferences {
			if ref.UID == ds.UID {
				t.Fatalf("pod %s still references the orphaning owner", name)
			}
		}
	}
	if refs := api.get(t, podKind, "b").OwnerReferences; len(refs) != 1 || refs[0].UID != other.UID {
		t.Fatalf("pod b references = %v, want only the other owner", refs)
	}
	if refs := api.get(t, revisionKind, "ds-1").OwnerReferences; len(refs) != 0 {
		t.Fatalf("revision references = %v", refs)
	}
	if api.log.index("patch pods a") > api.log.index("removed daemonsets ds") {
		t.Fatalf("finalizer removed before dependents were orphaned: %v", api.log.snapshot())
	}
	// Orphans stay: checked now that their owner is gone — whether or not the informers have
	// caught up with the orphaning — they must not be taken for its dependents.
	for _, d := range []struct {
		kind kindInfo
		name string
	}{{podKind, "a"}, {revisionKind, "ds-1"}} {
		item := objectRef{resource: d.kind.gvr, namespace: "default", name: d.name, uid: types.UID("uid-" + d.name)}
		poll.Until(t, waitTimeout, "the orphan to be cached", func() bool { return gc.cached(item) != nil })
		if err := gc.attemptToDeleteItem(context.Background(), item); err != nil {
			t.Fatalf("checking orphaned %s %s: %v", d.kind.gvr.Resource, d.name, err)
		}
	}
	if !api.exists(podKind, "a") || !api.exists(revisionKind, "ds-1") {
		t.Fatalf("orphaned dependents were deleted: %v", api.log.snapshot())
	}
}

// A cluster-scoped object cannot have a namespaced owner: such a reference is left alone,
// never taken for a missing owner.
func TestClusterScopedObjectWithNamespacedOwnerIsKept(t *testing.T) {
	api := newFakeAPI(object(nodeKind, "n1", object(dsKind, "ds")))
	gc, _ := startGC(t, api, nil)
	item := objectRef{resource: nodeKind.gvr, name: "n1", uid: "uid-n1"}
	if err := gc.attemptToDeleteItem(context.Background(), item); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the queue to drain", func() bool { return gc.attemptToDelete.Len() == 0 })
	if !api.exists(nodeKind, "n1") {
		t.Fatalf("node with an invalid owner reference was deleted: %v", api.log.snapshot())
	}
}

func TestNewValidates(t *testing.T) {
	api := newFakeAPI()
	valid := configs.DefaultGarbageCollectorController()
	tests := []struct {
		name    string
		cfg     configs.GarbageCollectorController
		opts    Options
		wantErr string
	}{
		{name: "defaults", cfg: valid, opts: Options{Metadata: api.client, Discovery: api.disc}},
		{name: "zero config", opts: Options{Metadata: api.client, Discovery: api.disc}, wantErr: "workers"},
		{name: "no metadata client", cfg: valid, opts: Options{Discovery: api.disc}, wantErr: "Metadata"},
		{name: "no discovery", cfg: valid, opts: Options{Metadata: api.client}, wantErr: "Discovery"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, tt.opts)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New = %v, want an error about %s", err, tt.wantErr)
			}
		})
	}
}

// A failed item is retried and logged at a level the default (Info) handler shows, with its
// retry count: a stuck collector must be visible.
func TestFailedItemIsLoggedAboveDebug(t *testing.T) {
	var logs bytes.Buffer
	api := newFakeAPI()
	gc, err := New(configs.DefaultGarbageCollectorController(), Options{Metadata: api.client, Discovery: api.disc,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Clock:  testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.attemptToDelete.ShutDown()
	item := objectRef{resource: podKind.gvr, namespace: "default", name: "a", uid: "uid-a"}
	gc.attemptToDelete.Add(item)
	worker.ProcessNext(context.Background(), gc.attemptToDelete, func(context.Context, objectRef) error {
		return errors.New("api unavailable")
	}, gc.collectFailed)
	if n := gc.attemptToDelete.NumRequeues(item); n != 1 {
		t.Errorf("requeues = %d, want 1", n)
	}
	for _, want := range []string{"level=WARN", `msg="garbage collection failed; retrying"`, "resource=pods", "object=default/a", "retries=1", `err="api unavailable"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q lacks %s", logs.String(), want)
		}
	}
}
