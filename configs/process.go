package configs

import "k8s.io/apimachinery/pkg/api/resource"

// Process configures what every long-running command tunes in its own process: the
// garbage collector's memory budget. `up` reads it from its file, the environment and its
// flags; the component commands (apiserver, controller-manager, scheduler, kubeletstub,
// etcd) from the environment and their flags.
type Process struct {
	// MemoryBudget is the memory the process's Go runtime may hold (heap, stacks,
	// metadata) before its garbage collector works harder: below it the collector runs
	// lazily (heap up to 5× the live objects, which is fastest), near it a memory limit of
	// the budget holds the process to it, and once the live objects outgrow half of it the
	// heap is held to twice the live objects, Go's default (see docs/performance.md). A
	// Kubernetes quantity (512Mi, 2Gi); default 208Mi for every command; "0" keeps the lazy
	// collector at any size. The GOGC and GOMEMLIMIT environment variables, when set, win
	// over it. Flag --memory-budget, variable MINIPLANE_MEMORY_BUDGET.
	MemoryBudget string `mapstructure:"memory-budget" flag:"memory-budget" help:"memory the Go runtime holds to before its garbage collector keeps the heap at twice the live objects instead of five times (a quantity: 208Mi, 2Gi; 0: no limit)"`
}

// DefaultMemoryBudget is the default MemoryBudget. It is small on purpose: a control plane
// for a handful of nodes stays well below it and gets the fastest collector; one for a
// thousand nodes is held to it (1,000 nodes: a peak resident set of 292 MiB, the goal of
// issue 13 being 300); a larger one has a live heap above half of it, and its peak resident
// set stays near twice what it really holds. Raise it to buy speed with memory; `up` raises
// it with the number of Nodes (Up.MemoryBudgetPerNode). A stub fleet has it too: with its
// heartbeat workers sized to the fleet, a 10,000-node fleet kept every Lease on time at a
// budget of this size (docs/performance.md).
const DefaultMemoryBudget = "208Mi"

// DefaultProcess returns the defaults.
func DefaultProcess() Process { return Process{MemoryBudget: DefaultMemoryBudget} }

// MemoryBudgetBytes is MemoryBudget in bytes; 0 when it is 0 or does not parse (Validate
// reports that).
func (c Process) MemoryBudgetBytes() int64 { return quantityBytes(c.MemoryBudget) }

// Validate reports the first problem with c.
func (c Process) Validate() error { return validateQuantity("memory-budget", c.MemoryBudget) }

// quantityBytes is the quantity v in bytes; 0 when it does not parse.
func quantityBytes(v string) int64 {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0
	}
	return q.Value()
}

// validateQuantity reports v, the value of key, unless it is a quantity of bytes of at least 0.
func validateQuantity(key, v string) error {
	q, err := resource.ParseQuantity(v)
	switch {
	case err != nil:
		return invalidf(key, "%q is not a quantity such as 512Mi or 2Gi", v)
	case q.Sign() < 0:
		return invalid(key, "must not be negative")
	}
	return nil
}
