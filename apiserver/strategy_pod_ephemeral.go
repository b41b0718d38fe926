package apiserver

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// podEphemeralContainersSubresource is pods/ephemeralcontainers, the only way to add a
// container to a pod that exists: `kubectl debug POD --image=...` patches it. A write through
// it changes spec.ephemeralContainers and nothing else (docs/kinds-and-admission.md,
// "Ephemeral containers"): the rest of the spec, the status and the metadata a client may edit
// are kept as stored, as kube-apiserver's ephemeral-containers strategy keeps them. Ephemeral
// containers may be added, never changed or removed.
var podEphemeralContainersSubresource = subresource{name: "ephemeralcontainers", verbs: metav1.Verbs{"get", "patch", "update"},
	rules: &subresourceRules{prepare: prepareEphemeralContainers, validate: validateEphemeralContainersUpdate}}

func prepareEphemeralContainers(obj, old runtime.Object) {
	pod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	added := pod.Spec.EphemeralContainers
	pod.Spec = oldPod.Spec
	pod.Spec.EphemeralContainers = added
	defaultEphemeralContainers(added)
	pod.Status = oldPod.Status
	// The metadata a status write may not change (metav1.ResetObjectMetaForStatus).
	pod.Labels, pod.Annotations = oldPod.Labels, oldPod.Annotations
	pod.Finalizers, pod.OwnerReferences = oldPod.Finalizers, oldPod.OwnerReferences
	if !apiequality.Semantic.DeepEqual(added, oldPod.Spec.EphemeralContainers) {
		// A pod's generation counts changes of its spec, these included.
		pod.Generation = oldPod.Generation + 1
	}
}

func defaultEphemeralContainers(ecs []corev1.EphemeralContainer) {
	for i := range ecs {
		defaultContainer((*corev1.Container)(&ecs[i].EphemeralContainerCommon))
	}
}

func validateEphemeralContainersUpdate(obj, old runtime.Object) field.ErrorList {
	pod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	if _, mirror := oldPod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return field.ErrorList{field.Forbidden(field.NewPath(""), "static pods do not support ephemeral containers")}
	}
	p := field.NewPath("spec", "ephemeralContainers")
	errs := validateEphemeralContainers(&pod.Spec, p)
	byName := make(map[string]*corev1.EphemeralContainer, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		byName[pod.Spec.EphemeralContainers[i].Name] = &pod.Spec.EphemeralContainers[i]
	}
	for _, was := range oldPod.Spec.EphemeralContainers {
		now, ok := byName[was.Name]
		switch {
		case !ok:
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("existing ephemeral containers %q may not be removed", was.Name)))
		case !apiequality.Semantic.DeepEqual(was, *now):
			errs = append(errs, field.Forbidden(p.Key(was.Name), fmt.Sprintf("existing ephemeral containers %q may not be changed", was.Name)))
		}
	}
	return errs
}

// ephemeralForbidden is what an ephemeral container may not set, by its JSON name: nothing
// that a pod's service would rely on (ports, probes, lifecycle hooks, resources, restarts).
var ephemeralForbidden = []struct {
	name string
	set  func(c *corev1.EphemeralContainerCommon) bool
}{
	{"ports", func(c *corev1.EphemeralContainerCommon) bool { return len(c.Ports) > 0 }},
	{"resources", func(c *corev1.EphemeralContainerCommon) bool {
		return !apiequality.Semantic.DeepEqual(c.Resources, corev1.ResourceRequirements{})
	}},
	{"resizePolicy", func(c *corev1.EphemeralContainerCommon) bool { return len(c.ResizePolicy) > 0 }},
	{"restartPolicy", func(c *corev1.EphemeralContainerCommon) bool { return c.RestartPolicy != nil }},
	{"restartPolicyRules", func(c *corev1.EphemeralContainerCommon) bool { return len(c.RestartPolicyRules) > 0 }},
	{"livenessProbe", func(c *corev1.EphemeralContainerCommon) bool { return c.LivenessProbe != nil }},
	{"readinessProbe", func(c *corev1.EphemeralContainerCommon) bool { return c.ReadinessProbe != nil }},
	{"startupProbe", func(c *corev1.EphemeralContainerCommon) bool { return c.StartupProbe != nil }},
	{"lifecycle", func(c *corev1.EphemeralContainerCommon) bool { return c.Lifecycle != nil }},
}

// validateEphemeralContainers checks a pod's ephemeral containers with kube-apiserver's
// paths and messages: a unique DNS-label name among all the pod's containers, an image, a
// target that is one of the pod's other containers, mounts of the pod's volumes without
// subpaths, and none of the fields ephemeralForbidden lists.
func validateEphemeralContainers(spec *corev1.PodSpec, p *field.Path) field.ErrorList {
	if len(spec.EphemeralContainers) == 0 {
		return nil
	}
	var errs field.ErrorList
	others := sets.New[string]()
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			others.Insert(c.Name)
		}
	}
	volumes := sets.New[string]()
	for _, v := range spec.Volumes {
		volumes.Insert(v.Name)
	}
	all := others.Clone()
	for i := range spec.EphemeralContainers {
		ec := &spec.EphemeralContainers[i].EphemeralContainerCommon
		ip := p.Index(i)
		switch {
		case ec.Name == "":
			errs = append(errs, field.Required(ip.Child("name"), ""))
		case len(validation.IsDNS1123Label(ec.Name)) > 0:
			for _, msg := range validation.IsDNS1123Label(ec.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), ec.Name, msg))
			}
		case all.Has(ec.Name):
			errs = append(errs, field.Duplicate(ip.Child("name"), ec.Name))
		default:
			all.Insert(ec.Name)
		}
		if strings.TrimSpace(ec.Image) == "" {
			errs = append(errs, field.Required(ip.Child("image"), ""))
		}
		if target := spec.EphemeralContainers[i].TargetContainerName; target != "" && !others.Has(target) {
			errs = append(errs, field.NotFound(ip.Child("targetContainerName"), target))
		}
		for _, f := range ephemeralForbidden {
			if f.set(ec) {
				errs = append(errs, field.Forbidden(ip.Child(f.name), "cannot be set for an Ephemeral Container"))
			}
		}
		switch ec.TerminationMessagePolicy {
		case corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError:
		default:
			errs = append(errs, field.NotSupported(ip.Child("terminationMessagePolicy"), ec.TerminationMessagePolicy,
				[]string{string(corev1.TerminationMessageReadFile), string(corev1.TerminationMessageFallbackToLogsOnError)}))
		}
		switch ec.ImagePullPolicy {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		default:
			errs = append(errs, field.NotSupported(ip.Child("imagePullPolicy"), ec.ImagePullPolicy,
				[]string{string(corev1.PullAlways), string(corev1.PullIfNotPresent), string(corev1.PullNever)}))
		}
		for j, m := range ec.VolumeMounts {
			mp := ip.Child("volumeMounts").Index(j)
			if !volumes.Has(m.Name) {
				errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
			}
			if m.SubPath != "" {
				errs = append(errs, field.Forbidden(mp.Child("subPath"), "cannot be set for an Ephemeral Container"))
			}
			if m.SubPathExpr != "" {
				errs = append(errs, field.Forbidden(mp.Child("subPathExpr"), "cannot be set for an Ephemeral Container"))
			}
		}
	}
	return errs
}
