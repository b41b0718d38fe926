package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/miniplane/miniplane/test/testenv"
)

// typedClient is the shape every client-go typed resource client shares.
type typedClient[T any, L any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
}

type object interface {
	metav1.Object
	runtime.Object
}

// crud runs create, get, list, update, stale update, delete and get-after-delete on one
// object through its typed client, checking the metadata the server maintains.
func crud[T object, L runtime.Object](t *testing.T, c typedClient[T, L], obj T, listName string, gone func() error) {
	ctx := testCtx(t)
	created, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.GetUID() == "" || created.GetCreationTimestamp().Time.IsZero() || created.GetResourceVersion() == "" {
		t.Fatalf("created object lacks server metadata: uid %q created %v rv %q",
			created.GetUID(), created.GetCreationTimestamp(), created.GetResourceVersion())
	}
	if _, err := c.Create(ctx, obj, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v, want AlreadyExists", err)
	}

	got, err := c.Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.GetUID() != created.GetUID() || got.GetResourceVersion() != created.GetResourceVersion() {
		t.Fatalf("get returned uid %s rv %s, created uid %s rv %s", got.GetUID(), got.GetResourceVersion(), created.GetUID(), created.GetResourceVersion())
	}

	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if !slices.Contains(namesOf(list), listName) {
		t.Fatalf("list %v does not contain %s", namesOf(list), listName)
	}
	lm, err := meta.ListAccessor(list)
	check(t, err)
	listRV, _ := strconv.ParseInt(lm.GetResourceVersion(), 10, 64)
	createdRV, _ := strconv.ParseInt(created.GetResourceVersion(), 10, 64)
	if listRV < createdRV {
		t.Fatalf("list resourceVersion %d older than the created object's %d", listRV, createdRV)
	}

	labels := got.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["updated"] = "yes"
	got.SetLabels(labels)
	updated, err := c.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	updatedRV, _ := strconv.ParseInt(updated.GetResourceVersion(), 10, 64)
	if updatedRV <= createdRV || updated.GetLabels()["updated"] != "yes" || updated.GetUID() != created.GetUID() {
		t.Fatalf("update returned rv %d (created %d), labels %v", updatedRV, createdRV, updated.GetLabels())
	}
	if !updated.GetCreationTimestamp().Time.Equal(created.GetCreationTimestamp().Time) {
		t.Fatal("update changed creationTimestamp")
	}
	// got still carries the old resourceVersion: writing it again is a conflict.
	if _, err := c.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("update with a stale resourceVersion: %v, want Conflict", err)
	}

	if err := c.Delete(ctx, created.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	eventually(t, "deletion of "+listName, func() (bool, error) {
		_, err := c.Get(ctx, created.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if err := gone(); !apierrors.IsNotFound(err) {
		t.Fatalf("delete of a deleted object: %v, want NotFound", err)
	}
}

func TestCRUDEveryResource(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	noOpts := metav1.DeleteOptions{}

	t.Run("namespaces", func(t *testing.T) {
		crud(t, c.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "crud"}}, "crud",
			func() error { return c.CoreV1().Namespaces().Delete(ctx, "crud", noOpts) })
	})
	t.Run("nodes", func(t *testing.T) {
		crud(t, c.CoreV1().Nodes(), node("n1"), "n1",
			func() error { return c.CoreV1().Nodes().Delete(ctx, "n1", noOpts) })
	})
	t.Run("pods", func(t *testing.T) {
		crud(t, c.CoreV1().Pods("default"), podOn("default", "p1", ""), "default/p1",
			func() error { return c.CoreV1().Pods("default").Delete(ctx, "p1", noOpts) })
	})
	t.Run("events", func(t *testing.T) {
		crud(t, c.CoreV1().Events("default"), event("default", "e1", podOn("default", "p1", "")), "default/e1",
			func() error { return c.CoreV1().Events("default").Delete(ctx, "e1", noOpts) })
	})
	t.Run("daemonsets", func(t *testing.T) {
		crud(t, c.AppsV1().DaemonSets("kube-system"), daemonSet("kube-system", "ds1"), "kube-system/ds1",
			func() error { return c.AppsV1().DaemonSets("kube-system").Delete(ctx, "ds1", noOpts) })
	})
	t.Run("controllerrevisions", func(t *testing.T) {
		crud(t, c.AppsV1().ControllerRevisions("default"), controllerRevision("default", "ds1-abc", 1), "default/ds1-abc",
			func() error { return c.AppsV1().ControllerRevisions("default").Delete(ctx, "ds1-abc", noOpts) })
	})
	t.Run("leases", func(t *testing.T) {
		crud(t, c.CoordinationV1().Leases("kube-node-lease"), lease("kube-node-lease", "n1", "n1"), "kube-node-lease/n1",
			func() error { return c.CoordinationV1().Leases("kube-node-lease").Delete(ctx, "n1", noOpts) })
	})
}

// TestCreateRules covers metadata the server owns on create: generateName, generation,
// and the bootstrap namespaces.
func TestCreateRules(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)

	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	check(t, err)
	for _, want := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if !slices.Contains(namesOf(nss), want) {
			t.Errorf("bootstrap namespace %s missing from %v", want, namesOf(nss))
		}
	}

	p := podOn("default", "", "")
	p.GenerateName = "web-"
	p.UID = "client-chosen"
	p.Generation = 7
	created, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	check(t, err)
	if len(created.Name) != len("web-")+5 || created.Name[:4] != "web-" {
		t.Fatalf("generateName web- gave name %q", created.Name)
	}
	if created.UID == "client-chosen" || created.UID == "" {
		t.Fatalf("uid %q: the server must assign it", created.UID)
	}
	if created.Status.Phase != corev1.PodPending {
		t.Fatalf("new pod phase %q, want Pending", created.Status.Phase)
	}

	ds, err := c.AppsV1().DaemonSets("default").Create(ctx, daemonSet("default", "gen"), metav1.CreateOptions{})
	check(t, err)
	if ds.Generation != 1 {
		t.Fatalf("new DaemonSet generation %d, want 1", ds.Generation)
	}
	l, err := c.CoordinationV1().Leases("default").Create(ctx, lease("default", "l", "me"), metav1.CreateOptions{})
	check(t, err)
	if l.Generation != 0 {
		t.Fatalf("lease generation %d, want 0 (leases do not track generation)", l.Generation)
	}

	// ownerReferences are stored as given.
	owned := podOn("default", "owned", "")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "gen", UID: ds.UID,
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}
	got, err := c.CoreV1().Pods("default").Create(ctx, owned, metav1.CreateOptions{})
	check(t, err)
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != ds.UID || !*got.OwnerReferences[0].Controller {
		t.Fatalf("ownerReferences not stored as given: %+v", got.OwnerReferences)
	}

	// PUT creates a missing lease or event, and refuses to create a missing DaemonSet.
	putLease := l.DeepCopy()
	putLease.Name, putLease.ResourceVersion, putLease.UID = "put-created", "", ""
	if _, err := c.CoordinationV1().Leases("default").Update(ctx, putLease, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("PUT of a missing lease: %v, want it created", err)
	}
	putDS := daemonSet("default", "missing")
	if _, err := c.AppsV1().DaemonSets("default").Update(ctx, putDS, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("PUT of a missing DaemonSet: %v, want NotFound", err)
	}

	// dryRun validates and answers without storing.
	dry := podOn("default", "dry", "")
	if _, err := c.CoreV1().Pods("default").Create(ctx, dry, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("default").Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dry-run create stored the pod: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestUpdateRules covers resourceVersion preconditions and unconditional updates, uid
// preconditions and immutable metadata.
func TestUpdateRules(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)
	created, err := pods.Create(ctx, podOn("default", "p", ""), metav1.CreateOptions{})
	check(t, err)

	// An update without resourceVersion is unconditional.
	uncond := created.DeepCopy()
	uncond.ResourceVersion = ""
	uncond.Labels["x"] = "1"
	u1, err := pods.Update(ctx, uncond, metav1.UpdateOptions{})
	check(t, err)
	if u1.Labels["x"] != "1" {
		t.Fatal("unconditional update lost")
	}

	// A no-op update writes nothing: same resourceVersion.
	u2, err := pods.Update(ctx, u1, metav1.UpdateOptions{})
	check(t, err)
	if u2.ResourceVersion != u1.ResourceVersion {
		t.Fatalf("no-op update changed resourceVersion %s → %s", u1.ResourceVersion, u2.ResourceVersion)
	}

	wrongUID := u2.DeepCopy()
	wrongUID.UID = types.UID("not-the-uid")
	if _, err := pods.Update(ctx, wrongUID, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("update with a wrong uid: %v, want Conflict", err)
	}

	// Pod spec is immutable except for images and a few fields.
	img := u2.DeepCopy()
	img.Spec.Containers[0].Image = "registry.example/app:2.0"
	u3, err := pods.Update(ctx, img, metav1.UpdateOptions{})
	check(t, err)
	if u3.Spec.Containers[0].Image != "registry.example/app:2.0" {
		t.Fatal("image update lost")
	}
	bad := u3.DeepCopy()
	bad.Spec.Containers[0].Name = "renamed"
	_, err = pods.Update(ctx, bad, metav1.UpdateOptions{})
	expectStatus(t, err, 422, metav1.StatusReasonInvalid)

	// Changing the namespace or name in the body does not move the object.
	moved := u3.DeepCopy()
	moved.Namespace = "kube-system"
	if _, err := pods.Update(ctx, moved, metav1.UpdateOptions{}); err == nil {
		t.Fatal("update with another namespace in the body succeeded")
	}

	// Delete preconditions.
	stale := created.ResourceVersion
	err = pods.Delete(ctx, "p", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &stale}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("delete with a stale resourceVersion precondition: %v, want Conflict", err)
	}
	otherUID := types.UID("nope")
	err = pods.Delete(ctx, "p", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &otherUID}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("delete with a wrong uid precondition: %v, want Conflict", err)
	}
	if err := pods.Delete(ctx, "p", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &created.UID, ResourceVersion: &u3.ResourceVersion}}); err != nil {
		t.Fatalf("delete with matching preconditions: %v", err)
	}
}

// TestGeneration: generation grows with spec changes only, for the resources that track it.
func TestGeneration(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	dss := env.Client.AppsV1().DaemonSets("default")
	ds, err := dss.Create(ctx, daemonSet("default", "g"), metav1.CreateOptions{})
	check(t, err)
	ds.Labels = map[string]string{"meta": "only"}
	ds, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
	check(t, err)
	if ds.Generation != 1 {
		t.Fatalf("metadata-only change bumped generation to %d", ds.Generation)
	}
	ds.Spec.MinReadySeconds = 5
	ds, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
	check(t, err)
	if ds.Generation != 2 {
		t.Fatalf("spec change: generation %d, want 2", ds.Generation)
	}
	ds.Generation = 40 // clients cannot set it
	ds.Spec.MinReadySeconds = 6
	ds, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
	check(t, err)
	if ds.Generation != 3 {
		t.Fatalf("generation %d after a client tried to set 40, want 3", ds.Generation)
	}
}

// TestDiscovery: the group versions and short names kubectl relies on.
func TestDiscovery(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	groups, resources, err := env.Client.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	var groupNames []string
	for _, g := range groups {
		groupNames = append(groupNames, g.Name)
	}
	for _, want := range []string{"", "apps", "coordination.k8s.io"} {
		if !slices.Contains(groupNames, want) {
			t.Errorf("group %q missing from %v", want, groupNames)
		}
	}
	short := map[string]string{}
	subresources := map[string]bool{}
	hashes := map[string]string{}
	for _, rl := range resources {
		for _, r := range rl.APIResources {
			for _, s := range r.ShortNames {
				short[s] = r.Name
			}
			subresources[rl.GroupVersion+"/"+r.Name] = true
		}
	}
	// The values a v1.37.2 kube-apiserver publishes: events share one storage, so both
	// groups name the core Event's. Only the per-group-version documents carry them
	// (aggregated discovery has no such field).
	for _, gv := range []string{"v1", "events.k8s.io/v1", "apps/v1", "coordination.k8s.io/v1"} {
		rl, err := env.Client.Discovery().ServerResourcesForGroupVersion(gv)
		check(t, err)
		for _, r := range rl.APIResources {
			hashes[gv+"/"+r.Name] = r.StorageVersionHash
		}
	}
	for gvr, want := range map[string]string{
		"v1/events": "r2yiGXH7wu8=", "events.k8s.io/v1/events": "r2yiGXH7wu8=", "v1/pods": "xPOwRZ+Yhw8=",
		"apps/v1/daemonsets": "dd7pWHUlMKQ=", "coordination.k8s.io/v1/leases": "gqkMMb/YqFM=",
	} {
		if hashes[gvr] != want {
			t.Errorf("storageVersionHash of %s = %q, want %q", gvr, hashes[gvr], want)
		}
	}
	for s, want := range map[string]string{"ds": "daemonsets", "po": "pods", "no": "nodes", "ns": "namespaces", "ev": "events"} {
		if short[s] != want {
			t.Errorf("short name %s → %q, want %s", s, short[s], want)
		}
	}
	for _, want := range []string{"v1/pods/status", "v1/pods/binding", "v1/nodes/status", "apps/v1/daemonsets/status",
		"apps/v1/controllerrevisions", "coordination.k8s.io/v1/leases", "v1/events"} {
		if !subresources[want] {
			t.Errorf("discovery lacks %s", want)
		}
	}
	v, err := env.Client.Discovery().ServerVersion()
	if err != nil || v.Major == "" {
		t.Fatalf("version: %+v %v", v, err)
	}
}

// TestConcurrentWrites: many clients patching one object at once lose nothing, and
// unconditional updates racing each other all land on the latest state.
func TestConcurrentWrites(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	pods := env.Client.CoreV1().Pods("default")
	ctx := testCtx(t)
	_, err := pods.Create(ctx, podOn("default", "hot", ""), metav1.CreateOptions{})
	check(t, err)
	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			patch := fmt.Sprintf(`{"metadata":{"labels":{"w%d":"x"}}}`, i)
			if _, err := pods.Patch(ctx, "hot", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent patch: %v", err)
	}
	got, err := pods.Get(ctx, "hot", metav1.GetOptions{})
	check(t, err)
	for i := 0; i < writers; i++ {
		if got.Labels[fmt.Sprintf("w%d", i)] != "x" {
			t.Fatalf("patch %d lost: labels %v", i, got.Labels)
		}
	}
}

// TestMetrics: the Prometheus endpoint counts requests and watches; viewers may read it.
func TestMetrics(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	_, err := env.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	check(t, err)
	raw := newRawClient(t, env)
	for _, user := range []string{testenv.AdminUser, testenv.ViewerUser} {
		resp := raw.do(t, request{method: "GET", path: "/metrics", token: env.Token(user)})
		if resp.code != 200 {
			t.Fatalf("/metrics as %s: HTTP %d", user, resp.code)
		}
		for _, want := range []string{
			`apiserver_request_total{code="200",group="",resource="pods",subresource="",verb="LIST"} 1` + "\n",
			`apiserver_request_duration_seconds_bucket{group="",resource="pods",subresource="",verb="LIST",le="+Inf"} 1` + "\n",
			"apiserver_registered_watchers ",
			`apiserver_watch_cache_resource_version{`,
		} {
			if !strings.Contains(string(resp.body), want) {
				t.Fatalf("/metrics lacks %q", want)
			}
		}
	}
	if resp := raw.do(t, request{method: "GET", path: "/metrics"}); resp.code != 401 {
		t.Fatalf("/metrics without a token: HTTP %d", resp.code)
	}
}

// TestNodeCount follows the Nodes created and deleted, as the memory budget of `up` reads it.
func TestNodeCount(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	nodes := e.Client.CoreV1().Nodes()
	count := func(want int) {
		t.Helper()
		eventually(t, fmt.Sprintf("NodeCount() == %d", want), func() (bool, error) {
			got := e.APIServer.NodeCount()
			return got == want, fmt.Errorf("NodeCount() = %d", got)
		})
	}
	count(0)
	for _, name := range []string{"a", "b", "c"} {
		_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		check(t, err)
	}
	count(3)
	check(t, nodes.Delete(ctx, "b", metav1.DeleteOptions{}))
	count(2)
}
