package apiserver

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/store"
)

// The scale subresource (autoscaling/v1 Scale) is how `kubectl scale` and autoscalers
// change a workload's replicas without touching the rest of it.

// scaleOf reads the replica count a workload wants and has, and the selector of its pods.
type scaleOf func(obj runtime.Object) (want, have int32, selector *metav1.LabelSelector)

// setReplicas changes the replica count a workload wants.
type setReplicas func(obj runtime.Object, replicas int32)

// scaleSubresource serves <resource>/<name>/scale with the given accessors.
func scaleSubresource(get scaleOf, set setReplicas) subresource {
	return subresource{name: "scale", kind: "Scale", kindGroupVersion: &autoscalingv1.SchemeGroupVersion,
		verbs: metav1.Verbs{"get", "patch", "update"}, serve: func(c *call) { c.serveScale(get, set) }}
}

var (
	deploymentScale = scaleSubresource(func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
		d := obj.(*appsv1.Deployment)
		return replicasOf(d.Spec.Replicas), d.Status.Replicas, d.Spec.Selector
	}, func(obj runtime.Object, n int32) { obj.(*appsv1.Deployment).Spec.Replicas = &n })
	replicaSetScale = scaleSubresource(func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
		rs := obj.(*appsv1.ReplicaSet)
		return replicasOf(rs.Spec.Replicas), rs.Status.Replicas, rs.Spec.Selector
	}, func(obj runtime.Object, n int32) { obj.(*appsv1.ReplicaSet).Spec.Replicas = &n })
	statefulSetScale = scaleSubresource(func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
		ss := obj.(*appsv1.StatefulSet)
		return replicasOf(ss.Spec.Replicas), ss.Status.Replicas, ss.Spec.Selector
	}, func(obj runtime.Object, n int32) { obj.(*appsv1.StatefulSet).Spec.Replicas = &n })
)

// toScale is the Scale view of obj.
func toScale(obj runtime.Object, get scaleOf) *autoscalingv1.Scale {
	m, _ := meta.Accessor(obj)
	want, have, sel := get(obj)
	selector := ""
	if s, err := metav1.LabelSelectorAsSelector(sel); err == nil {
		selector = s.String()
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{Kind: "Scale", APIVersion: autoscalingv1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp()},
		Spec:   autoscalingv1.ScaleSpec{Replicas: want},
		Status: autoscalingv1.ScaleStatus{Replicas: have, Selector: selector},
	}
}

func (c *call) serveScale(get scaleOf, set setReplicas) {
	res := c.info.res
	key := c.key(c.info.namespace, c.info.name)
	if c.info.verb == "get" {
		obj, err := c.s.store.Get(c.r.Context(), key)
		if err != nil {
			c.fail(err)
			return
		}
		writeOutput(c.w, c.out, http.StatusOK, toScale(obj, get))
		return
	}
	var body []byte
	var err error
	if body, err = c.readBody(); err != nil {
		c.fail(err)
		return
	}
	dryRun, err := c.dryRun()
	if err != nil {
		c.fail(err)
		return
	}
	var out *autoscalingv1.Scale
	_, err = c.s.store.GuaranteedUpdate(c.r.Context(), key, func(cur runtime.Object) (runtime.Object, error) {
		scale, err := c.nextScale(toScale(cur, get), body)
		if err != nil {
			return nil, err
		}
		m, _ := meta.Accessor(cur)
		if rv := scale.ResourceVersion; rv != "" && rv != m.GetResourceVersion() {
			return nil, conflictError(res.groupResource(), c.info.name)
		}
		if scale.Spec.Replicas < 0 {
			return nil, apierrors.NewInvalid(autoscalingv1.SchemeGroupVersion.WithKind("Scale").GroupKind(), c.info.name,
				field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), scale.Spec.Replicas, "must be greater than or equal to 0")})
		}
		if want, _, _ := get(cur); want != scale.Spec.Replicas && res.tracksGeneration {
			m.SetGeneration(m.GetGeneration() + 1)
		}
		set(cur, scale.Spec.Replicas)
		out = toScale(cur, get)
		if dryRun {
			return nil, errDryRun{obj: cur}
		}
		return cur, nil
	}, store.UpdateOptions{})
	var dr errDryRun
	if err != nil && !errors.As(err, &dr) {
		c.fail(err)
		return
	}
	if !dryRun {
		// The stored object's new resourceVersion is the scale's.
		if obj, err := c.s.store.Get(c.r.Context(), key); err == nil {
			out = toScale(obj, get)
		}
	}
	writeOutput(c.w, c.out, http.StatusOK, out)
}

// nextScale is the Scale a PUT body or a PATCH of cur asks for.
func (c *call) nextScale(cur *autoscalingv1.Scale, body []byte) (*autoscalingv1.Scale, error) {
	next := &autoscalingv1.Scale{}
	if c.info.verb == "update" {
		if err := c.decodeObject(body, autoscalingv1.SchemeGroupVersion.WithKind("Scale"), next); err != nil {
			return nil, err
		}
		return next, nil
	}
	curJSON, _ := json.Marshal(cur)
	mt, _, _ := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	var patched []byte
	var err error
	switch types.PatchType(mt) {
	case types.JSONPatchType:
		p, perr := jsonpatch.DecodePatch(body)
		if perr != nil {
			return nil, badRequest("the json patch could not be decoded: %v", perr)
		}
		patched, err = p.Apply(curJSON)
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(curJSON, body)
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(curJSON, body, &autoscalingv1.Scale{})
	default:
		return nil, unsupportedMediaType("the body of the request was in an unknown format - accepted media types include: " +
			strconv.Quote(string(types.JSONPatchType)) + ", " + strconv.Quote(string(types.MergePatchType)) + ", " + strconv.Quote(string(types.StrategicMergePatchType)))
	}
	if err != nil {
		return nil, badRequest("the patch could not be applied: %v", err)
	}
	if err := json.Unmarshal(patched, next); err != nil {
		return nil, badRequest("the patched scale could not be decoded: %v", err)
	}
	// A patch keeps the stored resourceVersion unless it names one.
	return next, nil
}
