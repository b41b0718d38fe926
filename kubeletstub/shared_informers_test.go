package kubeletstub

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/internal/poll"
)

// TestFleetReadsSharedInformers: given Options.Informers, the fleet opens no watch of its
// own, runs the pods bound to its nodes from the shared caches (which also hold pods that
// are not its own, and unbound ones), and leaves the factory running when it stops.
func TestFleetReadsSharedInformers(t *testing.T) {
	client := fake.NewClientset()
	shared := informers.NewSharedInformerFactory(client, 0)
	sharedCtx, stopShared := context.WithCancel(context.Background())
	defer func() { stopShared(); shared.Shutdown() }()
	// As in `up`, another component has asked for the informers and started them first.
	podLister := shared.Core().V1().Pods().Lister()
	shared.Core().V1().Nodes().Informer()
	shared.Start(sharedCtx.Done())

	f, err := New(testConfig(1), Options{Client: client, Clock: testingclock.NewFakeClock(t0), Logger: quietLogger(), Informers: shared})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	tf := &testFleet{Fleet: f, client: client}
	tf.waitReady(t)

	tf.createPod(t, newPod(podSpec{name: "ours", node: "n-0"}))
	tf.createPod(t, newPod(podSpec{name: "elsewhere", node: "not-ours"}))
	tf.createPod(t, newPod(podSpec{name: "unbound"}))
	tf.waitPhase(t, "ours", corev1.PodRunning)
	for _, name := range []string{"elsewhere", "unbound"} {
		if p := tf.pod(t, name); p.Status.Phase != corev1.PodPending {
			t.Errorf("pod %s, not on the fleet's nodes, was touched: %+v", name, p.Status)
		}
	}
	watches := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetVerb() == "watch" {
			watches[a.GetResource().Resource]++
		}
	}
	if watches["pods"] != 1 || watches["nodes"] != 1 {
		t.Errorf("watches %v; want the shared factory's one of pods and one of nodes", watches)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel")
	}
	tf.createPod(t, newPod(podSpec{name: "after"}))
	poll.Until(t, waitTimeout, "the shared pod informer still sees new pods after the fleet stopped", func() bool {
		pods, err := podLister.List(labels.Everything())
		return err == nil && len(pods) == 4
	})
}
