package apiserver

import (
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/store"
)

// bind serves POST pods/<name>/binding: the scheduler's way to set spec.nodeName.
func (c *call) bind() {
	data, err := c.readBody()
	if err != nil {
		c.fail(err)
		return
	}
	binding := &corev1.Binding{}
	if err := c.decodeObject(data, corev1.SchemeGroupVersion.WithKind("Binding"), binding); err != nil {
		c.fail(err)
		return
	}
	if binding.Name != "" && binding.Name != c.info.name {
		c.fail(badRequest("the name of the object (%s) does not match the name on the URL (%s)", binding.Name, c.info.name))
		return
	}
	if binding.Target.Name == "" {
		c.fail(apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Binding").GroupKind(), c.info.name,
			field.ErrorList{field.Required(field.NewPath("target", "name"), "")}))
		return
	}
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		c.fail(apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Binding").GroupKind(), c.info.name,
			field.ErrorList{field.NotSupported(field.NewPath("target", "kind"), binding.Target.Kind, []string{"Node", "<empty>"})}))
		return
	}
	dryRun, err := c.dryRun()
	if err != nil {
		c.fail(err)
		return
	}
	if err := c.admitSubresourceCreate(corev1.SchemeGroupVersion.WithKind("Binding"), binding, dryRun); err != nil {
		c.fail(err)
		return
	}
	res := c.info.res
	key := c.key(c.info.namespace, c.info.name)
	_, err = c.s.store.GuaranteedUpdate(c.r.Context(), key, func(cur runtime.Object) (runtime.Object, error) {
		pod := cur.(*corev1.Pod)
		if binding.UID != "" && binding.UID != pod.UID {
			return nil, apierrors.NewConflict(res.groupResource(), c.info.name,
				fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", binding.UID, pod.UID))
		}
		if pod.DeletionTimestamp != nil {
			return nil, apierrors.NewConflict(res.groupResource(), c.info.name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", pod.Name))
		}
		if pod.Spec.NodeName != "" {
			return nil, apierrors.NewConflict(res.groupResource(), c.info.name, fmt.Errorf("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = binding.Target.Name
		for k, v := range binding.Annotations {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[k] = v
		}
		setPodCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: c.now()})
		if dryRun {
			return nil, errDryRun{obj: pod}
		}
		return pod, nil
	}, store.UpdateOptions{Suggestion: res.cachedCopy(key)})
	var dr errDryRun
	if err != nil && !errors.As(err, &dr) {
		c.fail(err)
		return
	}
	writeJSON(c.w, http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

// setPodCondition replaces the condition of the same type, keeping its transition time
// when the status did not change.
func setPodCondition(status *corev1.PodStatus, cond corev1.PodCondition) {
	for i, existing := range status.Conditions {
		if existing.Type == cond.Type {
			if existing.Status == cond.Status {
				cond.LastTransitionTime = existing.LastTransitionTime
			}
			status.Conditions[i] = cond
			return
		}
	}
	status.Conditions = append(status.Conditions, cond)
}
