package nodeipam

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/miniplane/miniplane/configs"
)

func newNode(name, podCIDR string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	return n
}

// running is a controller over a fake clientset, started until the test ends.
type running struct {
	client   *fake.Clientset
	recorder *record.FakeRecorder
	stop     func()
}

func start(t *testing.T, cluster string, client *fake.Clientset) *running {
	t.Helper()
	cfg := configs.DefaultNodeIPAMController()
	cfg.ClusterCIDR = cluster
	factory := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(100)
	c, err := New(cfg, Options{Client: client, Informers: factory, Recorder: rec,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	stop := func() { cancel(); <-done; factory.Shutdown() }
	t.Cleanup(stop)
	return &running{client: client, recorder: rec, stop: stop}
}

// podCIDRs polls until every named node has a pod CIDR and returns them by node.
func podCIDRs(t *testing.T, client *fake.Clientset, names ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := map[string]string{}
		for _, name := range names {
			n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			if err == nil && n.Spec.PodCIDR != "" {
				if len(n.Spec.PodCIDRs) != 1 || n.Spec.PodCIDRs[0] != n.Spec.PodCIDR {
					t.Fatalf("node %s: podCIDRs %v do not match podCIDR %s", name, n.Spec.PodCIDRs, n.Spec.PodCIDR)
				}
				out[name] = n.Spec.PodCIDR
			}
		}
		if len(out) == len(names) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod CIDRs after 10s: %v, want one for each of %v", out, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func distinct(t *testing.T, cidrs map[string]string) {
	t.Helper()
	seen := map[string]string{}
	for n, c := range cidrs {
		if other, dup := seen[c]; dup {
			t.Fatalf("nodes %s and %s both got %s", other, n, c)
		}
		seen[c] = n
	}
}

func TestAssignsDistinctBlocksAndKeepsExistingOnes(t *testing.T) {
	client := fake.NewClientset(newNode("has", "10.128.0.0/24"), newNode("a", ""), newNode("b", ""))
	start(t, "10.128.0.0/16", client)
	got := podCIDRs(t, client, "has", "a", "b")
	if got["has"] != "10.128.0.0/24" {
		t.Errorf("node with a block now has %s", got["has"])
	}
	distinct(t, got)

	// A node registered later gets a fresh block too.
	if _, err := client.CoreV1().Nodes().Create(context.Background(), newNode("c", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	distinct(t, podCIDRs(t, client, "has", "a", "b", "c"))
}

// The used blocks are read back from the stored Nodes: a restarted controller (or a new
// leader) hands out none of them again.
func TestRestartReDerivesUsedBlocks(t *testing.T) {
	client := fake.NewClientset(newNode("a", ""), newNode("b", ""))
	r := start(t, "10.128.0.0/22", client)
	first := podCIDRs(t, client, "a", "b")
	r.stop()

	if _, err := client.CoreV1().Nodes().Create(context.Background(), newNode("c", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t, "10.128.0.0/22", client)
	got := podCIDRs(t, client, "a", "b", "c")
	for n, c := range first {
		if got[n] != c {
			t.Errorf("node %s changed block from %s to %s across the restart", n, c, got[n])
		}
	}
	distinct(t, got)
}

func TestDeletedNodeFreesItsBlockAndExhaustionIsReported(t *testing.T) {
	// A /23 holds two /24 blocks.
	client := fake.NewClientset(newNode("a", ""), newNode("b", ""))
	r := start(t, "10.128.0.0/23", client)
	got := podCIDRs(t, client, "a", "b")

	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Create(ctx, newNode("c", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-r.recorder.Events:
		if !strings.Contains(e, ReasonCIDRNotAvailable) {
			t.Fatalf("event %q, want %s", e, ReasonCIDRNotAvailable)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no CIDRNotAvailable event for a node beyond the range")
	}
	if n, _ := client.CoreV1().Nodes().Get(ctx, "c", metav1.GetOptions{}); n.Spec.PodCIDR != "" {
		t.Fatalf("node c got %s from a full range", n.Spec.PodCIDR)
	}

	if err := client.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The retry (rate-limited) finds a's block free.
	if c := podCIDRs(t, client, "c")["c"]; c != got["a"] {
		t.Errorf("node c got %s, want a's freed block %s", c, got["a"])
	}
}
