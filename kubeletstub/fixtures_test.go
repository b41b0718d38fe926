package kubeletstub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
)

// t0 is the fake clock's start; whole seconds, like API timestamps.
var t0 = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

// testFleet is a running fleet against a fake clientset and a fake clock.
type testFleet struct {
	*Fleet
	client *fake.Clientset
	clock  *testingclock.FakeClock
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testConfig is a small fleet with a short report interval and no events, so tests only
// see the writes they are about.
func testConfig(nodes int) configs.KubeletStub {
	cfg := configs.DefaultKubeletStub()
	cfg.Nodes = nodes
	cfg.NodePrefix = "n"
	// The fake API has no node IPAM: the nodes bring their own blocks.
	cfg.PodCIDR = "10.128.0.0/9"
	cfg.ReportInterval = time.Minute
	cfg.RecordEvents = false
	cfg.HeartbeatWorkers = 2
	cfg.PodWorkers = 2
	return cfg
}

// newTestFleet builds a fleet over a fake clientset holding objects and runs it until the
// test ends.
func newTestFleet(t *testing.T, cfg configs.KubeletStub, objects ...runtime.Object) *testFleet {
	t.Helper()
	return newTestFleetAt(t, cfg, t0, objects...)
}

// newTestFleetAt is newTestFleet with its fake clock at now: a stub restarted later.
func newTestFleetAt(t *testing.T, cfg configs.KubeletStub, now time.Time, objects ...runtime.Object) *testFleet {
	t.Helper()
	client := fake.NewClientset(objects...)
	// The fake API does not set UIDs; a real one does, and the stub relies on them (lease
	// owner references, delete preconditions).
	client.PrependReactor("create", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if obj, ok := action.(clienttesting.CreateAction).GetObject().(metav1.Object); ok && obj.GetUID() == "" {
			obj.SetUID(types.UID(fmt.Sprintf("uid-%s-%s", action.GetResource().Resource, obj.GetName())))
		}
		return false, nil, nil
	})
	clk := testingclock.NewFakeClock(now)
	f, err := New(cfg, Options{Client: client, Clock: clk, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return &testFleet{Fleet: f, client: client, clock: clk}
}

// waitTimeout bounds every wait (poll.Until): the stub's loops run on real goroutines even
// when time is fake.
const waitTimeout = 10 * time.Second

func (tf *testFleet) waitReady(t *testing.T) {
	t.Helper()
	poll.Until(t, waitTimeout, "the fleet is ready", tf.Ready)
}

func (tf *testFleet) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := tf.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

func (tf *testFleet) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := tf.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func (tf *testFleet) createPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, err := tf.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
}

// deletePod marks the pod deleted, as the API server's graceful delete does (the fake
// client has none), and waits until the stub, having stopped it, has removed it.
func (tf *testFleet) deletePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p.DeletionTimestamp = ptr(metav1.NewTime(tf.clock.Now()))
	if _, err := tf.client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, p.Name+" is deleted", func() bool {
		_, err := tf.client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// annotate sets (value != nil) or removes an annotation of a node.
func (tf *testFleet) annotate(t *testing.T, node, key string, value *string) {
	t.Helper()
	n := tf.node(t, node)
	if value == nil {
		delete(n.Annotations, key)
	} else {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[key] = *value
	}
	if _, err := tf.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("annotate node %s: %v", node, err)
	}
}

// podPhase waits for the pod to reach phase and returns it.
func (tf *testFleet) waitPhase(t *testing.T, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	poll.Until(t, waitTimeout, "pod "+name+" is "+string(phase), func() bool {
		got, err := tf.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		p = got
		return err == nil && got.Status.Phase == phase
	})
	return p
}

func ptr[T any](v T) *T { return &v }

// podSpec is a pod fixture.
type podSpec struct {
	name, node   string
	cpu, memory  string
	hostPort     int32
	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	phase        corev1.PodPhase
}

func newPod(s podSpec) *corev1.Pod {
	c := corev1.Container{Name: "app", Image: "registry.example/app:1"}
	if s.cpu != "" || s.memory != "" {
		c.Resources.Requests = corev1.ResourceList{}
		if s.cpu != "" {
			c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(s.cpu)
		}
		if s.memory != "" {
			c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(s.memory)
		}
	}
	if s.hostPort != 0 {
		c.Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: s.hostPort, Protocol: corev1.ProtocolTCP}}
	}
	phase := s.phase
	if phase == "" {
		phase = corev1.PodPending
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default", UID: types.UID("uid-" + s.name)},
		Spec: corev1.PodSpec{
			NodeName:     s.node,
			Containers:   []corev1.Container{c},
			NodeSelector: s.nodeSelector,
			Tolerations:  s.tolerations,
		},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func findPodCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	c := findPodCondition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}
