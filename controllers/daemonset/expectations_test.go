package daemonset

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	type step struct {
		op            string // set, create, delete, lower, wait, drop
		add, del      int
		wait          time.Duration
		wantSatisfied bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"no record is satisfied", []step{{op: "create", wantSatisfied: true}}},
		{"observations on a missing record stay missing", []step{{op: "create", wantSatisfied: true}, {op: "delete", wantSatisfied: true}, {op: "set", add: 1, wantSatisfied: false}}},
		{"creations count down", []step{
			{op: "set", add: 2, wantSatisfied: false},
			{op: "create", wantSatisfied: false},
			{op: "create", wantSatisfied: true},
		}},
		{"both counts must reach zero", []step{
			{op: "set", add: 1, del: 1, wantSatisfied: false},
			{op: "create", wantSatisfied: false},
			{op: "delete", wantSatisfied: true},
		}},
		{"negative is satisfied", []step{
			{op: "set", del: 1, wantSatisfied: false},
			{op: "delete", wantSatisfied: true},
			{op: "delete", wantSatisfied: true},
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
					e.DeletionObserved("k")
				case "lower":
					e.Lower("k", s.add, s.del)
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
