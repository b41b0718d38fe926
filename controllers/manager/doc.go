// Package manager runs `miniplane controller-manager`: it builds one API client per
// controller (each with its own user agent and rate limit) and a shared informer factory
// from a rest config, optionally elects a leader through the Lease
// kube-system/kube-controller-manager, starts the selected controllers (daemonset,
// garbagecollector, nodelifecycle, nodeipam, root-ca-cert-publisher, podgc) while it leads,
// and serves /healthz, /readyz and /metrics.
package manager
