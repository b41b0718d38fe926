package browser

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/ui"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/placement"
)

// modelPage serves the view's assets (no API behind them) and opens the page, whose model
// module the tests then call.
func modelPage(t *testing.T) *browser {
	t.Helper()
	b := newBrowser(t)
	h, err := ui.New(ui.Options{Config: configs.DefaultUI(), API: http.NotFoundHandler(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	b.run(30*time.Second, "open the page", chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("signin")))
	return b
}

// callModel calls model.js's fn with args (marshalled to JSON) and decodes the result.
func callModel(t *testing.T, b *browser, out any, fn string, args ...any) {
	t.Helper()
	expr := "import('/ui/static/js/model.js').then(m => m." + fn + "("
	for i, a := range args {
		js, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			expr += ", "
		}
		expr += string(js)
	}
	expr += "))"
	if err := b.eval(expr, out); err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
}

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

// TestPlacementModel: the page's placement check agrees with the DaemonSet controller's
// rules, and its affinity and toleration matching with controllers/placement (Kubernetes'
// component-helpers) on every case.
func TestPlacementModel(t *testing.T) {
	b := modelPage(t)
	linux := map[string]string{"kubernetes.io/os": "linux", "zone": "a", "rank": "7"}
	req := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	expr := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	noSchedule := corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}
	noExecute := corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoExecute}
	tests := []struct {
		name                  string
		spec                  corev1.PodSpec
		node                  *corev1.Node
		wanted, continueToRun bool
	}{
		{"no rules", corev1.PodSpec{}, node("n", nil), true, true},
		{"selector matches", corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}}, node("n", linux), true, true},
		{"selector misses", corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "windows"}}, node("n", linux), false, false},
		{"nodeName elsewhere", corev1.PodSpec{NodeName: "other"}, node("n", nil), false, false},
		{"nodeName here", corev1.PodSpec{NodeName: "n"}, node("n", nil), true, true},
		{"affinity In", corev1.PodSpec{Affinity: req(expr("zone", corev1.NodeSelectorOpIn, "a", "b"))}, node("n", linux), true, true},
		{"affinity NotIn", corev1.PodSpec{Affinity: req(expr("zone", corev1.NodeSelectorOpNotIn, "a"))}, node("n", linux), false, false},
		{"affinity DoesNotExist", corev1.PodSpec{Affinity: req(expr("gpu", corev1.NodeSelectorOpDoesNotExist))}, node("n", linux), true, true},
		{"affinity Gt", corev1.PodSpec{Affinity: req(expr("rank", corev1.NodeSelectorOpGt, "5"))}, node("n", linux), true, true},
		{"affinity Lt", corev1.PodSpec{Affinity: req(expr("rank", corev1.NodeSelectorOpLt, "5"))}, node("n", linux), false, false},
		{"second term matches", corev1.PodSpec{Affinity: req(expr("zone", corev1.NodeSelectorOpIn, "z"), expr("zone", corev1.NodeSelectorOpExists))}, node("n", linux), true, true},
		{"empty term matches nothing", corev1.PodSpec{Affinity: req(corev1.NodeSelectorTerm{})}, node("n", linux), false, false},
		{"matchFields on the name", corev1.PodSpec{Affinity: req(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n"}}}})}, node("n", nil), true, true},
		{"NoSchedule taint keeps old pods", corev1.PodSpec{}, node("n", nil, noSchedule), false, true},
		{"NoExecute taint evicts", corev1.PodSpec{}, node("n", nil, noExecute), false, false},
		{"tolerated by key", corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}, node("n", nil, noExecute), true, true},
		{"tolerated by value", corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}}, node("n", nil, noSchedule), true, true},
		{"wrong value", corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "dedicated", Value: "db"}}}, node("n", nil, noSchedule), false, true},
		{"tolerate everything", corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}, node("n", nil, noSchedule, noExecute), true, true},
		{"PreferNoSchedule does not count", corev1.PodSpec{}, node("n", nil, corev1.Taint{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}), true, true},
		{"cordoned: daemons tolerate unschedulable", corev1.PodSpec{}, node("n", nil, corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}), true, true},
		{"unreachable: tolerated", corev1.PodSpec{}, node("n", nil, corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}), true, true},
		{"network unavailable without hostNetwork", corev1.PodSpec{}, node("n", nil, corev1.Taint{Key: "node.kubernetes.io/network-unavailable", Effect: corev1.TaintEffectNoSchedule}), false, true},
		{"network unavailable with hostNetwork", corev1.PodSpec{HostNetwork: true}, node("n", nil, corev1.Taint{Key: "node.kubernetes.io/network-unavailable", Effect: corev1.TaintEffectNoSchedule}), true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"}, Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: tt.spec}}}
			var got struct{ Wanted, ContinueRunning bool }
			callModel(t, b, &got, "shouldRun", ds, tt.node)
			if got.Wanted != tt.wanted || got.ContinueRunning != tt.continueToRun {
				t.Fatalf("shouldRun: %+v, want wanted %v, continueRunning %v", got, tt.wanted, tt.continueToRun)
			}
			var match bool
			callModel(t, b, &match, "matchesNodeAffinity", tt.spec, tt.node)
			pod := &corev1.Pod{Spec: tt.spec}
			if want := placement.MatchesNodeSelectorAndAffinity(pod, tt.node); match != want {
				t.Fatalf("matchesNodeAffinity %v, component-helpers say %v", match, want)
			}
			for _, taint := range tt.node.Spec.Taints {
				for _, tol := range tt.spec.Tolerations {
					var tolerated bool
					callModel(t, b, &tolerated, "tolerates", tol, taint)
					if want := placement.Tolerates([]corev1.Toleration{tol}, &taint); tolerated != want {
						t.Fatalf("tolerates(%+v, %+v) %v, component-helpers say %v", tol, taint, tolerated, want)
					}
				}
			}
		})
	}
}

// TestCellModel: a node's cell summarises its daemon pods: state, revision, surge pods,
// misscheduled pods, and the accessible text naming the node and the state.
func TestCellModel(t *testing.T) {
	b := modelPage(t)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default", UID: "ds-uid"},
		Spec: appsv1.DaemonSetSpec{MinReadySeconds: 10, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"role": "worker"},
		}}},
	}
	worker := node("n1", map[string]string{"role": "worker"})
	other := node("n2", map[string]string{"role": "db"})
	pod := func(name, hash string, phase corev1.PodPhase, readySince time.Duration, mut ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"controller-revision-hash": hash}},
			Spec:       corev1.PodSpec{NodeName: "n1"},
			Status:     corev1.PodStatus{Phase: phase},
		}
		if readySince > 0 {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-readySince))}}
		}
		for _, m := range mut {
			m(p)
		}
		return p
	}
	deleting := func(p *corev1.Pod) { ts := metav1.NewTime(now); p.DeletionTimestamp = &ts }
	pulling := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}
	}
	type cell struct {
		State, Rev   string
		Second       *struct{ State, Rev string }
		Misscheduled bool
		Text         string
	}
	tests := []struct {
		name       string
		node       *corev1.Node
		pods       []*corev1.Pod
		state, rev string
		second     string // "state/rev" of a surge pod
		mis        bool
		text       string
	}{
		{"not wanted", other, nil, "none", "", "", false, "n2: no pod wanted"},
		{"not yet created", worker, nil, "missing", "", "", false, "n1: not yet created"},
		{"pending on an image", worker, []*corev1.Pod{pod("p", "new", corev1.PodPending, 0, pulling)}, "pending", "new", "", false, "n1: Pending (ImagePullBackOff), new revision, pod p"},
		{"running, not ready", worker, []*corev1.Pod{pod("p", "new", corev1.PodRunning, 0)}, "running", "new", "", false, "n1: Running, not Ready, new revision, pod p"},
		{"ready, not yet available", worker, []*corev1.Pod{pod("p", "new", corev1.PodRunning, 5*time.Second)}, "ready", "new", "", false, "n1: Ready, not yet available, new revision, pod p"},
		{"available", worker, []*corev1.Pod{pod("p", "old", corev1.PodRunning, time.Minute)}, "available", "old", "", false, "n1: Available, old revision, pod p"},
		{"failed", worker, []*corev1.Pod{pod("p", "new", corev1.PodFailed, 0, func(p *corev1.Pod) { p.Status.Reason = "Rejected" })}, "failed", "new", "", false, "n1: Failed (Rejected), new revision, pod p"},
		{"terminating", worker, []*corev1.Pod{pod("p", "old", corev1.PodRunning, time.Minute, deleting)}, "terminating", "old", "", false, ""},
		{"surge: the new pod shows, the old in the corner", worker,
			[]*corev1.Pod{pod("old", "old", corev1.PodRunning, time.Minute), pod("new", "new", corev1.PodPending, 0)},
			"pending", "new", "available/old", false, "n1: Pending, new revision, pod new; Available, old revision, pod old (2 pods: surge)"},
		{"misscheduled", other, []*corev1.Pod{pod("p", "new", corev1.PodRunning, time.Minute)}, "available", "new", "", true, "n2: Available, new revision, pod p; misscheduled: the node should not run it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := tt.pods
			if pods == nil {
				pods = []*corev1.Pod{}
			}
			var got cell
			callModel(t, b, &got, "cellFor", ds, tt.node, pods, "new", now.UnixMilli())
			second := ""
			if got.Second != nil {
				second = got.Second.State + "/" + got.Second.Rev
			}
			if got.State != tt.state || got.Rev != tt.rev || second != tt.second || got.Misscheduled != tt.mis {
				t.Fatalf("cell %+v (second %q), want %s/%s, second %q, misscheduled %v", got, second, tt.state, tt.rev, tt.second, tt.mis)
			}
			if tt.text != "" && got.Text != tt.text {
				t.Fatalf("text %q, want %q", got.Text, tt.text)
			}
		})
	}
	// The current revision is the highest-numbered one the DaemonSet controls.
	revs := []*appsv1.ControllerRevision{}
	for i, hash := range []string{"h1", "h3", "h2"} {
		revs = append(revs, &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("r", i), Labels: map[string]string{"controller-revision-hash": hash},
				OwnerReferences: []metav1.OwnerReference{{UID: "ds-uid", Controller: new(true)}}},
			Revision: int64(map[string]int{"h1": 1, "h3": 3, "h2": 2}[hash]),
		})
	}
	revs = append(revs, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Labels: map[string]string{"controller-revision-hash": "x"},
		OwnerReferences: []metav1.OwnerReference{{UID: "other", Controller: new(true)}}}, Revision: 9})
	var cur struct{ Hash string }
	callModel(t, b, &cur, "currentRevision", ds, revs)
	if cur.Hash != "h3" {
		t.Fatalf("current revision %q, want h3", cur.Hash)
	}
}
