package kubeletstub

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/poll"
)

func TestCurrentFaults(t *testing.T) {
	configured := configs.StubNodeTemplate{
		ReadyDelay: 2 * time.Second,
		Faults: configs.StubFaults{
			RejectPods: "Chaos", RejectRate: 0.2, FailAfter: time.Minute, FailRate: 0.5,
			Conditions: map[string]string{"diskpressure": "true"}, // as viper delivers it
		},
	}
	tests := []struct {
		name        string
		tmpl        configs.StubNodeTemplate
		annotations map[string]string
		want        faults
		problems    int
	}{
		{
			name: "healthy defaults",
			tmpl: configs.DefaultKubeletStub().Template,
			want: faults{rejectRate: 1, failRate: 1, rejectSource: "faults.reject-pods in the stub configuration",
				runtimeHandlers: []string{"runc"}},
		},
		{
			name:        "runtime handlers added by the annotation",
			tmpl:        configs.DefaultKubeletStub().Template,
			annotations: map[string]string{AnnotationRuntimeHandlers: "kata, runc,runsc,"},
			want: faults{rejectRate: 1, failRate: 1, rejectSource: "faults.reject-pods in the stub configuration",
				runtimeHandlers: []string{"runc", "kata", "runsc"}},
		},
		{
			name:        "a malformed handler list adds nothing",
			tmpl:        configs.DefaultKubeletStub().Template,
			annotations: map[string]string{AnnotationRuntimeHandlers: "kata,Not_A_Label"},
			want: faults{rejectRate: 1, failRate: 1, rejectSource: "faults.reject-pods in the stub configuration",
				runtimeHandlers: []string{"runc"}},
			problems: 1,
		},
		{
			name: "configuration only",
			tmpl: configured,
			want: faults{
				rejectReason: "Chaos", rejectRate: 0.2, rejectSource: "faults.reject-pods in the stub configuration",
				failAfter: time.Minute, failRate: 0.5, readyDelay: 2 * time.Second,
				conditions: map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeDiskPressure: corev1.ConditionTrue},
			},
		},
		{
			name: "annotations win and apply to every pod",
			tmpl: configured,
			annotations: map[string]string{
				AnnotationRejectPods: "Rejected", AnnotationFailAfter: "30s", AnnotationReadyDelay: "1m",
				AnnotationConditions: "MemoryPressure=True, ready=Unknown", AnnotationStopHeartbeats: "true",
			},
			want: faults{
				rejectReason: "Rejected", rejectRate: 1, rejectSource: "node annotation " + AnnotationRejectPods,
				failAfter: 30 * time.Second, failRate: 1, failFromAnnotation: true, readyDelay: time.Minute,
				conditions: map[corev1.NodeConditionType]corev1.ConditionStatus{
					corev1.NodeMemoryPressure: corev1.ConditionTrue, corev1.NodeReady: corev1.ConditionUnknown,
				},
				stopHeartbeats: true,
			},
		},
		{
			name:        "empty reject reason means Rejected",
			tmpl:        configs.DefaultKubeletStub().Template,
			annotations: map[string]string{AnnotationRejectPods: ""},
			want: faults{rejectReason: "Rejected", rejectRate: 1, failRate: 1, rejectSource: "node annotation " + AnnotationRejectPods,
				runtimeHandlers: []string{"runc"}},
		},
		{
			name: "malformed annotations are ignored and reported",
			tmpl: configured,
			annotations: map[string]string{
				AnnotationFailAfter: "soon", AnnotationReadyDelay: "-1s",
				AnnotationConditions: "MemoryPressure=Maybe,Bogus=True,PIDPressure=True", AnnotationStopHeartbeats: "yes please",
			},
			want: faults{
				rejectReason: "Chaos", rejectRate: 0.2, rejectSource: "faults.reject-pods in the stub configuration",
				failAfter: time.Minute, failRate: 0.5, readyDelay: 2 * time.Second,
				conditions: map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodePIDPressure: corev1.ConditionTrue},
			},
			problems: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := currentFaults(&tt.tmpl, tt.annotations)
			if len(got.conditions) == 0 {
				got.conditions = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("currentFaults =\n%+v\nwant\n%+v", got, tt.want)
			}
			if p := annotationProblems(tt.annotations); len(p) != tt.problems {
				t.Errorf("annotationProblems = %v, want %d", p, tt.problems)
			}
		})
	}
}

func TestConditionsUnderFaults(t *testing.T) {
	got := conditions(faults{conditions: map[corev1.NodeConditionType]corev1.ConditionStatus{
		corev1.NodeDiskPressure: corev1.ConditionTrue,
		corev1.NodeReady:        corev1.ConditionFalse,
		corev1.NodePIDPressure:  corev1.ConditionFalse, // the healthy value: unchanged wording
	}})
	byType := map[corev1.NodeConditionType]condition{}
	for _, c := range got {
		byType[c.typ] = c
	}
	if len(got) != 5 {
		t.Fatalf("%d conditions, want 5", len(got))
	}
	if c := byType[corev1.NodeDiskPressure]; c.status != corev1.ConditionTrue || c.reason != "KubeletHasDiskPressure" {
		t.Errorf("DiskPressure = %+v", c)
	}
	if c := byType[corev1.NodeReady]; c.status != corev1.ConditionFalse || c.reason != "KubeletNotReady" {
		t.Errorf("Ready = %+v", c)
	}
	if c := byType[corev1.NodePIDPressure]; c.reason != "KubeletHasSufficientPID" {
		t.Errorf("PIDPressure = %+v", c)
	}
	if c := byType[corev1.NodeMemoryPressure]; c.status != corev1.ConditionFalse || c.reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure = %+v", c)
	}
}

func TestRejectPodsAnnotation(t *testing.T) {
	tf := newTestFleet(t, testConfig(2))
	tf.waitReady(t)
	tf.createPod(t, newPod(podSpec{name: "before", node: "n-0"}))
	tf.waitPhase(t, "before", corev1.PodRunning)

	tf.annotate(t, "n-0", AnnotationRejectPods, ptr("Rejected"))
	poll.Until(t, waitTimeout, "the stub sees the annotation", func() bool {
		return currentFaults(&tf.nodes[0].tmpl, mustNode(tf, "n-0").Annotations).rejectReason == "Rejected"
	})
	tf.createPod(t, newPod(podSpec{name: "during", node: "n-0"}))
	tf.createPod(t, newPod(podSpec{name: "other-node", node: "n-1"}))
	p := tf.waitPhase(t, "during", corev1.PodFailed)
	if p.Status.Reason != "Rejected" || !strings.HasPrefix(p.Status.Message, "Pod was rejected: injected by node annotation") {
		t.Errorf("rejected pod status = %q %q", p.Status.Reason, p.Status.Message)
	}
	tf.waitPhase(t, "other-node", corev1.PodRunning)
	if p := tf.pod(t, "before"); p.Status.Phase != corev1.PodRunning {
		t.Errorf("a pod admitted before the annotation is %s, want Running", p.Status.Phase)
	}

	tf.annotate(t, "n-0", AnnotationRejectPods, nil)
	poll.Until(t, waitTimeout, "the stub sees the annotation removed", func() bool {
		return currentFaults(&tf.nodes[0].tmpl, mustNode(tf, "n-0").Annotations).rejectReason == ""
	})
	tf.createPod(t, newPod(podSpec{name: "after", node: "n-0"}))
	tf.waitPhase(t, "after", corev1.PodRunning)
	if p := tf.pod(t, "during"); p.Status.Phase != corev1.PodFailed {
		t.Errorf("a rejected pod came back: %s", p.Status.Phase)
	}
}

// mustNode reads a node from the fleet's cache (what the stub decides on).
func mustNode(tf *testFleet, name string) *corev1.Node {
	n, err := tf.heartbeat.nodeLister.Get(name)
	if err != nil {
		return &corev1.Node{}
	}
	return n
}

func TestFailAfterAnnotation(t *testing.T) {
	tf := newTestFleet(t, testConfig(1))
	tf.waitReady(t)
	tf.createPod(t, newPod(podSpec{name: "old", node: "n-0"}))
	tf.waitPhase(t, "old", corev1.PodRunning)
	tf.clock.Step(time.Minute) // "old" has run for a minute

	tf.createPod(t, newPod(podSpec{name: "young", node: "n-0"}))
	tf.waitPhase(t, "young", corev1.PodRunning)
	tf.annotate(t, "n-0", AnnotationFailAfter, ptr("30s"))

	// Older than 30s: fails at once, its containers ending at start+30s.
	p := tf.waitPhase(t, "old", corev1.PodFailed)
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 1 || term.Reason != "Error" || !term.FinishedAt.Time.Equal(t0.Add(30*time.Second)) || podReady(p) {
		t.Errorf("failed pod = %+v, want exit 1 at t0+30s and not ready", p.Status)
	}
	if p := tf.pod(t, "young"); p.Status.Phase != corev1.PodRunning {
		t.Fatalf("young failed early: %+v", p.Status)
	}
	tf.clock.Step(30 * time.Second)
	tf.waitPhase(t, "young", corev1.PodFailed)
}

func TestReadyDelayAnnotation(t *testing.T) {
	tf := newTestFleet(t, testConfig(1))
	tf.waitReady(t)
	tf.annotate(t, "n-0", AnnotationReadyDelay, ptr("20s"))
	poll.Until(t, waitTimeout, "the stub sees the annotation", func() bool {
		return currentFaults(&tf.nodes[0].tmpl, mustNode(tf, "n-0").Annotations).readyDelay == 20*time.Second
	})
	tf.createPod(t, newPod(podSpec{name: "p", node: "n-0"}))
	if p := tf.waitPhase(t, "p", corev1.PodRunning); podReady(p) {
		t.Fatalf("Ready before the 20s delay")
	}
	tf.clock.Step(19 * time.Second)
	tf.createPod(t, newPod(podSpec{name: "marker", node: "n-0"}))
	tf.waitPhase(t, "marker", corev1.PodRunning)
	if podReady(tf.pod(t, "p")) {
		t.Fatalf("Ready after 19s of a 20s delay")
	}
	tf.clock.Step(time.Second)
	poll.Until(t, waitTimeout, "p turns Ready", func() bool { return podReady(tf.pod(t, "p")) })
}

func TestConditionsAnnotationAndConfiguration(t *testing.T) {
	cfg := testConfig(1)
	cfg.Template.Faults.Conditions = map[string]string{"diskpressure": "true"}
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	if c := findNodeCondition(tf.node(t, "n-0"), corev1.NodeDiskPressure); c.Status != corev1.ConditionTrue {
		t.Errorf("configured DiskPressure = %s, want True", c.Status)
	}
	tf.annotate(t, "n-0", AnnotationConditions, ptr("MemoryPressure=True,Ready=False"))
	poll.Until(t, waitTimeout, "the node reports the annotated conditions", func() bool {
		n := tf.node(t, "n-0")
		return findNodeCondition(n, corev1.NodeMemoryPressure).Status == corev1.ConditionTrue &&
			findNodeCondition(n, corev1.NodeReady).Status == corev1.ConditionFalse &&
			findNodeCondition(n, corev1.NodeDiskPressure).Status == corev1.ConditionFalse // the annotation replaces the set
	})
}

// TestConfiguredFaultRates runs a node that rejects half its pods and fails a quarter of the
// rest, with a fixed seed: the counts are exactly those of the node's seeded sequence,
// whichever order the workers see the pods in.
func TestConfiguredFaultRates(t *testing.T) {
	const pods = 40
	cfg := testConfig(1)
	cfg.FaultSeed = 7
	cfg.Template.Capacity.Pods = 200
	cfg.Template.Faults = configs.StubFaults{RejectPods: "Chaos", RejectRate: 0.5, FailAfter: 10 * time.Second, FailRate: 0.25}
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)

	// Replay the node's sequence: each pod draws for rejection, and each admitted one then
	// draws for failure.
	rng := newRand(7, "n-0")
	wantRejected, wantFailed := 0, 0
	for range pods {
		if rng.Float64() < 0.5 {
			wantRejected++
			continue
		}
		if rng.Float64() < 0.25 {
			wantFailed++
		}
	}
	if wantRejected < 10 || wantRejected > 30 {
		t.Fatalf("seed 7 gives %d/%d rejections: not a useful test", wantRejected, pods)
	}

	for i := range pods {
		tf.createPod(t, newPod(podSpec{name: fmt.Sprintf("p%d", i), node: "n-0"}))
	}
	count := func(phase corev1.PodPhase) int {
		list, err := tf.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range list.Items {
			if p.Status.Phase == phase {
				n++
			}
		}
		return n
	}
	poll.Until(t, waitTimeout, "every pod decided", func() bool { return count(corev1.PodFailed)+count(corev1.PodRunning) == pods })
	if got := count(corev1.PodFailed); got != wantRejected {
		t.Errorf("%d pods rejected, want %d", got, wantRejected)
	}
	tf.clock.Step(10 * time.Second)
	poll.Until(t, waitTimeout, "the doomed pods fail", func() bool { return count(corev1.PodFailed) == wantRejected+wantFailed })
	if got := count(corev1.PodRunning); got != pods-wantRejected-wantFailed {
		t.Errorf("%d pods running, want %d", got, pods-wantRejected-wantFailed)
	}
}

// TestCompleteAfterAnnotation: pods that are not restarted complete that long after they
// started (older ones at once), with exit code 0; pods that are restarted keep running.
func TestCompleteAfterAnnotation(t *testing.T) {
	tf := newTestFleet(t, testConfig(1))
	tf.waitReady(t)
	withRestart := func(name string, policy corev1.RestartPolicy) *corev1.Pod {
		p := newPod(podSpec{name: name, node: "n-0"})
		p.Spec.RestartPolicy = policy
		return p
	}
	tf.createPod(t, withRestart("old", corev1.RestartPolicyNever))
	tf.createPod(t, withRestart("daemon", corev1.RestartPolicyAlways))
	tf.waitPhase(t, "old", corev1.PodRunning)
	tf.waitPhase(t, "daemon", corev1.PodRunning)
	tf.clock.Step(time.Minute)
	tf.createPod(t, withRestart("young", corev1.RestartPolicyOnFailure))
	tf.waitPhase(t, "young", corev1.PodRunning)
	tf.annotate(t, "n-0", AnnotationCompleteAfter, ptr("30s"))

	p := tf.waitPhase(t, "old", corev1.PodSucceeded)
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || !term.FinishedAt.Time.Equal(t0.Add(30*time.Second)) || podReady(p) {
		t.Errorf("completed pod = %+v, want exit 0 at t0+30s and not ready", p.Status)
	}
	if c := findPodCondition(p, corev1.PodReady); c == nil || c.Reason != "PodCompleted" {
		t.Errorf("Ready condition of a completed pod = %+v, want reason PodCompleted", c)
	}
	if p := tf.pod(t, "young"); p.Status.Phase != corev1.PodRunning {
		t.Fatalf("young completed early: %+v", p.Status)
	}
	tf.clock.Step(30 * time.Second)
	tf.waitPhase(t, "young", corev1.PodSucceeded)
	if p := tf.pod(t, "daemon"); p.Status.Phase != corev1.PodRunning || !podReady(p) {
		t.Errorf("a pod that is restarted completed: %+v", p.Status)
	}
}
