package apiserver_test

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestServiceAccountTokenMount: the ServiceAccount plugin mounts the projected token volume
// as kube-apiserver does, unless the pod or its account opts out, and passes the account's
// image pull secrets to a pod that has none.
func TestServiceAccountTokenMount(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	for _, sa := range []*corev1.ServiceAccount{
		{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}, AutomountServiceAccountToken: ptr.To(false)},
		{ObjectMeta: metav1.ObjectMeta{Name: "puller"}, ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}}},
	} {
		_, err := c.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{})
		check(t, err)
	}
	const mountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	ownMount := corev1.VolumeMount{Name: "mine", MountPath: mountPath}

	cases := []struct {
		name        string
		account     string
		automount   *bool
		pullSecrets []corev1.LocalObjectReference
		// withOwnMount gives the second container its own volume at the token's path.
		withOwnMount bool
		wantVolume   bool
		wantSecrets  []string
	}{
		{name: "default-account", wantVolume: true},
		{name: "pod-opts-out", automount: ptr.To(false)},
		{name: "account-opts-out", account: "quiet"},
		{name: "pod-overrides-account", account: "quiet", automount: ptr.To(true), wantVolume: true},
		{name: "own-mount-kept", withOwnMount: true, wantVolume: true},
		{name: "account-pull-secrets", account: "puller", wantVolume: true, wantSecrets: []string{"regcred"}},
		{name: "own-pull-secrets", account: "puller", pullSecrets: []corev1.LocalObjectReference{{Name: "own"}},
			wantVolume: true, wantSecrets: []string{"own"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podOn("default", tc.name, "")
			pod.Spec.ServiceAccountName = tc.account
			pod.Spec.AutomountServiceAccountToken = tc.automount
			pod.Spec.ImagePullSecrets = tc.pullSecrets
			pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "registry.example/init:1.0"}}
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "side", Image: "registry.example/side:1.0"})
			if tc.withOwnMount {
				pod.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{ownMount}
				pod.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			}
			got, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
			check(t, err)

			var token *corev1.Volume
			for i, v := range got.Spec.Volumes {
				if strings.HasPrefix(v.Name, "kube-api-access-") {
					if token != nil {
						t.Fatalf("two token volumes: %v", got.Spec.Volumes)
					}
					token = &got.Spec.Volumes[i]
				}
			}
			if (token != nil) != tc.wantVolume {
				t.Fatalf("token volume %v, want one: %v", token, tc.wantVolume)
			}
			all := append(append([]corev1.Container(nil), got.Spec.InitContainers...), got.Spec.Containers...)
			for _, ctr := range all {
				var at []corev1.VolumeMount
				for _, m := range ctr.VolumeMounts {
					if m.MountPath == mountPath {
						at = append(at, m)
					}
				}
				switch {
				case tc.withOwnMount && ctr.Name == "side":
					if len(at) != 1 || !reflect.DeepEqual(at[0], ownMount) {
						t.Errorf("container %s: mounts at the token path %v, want only its own %v", ctr.Name, at, ownMount)
					}
				case token == nil:
					if len(at) != 0 {
						t.Errorf("container %s: mounts %v without a token volume", ctr.Name, at)
					}
				default:
					want := corev1.VolumeMount{Name: token.Name, ReadOnly: true, MountPath: mountPath}
					if len(at) != 1 || !reflect.DeepEqual(at[0], want) {
						t.Errorf("container %s: mounts at the token path %v, want %v", ctr.Name, at, want)
					}
				}
			}
			if token != nil {
				checkTokenVolume(t, token)
			}
			var secrets []string
			for _, s := range got.Spec.ImagePullSecrets {
				secrets = append(secrets, s.Name)
			}
			if strings.Join(secrets, ",") != strings.Join(tc.wantSecrets, ",") {
				t.Errorf("imagePullSecrets %v, want %v", secrets, tc.wantSecrets)
			}
		})
	}
}

// checkTokenVolume compares the projected sources with kube-apiserver's: a bound token of
// 3607 s, the CA bundle from kube-root-ca.crt and the namespace, mode 0644.
func checkTokenVolume(t *testing.T, v *corev1.Volume) {
	t.Helper()
	p := v.Projected
	if p == nil || p.DefaultMode == nil || *p.DefaultMode != 0o644 || len(p.Sources) != 3 {
		t.Fatalf("token volume %+v, want projected, mode 0644, three sources", v.VolumeSource)
	}
	tok, ca, ns := p.Sources[0].ServiceAccountToken, p.Sources[1].ConfigMap, p.Sources[2].DownwardAPI
	if tok == nil || tok.Path != "token" || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != 3607 || tok.Audience != "" {
		t.Errorf("token source %+v", tok)
	}
	if ca == nil || ca.Name != "kube-root-ca.crt" || len(ca.Items) != 1 || ca.Items[0] != (corev1.KeyToPath{Key: "ca.crt", Path: "ca.crt"}) {
		t.Errorf("CA source %+v", ca)
	}
	if ns == nil || len(ns.Items) != 1 || ns.Items[0].Path != "namespace" || ns.Items[0].FieldRef == nil ||
		*ns.Items[0].FieldRef != (corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}) {
		t.Errorf("namespace source %+v", ns)
	}
}
