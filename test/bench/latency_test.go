package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// latencyKind is one kind of write a DaemonSet's pods cost, as the API server's request
// histogram labels it.
type latencyKind struct {
	title                              string
	verb, group, resource, subresource string
}

// latencyKinds are the writes whose mean server latency over the ready phase the benchmark
// prints: the DaemonSet controller's creates, the scheduler's bindings, the kubelets' status
// updates and, beside them, the nodes' Lease renewals (docs/performance.md, "Eighteenth round").
var latencyKinds = []latencyKind{
	{title: "create pods", verb: "CREATE", resource: "pods"},
	{title: "pods/binding", verb: "CREATE", resource: "pods", subresource: "binding"},
	{title: "pods/status", verb: "UPDATE", resource: "pods", subresource: "status"},
	{title: "leases", verb: "UPDATE", group: "coordination.k8s.io", resource: "leases"},
}

// requestLatencyFamily is the API server's histogram of request latencies.
const requestLatencyFamily = "apiserver_request_duration_seconds"

// latencyTotals is the histogram's sum and count for each kind, at one moment.
type latencyTotals map[latencyKind]latencyTotal

type latencyTotal struct {
	sum   float64 // seconds
	count uint64
}

// parseLatencyTotals reads the kinds' totals from a /metrics page.
func parseLatencyTotals(page io.Reader) (latencyTotals, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(page)
	if err != nil {
		return nil, err
	}
	totals := latencyTotals{}
	family := families[requestLatencyFamily]
	if family == nil {
		return totals, nil
	}
	for _, m := range family.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for _, k := range latencyKinds {
			if labels["verb"] == k.verb && labels["group"] == k.group && labels["resource"] == k.resource && labels["subresource"] == k.subresource {
				totals[k] = latencyTotal{sum: m.GetHistogram().GetSampleSum(), count: m.GetHistogram().GetSampleCount()}
			}
		}
	}
	return totals, nil
}

// meanSince is the mean latency of kind's requests served between before and t, and how
// many there were.
func (t latencyTotals) meanSince(before latencyTotals, kind latencyKind) (time.Duration, uint64) {
	n := t[kind].count - before[kind].count
	if n == 0 {
		return 0, 0
	}
	return time.Duration((t[kind].sum - before[kind].sum) / float64(n) * float64(time.Second)), n
}

// readLatencyTotals reads the kinds' totals from the API server's /metrics.
func readLatencyTotals(b *testing.B, c kubernetes.Interface) latencyTotals {
	page, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading /metrics: %v", err)
	}
	totals, err := parseLatencyTotals(bytes.NewReader(page))
	if err != nil {
		b.Fatalf("parsing /metrics: %v", err)
	}
	return totals
}

// printLatencyTable prints the mean server latency of each kind over each run's ready phase.
func printLatencyTable(w io.Writer, results []processResult) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "Mean server latency over the ready phase (%s; requests in parentheses)\n", requestLatencyFamily)
	fmt.Fprintf(w, "%7s", "nodes")
	for _, k := range latencyKinds {
		fmt.Fprintf(w, " %22s", k.title)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%7d", r.nodes)
		for _, k := range latencyKinds {
			mean, n := r.readyLatency.after.meanSince(r.readyLatency.before, k)
			fmt.Fprintf(w, " %22s", fmt.Sprintf("%.1f ms (%d)", float64(mean)/float64(time.Millisecond), n))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// TestLatencyTotals: the means come from the histogram of each kind alone, between two
// readings of /metrics.
func TestLatencyTotals(t *testing.T) {
	page := func(createSum float64, createCount int, statusSum float64, statusCount int) string {
		return fmt.Sprintf(`# HELP apiserver_request_duration_seconds Request latency.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{group="",resource="pods",subresource="",verb="CREATE",le="+Inf"} %[2]d
apiserver_request_duration_seconds_sum{group="",resource="pods",subresource="",verb="CREATE"} %[1]g
apiserver_request_duration_seconds_count{group="",resource="pods",subresource="",verb="CREATE"} %[2]d
apiserver_request_duration_seconds_bucket{group="",resource="pods",subresource="status",verb="UPDATE",le="+Inf"} %[4]d
apiserver_request_duration_seconds_sum{group="",resource="pods",subresource="status",verb="UPDATE"} %[3]g
apiserver_request_duration_seconds_count{group="",resource="pods",subresource="status",verb="UPDATE"} %[4]d
apiserver_request_duration_seconds_bucket{group="",resource="pods",subresource="",verb="LIST",le="+Inf"} 7
apiserver_request_duration_seconds_sum{group="",resource="pods",subresource="",verb="LIST"} 70
apiserver_request_duration_seconds_count{group="",resource="pods",subresource="",verb="LIST"} 7
`, createSum, createCount, statusSum, statusCount)
	}
	parse := func(s string) latencyTotals {
		totals, err := parseLatencyTotals(bytes.NewReader([]byte(s)))
		if err != nil {
			t.Fatal(err)
		}
		return totals
	}
	before := parse(page(1.0, 10, 0.5, 5))
	after := parse(page(1.0+100*0.02, 110, 0.5+50*0.01, 55))
	for _, tc := range []struct {
		kind  latencyKind
		mean  time.Duration
		count uint64
	}{
		{latencyKinds[0], 20 * time.Millisecond, 100},
		{latencyKinds[2], 10 * time.Millisecond, 50},
		{latencyKinds[1], 0, 0}, // no bindings on the page
	} {
		mean, n := after.meanSince(before, tc.kind)
		if n != tc.count || (mean-tc.mean).Abs() > time.Microsecond {
			t.Errorf("%s: mean %v over %d requests, want %v over %d", tc.kind.title, mean, n, tc.mean, tc.count)
		}
	}
}
