package podgc_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/podgc"
	"github.com/miniplane/miniplane/internal/poll"
	"github.com/miniplane/miniplane/test/testenv"
)

// collectorClient acts as the collector's ServiceAccount, so that its bootstrap role is
// checked too.
func collectorClient(t *testing.T, env *testenv.Env) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	sas := env.Client.CoreV1().ServiceAccounts(metav1.NamespaceSystem)
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: podgc.UserAgent}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := sas.CreateToken(ctx, podgc.UserAgent, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.AdminConfig)
	cfg.BearerToken = tr.Status.Token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestCollectsThePodsOfADeletedNode runs the collector against a real API server: a pod
// bound to a Node that is deleted is marked Failed with DisruptionTarget, then deleted with
// no grace period, once the quarantine has passed; a pod on a Node that stays is untouched.
func TestCollectsThePodsOfADeletedNode(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := env.Client
	for _, name := range []string{"stays", "goes"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "on-" + name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// As in the controller-manager, the caches are the shared informers' (which list and
	// watch with credentials of their own) and the writes are the collector's.
	client := collectorClient(t, env)
	factory := informers.NewSharedInformerFactory(admin, 0)
	defer func() { cancel(); factory.Shutdown() }()
	clk := clocktesting.NewFakeClock(time.Now())
	gc, err := podgc.New(configs.PodGCController{}, podgc.Options{Client: client, Informers: factory, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}

	w, err := admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=on-goes"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := admin.CoreV1().Nodes().Delete(ctx, "goes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := factory.Core().V1().Nodes().Lister()
	poll.Until(t, 10*time.Second, "the collector's cache to lose the deleted node", func() bool {
		_, err := nodes.Get("goes")
		return apierrors.IsNotFound(err)
	})

	if n := gc.Collect(ctx); n != 0 {
		t.Fatalf("collected %d pods before the quarantine", n)
	}
	clk.Step(podgc.Quarantine)
	if n := gc.Collect(ctx); n != 1 {
		t.Fatalf("collected %d pods after the quarantine, want 1", n)
	}

	var failed bool
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			pod, _ := ev.Object.(*corev1.Pod)
			switch {
			case pod == nil:
				t.Fatalf("watch event %v", ev)
			case ev.Type == watch.Modified && pod.Status.Phase == corev1.PodFailed:
				for _, c := range pod.Status.Conditions {
					if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue &&
						c.Reason == "DeletionByPodGC" && c.Message == "PodGC: node no longer exists" {
						failed = true
					}
				}
			case ev.Type == watch.Deleted:
				if pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds != 0 {
					t.Errorf("deleted with a grace period of %ds, want 0", *pod.DeletionGracePeriodSeconds)
				}
				done = true
			}
		case <-timeout:
			t.Fatal("the pod of the deleted node was not deleted")
		}
	}
	if !failed {
		t.Error("the pod was not marked Failed with DisruptionTarget DeletionByPodGC before it went")
	}
	if _, err := admin.CoreV1().Pods("default").Get(ctx, "on-stays", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod of the node that stays: %v", err)
	}
}
