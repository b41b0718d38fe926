package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/test/testenv"
)

// TestServiceAccountTokenAndRootCA: with the whole control plane, a new namespace gets
// kube-root-ca.crt holding the CA clients trust the API server with, the ConfigMap comes
// back when deleted, and a pod there gets the projected volume that reads it, mounted in
// its container, and is run by its node.
func TestServiceAccountTokenAndRootCA(t *testing.T) {
	env := testenv.New(t, testenv.Everything(1))
	ctx := context.Background()
	client := env.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rootCA := func() (bool, error) {
		cm, err := client.CoreV1().ConfigMaps("team").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cm.Data["ca.crt"] == string(env.CAPEM), err
	}
	cpEventually(t, 30*time.Second, "kube-root-ca.crt with the cluster CA in a new namespace", rootCA)
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
	if err := client.CoreV1().ConfigMaps("team").Delete(ctx, "kube-root-ca.crt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cpEventually(t, 30*time.Second, "a deleted kube-root-ca.crt to come back", rootCA)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
	}
	pod, err := client.CoreV1().Pods("team").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Volumes) != 1 || !strings.HasPrefix(pod.Spec.Volumes[0].Name, "kube-api-access-") {
		t.Fatalf("volumes %+v, want the token volume", pod.Spec.Volumes)
	}
	mounts := pod.Spec.Containers[0].VolumeMounts
	if len(mounts) != 1 || mounts[0].Name != pod.Spec.Volumes[0].Name || mounts[0].MountPath != "/var/run/secrets/kubernetes.io/serviceaccount" || !mounts[0].ReadOnly {
		t.Fatalf("mounts %+v", mounts)
	}
	cpEventually(t, 30*time.Second, "the pod to run", func() (bool, error) {
		p, err := client.CoreV1().Pods("team").Get(ctx, "app", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
}
