// Package component runs a control-plane component (the controller-manager or the scheduler)
// inside a process: API clients with a user agent and rate limits, the /healthz, /readyz and
// /metrics endpoint, and optional client-go leader election on a Lease, so that of several
// replicas only the leader acts.
package component
