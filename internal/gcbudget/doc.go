// Package gcbudget tunes the Go garbage collector of a miniplane process to a memory budget.
// While the live heap is small the collector runs lazily (GOGC 400, fastest); as it grows,
// GOGC falls so that the heap's goal stays within the budget, and a memory limit of the
// budget holds the whole of the runtime's memory (heap, stacks, metadata, freed pages not
// yet returned) to it. Once the live heap outgrows half the budget the limit is lifted and
// the heap grows to twice the live objects, Go's default: unlike a GOMEMLIMIT of the same
// size, a budget never makes the collector run more often than an untuned program's does.
// docs/performance.md has the measurements behind it.
package gcbudget
