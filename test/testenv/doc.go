// Package testenv runs a whole miniplane control plane in one process: an embedded etcd,
// the API server on a loopback port, and (as configured) the controller-manager, the
// scheduler and a fleet of stub kubelets, each talking to the API server as an ordinary
// client with its own token. It is what `miniplane up` runs, and what tests import to get
// a real control plane without downloading binaries — envtest for miniplane.
package testenv
