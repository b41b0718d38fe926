package apiserver

import (
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// countingConverter counts the conversions that reach the library's type converter.
type countingConverter struct {
	managedfields.TypeConverter
	calls atomic.Int64
}

func (c *countingConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	c.calls.Add(1)
	return c.TypeConverter.ObjectToTyped(obj, opts...)
}

// TestTrackWriteTrustsBuiltinObjects: the managed fields an update records are the same
// whether its objects are converted by the library's validating converter or, as trackWrite
// does for a built-in kind, without validation (and the stored one without a copy), also for
// objects with duplicate or missing list keys; and with trackWrite nothing is validated.
func TestTrackWriteTrustsBuiltinObjects(t *testing.T) {
	reg := builtinRegistry(t)
	fields := newFieldManagers(reg, newOpenAPIDocs(reg))
	s := &Server{fields: fields}
	pods := reg.lookup("", "v1", "pods")
	if _, _, err := fields.getWithConverter(pods, "status"); err != nil {
		t.Fatal(err)
	}
	library := fields.converter.TypeConverter
	counting := &countingConverter{TypeConverter: library}
	fields.converter = &trustingConverter{TypeConverter: counting}
	fields.managers = map[fieldManagerKey]*managedfields.FieldManager{}

	created := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
	}
	running := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	tests := []struct {
		name, subresource, manager string
		change                     func(p *corev1.Pod)
		stored                     func(p *corev1.Pod) // changes the stored object first
	}{
		{name: "status by the kubelet", subresource: "status", manager: "kubelet", change: running},
		// The half a write cannot change is left out of the comparison (withoutResetField):
		// what the library records must not depend on it, also where it differs.
		{name: "status and spec in a status write", subresource: "status", manager: "kubelet", change: func(p *corev1.Pod) {
			running(p)
			p.Spec.Containers[0].Image = "i:3"
			p.Spec.NodeName = "n"
		}},
		{name: "only spec in a status write, by the spec's manager", subresource: "status", manager: "creator", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "i:3"
		}},
		{name: "status and labels in a write to the pod", manager: "kubectl", change: func(p *corev1.Pod) {
			running(p)
			p.Labels["tier"] = "web"
		}},
		{name: "only status in a write to the pod", manager: "kubectl", change: running},
		{name: "status by a second status writer", subresource: "status", manager: "other", change: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		}, stored: func(p *corev1.Pod) {
			before := p.DeepCopy()
			running(p)
			p.ManagedFields = s.trackWrite(pods, "status", before, p.DeepCopy(), "kubelet").(*corev1.Pod).ManagedFields
			if len(p.ManagedFields) != 2 {
				t.Fatalf("the kubelet's status write left %d managedFields entries; want the creator's and the kubelet's", len(p.ManagedFields))
			}
		}},
		// A manager recorded in another version keeps the full comparison.
		{name: "a manager of another version", subresource: "status", manager: "kubelet", change: func(p *corev1.Pod) {
			running(p)
			p.Spec.Containers[0].Image = "i:3"
		}, stored: func(p *corev1.Pod) { p.ManagedFields[0].APIVersion = "v1beta1" }},
		{name: "labels by another manager", manager: "kubectl", change: func(p *corev1.Pod) { p.Labels["tier"] = "web" }},
		{name: "image by the first manager", manager: "creator", change: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "i:2" }},
		// Allowed (with a warning) by validation; the field manager tolerates duplicates.
		{name: "duplicate env names", manager: "kubectl", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "2"}}
		}},
		// A keyed list item without its key: the bookkeeping fails and the library's
		// UpdateNoErrors keeps the stored managed fields; so must trackWrite.
		{name: "env item without its key", manager: "kubectl", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Value: "nameless"}}
		}},
		{name: "status item without its key", subresource: "status", manager: "kubelet", change: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Status: corev1.ConditionTrue}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The stored object, with managed fields from its creation.
			stored := s.trackWrite(pods, "", &corev1.Pod{}, created.DeepCopy(), "creator").(*corev1.Pod)
			if tc.stored != nil {
				tc.stored(stored)
			}
			next := stored.DeepCopy()
			tc.change(next)

			fm, err := managedfields.NewDefaultFieldManager(library, Scheme, Scheme, Scheme,
				pods.gvk(), pods.gvk().GroupVersion(), tc.subresource, resetFields(pods, tc.subresource))
			if err != nil {
				t.Fatal(err)
			}
			live := stored.DeepCopy()
			live.SetGroupVersionKind(pods.gvk())
			want := next.DeepCopy()
			want.SetGroupVersionKind(pods.gvk())
			wantObj := fm.UpdateNoErrors(live, want, tc.manager).(*corev1.Pod)

			before := counting.calls.Load()
			got := s.trackWrite(pods, tc.subresource, stored.DeepCopy(), next.DeepCopy(), tc.manager).(*corev1.Pod)
			if calls := counting.calls.Load() - before; calls != 0 {
				t.Errorf("%d validating conversions for one update of a built-in kind; want 0", calls)
			}
			// The entries' times are the clock's at each update.
			for _, mf := range [][]metav1.ManagedFieldsEntry{got.ManagedFields, wantObj.ManagedFields} {
				for i := range mf {
					mf[i].Time = nil
				}
			}
			if !apiequality.Semantic.DeepEqual(got.ManagedFields, wantObj.ManagedFields) {
				t.Errorf("managedFields differ from the library's:\n got %+v\nwant %+v", got.ManagedFields, wantObj.ManagedFields)
			}
		})
	}
}

// daemonPod is a pod as the DaemonSet controller, the API server's defaults and the
// ServiceAccount admission make it.
func daemonPod() *corev1.Pod {
	yes, grace, mode, priority := true, int64(30), int32(420), int32(0)
	preempt := corev1.PreemptLowerPriority
	tolerate := func(key string, effect corev1.TaintEffect) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "agent-x7k2p", GenerateName: "agent-", Namespace: "default", UID: "0b6c9d4e",
			Labels: map[string]string{"app": "agent", "controller-revision-hash": "5d8f7c6b9", "pod-template-generation": "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent",
				UID: "4f1e2d3c", Controller: &yes, BlockOwnerDeletion: &yes}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-0001",
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name",
						Operator: corev1.NodeSelectorOpIn, Values: []string{"node-0001"}}},
				}}},
			}},
			Tolerations: []corev1.Toleration{
				tolerate(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
				tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute),
				tolerate(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule),
				tolerate(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule),
				tolerate(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule),
				tolerate(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule),
			},
			Containers: []corev1.Container{{
				Name: "agent", Image: "registry.example/agent:1.0", ImagePullPolicy: corev1.PullIfNotPresent,
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: apiresource.MustParse("50m"), corev1.ResourceMemory: apiresource.MustParse("64Mi")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-abcde", ReadOnly: true,
					MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: &mode,
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				},
			}}}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, SchedulerName: corev1.DefaultSchedulerName,
			ServiceAccountName: "default", TerminationGracePeriodSeconds: &grace, EnableServiceLinks: &yes,
			SecurityContext: &corev1.PodSecurityContext{}, PreemptionPolicy: &preempt, Priority: &priority,
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
}

// runningStatus sets the status a kubelet writes once p's one container runs.
func runningStatus(p *corev1.Pod) {
	started := metav1.NewTime(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC))
	yes := true
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP, p.Status.PodIP = "10.0.0.1", "10.244.0.5"
	p.Status.HostIPs = []corev1.HostIP{{IP: "10.0.0.1"}}
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	p.Status.StartTime = &started
	p.Status.Conditions = nil
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		p.Status.Conditions = append(p.Status.Conditions,
			corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: started})
	}
	c := p.Spec.Containers[0]
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Ready: true, Started: &yes,
		Image: c.Image, ImageID: c.Image + "@sha256:0123", ContainerID: "containerd://abc",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}
}

// fieldsOnlyServer is a Server with nothing but the field managers of the built-in kinds,
// for benchmarks of trackWrite.
func fieldsOnlyServer(b *testing.B) (*Server, *registry) {
	reg := builtinRegistry(b)
	return &Server{fields: newFieldManagers(reg, newOpenAPIDocs(reg))}, reg
}

// BenchmarkTrackWritePodStatus is the managed-fields bookkeeping of a kubelet's pod status
// update, the API server's most frequent write in a rollout: of a small pod, and of a pod as
// a DaemonSet's are.
func BenchmarkTrackWritePodStatus(b *testing.B) {
	s, reg := fieldsOnlyServer(b)
	pods := reg.lookup("", "v1", "pods")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
	}
	for _, bc := range []struct {
		name string
		pod  *corev1.Pod
	}{{"small", pod}, {"daemon", daemonPod()}} {
		b.Run(bc.name, func(b *testing.B) {
			stored := s.trackWrite(pods, "", &corev1.Pod{}, bc.pod, "creator").(*corev1.Pod)
			next := stored.DeepCopy()
			runningStatus(next)
			b.ReportAllocs()
			for b.Loop() {
				s.trackWrite(pods, "status", stored.DeepCopy(), next.DeepCopy(), "kubelet")
			}
		})
	}
}

// BenchmarkTrackWriteLeaseRenewal is the managed-fields bookkeeping of a node's Lease
// renewal, the write a cluster makes most when nothing else happens (one per node every
// 10 s): only renewTime changes, and the managed fields carry over each time. Set beside
// the same bookkeeping in a running server's profile, it shows how much slower code runs
// there than in a loop (docs/performance.md, "Seventeenth round").
func BenchmarkTrackWriteLeaseRenewal(b *testing.B) {
	s, reg := fieldsOnlyServer(b)
	leases := reg.lookup("coordination.k8s.io", "v1", "leases")
	holder, seconds := "node-1", int32(40)
	renewed := metav1.NewMicroTime(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: holder, Namespace: "kube-node-lease",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: holder, UID: "8f0c"}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &renewed},
	}
	stored := s.trackWrite(leases, "", &coordinationv1.Lease{}, lease, "kubelet").(*coordinationv1.Lease)
	b.ReportAllocs()
	for b.Loop() {
		next := stored.DeepCopy()
		next.ManagedFields = nil // as the stub fleet sends it
		later := metav1.NewMicroTime(next.Spec.RenewTime.Add(10 * time.Second))
		next.Spec.RenewTime = &later
		stored = s.trackWrite(leases, "", stored.DeepCopy(), next, "kubelet").(*coordinationv1.Lease)
	}
	if len(stored.ManagedFields) != 1 || stored.ManagedFields[0].Manager != "kubelet" {
		b.Fatalf("managed fields after the renewals: %+v", stored.ManagedFields)
	}
}

// TestWithoutResetField: which writes leave which half out of the bookkeeping, and that the
// objects a request carries are not changed by it.
func TestWithoutResetField(t *testing.T) {
	reg := builtinRegistry(t)
	pods, leases := reg.lookup("", "v1", "pods"), reg.lookup("coordination.k8s.io", "v1", "leases")
	pod := func(version string) *corev1.Pod {
		p := daemonPod()
		runningStatus(p)
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "creator", APIVersion: version}}
		return p
	}
	tests := []struct {
		name        string
		res         *resource
		subresource string
		obj         func() runtime.Object
		hidden      string // "" when the full objects must be compared
	}{
		{"pod status write", pods, "status", func() runtime.Object { return pod("v1") }, "Spec"},
		{"pod write", pods, "", func() runtime.Object { return pod("v1") }, "Status"},
		{"pod with a manager of another version", pods, "status", func() runtime.Object { return pod("v2") }, ""},
		{"pod binding", pods, "binding", func() runtime.Object { return pod("v1") }, ""},
		{"kind without status", leases, "", func() runtime.Object { return &coordinationv1.Lease{} }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			live, obj := tc.obj(), tc.obj()
			liveShown, objShown, ok := withoutResetField(tc.res, tc.subresource, live, obj)
			if ok != (tc.hidden != "") {
				t.Fatalf("ok = %v, want %v", ok, tc.hidden != "")
			}
			if !apiequality.Semantic.DeepEqual(live, tc.obj()) || !apiequality.Semantic.DeepEqual(obj, tc.obj()) {
				t.Error("the objects passed in were changed")
			}
			if !ok {
				return
			}
			for _, shown := range []runtime.Object{liveShown, objShown} {
				p := shown.(*corev1.Pod)
				switch tc.hidden {
				case "Spec":
					if !apiequality.Semantic.DeepEqual(p.Spec, corev1.PodSpec{}) || p.Status.Phase != corev1.PodRunning {
						t.Errorf("status write: spec %+v, phase %q; want the spec left out, the status kept", p.Spec, p.Status.Phase)
					}
				case "Status":
					if !apiequality.Semantic.DeepEqual(p.Status, corev1.PodStatus{}) || p.Spec.NodeName == "" {
						t.Errorf("write: status %+v, node %q; want the status left out, the spec kept", p.Status, p.Spec.NodeName)
					}
				}
				if p.Name != "agent-x7k2p" || len(p.ManagedFields) != 1 {
					t.Errorf("metadata not kept: %+v", p.ObjectMeta)
				}
			}
		})
	}
}
