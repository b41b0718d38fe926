package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/miniplane/miniplane/internal/poll"
)

// podCreates reads from the API server's metrics how many pod creates it answered with
// code (201, 403, …).
func podCreates(t *testing.T, c kubernetes.Interface, code int) int {
	t.Helper()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	want := fmt.Sprintf(`apiserver_request_total{code="%d",group="",resource="pods",subresource="",verb="CREATE"} `, code)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}

// TestQuotaSlowStart runs a DaemonSet over 100 nodes in a namespace whose quota allows 10
// pods, and checks what docs/daemonset-controller.md says of failed creates: slow-start
// batches 1, 2, 4, 8 put exactly 10 pods in place (the batch of 8 meets the quota),
// every refusal is a FailedCreate event carrying the quota's message, creation stops
// after the failing batch and the skipped creations are taken off the expectations, so
// the DaemonSet is synced again soon (each later sync tries one pod, a batch of 1, and
// stops) instead of waiting for pods that will never come.
func TestQuotaSlowStart(t *testing.T) {
	const nodes, limit = 100, 10
	env := dsStart(t, dsModes[0], nodes)
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := c.CoreV1().ResourceQuotas(dsNS).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "pods-quota"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(strconv.Itoa(limit))}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds := dsNewDaemonSet("agent")
	if _, err := c.AppsV1().DaemonSets(dsNS).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podCount := func() int {
		pods, err := c.CoreV1().Pods(dsNS).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			t.Fatal(err)
		}
		return len(pods.Items)
	}
	// The batch of 8 is sent at once: its 3 creates that fit and its 5 refused ones are
	// answered in any order, so the 10th pod can be listed before the last refusals are
	// counted. (Which creates a sync sends is TestSlowStart's, in the controller's package.)
	poll.Until(t, dsTimeout, "the quota's 10 pods and the batch of 8's 5 refused creates", func() bool {
		return podCount() == limit && podCreates(t, c, 403) >= 5
	})

	// Sample the refused creates while the rate-limited retries space out: every sync after
	// the first tries exactly one pod.
	var counts []int
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if n := podCreates(t, c, 403); len(counts) == 0 || n != counts[len(counts)-1] {
			counts = append(counts, n)
		}
		if got := podCount(); got > limit {
			t.Fatalf("%d pods, the quota allows %d", got, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if created := podCreates(t, c, 201); created != limit {
		t.Errorf("%d pod creates succeeded, want %d", created, limit)
	}
	t.Logf("refused creates as sampled over 6s: %v", counts)
	// The first sync is refused 5 times (the batch of 8 with 3 places left); the retries
	// after it back off 5ms·2^n, so from the 7th on they are far apart and each is seen
	// alone.
	const spaced = 5 + 7
	var steps []int
	for i := 1; i < len(counts); i++ {
		if counts[i-1] >= spaced {
			steps = append(steps, counts[i]-counts[i-1])
		}
	}
	if len(steps) < 2 {
		t.Errorf("refused creates over 6s: %v; want the DaemonSet retried (expectations lowered), not waiting for skipped pods", counts)
	}
	for _, s := range steps {
		if s != 1 {
			t.Errorf("refused creates grew by %v between samples (counts %v); a later sync tries one pod", steps, counts)
			break
		}
	}

	evs, err := c.CoreV1().Events(dsNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=agent,reason=FailedCreate"})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("exceeded quota: pods-quota, requested: pods=1, used: pods=%d, limited: pods=%d", limit, limit)
	if len(evs.Items) == 0 || !strings.Contains(evs.Items[0].Message, want) || evs.Items[0].Type != corev1.EventTypeWarning {
		t.Errorf("FailedCreate events %v, want a Warning containing %q", evs.Items, want)
	}
	got, err := c.AppsV1().DaemonSets(dsNS).Get(ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.DesiredNumberScheduled != nodes || got.Status.CurrentNumberScheduled != limit {
		t.Errorf("status desired %d current %d, want %d and %d", got.Status.DesiredNumberScheduled, got.Status.CurrentNumberScheduled, nodes, limit)
	}
}
