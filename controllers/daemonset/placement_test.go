package daemonset

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// decisionCase is one predicate outcome; want is the CURRENT answer, wantLegacy the
// LEGACY-BIND one, with the FailedPlacement reasons it reports.
type decisionCase struct {
	name       string
	ds         *appsv1.DaemonSet
	node       *corev1.Node
	others     []*corev1.Pod // pods bound to the node (not the DaemonSet's)
	want       decision
	wantLegacy decision
	reasons    []string
}

var (
	dTTT = decision{true, true, true}
	dFFT = decision{false, false, true}
	dFFF = decision{}
	dTFT = decision{true, false, true}
)

func otherPod(name, node string, cpu string, hostPort int32) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "other", UID: newUID()},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	if hostPort != 0 {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: hostPort, HostPort: hostPort, Protocol: corev1.ProtocolTCP}}
	}
	return p
}

func decisionCases() []decisionCase {
	tolerate := func(key string, effect corev1.TaintEffect) dsOpt {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Tolerations = append(ds.Spec.Template.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect})
		}
	}
	critical := func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.PriorityClassName = "system-node-critical" }
	pinned := func(node string) dsOpt { return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeName = node } }
	requiredZone := func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
		}}}
	}
	failed := otherPod("done", "n1", "2", 80)
	failed.Status.Phase = corev1.PodFailed

	return []decisionCase{
		{name: "plain node", ds: newDS("d"), node: newNode("n1"), want: dTTT, wantLegacy: dTTT},
		{name: "template nodeName names this node", ds: newDS("d", pinned("n1")), node: newNode("n1"), want: dTTT, wantLegacy: dTTT},
		{name: "template nodeName names another node", ds: newDS("d", pinned("n2")), node: newNode("n1"), want: dFFF, wantLegacy: dFFF},
		{name: "nodeSelector matches", ds: newDS("d", withNodeSelector(map[string]string{"role": "x"})), node: newNode("n1", withLabels(map[string]string{"role": "x"})), want: dTTT, wantLegacy: dTTT},
		{name: "nodeSelector mismatch", ds: newDS("d", withNodeSelector(map[string]string{"role": "x"})), node: newNode("n1"), want: dFFF, wantLegacy: dFFF},
		{name: "required affinity mismatch", ds: newDS("d", requiredZone), node: newNode("n1", withLabels(map[string]string{"zone": "b"})), want: dFFF, wantLegacy: dFFF},
		{name: "required affinity match", ds: newDS("d", requiredZone), node: newNode("n1", withLabels(map[string]string{"zone": "a"})), want: dTTT, wantLegacy: dTTT},
		{name: "untolerated NoExecute", ds: newDS("d"), node: newNode("n1", withTaint("k", corev1.TaintEffectNoExecute)), want: dFFF, wantLegacy: dFFF},
		{name: "untolerated NoSchedule only", ds: newDS("d"), node: newNode("n1", withTaint("k", corev1.TaintEffectNoSchedule)), want: dFFT, wantLegacy: dFFT},
		{name: "PreferNoSchedule ignored", ds: newDS("d"), node: newNode("n1", withTaint("k", corev1.TaintEffectPreferNoSchedule)), want: dTTT, wantLegacy: dTTT},
		{name: "tolerated NoSchedule", ds: newDS("d", tolerate("k", corev1.TaintEffectNoSchedule)), node: newNode("n1", withTaint("k", corev1.TaintEffectNoSchedule)), want: dTTT, wantLegacy: dTTT},
		{name: "tolerated NoExecute", ds: newDS("d", tolerate("k", "")), node: newNode("n1", withTaint("k", corev1.TaintEffectNoExecute)), want: dTTT, wantLegacy: dTTT},
		{name: "auto toleration: unschedulable", ds: newDS("d"), node: newNode("n1", withTaint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)), want: dTTT, wantLegacy: dTTT},
		{name: "auto toleration: not-ready NoExecute", ds: newDS("d"), node: newNode("n1", withTaint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)), want: dTTT, wantLegacy: dTTT},
		{name: "network-unavailable not tolerated without hostNetwork", ds: newDS("d"), node: newNode("n1", withTaint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), want: dFFT, wantLegacy: dFFT},
		{name: "network-unavailable tolerated with hostNetwork", ds: newDS("d", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true }), node: newNode("n1", withTaint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), want: dTTT, wantLegacy: dTTT},
		{name: "NoSchedule and NoExecute", ds: newDS("d"), node: newNode("n1", withTaint("a", corev1.TaintEffectNoSchedule), withTaint("b", corev1.TaintEffectNoExecute)), want: dFFF, wantLegacy: dFFF},

		// Resource, host-port and pressure outcomes matter only in LEGACY-BIND.
		{name: "insufficient cpu", ds: newDS("d", withRequests("500m")), node: newNode("n1", withAllocatable("1", "110")), others: []*corev1.Pod{otherPod("o", "n1", "600m", 0)},
			want: dTTT, wantLegacy: dTFT, reasons: []string{"Insufficient cpu"}},
		{name: "cpu fits exactly", ds: newDS("d", withRequests("400m")), node: newNode("n1", withAllocatable("1", "110")), others: []*corev1.Pod{otherPod("o", "n1", "600m", 0)},
			want: dTTT, wantLegacy: dTTT},
		{name: "too many pods", ds: newDS("d"), node: newNode("n1", withAllocatable("1", "1")), others: []*corev1.Pod{otherPod("o", "n1", "", 0)},
			want: dTTT, wantLegacy: dTFT, reasons: []string{"Insufficient pods"}},
		{name: "several resources: the last one is reported", ds: newDS("d", withRequests("500m")), node: newNode("n1", withAllocatable("1", "1")), others: []*corev1.Pod{otherPod("o", "n1", "600m", 0)},
			want: dTTT, wantLegacy: dTFT, reasons: []string{"Insufficient cpu"}},
		{name: "terminal pods hold nothing", ds: newDS("d", withRequests("500m"), withHostPort(80)), node: newNode("n1", withAllocatable("1", "110")), others: []*corev1.Pod{failed},
			want: dTTT, wantLegacy: dTTT},
		{name: "host port conflict", ds: newDS("d", withHostPort(80)), node: newNode("n1"), others: []*corev1.Pod{otherPod("o", "n1", "", 80)},
			want: dTTT, wantLegacy: dFFF},
		{name: "different host port", ds: newDS("d", withHostPort(80)), node: newNode("n1"), others: []*corev1.Pod{otherPod("o", "n1", "", 81)},
			want: dTTT, wantLegacy: dTTT},
		{name: "NoSchedule taint with insufficient cpu: no event", ds: newDS("d", withRequests("500m")), node: newNode("n1", withAllocatable("1", "110"), withTaint("k", corev1.TaintEffectNoSchedule)),
			others: []*corev1.Pod{otherPod("o", "n1", "600m", 0)}, want: dFFT, wantLegacy: dFFT},
		{name: "NoExecute taint with host port conflict", ds: newDS("d", withHostPort(80)), node: newNode("n1", withTaint("k", corev1.TaintEffectNoExecute)),
			others: []*corev1.Pod{otherPod("o", "n1", "", 80)}, want: dFFF, wantLegacy: dFFF},
		{name: "memory pressure, best-effort pod", ds: newDS("d"), node: newNode("n1", withCondition(corev1.NodeMemoryPressure)),
			want: dTTT, wantLegacy: dTFT, reasons: []string{reasonMemoryPressure}},
		{name: "memory pressure, pod with requests", ds: newDS("d", withRequests("100m")), node: newNode("n1", withCondition(corev1.NodeMemoryPressure)),
			want: dTTT, wantLegacy: dTTT},
		{name: "disk pressure", ds: newDS("d", withRequests("100m")), node: newNode("n1", withCondition(corev1.NodeDiskPressure)),
			want: dTTT, wantLegacy: dTFT, reasons: []string{reasonDiskPressure}},
		{name: "disk pressure and insufficient cpu: pressure reported only", ds: newDS("d", withRequests("500m")), node: newNode("n1", withAllocatable("1", "110"), withCondition(corev1.NodeDiskPressure)),
			others: []*corev1.Pod{otherPod("o", "n1", "600m", 0)}, want: dTTT, wantLegacy: dTFT, reasons: []string{reasonDiskPressure}},
		{name: "critical pod ignores resources", ds: newDS("d", withRequests("500m"), critical), node: newNode("n1", withAllocatable("1", "1")),
			others: []*corev1.Pod{otherPod("o", "n1", "600m", 0)}, want: dTTT, wantLegacy: dTTT},
		{name: "critical pod ignores pressure", ds: newDS("d", critical), node: newNode("n1", withCondition(corev1.NodeDiskPressure), withCondition(corev1.NodeMemoryPressure)),
			want: dTTT, wantLegacy: dTTT},
		{name: "critical pod still blocked by host port", ds: newDS("d", withHostPort(80), critical), node: newNode("n1"),
			others: []*corev1.Pod{otherPod("o", "n1", "", 80)}, want: dTTT, wantLegacy: dFFF},
		{name: "critical pod still blocked by selector", ds: newDS("d", critical, withNodeSelector(map[string]string{"role": "x"})), node: newNode("n1"),
			want: dFFF, wantLegacy: dFFF},
	}
}

func TestDecisionCurrent(t *testing.T) {
	for _, tt := range decisionCases() {
		t.Run(tt.name, func(t *testing.T) {
			got := newEvaluator(tt.ds).current(tt.node)
			if got != tt.want {
				t.Errorf("current = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecisionLegacy(t *testing.T) {
	for _, tt := range decisionCases() {
		t.Run(tt.name, func(t *testing.T) {
			got, reasons := newEvaluator(tt.ds).legacy(tt.node, tt.others)
			if got != tt.wantLegacy {
				t.Errorf("legacy = %+v, want %+v", got, tt.wantLegacy)
			}
			if !reflect.DeepEqual(reasons, tt.reasons) {
				t.Errorf("reasons = %q, want %q", reasons, tt.reasons)
			}
		})
	}
}

// The controller's own pods and unbound pods are not part of LEGACY-BIND's simulation, and
// its answer comes with FailedPlacement events only on the sync path.
func TestLegacySimulationInputs(t *testing.T) {
	ds := newDS("d", withRequests("600m"), withHostPort(80))
	node := newNode("n1", withAllocatable("1", "110"))
	own := newDaemonPodFor(ds, "n1", "h")
	own.Spec.Containers = ds.Spec.Template.Spec.Containers
	unboundOther := otherPod("u", "", "900m", 80)
	f := newFixture(t, []runtime.Object{ds, node, own, unboundOther}, legacyMode)

	d, reasons := f.c.decide(ds, node)
	if d != dTTT || len(reasons) != 0 {
		t.Fatalf("own pods must be excluded: got %+v %q", d, reasons)
	}
	f.addToCache(otherPod("o", "n1", "500m", 0))
	if d, reasons = f.c.decide(ds, node); d != dTFT || !reflect.DeepEqual(reasons, []string{"Insufficient cpu"}) {
		t.Fatalf("other pod must count: got %+v %q", d, reasons)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("decide must not record events itself: %q", ev)
	}
}

func TestEvaluatorCache(t *testing.T) {
	var c evaluatorCache
	ds := newDS("d")
	e1 := c.get(ds)
	if c.get(ds) != e1 {
		t.Error("same resourceVersion must reuse the evaluator")
	}
	ds2 := ds.DeepCopy()
	ds2.ResourceVersion = "2"
	ds2.Spec.Template.Spec.NodeSelector = map[string]string{"x": "y"}
	e2 := c.get(ds2)
	if e2 == e1 || e2.current(newNode("n")) != dFFF {
		t.Error("new resourceVersion must rebuild the evaluator")
	}
	c.forget(ds.UID)
	if c.get(ds2) == e2 {
		t.Error("forget must drop the entry")
	}
}
