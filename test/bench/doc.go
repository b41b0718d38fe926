// Package bench holds end-to-end benchmarks of a whole in-process miniplane (etcd, API
// server, controller-manager, scheduler and a fleet of stub kubelets). It has no library
// code; run it with
//
//	go test -run '^$' -bench DaemonSetRollout -benchtime 1x ./test/bench/
package bench
