package kubeletstub

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/miniplane/miniplane/configs"
)

// KubeletVersion is what stub nodes report as status.nodeInfo.kubeletVersion.
const KubeletVersion = "v1.37.2-miniplane"

// Progress bits of a node (stubNode.progress): the fleet is Ready once every node has all
// three.
const (
	progressRegistered uint32 = 1 << iota
	progressStatus
	progressLease
	progressAll = progressRegistered | progressStatus | progressLease
)

// stubNode is one simulated node: its fixed description (from the configuration) and the
// little state the loops keep about it. The Node object itself is read from the shared
// informer; this struct never caches it.
type stubNode struct {
	name  string
	index int
	tmpl  configs.StubNodeTemplate

	labels, annotations map[string]string
	taints              []corev1.Taint
	capacity            corev1.ResourceList
	allocatable         corev1.ResourceList
	addresses           []corev1.NodeAddress
	// hostIP is the first InternalIP, the pods' status.hostIP.
	hostIP string
	// podCIDR is the block this node asks for at registration, "" to leave it to the
	// control plane; pod IPs come from the Node's spec.podCIDR when it has one (a re-used
	// node keeps its block).
	podCIDR string

	progress atomic.Uint32

	// mu guards the pod records, the random source and the IP cursor: admission on one node
	// is serialized so two pods cannot both take the last free cpu or the same IP.
	mu       sync.Mutex
	pods     map[types.UID]*podRecord
	rng      *rand.Rand
	ipCursor uint32
	recorder record.EventRecorder
	// images are the images containers started from on this node, by the runtime's
	// reference: the kubelet pulls an IfNotPresent image only the first time.
	images map[string]bool
	// probeFaults are the node's probe-fault episodes, nil until a fail-probes annotation is
	// first seen (most nodes never have one).
	probeFaults *[numProbeKinds]probeEpisode

	// Heartbeat state, each touched only by the worker holding that node's status or lease
	// key (the work queue never hands one key to two workers at once).
	lastReport     metav1.Time
	lastConditions []condition
	lastHandlers   []string
	// lastUnschedulable is spec.unschedulable as the last status check saw it; false at
	// start, as the kubelet's, so a node found cordoned is announced so.
	lastUnschedulable bool
	statusErrors      int
	lease             *coordinationv1.Lease
	leaseErrors       int
	// freshLease is set by registration when it created the Node: the first renewal then
	// creates the Lease without reading it first (one request instead of two per node).
	freshLease bool
}

// newStubNode resolves the configuration of the node with the given name and index.
func newStubNode(cfg *configs.KubeletStub, name string, index int, resources resourceCache) (*stubNode, error) {
	tmpl := cfg.NodeTemplate(name)
	n := &stubNode{
		name:  name,
		index: index,
		tmpl:  tmpl,
		pods:  map[types.UID]*podRecord{},
		rng:   newRand(cfg.FaultSeed, name),
	}
	n.labels = map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	for k, v := range tmpl.Labels {
		n.labels[k] = v
	}
	n.annotations = tmpl.Annotations // read-only, shared by the nodes of one template
	for _, t := range tmpl.Taints {
		n.taints = append(n.taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	var err error
	if n.capacity, n.allocatable, err = resources.lists(tmpl.Capacity, tmpl.Allocatable); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}

	internalIP, err := nthAddress(cfg.InternalIPCIDR, uint32(index)+1)
	if err != nil {
		return nil, fmt.Errorf("internal-ip-cidr: %w", err)
	}
	if len(tmpl.Addresses) == 0 {
		n.addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: internalIP.String()},
			{Type: corev1.NodeHostName, Address: name},
		}
	} else {
		for _, a := range tmpl.Addresses {
			n.addresses = append(n.addresses, corev1.NodeAddress{
				Type:    corev1.NodeAddressType(a.Type),
				Address: strings.ReplaceAll(a.Address, "{name}", name),
			})
		}
	}
	for _, a := range n.addresses {
		if a.Type == corev1.NodeInternalIP {
			n.hostIP = a.Address
			break
		}
	}
	if n.hostIP == "" {
		n.hostIP = internalIP.String()
	}
	if cfg.PodCIDR != "" {
		block, err := configs.CIDRBlock(cfg.PodCIDR, cfg.NodeCIDRMaskSize, index)
		if err != nil {
			return nil, fmt.Errorf("pod-cidr: %w", err)
		}
		n.podCIDR = block.String()
	}
	return n, nil
}

// newRand returns the node's random source, seeded from the fleet's seed and the node's
// name so that each node's fault decisions are reproducible whatever the order in which the
// fleet's nodes see their pods. PCG keeps it at 16 bytes a node (math/rand's source is 5 kB).
func newRand(seed int64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// chance draws against rate with the node's random source; rates of 0 and 1 draw nothing so
// that they do not shift the sequence of the fractional ones. Callers hold n.mu.
func (n *stubNode) chance(rate float64) bool {
	switch {
	case rate <= 0:
		return false
	case rate >= 1:
		return true
	}
	return n.rng.Float64() < rate
}

// resourceCache shares the parsed capacity and allocatable of identical templates between
// nodes: thousands of nodes usually have one template, and the lists are only read.
type resourceCache map[[2]configs.StubResources][2]corev1.ResourceList

// lists returns the capacity and allocatable lists; empty allocatable fields take the
// capacity's value.
func (c resourceCache) lists(capacity, allocatable configs.StubResources) (corev1.ResourceList, corev1.ResourceList, error) {
	key := [2]configs.StubResources{capacity, allocatable}
	if l, ok := c[key]; ok {
		return l[0], l[1], nil
	}
	capList, err := resourceList(capacity)
	if err != nil {
		return nil, nil, fmt.Errorf("capacity: %w", err)
	}
	alloc, err := resourceList(allocatable)
	if err != nil {
		return nil, nil, fmt.Errorf("allocatable: %w", err)
	}
	allocList := capList.DeepCopy()
	for k, v := range alloc {
		allocList[k] = v
	}
	c[key] = [2]corev1.ResourceList{capList, allocList}
	return capList, allocList, nil
}

func resourceList(r configs.StubResources) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: r.CPU, corev1.ResourceMemory: r.Memory, corev1.ResourceEphemeralStorage: r.EphemeralStorage,
	} {
		if v == "" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = q
	}
	if r.Pods > 0 {
		out[corev1.ResourcePods] = *resource.NewQuantity(int64(r.Pods), resource.DecimalSI)
	}
	return out, nil
}

// newNodeObject is the Node this stub registers when none exists, with the status of its
// first heartbeat (stamped now), so a fresh node is Ready without a second request. Status
// is the kubelet's to own: a server that drops it on create gets it from the first
// heartbeat, which follows at once.
func (n *stubNode) newNodeObject(now time.Time) *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.name,
			Labels:      n.labels,
			Annotations: n.annotations,
		},
		Spec: corev1.NodeSpec{
			ProviderID: "miniplane://" + n.name,
			Taints:     n.taints,
		},
		Status: n.newNodeStatus(now),
	}
	if n.podCIDR != "" {
		// Without a block of its own the node gets one from the control plane.
		node.Spec.PodCIDR, node.Spec.PodCIDRs = n.podCIDR, []string{n.podCIDR}
	}
	return node.DeepCopy()
}

// status is the node status to report: the configured capacity, addresses and node info,
// the runtime handlers named (and the default one), and the conditions want, heartbeat at
// stamp. A condition whose status is the same in current (the Node as last seen, or nil)
// keeps its transition time.
func (n *stubNode) status(want []condition, handlers []string, current *corev1.Node, stamp metav1.Time) corev1.NodeStatus {
	status := corev1.NodeStatus{
		Capacity:        n.capacity,
		Allocatable:     n.allocatable,
		Addresses:       n.addresses,
		NodeInfo:        n.nodeInfo(),
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		RuntimeHandlers: runtimeHandlers(handlers),
	}
	for _, c := range want {
		transition := stamp
		if current != nil {
			if cur := findNodeCondition(current, c.typ); cur != nil && cur.Status == c.status && !cur.LastTransitionTime.IsZero() {
				transition = cur.LastTransitionTime
			}
		}
		status.Conditions = append(status.Conditions, corev1.NodeCondition{
			Type: c.typ, Status: c.status, Reason: c.reason, Message: c.message,
			LastHeartbeatTime: stamp, LastTransitionTime: transition,
		})
	}
	return status
}

// runtimeHandlers is status.runtimeHandlers as a kubelet on containerd 2 reports it: the
// named handlers, then the default one (""), each with the features a current kernel gives.
func runtimeHandlers(names []string) []corev1.NodeRuntimeHandler {
	out := make([]corev1.NodeRuntimeHandler, 0, len(names)+1)
	for i := 0; i <= len(names); i++ {
		name := ""
		if i < len(names) {
			name = names[i]
		}
		out = append(out, corev1.NodeRuntimeHandler{Name: name, Features: &corev1.NodeRuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: ptrTo(true), UserNamespaces: ptrTo(true)}})
	}
	return out
}

// runtimeHandlersMatch reports whether have is what runtimeHandlers(names) reports, by name.
func runtimeHandlersMatch(have []corev1.NodeRuntimeHandler, names []string) bool {
	if len(have) != len(names)+1 || have[len(names)].Name != "" {
		return false
	}
	for i, name := range names {
		if have[i].Name != name {
			return false
		}
	}
	return true
}

// newNodeStatus is the status a node registers with.
func (n *stubNode) newNodeStatus(now time.Time) corev1.NodeStatus {
	f := currentFaults(&n.tmpl, n.annotations)
	return n.status(conditions(f), f.runtimeHandlers, nil, metav1.NewTime(now).Rfc3339Copy())
}

func (n *stubNode) nodeInfo() corev1.NodeSystemInfo {
	return corev1.NodeSystemInfo{
		KubeletVersion:          KubeletVersion,
		OperatingSystem:         "linux",
		Architecture:            "amd64",
		OSImage:                 "miniplane stub node",
		KernelVersion:           "stub",
		ContainerRuntimeVersion: "stub://1.0",
	}
}

// condition is what a node condition says, without its timestamps.
type condition struct {
	typ     corev1.NodeConditionType
	status  corev1.ConditionStatus
	reason  string
	message string
}

// healthy lists the conditions of a healthy node, with the kubelet's reasons and messages,
// in the kubelet's order. NetworkUnavailable is normally set by the network plugin; the stub
// plays that part too.
var healthy = []condition{
	{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
	{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
	{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
	{corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "StubNetworkReady", "the stub network is configured"},
}

// unhealthy gives the kubelet's wording of each condition in its bad state.
var unhealthy = map[corev1.NodeConditionType]condition{
	corev1.NodeMemoryPressure:     {reason: "KubeletHasInsufficientMemory", message: "kubelet has insufficient memory available"},
	corev1.NodeDiskPressure:       {reason: "KubeletHasDiskPressure", message: "kubelet has disk pressure"},
	corev1.NodePIDPressure:        {reason: "KubeletHasInsufficientPID", message: "kubelet has insufficient PID available"},
	corev1.NodeReady:              {reason: "KubeletNotReady", message: "kubelet is not ready"},
	corev1.NodeNetworkUnavailable: {reason: "StubNetworkUnavailable", message: "the stub network is unavailable"},
}

// conditions returns the node conditions to report under f.
func conditions(f faults) []condition {
	out := make([]condition, len(healthy))
	copy(out, healthy)
	for i, c := range out {
		want, ok := f.conditions[c.typ]
		if !ok || want == c.status {
			continue
		}
		bad := unhealthy[c.typ]
		c.status = want
		c.reason, c.message = bad.reason, bad.message+" ("+AnnotationConditions+")"
		if want == corev1.ConditionUnknown {
			c.reason, c.message = "StubConditionUnknown", "status forced to Unknown ("+AnnotationConditions+")"
		}
		out[i] = c
	}
	return out
}

// nthAddress returns the n-th address of an IPv4 CIDR.
func nthAddress(cidr string, n uint32) (net.IP, error) {
	_, ipNet, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, err
	}
	base := ipNet.IP.To4()
	if base == nil {
		return nil, fmt.Errorf("%s is not IPv4", cidr)
	}
	ones, _ := ipNet.Mask.Size()
	if size := uint64(1) << (32 - ones); uint64(n) >= size {
		return nil, fmt.Errorf("%s has no address number %d", cidr, n)
	}
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, binary.BigEndian.Uint32(base)+n)
	return ip, nil
}

// allocateIP returns a free pod IP in block (the node's pod CIDR), skipping the network and
// broadcast addresses and every IP in used. The cursor rotates so a freed IP is not handed
// out again at once. Callers hold n.mu.
func (n *stubNode) allocateIP(block string, used map[string]bool) (string, error) {
	_, ipNet, err := net.ParseCIDR(block)
	if err != nil || ipNet.IP.To4() == nil {
		return "", fmt.Errorf("pod CIDR %q is not an IPv4 CIDR", block)
	}
	ones, _ := ipNet.Mask.Size()
	hosts := uint32(1)<<(32-ones) - 2
	base := binary.BigEndian.Uint32(ipNet.IP.To4())
	for i := uint32(0); i < hosts; i++ {
		off := (n.ipCursor+i)%hosts + 1
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, base+off)
		if s := ip.String(); !used[s] {
			n.ipCursor = off % hosts
			return s, nil
		}
	}
	return "", fmt.Errorf("pod CIDR %s is full", block)
}

// observeProbeFaults records whether each probe fault is in force at now and returns the
// node's episodes.
func (n *stubNode) observeProbeFaults(f faults, now time.Time) [numProbeKinds]probeEpisode {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeFaults == nil {
		if f.failProbes == ([numProbeKinds]bool{}) {
			return [numProbeKinds]probeEpisode{}
		}
		n.probeFaults = &[numProbeKinds]probeEpisode{}
	}
	for k := range n.probeFaults {
		n.probeFaults[k].observe(f.failProbes[k], now)
	}
	return *n.probeFaults
}
