package apiserver

import (
	"bytes"
	"context"
	"runtime/trace"
	"testing"
)

// TestRequestLabelsAllocateNothing: after the first request of a kind, labelling a request
// and taking the labels off again allocates nothing, since it runs for every request.
func TestRequestLabelsAllocateNothing(t *testing.T) {
	l := newRequestLabels()
	info := &requestInfo{verb: "update", res: &resource{name: "pods"}, subresource: "status"}
	l.end(l.set(context.Background(), info))
	if n := testing.AllocsPerRun(1000, func() { l.end(l.set(context.Background(), info)) }); n != 0 {
		t.Errorf("%v allocations a request, want 0", n)
	}
}

// TestRequestTraceRegion: while an execution trace is taken, a request is a region named by
// its verb and resource, which is what `go tool trace` groups request latencies by.
func TestRequestTraceRegion(t *testing.T) {
	if trace.IsEnabled() {
		t.Skip("a trace is already being taken (go test -trace)")
	}
	l := newRequestLabels()
	info := &requestInfo{verb: "create", res: &resource{name: "leases", group: "coordination.k8s.io"}}
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	l.end(l.set(context.Background(), info))
	trace.Stop()
	if want := []byte("create leases.coordination.k8s.io"); !bytes.Contains(buf.Bytes(), want) {
		t.Errorf("the trace (%d bytes) names no region %q", buf.Len(), want)
	}
}
