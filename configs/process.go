package configs

import "k8s.io/apimachinery/pkg/api/resource"

// Process configures what every long-running command tunes in its own process: the
// garbage collector's memory budget. `up` reads it from its file, the environment and its
// flags; the component commands (apiserver, controller-manager, scheduler, kubeletstub,
// etcd) from the environment and their flags.
type Process struct {
	// MemoryBudget is the heap the process may grow to before its garbage collector works
	// harder: below it the collector runs lazily (heap up to 5× the live objects, which is
	// fastest), above it the heap is held to twice the live objects, Go's default (see
	// docs/performance.md). A Kubernetes quantity (512Mi, 2Gi); default 256Mi for every
	// command; "0" keeps the lazy collector at any size. The GOGC and
	// GOMEMLIMIT environment variables, when set, win over it. Flag --memory-budget, variable MINIPLANE_MEMORY_BUDGET.
	MemoryBudget string `mapstructure:"memory-budget" flag:"memory-budget" help:"heap size above which the garbage collector keeps the heap at twice the live objects instead of five times (a quantity: 256Mi, 2Gi; 0: no limit)"`
}

// DefaultMemoryBudget is the default MemoryBudget. It is small on purpose: a control plane
// for a handful of nodes stays well below it and gets the fastest collector, and one for a
// thousand nodes or more has a live heap above it, so its peak resident set stays near twice
// what it really holds (the goals of issue 13: 300 MiB for 1,000 nodes, 1 GiB for 5,000).
// Raise it to buy speed with memory. A stub fleet has it too: with its heartbeat workers
// sized to the fleet, a 10,000-node fleet kept every Lease on time at this budget, in
// 37 KiB a node instead of 84 without it (docs/performance.md).
const DefaultMemoryBudget = "256Mi"

// DefaultProcess returns the defaults.
func DefaultProcess() Process { return Process{MemoryBudget: DefaultMemoryBudget} }

// MemoryBudgetBytes is MemoryBudget in bytes; 0 when it is 0 or does not parse (Validate
// reports that).
func (c Process) MemoryBudgetBytes() int64 {
	q, err := resource.ParseQuantity(c.MemoryBudget)
	if err != nil {
		return 0
	}
	return q.Value()
}

// Validate reports the first problem with c.
func (c Process) Validate() error {
	q, err := resource.ParseQuantity(c.MemoryBudget)
	switch {
	case err != nil:
		return invalidf("memory-budget", "%q is not a quantity such as 512Mi or 2Gi", c.MemoryBudget)
	case q.Sign() < 0:
		return invalid("memory-budget", "must not be negative")
	}
	return nil
}
