package daemonset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
)

// podControl is the narrow write interface for daemon pods. The real one records the
// per-pod events (SuccessfulCreate, FailedCreate, SuccessfulDelete, FailedDelete) on the
// DaemonSet, as Kubernetes' RealPodControl does.
type podControl interface {
	// CreatePod creates pod in ds's namespace.
	CreatePod(ctx context.Context, ds *appsv1.DaemonSet, pod *corev1.Pod) error
	// DeletePod deletes the named pod with default options (its grace period applies).
	DeletePod(ctx context.Context, ds *appsv1.DaemonSet, name string) error
	// PatchPod applies patch to the named pod.
	PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte) error
}

var _ podControl = (*realPodControl)(nil)

type realPodControl struct {
	client kubernetes.Interface
	// recorder is looked up on each use so tests can swap the controller's recorder.
	recorder func() record.EventRecorder
}

func (r *realPodControl) CreatePod(ctx context.Context, ds *appsv1.DaemonSet, pod *corev1.Pod) error {
	if len(pod.Labels) == 0 {
		return fmt.Errorf("unable to create pods, no labels")
	}
	created, err := r.client.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		// A terminating namespace refuses creates; that is expected and not worth an event.
		if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			r.recorder().Eventf(ds, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		}
		return err
	}
	r.recorder().Eventf(ds, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", created.Name)
	return nil
}

func (r *realPodControl) DeletePod(ctx context.Context, ds *appsv1.DaemonSet, name string) error {
	if err := r.client.CoreV1().Pods(ds.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			// Already gone: nothing to report.
			return err
		}
		r.recorder().Eventf(ds, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
		return fmt.Errorf("unable to delete pods: %w", err)
	}
	r.recorder().Eventf(ds, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %v", name)
	return nil
}

func (r *realPodControl) PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte) error {
	_, err := r.client.CoreV1().Pods(namespace).Patch(ctx, name, pt, patch, metav1.PatchOptions{})
	return err
}
