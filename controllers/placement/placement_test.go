package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourcePods: resource.MustParse("3"),
		}},
	}
}

func pod(uid, cpu, mem string, hostPorts ...int32) *corev1.Pod {
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	if cpu != "" {
		c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	for _, hp := range hostPorts {
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: hp, HostPort: hp, Protocol: corev1.ProtocolTCP})
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
}

func pinnedTo(nodeName string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}},
		}}},
	}}}
}

func TestMatchesNodeSelectorAndAffinity(t *testing.T) {
	n := node("n1", map[string]string{"disk": "ssd"})
	tests := []struct {
		name     string
		selector map[string]string
		affinity *corev1.Affinity
		want     bool
	}{
		{"nothing asked", nil, nil, true},
		{"selector matches", map[string]string{"disk": "ssd"}, nil, true},
		{"selector does not match", map[string]string{"disk": "hdd"}, nil, false},
		{"pinned to this node", nil, pinnedTo("n1"), true},
		{"pinned to another node", nil, pinnedTo("n2"), false},
		{"selector and pin both hold", map[string]string{"disk": "ssd"}, pinnedTo("n1"), true},
		{"pin holds, selector does not", map[string]string{"disk": "hdd"}, pinnedTo("n1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod("p", "", "")
			p.Spec.NodeSelector, p.Spec.Affinity = tt.selector, tt.affinity
			if got := MatchesNodeSelectorAndAffinity(p, n); got != tt.want {
				t.Fatalf("MatchesNodeSelectorAndAffinity = %v, want %v", got, tt.want)
			}
			if got := NewAffinityMatcher(p).Matches(n); got != tt.want {
				t.Fatalf("AffinityMatcher.Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUntoleratedTaint(t *testing.T) {
	noSched := corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}
	noExec := corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute}
	tests := []struct {
		name        string
		taints      []corev1.Taint
		tolerations []corev1.Toleration
		effects     []corev1.TaintEffect
		wantKey     string
	}{
		{"no taints", nil, nil, nil, ""},
		{"untolerated NoSchedule", []corev1.Taint{noSched}, nil, nil, "dedicated"},
		{"tolerated by key and value", []corev1.Taint{noSched}, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra"}}, nil, ""},
		{"wrong value", []corev1.Taint{noSched}, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "web"}}, nil, "dedicated"},
		{"Exists tolerates any value", []corev1.Taint{noSched}, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}, nil, ""},
		{"only NoExecute asked", []corev1.Taint{noSched, noExec}, nil, []corev1.TaintEffect{corev1.TaintEffectNoExecute}, "gpu"},
		{"NoSchedule filtered out", []corev1.Taint{noSched}, nil, []corev1.TaintEffect{corev1.TaintEffectNoExecute}, ""},
		{"empty key Exists tolerates all", []corev1.Taint{noSched, noExec}, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod("p", "", "")
			p.Spec.Tolerations = tt.tolerations
			taint, found := UntoleratedTaint(p, node("n", nil, tt.taints...), tt.effects...)
			if found != (tt.wantKey != "") || (found && taint.Key != tt.wantKey) {
				t.Fatalf("UntoleratedTaint = %v %v, want key %q", taint, found, tt.wantKey)
			}
		})
	}
}

func TestInsufficientResources(t *testing.T) {
	n := node("n", nil) // 1 cpu, 1Gi, 3 pods
	failed := pod("f", "900m", "")
	failed.Status.Phase = corev1.PodFailed
	tests := []struct {
		name    string
		pod     *corev1.Pod
		others  []*corev1.Pod
		reasons []string
	}{
		{"fits on an empty node", pod("p", "500m", "512Mi"), nil, nil},
		{"exactly fills the node", pod("p", "500m", ""), []*corev1.Pod{pod("o", "500m", "")}, nil},
		{"cpu short", pod("p", "600m", ""), []*corev1.Pod{pod("o", "500m", "")}, []string{"Insufficient cpu"}},
		{"cpu and memory short", pod("p", "2", "2Gi"), nil, []string{"Insufficient cpu", "Insufficient memory"}},
		{"too many pods", pod("p", "", ""), []*corev1.Pod{pod("a", "", ""), pod("b", "", ""), pod("c", "", "")}, []string{"Too many pods"}},
		{"terminal pods do not count", pod("p", "500m", ""), []*corev1.Pod{failed}, nil},
		{"the pod itself does not count", pod("p", "600m", ""), []*corev1.Pod{pod("p", "600m", "")}, nil},
		{"extended resource missing on the node", func() *corev1.Pod {
			p := pod("p", "", "")
			p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
			return p
		}(), nil, []string{"Insufficient nvidia.com/gpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := InsufficientResources(tt.pod, n, tt.others)
			if len(got) != len(tt.reasons) {
				t.Fatalf("InsufficientResources = %+v, want %v", got, tt.reasons)
			}
			for i := range got {
				if got[i].Reason() != tt.reasons[i] {
					t.Fatalf("reason %d = %q, want %q", i, got[i].Reason(), tt.reasons[i])
				}
			}
		})
	}
}

func TestHostPortConflict(t *testing.T) {
	withIP := pod("o", "", "", 80)
	withIP.Spec.Containers[0].Ports[0].HostIP = "10.0.0.1"
	udp := pod("o", "", "", 53)
	udp.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP
	finished := pod("o", "", "", 80)
	finished.Status.Phase = corev1.PodSucceeded
	tests := []struct {
		name   string
		pod    *corev1.Pod
		others []*corev1.Pod
		want   bool
	}{
		{"no host ports", pod("p", "", ""), []*corev1.Pod{pod("o", "", "", 80)}, false},
		{"same port", pod("p", "", "", 80), []*corev1.Pod{pod("o", "", "", 80)}, true},
		{"other port", pod("p", "", "", 81), []*corev1.Pod{pod("o", "", "", 80)}, false},
		{"wildcard against a specific IP", pod("p", "", "", 80), []*corev1.Pod{withIP}, true},
		{"other protocol", pod("p", "", "", 53), []*corev1.Pod{udp}, false},
		{"finished pods free their ports", pod("p", "", "", 80), []*corev1.Pod{finished}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HostPortConflict(tt.pod, tt.others); got != tt.want {
				t.Fatalf("HostPortConflict = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTargetNodeName(t *testing.T) {
	bound := pod("p", "", "")
	bound.Spec.NodeName = "n1"
	pinned := pod("p", "", "")
	pinned.Spec.Affinity = pinnedTo("n2")
	free := pod("p", "", "")
	for _, tt := range []struct {
		pod  *corev1.Pod
		want string
		ok   bool
	}{{bound, "n1", true}, {pinned, "n2", true}, {free, "", false}} {
		if got, ok := TargetNodeName(tt.pod); got != tt.want || ok != tt.ok {
			t.Errorf("TargetNodeName = %q %v, want %q %v", got, ok, tt.want, tt.ok)
		}
	}
}
