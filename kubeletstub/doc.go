// Package kubeletstub runs stub kubelets: one node or a fleet of thousands in one process,
// each an ordinary API client that registers its Node, heartbeats (node status conditions and
// a Lease in kube-node-lease), and accepts or rejects the pods bound to it the way a kubelet
// does, so the control plane's failure paths really run.
//
// The behaviour is split into small loops tied together by callbacks, as in KWOK:
//
//   - registration creates each Node, or re-uses the one already there, and reports it
//     registered;
//   - the heartbeater keeps one timer queue for the whole fleet (no goroutine or ticker per
//     node), checks each node's status every heartbeat interval, writes it when something
//     changed or the report interval passed, and renews each node's Lease;
//   - the pod controller admits pods bound to the fleet's nodes (resources, host ports,
//     node affinity, NoExecute taints), moves them Pending → Running → Ready as a kubelet's
//     containers would (image pulls that fail and back off, init containers in order,
//     startup and readiness probe timing), fails them when a fault says so, and stops and
//     deletes them when they are deleted. A pod's status is a pure function of its spec, the
//     node's record of it, the faults and the clock; the one timer queue of the fleet wakes
//     it when that status next changes by itself.
//
// The fleet shares one node informer and one pod informer. Its pod and heartbeat workers
// grow with the number of nodes unless configured (configs.KubeletStub.PodWorkerCount):
// N nodes stand for N kubelets, which do not wait for each other.
//
// Faults are read from node annotations at run time, so `kubectl annotate node` injects
// them while the system runs (an annotation wins over the configuration):
//
//	stub.miniplane.io/reject-pods: "<reason>"   new pods are rejected (phase Failed, that reason)
//	stub.miniplane.io/fail-after: "<duration>"  running pods fail that long after they started
//	stub.miniplane.io/ready-delay: "<duration>" pods turn Ready that long after they started
//	stub.miniplane.io/complete-after: "<duration>"
//	                                            pods that are not restarted (restartPolicy
//	                                            Never, OnFailure) Succeed that long after
//	                                            they started
//	stub.miniplane.io/conditions: "MemoryPressure=True,DiskPressure=True"
//	                                            the node reports these condition statuses
//	stub.miniplane.io/stop-heartbeats: "true"   no status updates or Lease renewals
//	stub.miniplane.io/image-pull-failures: ":v2,registry.example/"
//	                                            images the node cannot pull (ErrImagePull,
//	                                            ImagePullBackOff), on top of the configured ones
//	stub.miniplane.io/fail-probes: "readiness"  readiness (or startup) probes fail
//	stub.miniplane.io/runtime-handlers: "kata"  runtime handlers the node has on top of the
//	                                            configured ones (pods of a RuntimeClass
//	                                            naming another wait in ContainerCreating)
//
// The same behaviours can be set per node in the configuration (configs.StubFaults), with
// a rate (reject 20% of pods, fail 10%) drawn from a per-node random seeded by fault-seed.
package kubeletstub
