package apiserver_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func claim(name, size string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: modes}}
	if size != "" {
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}
	}
	return pvc
}

func ingressPath(path string, pathType *networkingv1.PathType, backend networkingv1.IngressBackend) networkingv1.HTTPIngressPath {
	return networkingv1.HTTPIngressPath{Path: path, PathType: pathType, Backend: backend}
}

func serviceBackend(name string, port int32) networkingv1.IngressBackend {
	return networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name,
		Port: networkingv1.ServiceBackendPort{Number: port}}}
}

// TestStorageAndIngressKindsInvalid: claims, volumes, replication controllers, ingresses and
// ingress classes are refused with every problem named, as kube-apiserver names them, and
// nothing is stored.
func TestStorageAndIngressKindsInvalid(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	const ns = "default"
	prefix := networkingv1.PathTypePrefix
	bogus := networkingv1.PathType("Glob")
	block := corev1.PersistentVolumeMode("Tape")
	negative := int32(-1)
	nsScope := networkingv1.IngressClassParametersReferenceScopeNamespace
	tests := []invalidCreate{
		{"claim without modes or size", func(ctx context.Context, c kubernetes.Interface) error {
			pvc := claim("data", "")
			pvc.Spec.VolumeMode = &block
			_, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
			return err
		}, []string{"spec.accessModes", "spec.resources.requests[storage]", "spec.volumeMode"}},
		{"claim with ReadWriteOncePod among others, size zero", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx,
				claim("data", "0", corev1.ReadWriteOncePod, corev1.ReadWriteOnce), metav1.CreateOptions{})
			return err
		}, []string{"spec.accessModes", "spec.resources.requests[storage]"}},
		{"volume without capacity, with two sources", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"},
				Spec: corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: "Shred",
					PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/a"},
						NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/b"}}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.capacity", "spec.nfs", "spec.persistentVolumeReclaimPolicy"}},
		{"volume without a source", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"},
				Spec: corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec"}},
		{"replication controller", func(ctx context.Context, c kubernetes.Interface) error {
			tmpl := podTemplate("web", corev1.RestartPolicyNever)
			_, err := c.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "rc"},
				Spec: corev1.ReplicationControllerSpec{Replicas: &negative, Selector: labelled("other"), Template: &tmpl}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.replicas", "spec.template.metadata.labels", "spec.template.spec.restartPolicy"}},
		{"replication controller without a template", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "rc"}},
				metav1.CreateOptions{})
			return err
		}, []string{"spec.selector", "spec.template"}},
		{"ingress without rules or default backend", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "ing"}}, metav1.CreateOptions{})
			return err
		}, []string{"spec"}},
		{"ingress rules", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "ing"},
				Spec: networkingv1.IngressSpec{
					TLS: []networkingv1.IngressTLS{{Hosts: []string{"Bad_Host"}}},
					Rules: []networkingv1.IngressRule{
						{Host: "10.0.0.1", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
							Paths: []networkingv1.HTTPIngressPath{
								ingressPath("/", nil, serviceBackend("web", 80)),
								ingressPath("relative", &prefix, serviceBackend("web", 0)),
								ingressPath("/x", &bogus, networkingv1.IngressBackend{}),
							}}}},
						{Host: "*.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}},
					}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.rules[0].host", "spec.rules[0].http.paths[0].pathType", "spec.rules[0].http.paths[1].backend.service.port",
			"spec.rules[0].http.paths[1].path", "spec.rules[0].http.paths[2].backend", "spec.rules[0].http.paths[2].pathType",
			"spec.rules[1].http.paths", "spec.tls[0].hosts[0]"}},
		{"ingress class", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "ic"},
				Spec: networkingv1.IngressClassSpec{Controller: "no-domain",
					Parameters: &networkingv1.IngressClassParametersReference{Kind: "Params", Scope: &nsScope}}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.controller", "spec.parameters.name", "spec.parameters.namespace"}},
	}
	runInvalid(t, c, tests)
}

// TestStorageAndIngressKindsDefaults: the defaults, the update rules and the subresources
// of the same kinds, and the DefaultIngressClass admission plugin.
func TestStorageAndIngressKindsDefaults(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns = "default"

	pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("data", "1Gi", corev1.ReadWriteOnce), metav1.CreateOptions{})
	check(t, err)
	if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem {
		t.Errorf("claim: phase %q volumeMode %v; want Pending and Filesystem", pvc.Status.Phase, pvc.Spec.VolumeMode)
	}
	// An unbound claim may change neither its modes nor its size.
	grown := pvc.DeepCopy()
	grown.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	_, err = c.CoreV1().PersistentVolumeClaims(ns).Update(ctx, grown, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "spec" {
		t.Errorf("resizing an unbound claim: causes %v, want spec", got)
	}
	// A bound one may grow, never shrink.
	pvc.Status.Phase = corev1.ClaimBound
	pvc, err = c.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	check(t, err)
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	pvc, err = c.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{})
	check(t, err)
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("1Gi")
	_, err = c.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "spec.resources.requests.storage" {
		t.Errorf("shrinking a bound claim: causes %v, want spec.resources.requests.storage", got)
	}

	pv, err := c.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"},
		Spec: corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}}}, metav1.CreateOptions{})
	check(t, err)
	if pv.Status.Phase != corev1.VolumePending || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("volume: phase %q reclaim policy %q; want Pending and Retain", pv.Status.Phase, pv.Spec.PersistentVolumeReclaimPolicy)
	}
	pv.Spec.HostPath.Path = "/elsewhere"
	_, err = c.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "spec.persistentvolumesource" {
		t.Errorf("changing a volume's source: causes %v, want spec.persistentvolumesource", got)
	}

	tmpl := podTemplate("web", "")
	rc, err := c.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ReplicationControllerSpec{Template: &tmpl}}, metav1.CreateOptions{})
	check(t, err)
	if *rc.Spec.Replicas != 1 || rc.Spec.Selector["app"] != "web" || rc.Labels["app"] != "web" || rc.Generation != 1 ||
		rc.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("replication controller defaults: labels %v spec %+v generation %d", rc.Labels, rc.Spec, rc.Generation)
	}
	scale, err := c.CoreV1().ReplicationControllers(ns).GetScale(ctx, "web", metav1.GetOptions{})
	check(t, err)
	scale.Spec.Replicas = 4
	_, err = c.CoreV1().ReplicationControllers(ns).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{})
	check(t, err)
	if rc, err = c.CoreV1().ReplicationControllers(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil || *rc.Spec.Replicas != 4 || rc.Generation != 2 {
		t.Errorf("after scaling to 4: %v, replicas %v, generation %d", err, rc.Spec.Replicas, rc.Generation)
	}

	ic, err := c.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: networkingv1.IngressClassSpec{Controller: "example.com/ingress",
			Parameters: &networkingv1.IngressClassParametersReference{Kind: "Params", Name: "p"}}}, metav1.CreateOptions{})
	check(t, err)
	if s := ic.Spec.Parameters.Scope; s == nil || *s != networkingv1.IngressClassParametersReferenceScopeCluster {
		t.Errorf("ingress class parameters scope %v, want Cluster", s)
	}
	ic.Spec.Controller = "example.com/other"
	_, err = c.NetworkingV1().IngressClasses().Update(ctx, ic, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "spec.controller" {
		t.Errorf("changing an ingress class's controller: causes %v, want spec.controller", got)
	}

	// DefaultIngressClass: the class marked default is given to an Ingress naming none
	// (which of several: TestNewestDefault).
	_, err = c.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "newer",
		Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec: networkingv1.IngressClassSpec{Controller: "example.com/ingress"}}, metav1.CreateOptions{})
	check(t, err)
	newIngress := func(name string, annotations map[string]string) *networkingv1.Ingress {
		ing, err := c.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec:       networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}}}},
			metav1.CreateOptions{})
		check(t, err)
		return ing
	}
	if ing := newIngress("defaulted", nil); ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "newer" || ing.Generation != 1 {
		t.Errorf("ingress class %v generation %d, want the newest default class, newer, and 1", ing.Spec.IngressClassName, ing.Generation)
	}
	if ing := newIngress("annotated", map[string]string{"kubernetes.io/ingress.class": "legacy"}); ing.Spec.IngressClassName != nil {
		t.Errorf("an ingress with the class annotation got class %q", *ing.Spec.IngressClassName)
	}
}

// TestClaimQuota: claims count against persistentvolumeclaims and requests.storage, overall
// and per storage class.
func TestClaimQuota(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns = "default"
	_, err := c.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "storage"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePersistentVolumeClaims:               resource.MustParse("3"),
			corev1.ResourceRequestsStorage:                      resource.MustParse("10Gi"),
			"fast.storageclass.storage.k8s.io/requests.storage": resource.MustParse("1Gi"),
		}}}, metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("a", "8Gi", corev1.ReadWriteOnce), metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("b", "4Gi", corev1.ReadWriteOnce), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: storage") || !strings.Contains(err.Error(), "requests.storage") {
		t.Errorf("a claim over the storage quota: %v, want 403 exceeded quota on requests.storage", err)
	}
	fast := claim("c", "2Gi", corev1.ReadWriteOnce)
	class := "fast"
	fast.Spec.StorageClassName = &class
	_, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, fast, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "fast.storageclass.storage.k8s.io/requests.storage") {
		t.Errorf("a claim over its class's quota: %v, want 403 on fast.storageclass.storage.k8s.io/requests.storage", err)
	}
	eventually(t, "the quota's usage", func() (bool, error) {
		q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "storage", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used := q.Status.Used[corev1.ResourcePersistentVolumeClaims]
		storage := q.Status.Used[corev1.ResourceRequestsStorage]
		return used.Value() == 1 && storage.Cmp(resource.MustParse("8Gi")) == 0, nil
	})
}

// TestStorageAndRuntimeClasses: StorageClasses, CSIDrivers and RuntimeClasses get their
// defaults, refuse what kube-apiserver refuses, and a claim that leaves its class unset gets
// the default StorageClass.
func TestStorageAndRuntimeClasses(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns = "default"

	shred := corev1.PersistentVolumeReclaimPolicy("Shred")
	_, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Provisioner: "not a name!", ReclaimPolicy: &shred}, metav1.CreateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "provisioner,reclaimPolicy" {
		t.Errorf("invalid storage class: causes %v, want provisioner and reclaimPolicy", got)
	}
	sc, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard",
		Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "csi.example.com", Parameters: map[string]string{"type": "ssd"}}, metav1.CreateOptions{})
	check(t, err)
	if *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || *sc.VolumeBindingMode != storagev1.VolumeBindingImmediate {
		t.Errorf("storage class defaults: reclaim %v binding %v", *sc.ReclaimPolicy, *sc.VolumeBindingMode)
	}
	sc.Parameters["type"] = "hdd"
	sc.Provisioner = "other.example.com"
	_, err = c.StorageV1().StorageClasses().Update(ctx, sc, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "parameters,provisioner" {
		t.Errorf("changing a storage class: causes %v, want parameters and provisioner", got)
	}

	pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("defaulted", "1Gi", corev1.ReadWriteOnce), metav1.CreateOptions{})
	check(t, err)
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "standard" {
		t.Errorf("claim without a class got %v, want the default class, standard", pvc.Spec.StorageClassName)
	}
	none := claim("classless", "1Gi", corev1.ReadWriteOnce)
	empty := ""
	none.Spec.StorageClassName = &empty
	pvc, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, none, metav1.CreateOptions{})
	check(t, err)
	if *pvc.Spec.StorageClassName != "" {
		t.Errorf("claim asking for no class got %q", *pvc.Spec.StorageClassName)
	}

	short := int64(60)
	_, err = c.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "-bad-"},
		Spec: storagev1.CSIDriverSpec{VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{"Forever"},
			TokenRequests: []storagev1.TokenRequest{{Audience: "a", ExpirationSeconds: &short}, {Audience: "a"}}}}, metav1.CreateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "metadata.name,spec.tokenRequests[0].expirationSeconds,spec.tokenRequests[1].audience,spec.volumeLifecycleModes[0]" {
		t.Errorf("invalid CSI driver: causes %v", got)
	}
	drv, err := c.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "csi.example.com"}}, metav1.CreateOptions{})
	check(t, err)
	if !*drv.Spec.AttachRequired || *drv.Spec.PodInfoOnMount || *drv.Spec.StorageCapacity || *drv.Spec.RequiresRepublish ||
		*drv.Spec.FSGroupPolicy != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy ||
		len(drv.Spec.VolumeLifecycleModes) != 1 || drv.Spec.VolumeLifecycleModes[0] != storagev1.VolumeLifecyclePersistent {
		t.Errorf("CSI driver defaults: %+v", drv.Spec)
	}
	no := false
	drv.Spec.AttachRequired = &no
	_, err = c.StorageV1().CSIDrivers().Update(ctx, drv, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "spec.attachRequired" {
		t.Errorf("changing attachRequired: causes %v", got)
	}

	_, err = c.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "Run.SC"}, metav1.CreateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "handler" {
		t.Errorf("invalid runtime class: causes %v", got)
	}
	rc, err := c.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{})
	check(t, err)
	rc.Handler = "kata"
	_, err = c.NodeV1().RuntimeClasses().Update(ctx, rc, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "handler" {
		t.Errorf("changing a runtime class's handler: causes %v", got)
	}
}

// TestRuntimeClassAdmission: a pod running under a RuntimeClass gets the class's overhead,
// node selector and tolerations, or is refused as kube-apiserver's RuntimeClass plugin
// refuses it.
func TestRuntimeClassAdmission(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns = "default"
	overhead := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("120Mi")}
	_, err := c.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandbox"}, Handler: "sandbox",
		Overhead: &nodev1.Overhead{PodFixed: overhead},
		Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{"sandbox": "yes"},
			Tolerations: []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}}},
		metav1.CreateOptions{})
	check(t, err)
	pod := func(name, class string, change func(*corev1.Pod)) (*corev1.Pod, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: podTemplate(name, "").Spec}
		if class != "" {
			p.Spec.RuntimeClassName = &class
		}
		if change != nil {
			change(p)
		}
		return c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	}

	p, err := pod("sandboxed", "sandbox", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} })
	check(t, err)
	if !apiequality.Semantic.DeepEqual(p.Spec.Overhead, overhead) || p.Spec.NodeSelector["sandbox"] != "yes" || p.Spec.NodeSelector["zone"] != "a" ||
		!slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "sandbox" }) {
		t.Errorf("pod under the sandbox class: overhead %v nodeSelector %v tolerations %v", p.Spec.Overhead, p.Spec.NodeSelector, p.Spec.Tolerations)
	}
	for _, tc := range []struct {
		name, class string
		change      func(*corev1.Pod)
		want        string
	}{
		{"no such class", "nope", nil, `pod rejected: RuntimeClass "nope" not found`},
		{"conflicting node selector", "sandbox", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"sandbox": "no"} },
			"conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"},
		{"other overhead", "sandbox", func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		},
			"pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"},
		{"overhead without a class", "", func(p *corev1.Pod) { p.Spec.Overhead = overhead },
			"pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"},
	} {
		_, err := pod("refused", tc.class, tc.change)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 403 %q", tc.name, err, tc.want)
		}
	}
}
