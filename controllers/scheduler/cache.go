package scheduler

import (
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/miniplane/miniplane/controllers/placement"
)

// Requests assumed for scoring pods that request nothing, as kube-scheduler's
// least-allocated scoring does, so empty pods still spread.
const (
	defaultMilliCPURequest = 100               // 0.1 core
	defaultMemoryRequest   = 200 * 1024 * 1024 // 200 MiB
)

// nodeInfo is one node and the pods that hold resources on it.
type nodeInfo struct {
	node *corev1.Node // nil while pods name a node the informer has not delivered yet
	pods map[types.UID]*corev1.Pod
	// Non-zero requests of pods, for least-allocated scoring.
	milliCPU, memory int64
}

func (n *nodeInfo) podList() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(n.pods))
	for _, p := range n.pods {
		out = append(out, p)
	}
	return out
}

// cache is the scheduler's view of nodes and of the pods bound to them, including pods it
// has "assumed": decided and being bound, but not yet seen bound through the informer.
// Filtering and assuming happen under one lock, so concurrent workers never place two pods
// on capacity that fits only one.
type nodeCache struct {
	mu      sync.Mutex
	nodes   map[string]*nodeInfo
	numReal int                  // nodes with a Node object
	podNode map[types.UID]string // bound or assumed pod → node
	assumed map[types.UID]bool
}

func newCache() *nodeCache {
	return &nodeCache{nodes: map[string]*nodeInfo{}, podNode: map[types.UID]string{}, assumed: map[types.UID]bool{}}
}

func (c *nodeCache) info(name string) *nodeInfo {
	n := c.nodes[name]
	if n == nil {
		n = &nodeInfo{pods: map[types.UID]*corev1.Pod{}}
		c.nodes[name] = n
	}
	return n
}

// setNode records the latest version of node.
func (c *nodeCache) setNode(node *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.info(node.Name)
	if n.node == nil {
		c.numReal++
	}
	n.node = node
}

// removeNode forgets a node; its pods stay accounted until they go.
func (c *nodeCache) removeNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	if n == nil || n.node == nil {
		return
	}
	n.node = nil
	c.numReal--
	if len(n.pods) == 0 {
		delete(c.nodes, name)
	}
}

// setPod records a pod seen through the informer: bound, non-terminal pods hold resources;
// anything else is removed. Seeing a pod bound confirms (replaces) its assumed entry.
func (c *nodeCache) setPod(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pod.Spec.NodeName == "" {
		if c.assumed[pod.UID] {
			return // our binding is in flight; the informer has not caught up yet
		}
		c.removeLocked(pod.UID)
		return
	}
	if placement.IsTerminal(pod) {
		c.removeLocked(pod.UID)
		return
	}
	c.removeLocked(pod.UID)
	c.addLocked(pod, pod.Spec.NodeName)
}

// removePod forgets a deleted pod.
func (c *nodeCache) removePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(uid)
}

// has reports whether the pod is bound or assumed.
func (c *nodeCache) has(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.podNode[uid]
	return ok
}

// forget drops an assumption after its binding failed.
func (c *nodeCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assumed[uid] {
		c.removeLocked(uid)
	}
}

func (c *nodeCache) addLocked(pod *corev1.Pod, node string) {
	n := c.info(node)
	n.pods[pod.UID] = pod
	cpu, mem := nonZeroRequests(pod)
	n.milliCPU += cpu
	n.memory += mem
	c.podNode[pod.UID] = node
}

func (c *nodeCache) removeLocked(uid types.UID) {
	name, ok := c.podNode[uid]
	if !ok {
		return
	}
	delete(c.podNode, uid)
	delete(c.assumed, uid)
	n := c.nodes[name]
	if n == nil {
		return
	}
	if p, ok := n.pods[uid]; ok {
		cpu, mem := nonZeroRequests(p)
		n.milliCPU -= cpu
		n.memory -= mem
		delete(n.pods, uid)
	}
	if n.node == nil && len(n.pods) == 0 {
		delete(c.nodes, name)
	}
}

// scheduleAndAssume picks a node for pod and, when one fits, assumes the pod on it before
// releasing the lock. It returns the node name, or the reasons nothing fits.
func (c *nodeCache) scheduleAndAssume(pod *corev1.Pod) (string, *fitError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fe := &fitError{numAllNodes: c.numReal, reasons: map[string]int{}}
	if c.numReal == 0 {
		return "", fe
	}
	var candidates []*nodeInfo
	if names, pinned := pinnedNodeNames(pod); pinned {
		for name := range names {
			if n := c.nodes[name]; n != nil && n.node != nil {
				candidates = append(candidates, n)
			}
		}
		if absent := c.numReal - len(candidates); absent > 0 {
			fe.reasons[reasonPinnedElsewhere] = absent
		}
	} else {
		candidates = make([]*nodeInfo, 0, c.numReal)
		for _, n := range c.nodes {
			if n.node != nil {
				candidates = append(candidates, n)
			}
		}
	}
	// Name order makes ties (and tests) deterministic.
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].node.Name < candidates[j].node.Name })

	var best *nodeInfo
	bestScore := int64(-1)
	cpu, mem := nonZeroRequests(pod)
	for _, n := range candidates {
		if reasons := filterNode(pod, n.node, n.podList()); len(reasons) > 0 {
			for _, r := range reasons {
				fe.reasons[r]++
			}
			continue
		}
		if score := leastAllocatedScore(n, cpu, mem); score > bestScore {
			best, bestScore = n, score
		}
	}
	if best == nil {
		return "", fe
	}
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = best.node.Name
	c.addLocked(assumed, best.node.Name)
	c.assumed[pod.UID] = true
	return best.node.Name, nil
}

// leastAllocatedScore is kube-scheduler's NodeResourcesFit LeastAllocated score (0–100): the
// mean free fraction of cpu and memory after placing the pod.
func leastAllocatedScore(n *nodeInfo, cpu, mem int64) int64 {
	alloc := n.node.Status.Allocatable
	score := func(requested, capacity int64) int64 {
		if capacity <= 0 || requested > capacity {
			return 0
		}
		return (capacity - requested) * 100 / capacity
	}
	allocCPU := alloc.Cpu().MilliValue()
	allocMem := alloc.Memory().Value()
	return (score(n.milliCPU+cpu, allocCPU) + score(n.memory+mem, allocMem)) / 2
}

// nonZeroRequests returns the pod's cpu (millicores) and memory requests, with
// kube-scheduler's defaults for what it leaves unset.
func nonZeroRequests(pod *corev1.Pod) (int64, int64) {
	req := placement.PodRequests(pod)
	cpu, mem := int64(defaultMilliCPURequest), int64(defaultMemoryRequest)
	if q, ok := req[corev1.ResourceCPU]; ok && !q.IsZero() {
		cpu = q.MilliValue()
	}
	if q, ok := req[corev1.ResourceMemory]; ok && !q.IsZero() {
		mem = q.Value()
	}
	return cpu, mem
}
