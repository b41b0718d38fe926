package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// defaultServiceAccountName is the ServiceAccount every namespace has and pods run as
// unless they name another.
const defaultServiceAccountName = "default"

// What the ServiceAccount plugin mounts into a pod (docs/kinds-and-admission.md#admission):
// kube-apiserver's names and values, which tools and policies look for.
const (
	// tokenMountPath is where every container finds its token, CA bundle and namespace.
	tokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// tokenVolumePrefix starts the generated name of the projected volume.
	tokenVolumePrefix = "kube-api-access-"
	// RootCAConfigMap is the ConfigMap every namespace holds the cluster's CA bundle in
	// (published by the controller-manager), under the key RootCAConfigMapKey.
	RootCAConfigMap    = "kube-root-ca.crt"
	RootCAConfigMapKey = "ca.crt"
	// tokenExpirationSeconds is the lifetime kube-apiserver asks for: an hour and seven
	// seconds, the odd figure by which it recognises its own projected tokens.
	tokenExpirationSeconds = 3607
)

// admitServiceAccount is the ServiceAccount plugin: a pod runs as the namespace's default
// ServiceAccount unless it names one, and the one it runs as must exist. Unless the pod or,
// failing that, the account opts out (automountServiceAccountToken: false), every container
// and init container gets the account's token, the cluster CA and the namespace mounted at
// tokenMountPath from one projected volume, and a pod without image pull secrets gets the
// account's.
func admitServiceAccount(s *Server, ctx context.Context, a *admission) error {
	if a.op != opCreate || !a.is(podsResource) {
		return nil
	}
	pod := a.obj.(*corev1.Pod)
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return nil
	}
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = defaultServiceAccountName
	}
	pod.Spec.DeprecatedServiceAccount = pod.Spec.ServiceAccountName //nolint:staticcheck // set as kube-apiserver sets it
	obj, err := s.lookup(ctx, serviceAccountsResource, a.namespace, pod.Spec.ServiceAccountName)
	if err != nil {
		return a.forbidden(fmt.Errorf("error looking up service account %s/%s: %w", a.namespace, pod.Spec.ServiceAccountName, err))
	}
	// The cached account is shared with other requests: read it, never change it.
	sa := obj.(*corev1.ServiceAccount)
	if automountToken(sa, pod) {
		mountServiceAccountToken(pod)
	}
	if len(pod.Spec.ImagePullSecrets) == 0 && len(sa.ImagePullSecrets) > 0 {
		pod.Spec.ImagePullSecrets = make([]corev1.LocalObjectReference, len(sa.ImagePullSecrets))
		for i, ref := range sa.ImagePullSecrets {
			pod.Spec.ImagePullSecrets[i].Name = ref.Name
		}
	}
	return nil
}

// automountToken reports whether pod gets its token: the pod's own setting wins, then the
// account's, and without either it does.
func automountToken(sa *corev1.ServiceAccount, pod *corev1.Pod) bool {
	if pod.Spec.AutomountServiceAccountToken != nil {
		return *pod.Spec.AutomountServiceAccountToken
	}
	if sa.AutomountServiceAccountToken != nil {
		return *sa.AutomountServiceAccountToken
	}
	return true
}

// mountServiceAccountToken mounts the token volume into every container and init container
// that has nothing mounted at tokenMountPath yet (a pod that brings its own mount there
// keeps it), and adds the volume when any of them took it.
func mountServiceAccountToken(pod *corev1.Pod) {
	taken := make(map[string]bool, len(pod.Spec.Volumes))
	for _, v := range pod.Spec.Volumes {
		taken[v.Name] = true
	}
	name := tokenVolumePrefix + rand.String(5)
	for taken[name] {
		name = tokenVolumePrefix + rand.String(5)
	}
	mount := corev1.VolumeMount{Name: name, ReadOnly: true, MountPath: tokenMountPath}
	mounted := false
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			if !hasMountAt(containers[i].VolumeMounts, tokenMountPath) {
				containers[i].VolumeMounts = append(containers[i].VolumeMounts, mount)
				mounted = true
			}
		}
	}
	if mounted {
		pod.Spec.Volumes = append(pod.Spec.Volumes, tokenVolume(name))
	}
}

func hasMountAt(mounts []corev1.VolumeMount, path string) bool {
	for _, m := range mounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

// tokenVolume is the projected volume kube-apiserver adds: a bound token for the pod's
// account, the CA bundle from RootCAConfigMap and the pod's namespace.
func tokenVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: new(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Path: "token", ExpirationSeconds: new(int64(tokenExpirationSeconds))}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: RootCAConfigMap},
				Items:                []corev1.KeyToPath{{Key: RootCAConfigMapKey, Path: RootCAConfigMapKey}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}
