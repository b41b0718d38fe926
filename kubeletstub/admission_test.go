package kubeletstub

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/configs"
)

func admissionNode(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n-0", Labels: map[string]string{"disk": "ssd", corev1.LabelHostname: "n-0"}},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("1"),
			corev1.ResourceMemory: resource.MustParse("1Gi"),
			corev1.ResourcePods:   resource.MustParse("2"),
		}},
	}
}

func TestAdmit(t *testing.T) {
	noExecute := corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoExecute}
	noSchedule := corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}
	running := newPod(podSpec{name: "running", node: "n-0", cpu: "100m", memory: "100Mi", hostPort: 8080, phase: corev1.PodRunning})
	failed := newPod(podSpec{name: "failed", node: "n-0", cpu: "900m", hostPort: 9090, phase: corev1.PodFailed})
	tests := []struct {
		name        string
		pod         *corev1.Pod
		node        *corev1.Node
		others      []*corev1.Pod
		wantReason  string
		wantMessage string
	}{
		{
			name: "fits", pod: newPod(podSpec{name: "p", cpu: "900m", memory: "900Mi"}),
			node: admissionNode(), others: []*corev1.Pod{running},
		},
		{
			name: "terminal pods hold no resources or ports", pod: newPod(podSpec{name: "p", cpu: "900m", hostPort: 9090}),
			node: admissionNode(), others: []*corev1.Pod{running, failed},
		},
		{
			name: "out of cpu", pod: newPod(podSpec{name: "p", cpu: "2"}),
			node: admissionNode(), others: []*corev1.Pod{running},
			wantReason:  "OutOfcpu",
			wantMessage: "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 100, capacity: 1000",
		},
		{
			name: "out of memory", pod: newPod(podSpec{name: "p", memory: "1000Mi"}),
			node: admissionNode(), others: []*corev1.Pod{running},
			wantReason:  "OutOfmemory",
			wantMessage: "Pod was rejected: Node didn't have enough resource: memory, requested: 1048576000, used: 104857600, capacity: 1073741824",
		},
		{
			name: "out of pods", pod: newPod(podSpec{name: "p"}),
			node: admissionNode(), others: []*corev1.Pod{running, newPod(podSpec{name: "other", phase: corev1.PodRunning})},
			wantReason:  "OutOfpods",
			wantMessage: "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2",
		},
		{
			name: "host port in use", pod: newPod(podSpec{name: "p", hostPort: 8080}),
			node: admissionNode(), others: []*corev1.Pod{running},
			wantReason:  "NodePorts",
			wantMessage: "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
		},
		{
			name: "node selector mismatch", pod: newPod(podSpec{name: "p", nodeSelector: map[string]string{"disk": "hdd"}}),
			node:        admissionNode(),
			wantReason:  "NodeAffinity",
			wantMessage: "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
		},
		{
			name: "node selector match", pod: newPod(podSpec{name: "p", nodeSelector: map[string]string{"disk": "ssd"}}),
			node: admissionNode(),
		},
		{
			name: "untolerated NoExecute taint", pod: newPod(podSpec{name: "p"}),
			node:        admissionNode(noExecute),
			wantReason:  "Taint",
			wantMessage: "Pod was rejected: Predicate TaintToleration failed: node(s) had untolerated taint {dedicated: infra}",
		},
		{
			name: "tolerated NoExecute taint", pod: newPod(podSpec{name: "p", tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}),
			node: admissionNode(noExecute),
		},
		{
			name: "NoSchedule taints are the scheduler's business", pod: newPod(podSpec{name: "p"}),
			node: admissionNode(noSchedule),
		},
		{
			name: "resources are checked first", pod: newPod(podSpec{name: "p", cpu: "2", hostPort: 8080, nodeSelector: map[string]string{"disk": "hdd"}}),
			node: admissionNode(noExecute), others: []*corev1.Pod{running},
			wantReason:  "OutOfcpu",
			wantMessage: "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 100, capacity: 1000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := admit(tt.pod, tt.node, tt.others)
			if tt.wantReason == "" {
				if !got.admitted {
					t.Fatalf("rejected with %s: %s; want admitted", got.reason, got.message)
				}
				return
			}
			if got.admitted {
				t.Fatalf("admitted; want rejected with %s", tt.wantReason)
			}
			if got.reason != tt.wantReason || got.message != tt.wantMessage {
				t.Errorf("got %q %q\nwant %q %q", got.reason, got.message, tt.wantReason, tt.wantMessage)
			}
		})
	}
}

// TestAdmissionThroughFleet runs admission end to end on a fake API: each rejection ends in
// phase Failed with the kubelet's reason, and an admitted pod's resources count against the
// next one.
func TestAdmissionThroughFleet(t *testing.T) {
	cfg := testConfig(1)
	cfg.Template.Capacity = configs.StubResources{CPU: "1", Memory: "1Gi", Pods: 3}
	cfg.Template.Taints = []configs.StubTaint{{Key: "dedicated", Value: "infra", Effect: "NoExecute"}}
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	tolerate := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}

	tf.createPod(t, newPod(podSpec{name: "big", node: "n-0", cpu: "600m", hostPort: 8080, tolerations: tolerate}))
	tf.waitPhase(t, "big", corev1.PodRunning)

	cases := []struct {
		pod    podSpec
		reason string
	}{
		{podSpec{name: "cpu", node: "n-0", cpu: "600m", tolerations: tolerate}, "OutOfcpu"},
		{podSpec{name: "memory", node: "n-0", memory: "2Gi", tolerations: tolerate}, "OutOfmemory"},
		{podSpec{name: "port", node: "n-0", hostPort: 8080, tolerations: tolerate}, "NodePorts"},
		{podSpec{name: "selector", node: "n-0", nodeSelector: map[string]string{"disk": "ssd"}, tolerations: tolerate}, "NodeAffinity"},
		{podSpec{name: "taint", node: "n-0"}, "Taint"},
	}
	for _, c := range cases {
		tf.createPod(t, newPod(c.pod))
	}
	for _, c := range cases {
		p := tf.waitPhase(t, c.pod.name, corev1.PodFailed)
		if p.Status.Reason != c.reason {
			t.Errorf("pod %s: reason %q, want %q (message %q)", c.pod.name, p.Status.Reason, c.reason, p.Status.Message)
		}
		if len(p.Status.ContainerStatuses) != 0 || p.Status.StartTime != nil {
			t.Errorf("pod %s: a rejected pod must not start: %+v", c.pod.name, p.Status)
		}
	}
	// Two slots remain for pods (3 minus "big"); rejected pods hold none.
	tf.createPod(t, newPod(podSpec{name: "small-1", node: "n-0", tolerations: tolerate}))
	tf.waitPhase(t, "small-1", corev1.PodRunning)
	tf.createPod(t, newPod(podSpec{name: "small-2", node: "n-0", tolerations: tolerate}))
	tf.waitPhase(t, "small-2", corev1.PodRunning)
	tf.createPod(t, newPod(podSpec{name: "one-too-many", node: "n-0", tolerations: tolerate}))
	if p := tf.waitPhase(t, "one-too-many", corev1.PodFailed); p.Status.Reason != "OutOfpods" {
		t.Errorf("one-too-many: reason %q, want OutOfpods", p.Status.Reason)
	}
}
