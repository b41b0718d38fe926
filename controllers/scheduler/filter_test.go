package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

func testNode(name string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("1"),
			corev1.ResourceMemory: resource.MustParse("1Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func testPod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			SchedulerName: "default-scheduler",
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func withCPU(q string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
}

func withHostPort(port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: port}}
	}
}

func pinnedTo(nodes ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: nodes}},
			}}},
		}}
	}
}

func boundTo(node string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.NodeName = node }
}

func tainted(taints ...corev1.Taint) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taints...) }
}

func TestFilterNode(t *testing.T) {
	noSchedule := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	noExecute := corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}
	preferNo := corev1.Taint{Key: "soft", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule}
	unschedulable := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	tests := []struct {
		name  string
		pod   *corev1.Pod
		node  *corev1.Node
		onIt  []*corev1.Pod
		wants []string
	}{
		{name: "fits", pod: testPod("p", withCPU("500m")), node: testNode("n1")},
		{name: "unschedulable node", pod: testPod("p"), node: testNode("n1", unschedulable),
			wants: []string{"node(s) were unschedulable"}},
		{name: "unschedulable node tolerated by the daemon toleration", node: testNode("n1", unschedulable),
			pod: testPod("p", func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			})},
		{name: "other node name", pod: testPod("p", boundTo("n2")), node: testNode("n1"),
			wants: []string{"node(s) didn't match the requested node name"}},
		{name: "untolerated NoSchedule taint", pod: testPod("p"), node: testNode("n1", tainted(noSchedule)),
			wants: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "untolerated NoExecute taint", pod: testPod("p"), node: testNode("n1", tainted(noExecute)),
			wants: []string{"node(s) had untolerated taint {node.kubernetes.io/unreachable: }"}},
		{name: "PreferNoSchedule is not a filter", pod: testPod("p"), node: testNode("n1", tainted(preferNo))},
		{name: "tolerated taint", node: testNode("n1", tainted(noSchedule)),
			pod: testPod("p", func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
			})},
		{name: "node selector mismatch", node: testNode("n1"),
			pod:   testPod("p", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }),
			wants: []string{"node(s) didn't match Pod's node affinity/selector"}},
		{name: "node selector match", node: testNode("n1", func(n *corev1.Node) { n.Labels["disk"] = "ssd" }),
			pod: testPod("p", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} })},
		{name: "matchFields pins to another node", pod: testPod("p", pinnedTo("n2")), node: testNode("n1"),
			wants: []string{"node(s) didn't match Pod's node affinity/selector"}},
		{name: "matchFields pins to this node", pod: testPod("p", pinnedTo("n1")), node: testNode("n1")},
		{name: "host port taken", pod: testPod("p", withHostPort(8080)), node: testNode("n1"),
			onIt:  []*corev1.Pod{testPod("q", boundTo("n1"), withHostPort(8080))},
			wants: []string{"node(s) didn't have free ports for the requested pod ports"}},
		{name: "host port taken by a finished pod", pod: testPod("p", withHostPort(8080)), node: testNode("n1"),
			onIt: []*corev1.Pod{testPod("q", boundTo("n1"), withHostPort(8080), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })}},
		{name: "insufficient cpu", pod: testPod("p", withCPU("600m")), node: testNode("n1"),
			onIt:  []*corev1.Pod{testPod("q", boundTo("n1"), withCPU("500m"))},
			wants: []string{"Insufficient cpu"}},
		{name: "too many pods and insufficient cpu", pod: testPod("p", withCPU("2")),
			node:  testNode("n1", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("1") }),
			onIt:  []*corev1.Pod{testPod("q", boundTo("n1"))},
			wants: []string{"Too many pods", "Insufficient cpu"}},
		{name: "taint is checked before resources", pod: testPod("p", withCPU("2")), node: testNode("n1", tainted(noSchedule)),
			wants: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := filterNode(tt.pod, tt.node, tt.onIt)
			if len(got) != len(tt.wants) {
				t.Fatalf("filterNode = %q, want %q", got, tt.wants)
			}
			for i := range got {
				if got[i] != tt.wants[i] {
					t.Fatalf("filterNode = %q, want %q", got, tt.wants)
				}
			}
		})
	}
}

func TestPinnedNodeNames(t *testing.T) {
	twoTerms := testPod("p", pinnedTo("a"))
	twoTerms.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(
		twoTerms.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
		corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}})
	labelTerm := testPod("p", pinnedTo("a"))
	labelTerm.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(
		labelTerm.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists}}})
	tests := []struct {
		name   string
		pod    *corev1.Pod
		want   []string
		pinned bool
	}{
		{name: "no affinity", pod: testPod("p")},
		{name: "daemon pod", pod: testPod("p", pinnedTo("n1")), want: []string{"n1"}, pinned: true},
		{name: "terms are ORed", pod: twoTerms, want: []string{"a", "b"}, pinned: true},
		{name: "a term without matchFields allows every node", pod: labelTerm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, pinned := pinnedNodeNames(tt.pod)
			if pinned != tt.pinned || (pinned && !got.Equal(sets.New(tt.want...))) {
				t.Fatalf("pinnedNodeNames = %v, %v; want %v, %v", sets.List(got), pinned, tt.want, tt.pinned)
			}
		})
	}
}

func TestFitErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  fitError
		want string
	}{
		{name: "no nodes", err: fitError{numAllNodes: 0}, want: "no nodes available to schedule pods"},
		{name: "histogram sorted as strings", err: fitError{numAllNodes: 5, reasons: map[string]int{
			"Insufficient cpu": 3, "node(s) had untolerated taint {key: value}": 2,
		}}, want: "0/5 nodes are available: 2 node(s) had untolerated taint {key: value}, 3 Insufficient cpu."},
		{name: "pinned daemon pod", err: fitError{numAllNodes: 3, reasons: map[string]int{
			"Insufficient cpu": 1, reasonPinnedElsewhere: 2,
		}}, want: "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}
