package kubeletstub

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/miniplane/miniplane/configs"
)

func nodeCreates(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

// TestRegistrationCreatesConfiguredNodes checks what a fresh node registers with.
func TestRegistrationCreatesConfiguredNodes(t *testing.T) {
	cfg := testConfig(2)
	cfg.Template.Labels = map[string]string{"topology.kubernetes.io/zone": "zone-a"}
	cfg.Template.Taints = []configs.StubTaint{{Key: "dedicated", Value: "infra", Effect: "NoSchedule"}}
	cfg.Template.Capacity = configs.StubResources{CPU: "8", Memory: "32Gi", Pods: 50}
	cfg.Template.Allocatable = configs.StubResources{CPU: "7500m"}
	cfg.Overrides = []configs.StubNodeOverride{{Name: "n-1", StubNodeTemplate: configs.StubNodeTemplate{
		Labels: map[string]string{"topology.kubernetes.io/zone": "zone-b"},
	}}}
	tf := newTestFleet(t, cfg)
	tf.waitReady(t)
	if got := nodeCreates(tf.client); got != 2 {
		t.Errorf("%d node creates, want 2", got)
	}
	for i, zone := range []string{"zone-a", "zone-b"} {
		name := []string{"n-0", "n-1"}[i]
		n := tf.node(t, name)
		wantLabels := map[string]string{
			corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
			"topology.kubernetes.io/zone": zone,
		}
		for k, v := range wantLabels {
			if n.Labels[k] != v {
				t.Errorf("%s label %s = %q, want %q", name, k, n.Labels[k], v)
			}
		}
		if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "dedicated" || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
			t.Errorf("%s taints = %v", name, n.Spec.Taints)
		}
		wantPodCIDR := []string{"10.128.0.0/24", "10.128.1.0/24"}[i]
		if n.Spec.PodCIDR != wantPodCIDR {
			t.Errorf("%s podCIDR = %s, want %s", name, n.Spec.PodCIDR, wantPodCIDR)
		}
		checkQuantity(t, name+" capacity cpu", n.Status.Capacity, corev1.ResourceCPU, "8")
		checkQuantity(t, name+" allocatable cpu", n.Status.Allocatable, corev1.ResourceCPU, "7500m")
		checkQuantity(t, name+" allocatable memory", n.Status.Allocatable, corev1.ResourceMemory, "32Gi")
		checkQuantity(t, name+" allocatable pods", n.Status.Allocatable, corev1.ResourcePods, "50")
		wantIP := []string{"172.16.0.1", "172.16.0.2"}[i]
		if len(n.Status.Addresses) != 2 || n.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: wantIP}) ||
			n.Status.Addresses[1] != (corev1.NodeAddress{Type: corev1.NodeHostName, Address: name}) {
			t.Errorf("%s addresses = %v, want InternalIP %s and Hostname", name, n.Status.Addresses, wantIP)
		}
		if c := findNodeCondition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("%s Ready = %+v, want True", name, c)
		}
	}
}

func checkQuantity(t *testing.T, what string, rl corev1.ResourceList, name corev1.ResourceName, want string) {
	t.Helper()
	got, ok := rl[name]
	if !ok || got.Cmp(resource.MustParse(want)) != 0 {
		t.Errorf("%s = %v, want %s", what, got.String(), want)
	}
}

// TestRegistrationReusesExistingNode restarts a stub over a Node that is already there: it is
// not created again, its metadata is kept, and its status is brought up to date.
func TestRegistrationReusesExistingNode(t *testing.T) {
	existing := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "n-0", UID: "uid-existing",
			Labels:      map[string]string{"kept": "yes", corev1.LabelHostname: "n-0"},
			Annotations: map[string]string{"note": "kept"},
		},
		Spec: corev1.NodeSpec{PodCIDR: "10.99.0.0/24", Unschedulable: true},
	}
	tf := newTestFleet(t, testConfig(1), existing)
	tf.waitReady(t)
	if got := nodeCreates(tf.client); got != 0 {
		t.Errorf("%d node creates for an existing node, want 0", got)
	}
	n := tf.node(t, "n-0")
	if n.UID != "uid-existing" || n.Labels["kept"] != "yes" || n.Annotations["note"] != "kept" || !n.Spec.Unschedulable {
		t.Errorf("existing node metadata or spec changed: %+v", n.ObjectMeta)
	}
	checkQuantity(t, "capacity cpu", n.Status.Capacity, corev1.ResourceCPU, "4")
	if c := findNodeCondition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", c)
	}
	// Pod IPs come from the re-used node's own block.
	tf.createPod(t, newPod(podSpec{name: "p", node: "n-0"}))
	if p := tf.waitPhase(t, "p", corev1.PodRunning); p.Status.PodIP != "10.99.0.1" {
		t.Errorf("pod IP %s, want 10.99.0.1 from the node's podCIDR", p.Status.PodIP)
	}
}

// TestRegisterAlreadyExists covers the race where the cache has not seen a node that the API
// server already has: the create's AlreadyExists counts as registered.
func TestRegisterAlreadyExists(t *testing.T) {
	cfg := testConfig(1)
	n, err := newStubNode(&cfg, "n-0", 0, resourceCache{})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	client.PrependReactor("create", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("nodes"), "n-0")
	})
	var registered []string
	r := &registrar{
		client:       client,
		nodeLister:   corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
		nodes:        []*stubNode{n},
		clock:        testingclock.NewFakeClock(t0),
		log:          quietLogger(),
		onRegistered: func(n *stubNode) { registered = append(registered, n.name) },
	}
	if err := r.register(context.Background(), n); err != nil {
		t.Fatalf("register: %v", err)
	}
	if len(registered) != 1 || registered[0] != "n-0" {
		t.Errorf("registered = %v, want [n-0]", registered)
	}

	// Any other error is returned for a retry, and the node is not reported registered.
	client.PrependReactor("create", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "n-0", errors.New("denied"))
	})
	registered = nil
	if err := r.register(context.Background(), n); !apierrors.IsForbidden(err) {
		t.Errorf("register error = %v, want Forbidden", err)
	}
	if len(registered) != 0 {
		t.Errorf("registered = %v after a failed create", registered)
	}
}
