// Package gcbudget tunes the Go garbage collector of `miniplane up` to a memory budget: the
// collector runs lazily (GOGC 400, fastest) while the heap stays within the budget, and
// falls back towards Go's default (GOGC 100, heap twice the live objects) as the live heap
// outgrows it. Unlike a GOMEMLIMIT of the same size it never makes the collector run
// without pause when the live objects alone exceed the budget. docs/performance.md has the
// measurements behind it.
package gcbudget
