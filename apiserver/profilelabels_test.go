package apiserver

import "testing"

// TestRequestLabelsAllocateNothing: after the first request of a kind, labelling a request
// and taking the labels off again allocates nothing, since it runs for every request.
func TestRequestLabelsAllocateNothing(t *testing.T) {
	l := newRequestLabels()
	info := &requestInfo{verb: "update", res: &resource{name: "pods"}, subresource: "status"}
	l.set(info)
	if n := testing.AllocsPerRun(1000, func() { l.set(info); l.reset() }); n != 0 {
		t.Errorf("%v allocations a request, want 0", n)
	}
}
