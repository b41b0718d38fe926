// Package testenv starts a whole miniplane control plane for a test: an embedded etcd, the
// API server on a free loopback port, and (as configured) the controller-manager, the
// scheduler and a fleet of stub kubelets, each talking to the API server as an ordinary
// client with its own token. It is envtest for miniplane: other projects import it to test
// their controllers against a real API server without downloading binaries.
//
// It is a thin layer over the assembly `miniplane up` runs: New adds a temporary directory,
// quiet logs and cleanup when the test ends. Its API (Config, Env, New, Start, Everything
// and the identity names) is kept stable for the projects that import it.
package testenv
