// Package nodeipam gives every Node a block of pod IP addresses, as kube-controller-manager's
// node IPAM controller does with --allocate-node-cidrs and the range allocator: the cluster
// CIDR (--cluster-cidr) is cut into blocks of --node-cidr-mask-size bits, a Node without
// spec.podCIDR gets the first free block (spec.podCIDR and spec.podCIDRs), a Node that has
// one keeps it and its block counts as used, and a deleted Node's block is free again.
//
// Which blocks are used is never stored: on start the controller reads it back from the
// Nodes in its cache before it allocates anything, so a restart (or a new leader) cannot hand
// out a block twice. When every block is taken, the Node gets a CIDRNotAvailable warning
// event and is retried with backoff until a block is freed.
//
// A stub kubelet started without its own pod-cidr waits for this block and takes its pod
// IPs from it, so fleets in separate processes never hand out the same pod IP.
package nodeipam
