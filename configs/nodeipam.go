package configs

import "net"

// Defaults of node IPAM. The cluster CIDR is the range the stub kubelets used to cut their
// own blocks from, so pod IPs look the same as before the control plane handed them out.
const (
	// DefaultClusterCIDR holds 32,768 /24 blocks, enough for the largest fleet we run.
	DefaultClusterCIDR = "10.128.0.0/9"
	// DefaultNodeCIDRMaskSize gives each node 254 pod IPs, above the default 110 max pods
	// (kube-controller-manager's --node-cidr-mask-size default for IPv4).
	DefaultNodeCIDRMaskSize = 24
)

// NodeIPAMController configures the node IPAM controller (a section of ControllerManager):
// kube-controller-manager's --allocate-node-cidrs, --cluster-cidr and --node-cidr-mask-size
// with the range allocator.
type NodeIPAMController struct {
	// AllocateNodeCIDRs gives every Node without spec.podCIDR a block of ClusterCIDR.
	// Default true, unlike kube-controller-manager (false): stub kubelets started without a
	// pod-cidr of their own take their pod IPs from that block, which is what keeps fleets
	// in separate processes from handing out the same IPs. Flag --allocate-node-cidrs.
	AllocateNodeCIDRs bool `mapstructure:"allocate-node-cidrs" flag:"allocate-node-cidrs" help:"assign every Node a pod CIDR block of --cluster-cidr"`
	// ClusterCIDR is the range the blocks are cut from; default 10.128.0.0/9.
	// Flag --cluster-cidr.
	ClusterCIDR string `mapstructure:"cluster-cidr" flag:"cluster-cidr" help:"CIDR range of the pods, cut into one block per Node"`
	// NodeCIDRMaskSize is the prefix length of each Node's block; default 24.
	// Flag --node-cidr-mask-size.
	NodeCIDRMaskSize int `mapstructure:"node-cidr-mask-size" flag:"node-cidr-mask-size" help:"prefix length of each Node's pod CIDR block"`
	// Workers assign blocks concurrently; default 30, kube-controller-manager's number of
	// CIDR update workers: each assignment is one PATCH, and a fleet of 10,000 registering at
	// once waits for all of them before its pods can start.
	Workers int `mapstructure:"workers"`
}

// DefaultNodeIPAMController returns the defaults.
func DefaultNodeIPAMController() NodeIPAMController {
	return NodeIPAMController{
		AllocateNodeCIDRs: true,
		ClusterCIDR:       DefaultClusterCIDR,
		NodeCIDRMaskSize:  DefaultNodeCIDRMaskSize,
		Workers:           30,
	}
}

// Validate reports the first problem with c. The range is checked even when allocation is
// off, so a typo shows up before someone turns it on.
func (c NodeIPAMController) Validate() error {
	_, cluster, err := net.ParseCIDR(c.ClusterCIDR)
	if err != nil {
		return invalid("cluster-cidr", "must be a CIDR such as %s", DefaultClusterCIDR)
	}
	ones, bits := cluster.Mask.Size()
	switch {
	case c.NodeCIDRMaskSize < ones || c.NodeCIDRMaskSize > bits:
		return invalidf("node-cidr-mask-size", "must be between %d and %d for cluster CIDR %s", ones, bits, c.ClusterCIDR)
	case c.NodeCIDRMaskSize-ones > 24:
		return invalidf("node-cidr-mask-size", "cuts cluster CIDR %s into more than 2^24 blocks", c.ClusterCIDR)
	case c.Workers < 1:
		return invalid("workers", "must be at least 1")
	}
	return nil
}
