package daemonset

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	type step struct {
		op            string // set, create, delete, lower, wait, drop
		add           int
		del           []string // set: the pods to delete; delete: the pod observed
		wait          time.Duration
		wantSatisfied bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"no record is satisfied", []step{{op: "create", wantSatisfied: true}}},
		{"observations on a missing record stay missing", []step{{op: "create", wantSatisfied: true}, {op: "delete", del: []string{"a"}, wantSatisfied: true}, {op: "set", add: 1, wantSatisfied: false}}},
		{"creations count down", []step{
			{op: "set", add: 2, wantSatisfied: false},
			{op: "create", wantSatisfied: false},
			{op: "create", wantSatisfied: true},
		}},
		{"creations and deletions must both be seen", []step{
			{op: "set", add: 1, del: []string{"a"}, wantSatisfied: false},
			{op: "create", wantSatisfied: false},
			{op: "delete", del: []string{"a"}, wantSatisfied: true},
		}},
		{"a deletion is observed once, however often it is seen", []step{
			{op: "set", del: []string{"a", "b"}, wantSatisfied: false},
			{op: "delete", del: []string{"a"}, wantSatisfied: false},
			{op: "delete", del: []string{"a"}, wantSatisfied: false},
			{op: "delete", del: []string{"b"}, wantSatisfied: true},
		}},
		{"a pod not waited for changes nothing", []step{
			{op: "set", del: []string{"a"}, wantSatisfied: false},
			{op: "delete", del: []string{"old"}, wantSatisfied: false},
			{op: "delete", del: []string{"a"}, wantSatisfied: true},
		}},
		{"surplus creations are satisfied", []step{
			{op: "set", add: 1, wantSatisfied: false},
			{op: "create", wantSatisfied: true},
			{op: "create", wantSatisfied: true},
		}},
		{"lower for skipped creates", []step{
			{op: "set", add: 7, wantSatisfied: false},
			{op: "lower", add: 4, wantSatisfied: false},
			{op: "create", wantSatisfied: false},
			{op: "create", wantSatisfied: false},
			{op: "create", wantSatisfied: true},
		}},
		{"set replaces the record", []step{
			{op: "set", add: 5, wantSatisfied: false},
			{op: "set", add: 0, wantSatisfied: true},
		}},
		{"expires after the TTL, not at it", []step{
			{op: "set", add: 1, wantSatisfied: false},
			{op: "wait", wait: 5 * time.Minute, wantSatisfied: false},
			{op: "wait", wait: time.Nanosecond, wantSatisfied: true},
		}},
		{"set restarts the TTL", []step{
			{op: "set", add: 1, wantSatisfied: false},
			{op: "wait", wait: 4 * time.Minute, wantSatisfied: false},
			{op: "set", add: 1, wantSatisfied: false},
			{op: "wait", wait: 4 * time.Minute, wantSatisfied: false},
		}},
		{"delete forgets", []step{
			{op: "set", add: 3, wantSatisfied: false},
			{op: "drop", wantSatisfied: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			e := newExpectations(clk, 5*time.Minute)
			for i, s := range tt.steps {
				switch s.op {
				case "set":
					e.Set("k", s.add, s.del)
				case "create":
					e.CreationObserved("k")
				case "delete":
					e.DeletionObserved("k", s.del[0])
				case "lower":
					e.LowerCreations("k", s.add)
				case "wait":
					clk.Step(s.wait)
				case "drop":
					e.Delete("k")
				}
				if got := e.Satisfied("k"); got != s.wantSatisfied {
					t.Errorf("step %d (%s): satisfied = %v, want %v", i, s.op, got, s.wantSatisfied)
				}
			}
		})
	}
}
