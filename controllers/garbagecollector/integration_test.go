package garbagecollector_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
	"github.com/miniplane/miniplane/test/testenv"
)

// These tests run the collector in a real controller-manager against a real API server on
// an embedded etcd, with kinds the collector did not know before it read discovery, and
// chains no controller of miniplane builds (Deployment → ReplicaSet → Pod), made by hand.

// collectTimeout bounds each wait for the collector; it acts within milliseconds.
const collectTimeout = 20 * time.Second

// holdFinalizer keeps a deleted dependent terminating until the test lets it go, so that
// its owner's foreground deletion is seen waiting for it.
const holdFinalizer = "example.com/hold"

var (
	configMapsGVR  = corev1.SchemeGroupVersion.WithResource("configmaps")
	secretsGVR     = corev1.SchemeGroupVersion.WithResource("secrets")
	podsGVR        = corev1.SchemeGroupVersion.WithResource("pods")
	deploymentsGVR = appsv1.SchemeGroupVersion.WithResource("deployments")
	replicaSetsGVR = appsv1.SchemeGroupVersion.WithResource("replicasets")
)

// gcEnv starts a control plane whose controller-manager runs the garbage collector only.
func gcEnv(t *testing.T) (*testenv.Env, metadata.Interface) {
	t.Helper()
	cm := configs.DefaultControllerManager()
	cm.Controllers = []string{configs.ControllerGarbageCollector}
	env := testenv.New(t, testenv.Config{ControllerManager: &cm})
	md, err := metadata.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return env, md
}

func ownerRef(apiVersion, kind string, owner metav1.Object) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: &yes, BlockOwnerDeletion: &yes}
}

func mustCreate[T any](t *testing.T, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) T {
	t.Helper()
	out, err := create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newSecret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"k": "v"}}
}

func newConfigMap(name string, refs ...metav1.OwnerReference) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: refs}, Data: map[string]string{"k": "v"}}
}

func deleteWith(t *testing.T, md metadata.Interface, gvr schema.GroupVersionResource, ns, name string, policy metav1.DeletionPropagation) {
	t.Helper()
	if err := md.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
}

func gone(md metadata.Interface, gvr schema.GroupVersionResource, ns, name string) bool {
	_, err := md.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

func mustGet(t *testing.T, md metadata.Interface, gvr schema.GroupVersionResource, ns, name string) *metav1.PartialObjectMetadata {
	t.Helper()
	obj, err := md.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting %s %s: %v", gvr.Resource, name, err)
	}
	return obj
}

// release removes the hold finalizer from a terminating object.
func release(t *testing.T, md metadata.Interface, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	if _, err := md.Resource(gvr).Namespace(ns).Patch(context.Background(), name, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deletions records, from watches, the resourceVersion at which each object was removed: the
// etcd revision of its deletion, which orders removals across resources.
type deletions struct {
	mu   sync.Mutex
	at   map[string]int64
	stop func()
}

func watchDeletions(t *testing.T, md metadata.Interface, ns string, gvrs ...schema.GroupVersionResource) *deletions {
	t.Helper()
	d := &deletions{at: map[string]int64{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, gvr := range gvrs {
		w, err := md.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		wg.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					obj, isMeta := ev.Object.(*metav1.PartialObjectMetadata)
					if ev.Type != watch.Deleted || !isMeta {
						continue
					}
					rv, _ := strconv.ParseInt(obj.ResourceVersion, 10, 64)
					d.mu.Lock()
					d.at[gvr.Resource+"/"+obj.Name] = rv
					d.mu.Unlock()
				}
			}
		})
	}
	d.stop = func() {
		cancel()
		wg.Wait()
	}
	t.Cleanup(d.stop)
	return d
}

// before reports whether a was removed before b, both removals seen.
func (d *deletions) before(a, b string) (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ra, oka := d.at[a]
	rb, okb := d.at[b]
	return oka && okb && ra < rb, fmt.Sprintf("%v", d.at)
}

// A ConfigMap owned by a Secret — kinds the collector learns from discovery — follows its
// owner's deletion in each propagation mode.
func TestConfigMapOwnedBySecret(t *testing.T) {
	env, md := gcEnv(t)
	c := env.Client
	const ns = "default"
	secrets, configMaps := c.CoreV1().Secrets(ns), c.CoreV1().ConfigMaps(ns)

	t.Run("background", func(t *testing.T) {
		s := mustCreate(t, secrets.Create, newSecret("bg-owner"))
		mustCreate(t, configMaps.Create, newConfigMap("bg-dependent", ownerRef("v1", "Secret", s)))
		mustCreate(t, configMaps.Create, newConfigMap("bg-bystander"))
		deleteWith(t, md, secretsGVR, ns, s.Name, metav1.DeletePropagationBackground)
		poll.Until(t, collectTimeout, "the ConfigMap of the deleted Secret to be collected", func() bool {
			return gone(md, configMapsGVR, ns, "bg-dependent")
		})
		if gone(md, configMapsGVR, ns, "bg-bystander") {
			t.Fatal("a ConfigMap without owner was deleted")
		}
	})

	t.Run("orphan", func(t *testing.T) {
		s := mustCreate(t, secrets.Create, newSecret("orphan-owner"))
		other := mustCreate(t, secrets.Create, newSecret("orphan-other-owner"))
		mustCreate(t, configMaps.Create, newConfigMap("orphan-dependent", ownerRef("v1", "Secret", s)))
		second := ownerRef("v1", "Secret", other)
		second.Controller = nil // one controller per object
		mustCreate(t, configMaps.Create, newConfigMap("orphan-shared", ownerRef("v1", "Secret", s), second))
		deleteWith(t, md, secretsGVR, ns, s.Name, metav1.DeletePropagationOrphan)
		poll.Until(t, collectTimeout, "the orphaning Secret to be removed", func() bool { return gone(md, secretsGVR, ns, s.Name) })
		if refs := mustGet(t, md, configMapsGVR, ns, "orphan-dependent").OwnerReferences; len(refs) != 0 {
			t.Fatalf("orphan keeps references %v", refs)
		}
		refs := mustGet(t, md, configMapsGVR, ns, "orphan-shared").OwnerReferences
		if len(refs) != 1 || refs[0].UID != other.UID {
			t.Fatalf("shared orphan references = %v, want the other owner only", refs)
		}
	})

	t.Run("foreground", func(t *testing.T) {
		d := watchDeletions(t, md, ns, secretsGVR, configMapsGVR)
		s := mustCreate(t, secrets.Create, newSecret("fg-owner"))
		cm := newConfigMap("fg-dependent", ownerRef("v1", "Secret", s))
		cm.Finalizers = []string{holdFinalizer}
		mustCreate(t, configMaps.Create, cm)
		deleteWith(t, md, secretsGVR, ns, s.Name, metav1.DeletePropagationForeground)
		poll.Until(t, collectTimeout, "the dependent to be deleted first", func() bool {
			return mustGet(t, md, configMapsGVR, ns, "fg-dependent").DeletionTimestamp != nil
		})
		owner := mustGet(t, md, secretsGVR, ns, s.Name)
		if owner.DeletionTimestamp == nil || len(owner.Finalizers) != 1 || owner.Finalizers[0] != metav1.FinalizerDeleteDependents {
			t.Fatalf("owner while its dependent terminates: deletionTimestamp %v, finalizers %v", owner.DeletionTimestamp, owner.Finalizers)
		}
		release(t, md, configMapsGVR, ns, "fg-dependent")
		poll.Until(t, collectTimeout, "the owner to go after its dependent", func() bool {
			ok, _ := d.before("configmaps/fg-dependent", "secrets/fg-owner")
			return ok
		})
	})
}

func newDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}},
		},
	}
}

func newReplicaSet(d *appsv1.Deployment) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-1", Labels: d.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef("apps/v1", "Deployment", d)}},
		Spec: appsv1.ReplicaSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
}

func newPod(rs *appsv1.ReplicaSet, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: rs.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef("apps/v1", "ReplicaSet", rs)}},
		Spec: rs.Spec.Template.Spec,
	}
}

// chain creates Deployment name → ReplicaSet → two Pods, the way the Deployment and
// ReplicaSet controllers would have.
func chain(t *testing.T, c kubernetes.Interface, ns, name string, podFinalizers ...string) (*appsv1.Deployment, *appsv1.ReplicaSet, []string) {
	t.Helper()
	d := mustCreate(t, c.AppsV1().Deployments(ns).Create, newDeployment(name))
	rs := mustCreate(t, c.AppsV1().ReplicaSets(ns).Create, newReplicaSet(d))
	var pods []string
	for i := range 2 {
		p := newPod(rs, fmt.Sprintf("%s-pod-%d", name, i))
		p.Finalizers = podFinalizers
		pods = append(pods, mustCreate(t, c.CoreV1().Pods(ns).Create, p).Name)
	}
	return d, rs, pods
}

// collectorHasSeenPods returns once the collector's cache holds every pod created before
// the call. An owner deleted in the foreground waits only for the dependents the collector
// knows of (kube's collector too): a ReplicaSet whose pods it has not yet seen would be
// deleted in the background. So a pod whose owner never existed is created after them and
// waited for: the collector deletes it only once its pod informer, which delivers pods in
// the order they were written, has delivered it.
func collectorHasSeenPods(t *testing.T, c kubernetes.Interface, md metadata.Interface, ns, name string) {
	t.Helper()
	yes := true
	marker := mustCreate(t, c.CoreV1().Pods(ns).Create, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1",
			Kind: "ReplicaSet", Name: name + "-owner", UID: types.UID(name + "-never-existed"), BlockOwnerDeletion: &yes}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
	})
	poll.Until(t, collectTimeout, "the collector to delete pod "+marker.Name, func() bool { return gone(md, podsGVR, ns, marker.Name) })
}

// A Deployment owning a ReplicaSet owning Pods goes as a whole: top-down in the background,
// bottom-up in the foreground.
func TestDeploymentReplicaSetPodChain(t *testing.T) {
	env, md := gcEnv(t)
	c := env.Client
	const ns = "default"

	t.Run("background", func(t *testing.T) {
		d, rs, pods := chain(t, c, ns, "bg")
		deleteWith(t, md, deploymentsGVR, ns, d.Name, metav1.DeletePropagationBackground)
		poll.Until(t, collectTimeout, "the ReplicaSet and its pods to be collected", func() bool {
			return gone(md, replicaSetsGVR, ns, rs.Name) && gone(md, podsGVR, ns, pods[0]) && gone(md, podsGVR, ns, pods[1])
		})
	})

	t.Run("foreground", func(t *testing.T) {
		del := watchDeletions(t, md, ns, deploymentsGVR, replicaSetsGVR, podsGVR)
		d, rs, pods := chain(t, c, ns, "fg", holdFinalizer)
		collectorHasSeenPods(t, c, md, ns, "fg-marker")
		deleteWith(t, md, deploymentsGVR, ns, d.Name, metav1.DeletePropagationForeground)
		poll.Until(t, collectTimeout, "the pods to be deleted", func() bool {
			return mustGet(t, md, podsGVR, ns, pods[0]).DeletionTimestamp != nil &&
				mustGet(t, md, podsGVR, ns, pods[1]).DeletionTimestamp != nil
		})
		// The pods terminate: the ReplicaSet waits for them in the foreground, and the
		// Deployment for the ReplicaSet.
		rsMeta := mustGet(t, md, replicaSetsGVR, ns, rs.Name)
		dMeta := mustGet(t, md, deploymentsGVR, ns, d.Name)
		for _, m := range []*metav1.PartialObjectMetadata{rsMeta, dMeta} {
			if m.DeletionTimestamp == nil || len(m.Finalizers) != 1 || m.Finalizers[0] != metav1.FinalizerDeleteDependents {
				t.Fatalf("%s while its dependents terminate: deletionTimestamp %v, finalizers %v", m.Name, m.DeletionTimestamp, m.Finalizers)
			}
		}
		release(t, md, podsGVR, ns, pods[0])
		release(t, md, podsGVR, ns, pods[1])
		poll.UntilErr(t, collectTimeout, "the chain to go bottom-up", func() (bool, error) {
			okPods, at := del.before("pods/"+pods[1], "replicasets/"+rs.Name)
			okPods0, _ := del.before("pods/"+pods[0], "replicasets/"+rs.Name)
			okRS, _ := del.before("replicasets/"+rs.Name, "deployments/"+d.Name)
			return okPods && okPods0 && okRS, fmt.Errorf("removals at %s", at)
		})
	})
}

// Dependents whose owner never existed, or exists under another UID, are deleted, as
// kube-controller-manager deletes them; a cluster-scoped owner's namespaced dependents go
// with it.
func TestDanglingAndClusterScopedOwners(t *testing.T) {
	env, md := gcEnv(t)
	c := env.Client
	const ns = "default"
	configMaps := c.CoreV1().ConfigMaps(ns)

	never := metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: "never-existed",
		UID: "00000000-0000-0000-0000-00000000dead"}
	mustCreate(t, configMaps.Create, newConfigMap("dangling", never))
	replaced := mustCreate(t, c.CoreV1().Secrets(ns).Create, newSecret("replaced"))
	stale := ownerRef("v1", "Secret", replaced)
	stale.UID = "00000000-0000-0000-0000-0000000000ff"
	mustCreate(t, configMaps.Create, newConfigMap("stale-uid", stale))
	mustCreate(t, configMaps.Create, newConfigMap("current-uid", ownerRef("v1", "Secret", replaced)))
	poll.Until(t, collectTimeout, "dependents of missing owners to be collected", func() bool {
		return gone(md, configMapsGVR, ns, "dangling") && gone(md, configMapsGVR, ns, "stale-uid")
	})
	if gone(md, configMapsGVR, ns, "current-uid") {
		t.Fatal("the dependent of an existing owner was deleted")
	}

	role := mustCreate(t, c.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gc-owner"}})
	mustCreate(t, configMaps.Create, newConfigMap("of-cluster-role", ownerRef("rbac.authorization.k8s.io/v1", "ClusterRole", role)))
	deleteWith(t, md, rbacv1.SchemeGroupVersion.WithResource("clusterroles"), "", role.Name, metav1.DeletePropagationBackground)
	poll.Until(t, collectTimeout, "the ConfigMap of the deleted ClusterRole to be collected", func() bool {
		return gone(md, configMapsGVR, ns, "of-cluster-role")
	})
}
