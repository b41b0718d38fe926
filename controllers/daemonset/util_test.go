package daemonset

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/davecgh/go-spew/spew"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestAddOrUpdateDaemonPodTolerations(t *testing.T) {
	auto := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	network := corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	user := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoSchedule}
	withSeconds := auto[0]
	withSeconds.TolerationSeconds = ptr.To[int64](300)

	tests := []struct {
		name string
		spec corev1.PodSpec
		want []corev1.Toleration
	}{
		{"empty", corev1.PodSpec{}, auto},
		{"host network adds network-unavailable", corev1.PodSpec{HostNetwork: true}, append(append([]corev1.Toleration{}, auto...), network)},
		{"user tolerations kept first", corev1.PodSpec{Tolerations: []corev1.Toleration{user}}, append([]corev1.Toleration{user}, auto...)},
		{"matching toleration replaced in place, tolerationSeconds dropped", corev1.PodSpec{Tolerations: []corev1.Toleration{user, withSeconds}},
			append([]corev1.Toleration{user}, auto...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec.DeepCopy()
			addOrUpdateDaemonPodTolerations(spec)
			if !reflect.DeepEqual(spec.Tolerations, tt.want) {
				t.Errorf("tolerations:\n got %+v\nwant %+v", spec.Tolerations, tt.want)
			}
		})
	}
}

func TestReplaceNodeNameAffinity(t *testing.T) {
	pin := corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}
	userTerm := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: userTerm}}
	podAffinity := &corev1.PodAffinity{}

	tests := []struct {
		name string
		in   *corev1.Affinity
		want *corev1.Affinity
	}{
		{"nil affinity", nil, &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{pin}}}}},
		{"pod affinity only", &corev1.Affinity{PodAffinity: podAffinity},
			&corev1.Affinity{PodAffinity: podAffinity, NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{pin}}}}},
		{"preferred kept", &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}},
			&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred, RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{pin}}}}},
		{"user required terms replaced", &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{userTerm, userTerm}}}},
			&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{pin}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := replaceNodeNameAffinity(tt.in.DeepCopy(), "n1")
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestIsPodAvailable(t *testing.T) {
	now := t0
	tests := []struct {
		name     string
		cond     *corev1.PodCondition
		minReady int32
		want     bool
	}{
		{"no ready condition", nil, 0, false},
		{"not ready", &corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse}, 0, false},
		{"ready, minReady 0", &corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}, 0, true},
		{"ready without transition time", &corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}, 5, false},
		{"ready exactly minReady ago is not yet available", &corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-5 * time.Second))}, 5, false},
		{"ready longer than minReady", &corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-6 * time.Second))}, 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{}
			if tt.cond != nil {
				p.Status.Conditions = []corev1.PodCondition{*tt.cond}
			}
			if got := isPodAvailable(p, tt.minReady, now); got != tt.want {
				t.Errorf("isPodAvailable = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSortPodsOldestFirst(t *testing.T) {
	mk := func(name, node string, at time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(at))}, Spec: corev1.PodSpec{NodeName: node}}
	}
	pods := []*corev1.Pod{
		mk("unbound-oldest", "", 0),
		mk("b-late", "n", 3*time.Second),
		mk("c-same", "n", 2*time.Second),
		mk("a-same", "n", 2*time.Second),
	}
	sortPodsOldestFirst(pods)
	var got []string
	for _, p := range pods {
		got = append(got, p.Name)
	}
	want := []string{"a-same", "c-same", "b-late", "unbound-oldest"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

func TestScaledCounts(t *testing.T) {
	tests := []struct {
		name                  string
		ds                    *appsv1.DaemonSet
		desired               int
		wantUnavail, wantSurg int
		wantAllowsSurge       bool
	}{
		{"int", newDS("a", withMaxUnavailable(intstr.FromInt32(3))), 10, 3, 0, false},
		{"percent rounds up", newDS("a", withMaxUnavailable(intstr.FromString("10%"))), 15, 2, 0, false},
		{"percent of 1000", newDS("a", withMaxUnavailable(intstr.FromString("10%"))), 1000, 100, 0, false},
		{"small percent of few nodes rounds up to 1", newDS("a", withMaxUnavailable(intstr.FromString("1%"))), 3, 1, 0, false},
		{"surge percent", newDS("a", withMaxSurge(intstr.FromString("25%"))), 10, 0, 3, true},
		{"OnDelete counts nothing", newDS("a", withOnDelete), 10, 0, 0, false},
		{"nil rollingUpdate", newDS("a", func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.RollingUpdate = nil }), 10, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := unavailableCount(tt.ds, tt.desired)
			if err != nil || u != tt.wantUnavail {
				t.Errorf("unavailableCount = %d, %v; want %d", u, err, tt.wantUnavail)
			}
			s, err := surgeCount(tt.ds, tt.desired)
			if err != nil || s != tt.wantSurg {
				t.Errorf("surgeCount = %d, %v; want %d", s, err, tt.wantSurg)
			}
			if got := allowsSurge(tt.ds); got != tt.wantAllowsSurge {
				t.Errorf("allowsSurge = %v, want %v", got, tt.wantAllowsSurge)
			}
		})
	}
}

// TestComputeHash pins computeHash to the controller-revision-hash values Kubernetes 1.37
// gives the same templates, so names and labels match a real cluster's byte for byte.
//
// Where the golden values come from: Kubernetes' ComputeHash (pkg/controller's
// controller_utils.go, with DeepHashObject from pkg/util/hash) is FNV-1a (32 bit) over
// dump.ForHash(template), a go-spew dump with a fixed configuration; when collisionCount is
// set, 8 more bytes whose first 4 are the count as a little-endian uint32 (the rest zero);
// the decimal form of the sum is then mapped character by character into the alphabet
// "bcdfghjklmnpqrstvwxz2456789" (rand.SafeEncodeString). referenceHash below restates that
// published algorithm without calling computeHash or the dump package it uses, and each
// literal was computed with it over k8s.io/api v0.37.2, the types Kubernetes 1.37 hashes
// (the dump covers every field, so a new API field changes every hash: that is why the
// literals belong to one Kubernetes minor version). The test checks both implementations
// against the literals, so a change to either is caught.
//
// The realistic template is in the form the API server stores it, after apps/v1 and
// core/v1 defaulting, and decoded as an informer decodes it; hashing the manifest as
// written would give another value.
func TestComputeHash(t *testing.T) {
	minimal := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
	}
	// node-exporter as `kubectl get ds -o json` shows spec.template for this manifest:
	//
	//	metadata: {labels: {app.kubernetes.io/name: node-exporter}, annotations: {prometheus.io/scrape: "true"}}
	//	spec:
	//	  containers:
	//	  - name: node-exporter
	//	    image: quay.io/prometheus/node-exporter:v1.8.2
	//	    args: [--path.rootfs=/host]
	//	    ports: [{name: metrics, containerPort: 9100}]
	//	    readinessProbe: {httpGet: {port: 9100}}
	//	    resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 128Mi}}
	//	    volumeMounts: [{name: root, mountPath: /host, readOnly: true, mountPropagation: HostToContainer}]
	//	  tolerations: [{operator: Exists}]
	//	  volumes: [{name: root, hostPath: {path: /}}]
	var realistic corev1.PodTemplateSpec
	dec := json.NewDecoder(strings.NewReader(nodeExporterTemplate))
	dec.DisallowUnknownFields() // a misspelt field would silently change what is pinned
	if err := dec.Decode(&realistic); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name           string
		template       corev1.PodTemplateSpec
		collisionCount *int32
		want           string
	}{
		{"minimal: one label, one container image", minimal, nil, "74f8f75d46"},
		{"minimal with collisionCount 1", minimal, ptr.To[int32](1), "98d446679"},
		{"minimal with collisionCount 0 differs from nil", minimal, ptr.To[int32](0), "76cb74c4fd"},
		{"realistic defaulted template", realistic, nil, "5d4dcc7f66"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ref := referenceHash(tt.template, tt.collisionCount); ref != tt.want {
				t.Errorf("published algorithm gives %q, golden value is %q", ref, tt.want)
			}
			got := computeHash(&tt.template, tt.collisionCount)
			if got != tt.want {
				t.Errorf("computeHash = %q, want %q", got, tt.want)
			}
			if got != computeHash(tt.template.DeepCopy(), tt.collisionCount) {
				t.Error("hash differs for a deep copy: it must depend on values, not pointers")
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%q hashes like %q", tt.name, other)
			}
			seen[got] = tt.name
		})
	}

	t.Run("template change changes the hash", func(t *testing.T) {
		changed := minimal.DeepCopy()
		changed.Spec.Containers[0].Image = "nginx:1.28"
		if computeHash(changed, nil) == computeHash(&minimal, nil) {
			t.Error("a new image must change the hash")
		}
	})
}

// nodeExporterTemplate is the stored (defaulted) template of TestComputeHash's realistic case.
const nodeExporterTemplate = `{
  "metadata": {
    "creationTimestamp": null,
    "labels": {"app.kubernetes.io/name": "node-exporter"},
    "annotations": {"prometheus.io/scrape": "true"}
  },
  "spec": {
    "volumes": [{"name": "root", "hostPath": {"path": "/", "type": ""}}],
    "containers": [{
      "name": "node-exporter",
      "image": "quay.io/prometheus/node-exporter:v1.8.2",
      "args": ["--path.rootfs=/host"],
      "ports": [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}],
      "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}},
      "volumeMounts": [{"name": "root", "readOnly": true, "mountPath": "/host", "mountPropagation": "HostToContainer"}],
      "readinessProbe": {
        "httpGet": {"path": "/", "port": 9100, "scheme": "HTTP"},
        "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3
      },
      "terminationMessagePath": "/dev/termination-log",
      "terminationMessagePolicy": "File",
      "imagePullPolicy": "IfNotPresent"
    }],
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "securityContext": {},
    "schedulerName": "default-scheduler",
    "tolerations": [{"operator": "Exists"}]
  }
}`

// referenceHash is Kubernetes' published ComputeHash, restated for TestComputeHash only: it
// must not share code with computeHash. The go-spew configuration is the one Kubernetes'
// dump.ForHash uses, printed with %#v.
func referenceHash(template corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	forHash := spew.ConfigState{
		Indent:                  " ",
		SortKeys:                true,
		DisableMethods:          true,
		SpewKeys:                true,
		DisablePointerAddresses: true,
		DisableCapacities:       true,
	}
	forHash.Fprintf(h, "%#v", template)
	if collisionCount != nil {
		var b [8]byte
		binary.LittleEndian.PutUint32(b[:4], uint32(*collisionCount))
		h.Write(b[:])
	}
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	digits := strconv.FormatUint(uint64(h.Sum32()), 10)
	out := make([]byte, len(digits))
	for i := range len(digits) {
		out[i] = alphabet[int(digits[i])%len(alphabet)]
	}
	return string(out)
}

func TestHistoryPatch(t *testing.T) {
	ds := newDS("web")
	// Above 2^53: a float64 on the way would round it.
	ds.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1<<53 + 1)
	got, err := historyPatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"busybox:1","name":"c","resources":{}}],"restartPolicy":"Always","terminationGracePeriodSeconds":9007199254740993}}}}`
	if string(got) != want {
		t.Errorf("patch:\n got %s\nwant %s", got, want)
	}
	// Round trip: the patch's template is the DaemonSet's template.
	var back struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Spec.Template, ds.Spec.Template) {
		t.Errorf("template does not round-trip: %+v", back.Spec.Template)
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 253)
	tests := []struct{ name, got, want string }{
		{"pod prefix", podNamePrefix("web"), "web-"},
		{"pod prefix too long falls back to name", podNamePrefix(long), long},
		{"revision name", revisionName("web", "abc"), "web-abc"},
		{"revision name trims prefix to 223", revisionName(long, "abc"), strings.Repeat("a", 223) + "-abc"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestFindUpdatedPodsOnNode(t *testing.T) {
	ds := newDS("f")
	newP := newDaemonPodFor(ds, "n", "new")
	newP2 := newDaemonPodFor(ds, "n", "new")
	oldP := newDaemonPodFor(ds, "n", "old")
	oldP2 := newDaemonPodFor(ds, "n", "other")
	gone := newDaemonPodFor(ds, "n", "new", terminating)
	tests := []struct {
		name             string
		pods             []*corev1.Pod
		wantNew, wantOld *corev1.Pod
		wantOK           bool
	}{
		{"empty", nil, nil, nil, true},
		{"one of each", []*corev1.Pod{oldP, newP}, newP, oldP, true},
		{"terminating ignored", []*corev1.Pod{gone, oldP}, nil, oldP, true},
		{"two new", []*corev1.Pod{newP, newP2}, nil, nil, false},
		{"two old", []*corev1.Pod{oldP, oldP2}, nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, o, ok := findUpdatedPodsOnNode(tt.pods, "new")
			if n != tt.wantNew || o != tt.wantOld || ok != tt.wantOK {
				t.Errorf("got (%v, %v, %v)", n, o, ok)
			}
		})
	}
}

func TestIsCriticalPod(t *testing.T) {
	tests := []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"plain", corev1.PodSpec{}, false},
		{"priority 2e9", corev1.PodSpec{Priority: ptr.To[int32](2000000000)}, true},
		{"priority just below", corev1.PodSpec{Priority: ptr.To[int32](1999999999)}, false},
		{"system-node-critical class", corev1.PodSpec{PriorityClassName: "system-node-critical"}, true},
		{"other class", corev1.PodSpec{PriorityClassName: "high"}, false},
	}
	for _, tt := range tests {
		if got := isCriticalPod(&corev1.Pod{Spec: tt.spec}); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPodTemplateLabels(t *testing.T) {
	ds := newDS("web")
	ds.Annotations[TemplateGenerationAnnotation] = "7"
	tpl := podTemplate(ds, "h4sh")
	want := map[string]string{"app": "web", RevisionHashLabel: "h4sh", TemplateGenerationLabel: "7"}
	if !reflect.DeepEqual(tpl.Labels, want) {
		t.Errorf("labels = %v, want %v", tpl.Labels, want)
	}
	if len(ds.Spec.Template.Labels) != 1 || len(ds.Spec.Template.Spec.Tolerations) != 0 {
		t.Error("podTemplate mutated the DaemonSet")
	}
	ds.Annotations[TemplateGenerationAnnotation] = "x"
	if _, ok := podTemplate(ds, "h").Labels[TemplateGenerationLabel]; ok {
		t.Error("unparsable generation must not produce a label")
	}
}

// TestIsBestEffort: only non-zero cpu or memory requests or limits, in any container or init
// container, make a pod more than best effort.
func TestIsBestEffort(t *testing.T) {
	rl := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	tests := []struct {
		name string
		init []corev1.ResourceRequirements
		main []corev1.ResourceRequirements
		want bool
	}{
		{"no containers", nil, nil, true},
		{"containers without resources", nil, []corev1.ResourceRequirements{{}, {}}, true},
		{"cpu request", nil, []corev1.ResourceRequirements{{Requests: rl("cpu", "100m")}}, false},
		{"memory request", nil, []corev1.ResourceRequirements{{Requests: rl("memory", "64Mi")}}, false},
		{"cpu limit only", nil, []corev1.ResourceRequirements{{Limits: rl("cpu", "1")}}, false},
		{"memory limit only", nil, []corev1.ResourceRequirements{{Limits: rl("memory", "1Gi")}}, false},
		{"zero cpu and memory are no request", nil, []corev1.ResourceRequirements{{Requests: rl("cpu", "0", "memory", "0"), Limits: rl("cpu", "0m")}}, true},
		{"ephemeral storage does not count", nil, []corev1.ResourceRequirements{{Requests: rl("ephemeral-storage", "1Gi"), Limits: rl("ephemeral-storage", "2Gi")}}, true},
		{"extended resources do not count", nil, []corev1.ResourceRequirements{{Requests: rl("example.com/gpu", "1"), Limits: rl("example.com/gpu", "1")}}, true},
		{"second container's request counts", nil, []corev1.ResourceRequirements{{}, {Requests: rl("memory", "1Mi")}}, false},
		{"init container's request counts", []corev1.ResourceRequirements{{Requests: rl("cpu", "10m")}}, []corev1.ResourceRequirements{{}}, false},
		{"init container's limit counts", []corev1.ResourceRequirements{{Limits: rl("memory", "1Mi")}}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{}
			for _, r := range tt.init {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "i", Resources: r})
			}
			for _, r := range tt.main {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "c", Resources: r})
			}
			if got := isBestEffort(pod); got != tt.want {
				t.Errorf("isBestEffort = %v, want %v", got, tt.want)
			}
		})
	}
}
