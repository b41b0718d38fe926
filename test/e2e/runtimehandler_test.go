package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/miniplane/miniplane/kubeletstub"
	"github.com/miniplane/miniplane/test/testenv"
)

// TestRuntimeHandlers: a stub node reports its runtime handlers and runs pods of a
// RuntimeClass whose handler it has; a pod whose class names a handler the node lacks stays
// Pending with the kubelet's FailedCreatePodSandBox event, and starts once the handler is
// added to the node (a runtime installed by a DaemonSet, say).
func TestRuntimeHandlers(t *testing.T) {
	env := testenv.New(t, testenv.Everything(1))
	ctx := context.Background()
	client := env.Client
	nodeName := env.Fleet.NodeNames()[0]

	handlers := func() ([]string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, h := range n.Status.RuntimeHandlers {
			out = append(out, h.Name)
		}
		return out, nil
	}
	cpEventually(t, 30*time.Second, "the node to report its runtime handlers", func() (bool, error) {
		h, err := handlers()
		return slices.Equal(h, []string{"runc", ""}), err
	})

	for _, rc := range []*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"},
		{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata-qemu"},
	} {
		if _, err := client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name, class string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: nodeName, RuntimeClassName: &class,
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
		}
	}
	for _, p := range []*corev1.Pod{pod("plain", "runc"), pod("sandboxed", "kata")} {
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	phase := func(name string) (corev1.PodPhase, *corev1.Pod, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", nil, err
		}
		return p.Status.Phase, p, nil
	}
	cpEventually(t, 30*time.Second, "the runc pod to run", func() (bool, error) {
		ph, _, err := phase("plain")
		return ph == corev1.PodRunning, err
	})
	cpEventually(t, 30*time.Second, "a FailedCreatePodSandBox event naming the missing handler", func() (bool, error) {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=sandboxed,reason=FailedCreatePodSandBox"})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, `no runtime for "kata-qemu" is configured`) {
				return true, nil
			}
		}
		return false, nil
	})
	ph, p, err := phase("sandboxed")
	if err != nil {
		t.Fatal(err)
	}
	if ph != corev1.PodPending || p.Status.PodIP != "" || len(p.Status.ContainerStatuses) != 1 ||
		p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Fatalf("pod without its handler: phase %s, IP %q, containers %+v; want Pending, no IP, ContainerCreating",
			ph, p.Status.PodIP, p.Status.ContainerStatuses)
	}

	patch := []byte(`{"metadata":{"annotations":{"` + kubeletstub.AnnotationRuntimeHandlers + `":"kata-qemu"}}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cpEventually(t, 30*time.Second, "the pod to run once the node has its handler", func() (bool, error) {
		ph, p, err := phase("sandboxed")
		return ph == corev1.PodRunning && p.Status.PodIP != "", err
	})
	cpEventually(t, 30*time.Second, "the node to report the added handler", func() (bool, error) {
		h, err := handlers()
		return slices.Equal(h, []string{"runc", "kata-qemu", ""}), err
	})
}
