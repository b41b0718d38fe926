package configs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of the stub kubelet. The intervals are the kubelet's own, so the node lifecycle
// controller sees the timing it expects from a real node.
const (
	// DefaultStubNodePrefix names fleet nodes P-0 … P-(N-1).
	DefaultStubNodePrefix = "stub-node"
	// DefaultStubHeartbeatInterval is how often each node's status is checked (kubelet
	// --node-status-update-frequency).
	DefaultStubHeartbeatInterval = 10 * time.Second
	// DefaultStubReportInterval is how often an unchanged status is written anyway (kubelet
	// nodeStatusReportFrequency); the Lease is the liveness signal in between.
	DefaultStubReportInterval = 5 * time.Minute
	// DefaultStubLeaseDuration is the kubelet's --node-lease-duration-seconds.
	DefaultStubLeaseDuration = 40 * time.Second
	// DefaultStubLeaseRenewInterval is the kubelet's renew interval (a quarter of the duration).
	DefaultStubLeaseRenewInterval = 10 * time.Second
	// DefaultStubNodeCIDRMaskSize gives each node 254 pod IPs, above the default 110 max
	// pods, when pod-cidr is set.
	DefaultStubNodeCIDRMaskSize = 24
	// StubInstanceHostname, in node-instance, stands for the host's name made a valid name
	// part (lower case, other characters than letters and digits turned into '-').
	StubInstanceHostname = "{hostname}"
	// StubInstanceReplica, in node-instance, stands for the replica number docker compose
	// gave the container (kubelet-fleet_3 → 3), which `up --scale` makes unique and
	// `down`/`up` keeps, unlike the container's hostname.
	StubInstanceReplica = "{replica}"
	// DefaultStubInternalIPCIDR numbers the nodes' InternalIP addresses: node i gets the
	// (i+1)-th address.
	DefaultStubInternalIPCIDR = "172.16.0.0/12"
)

// DefaultStubImagePullFailures returns the images no stub node can pull unless configured
// otherwise: what Kubernetes' own end-to-end tests use to mean "an image that does not exist"
// (the tags non-existent and nonexistent, the registry invalid.registry.k8s.io) and every
// registry under the .invalid top-level domain, which RFC 2606 reserves for names that must
// never resolve. Everything else, registry.example/… or docker.io/…, pulls.
func DefaultStubImagePullFailures() []string {
	return []string{":non-existent", ":nonexistent", ".invalid", "invalid.registry.k8s.io/"}
}

// KubeletStub configures `miniplane kubeletstub` (and the stub nodes of `miniplane up`): one
// node (NodeName) or a fleet of Nodes nodes named NodePrefix-0 … NodePrefix-(Nodes-1), all
// sharing one pod watch and one node watch.
//
// Every node is built from Template; an entry of Overrides with the node's name overrides the
// fields it sets to non-zero values (labels and annotations are merged key by key). Map keys
// (labels, annotations, conditions) keep the case they are written in.
type KubeletStub struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig" flag:"kubeconfig" help:"kubeconfig with the stub's node credentials"`
	// NodeName runs a single node with this name; flag --node-name. Empty runs a fleet.
	NodeName string `mapstructure:"node-name" flag:"node-name" help:"run a single node with this name"`
	// Nodes is the fleet size when NodeName is empty; default 1. Flag --nodes.
	Nodes int `mapstructure:"nodes" flag:"nodes" help:"fleet size when --node-name is not set"`
	// NodePrefix names fleet nodes NodePrefix-<i>; default "stub-node". Flag --node-prefix.
	NodePrefix string `mapstructure:"node-prefix" flag:"node-prefix" help:"fleet nodes are named PREFIX-0 … PREFIX-(N-1)"`
	// NodeInstance, when set, names fleet nodes NodePrefix-<instance>-<i> instead, so that
	// several processes running one fleet (one prefix, one credential) register distinct
	// nodes. StubInstanceHostname ("{hostname}") and StubInstanceReplica ("{replica}")
	// stand for the host's name and the docker compose replica number; `miniplane
	// kubeletstub` replaces them when it starts. Default "". Flag --node-instance.
	NodeInstance string `mapstructure:"node-instance" flag:"node-instance" help:"fleet nodes are named PREFIX-INSTANCE-<i>; {hostname} is the host's name, {replica} the docker compose replica number"`
	// HealthListen serves /healthz, /readyz and /metrics; "" (the default) disables it and
	// port 0 picks a free port. Flag --health-listen.
	HealthListen string `mapstructure:"health-listen" flag:"health-listen" help:"serve /healthz, /readyz and /metrics on HOST:PORT (port 0 picks one; \"\" disables)"`
	// Profiling adds Go's runtime profiles under /debug/pprof/ to the health listener.
	// That listener has no authentication, so profiling is off by default (the Kubernetes
	// components serve it on by default, but behind an authenticated port). It needs
	// HealthListen. Flag --profiling.
	Profiling bool `mapstructure:"profiling" flag:"profiling" help:"also serve Go profiles under /debug/pprof/ on the health listener, which has no authentication: anyone who reaches it can read them (off by default)"`

	// ClientQPS and ClientBurst override the client rate limit; 0 (the default) sizes it to
	// the fleet: QPS 200 + nodes, burst twice that (or the kubeconfig's, when higher). Every
	// node renews its Lease each LeaseRenewInterval, so a fleet of 5,000 needs 500
	// requests/s for leases alone, and twice the node count at start. Negative QPS disables
	// the limiter.
	ClientQPS   float32 `mapstructure:"client-qps"`
	ClientBurst int     `mapstructure:"client-burst"`

	// HeartbeatInterval is how often each node's status is checked and written when it
	// changed; default 10s.
	HeartbeatInterval time.Duration `mapstructure:"heartbeat-interval"`
	// ReportInterval is how often the status is written even when nothing changed; default 5m.
	ReportInterval time.Duration `mapstructure:"report-interval"`
	// LeaseDuration is the Lease's leaseDurationSeconds; default 40s.
	LeaseDuration time.Duration `mapstructure:"lease-duration"`
	// LeaseRenewInterval is how often each node renews its Lease in kube-node-lease; default 10s.
	LeaseRenewInterval time.Duration `mapstructure:"lease-renew-interval"`

	// HeartbeatWorkers send registrations, status updates and lease renewals concurrently
	// (they wait on the network, not the CPU); 0, the default, sizes them to the fleet
	// (HeartbeatWorkerCount).
	HeartbeatWorkers int `mapstructure:"heartbeat-workers"`
	// PodWorkers admit, start, stop and delete pods concurrently; 0, the default, sizes
	// them to the fleet (PodWorkerCount).
	PodWorkers int `mapstructure:"pod-workers"`
	// RecordEvents emits the kubelet's Events: Warnings for pods it cannot run (rejections,
	// image pulls, sandboxes), the Normal events of starting and stopping containers
	// (Pulling, Pulled, Created, Started, Killing) and those of the node (Starting,
	// NodeHas…, NodeReady, NodeNotSchedulable…); default true.
	RecordEvents bool `mapstructure:"record-events"`
	// EventQPS and EventBurst bound the Normal events of the whole fleet, as a kubelet's
	// event-qps and event-burst bound one node's: a pod's start or a node's goes out
	// together or not at all, and Warnings are never held back. A fleet standing for
	// thousands of kubelets in one process would otherwise write four Events for every pod
	// it starts and five for every node. Defaults 50 and 100, the kubelet's; EventQPS 0
	// removes the bound. Flags --event-qps, --event-burst.
	EventQPS   float32 `mapstructure:"event-qps" flag:"event-qps" help:"Normal events (Pulled, Started, Killing, Starting, NodeReady, …) the whole fleet records per second; 0: no limit"`
	EventBurst int     `mapstructure:"event-burst" flag:"event-burst" help:"Normal events the fleet may record at once, above event-qps"`

	// PodCIDR, when set, is split into per-node blocks of NodeCIDRMaskSize bits; node i gets
	// block i as spec.podCIDR when it is created. Default "": the Node is registered
	// without one and the control plane assigns it (the controller-manager's
	// allocate-node-cidrs), which keeps pod IPs unique across fleets in any number of
	// processes; pods wait for it, as on a kubelet whose network is not ready. Either way
	// pod IPs come from the Node's spec.podCIDR. NodeCIDRMaskSize defaults to 24.
	PodCIDR          string `mapstructure:"pod-cidr"`
	NodeCIDRMaskSize int    `mapstructure:"node-cidr-mask-size"`
	// InternalIPCIDR numbers the nodes' InternalIP addresses when the template lists none;
	// default 172.16.0.0/12.
	InternalIPCIDR string `mapstructure:"internal-ip-cidr"`

	// FaultSeed seeds the per-node random numbers that apply the fault rates, so a fleet
	// experiment can be repeated; default 1.
	FaultSeed int64 `mapstructure:"fault-seed"`

	// ImagePullFailures are the images that no node of the fleet can pull: their containers
	// wait in ErrImagePull and ImagePullBackOff and the pod stays Pending, as on a kubelet
	// whose registry answers "not found". An entry is ":TAG" (any image with that tag),
	// ".DOMAIN" (any registry whose host name ends so), "REGISTRY/" (one registry host,
	// port included if the image names one), "*" (every image) or an image reference
	// ("busybox" matches every tag of docker.io/library/busybox, "busybox:1.36" only that
	// one). Default DefaultStubImagePullFailures; an empty list pulls everything. The node
	// annotation stub.miniplane.io/image-pull-failures adds entries for one node. Flag
	// --image-pull-failures.
	ImagePullFailures []string `mapstructure:"image-pull-failures" flag:"image-pull-failures" help:"images no stub node can pull: :TAG, .DOMAIN, REGISTRY/, * or an image reference"`

	// Template describes every node.
	Template StubNodeTemplate `mapstructure:"template"`
	// Overrides customise single nodes by name.
	Overrides []StubNodeOverride `mapstructure:"overrides"`
}

// StubNodeTemplate describes a stub node: what it registers and how it behaves.
type StubNodeTemplate struct {
	// Labels are added to the node at registration. kubernetes.io/hostname (the node name),
	// kubernetes.io/os (linux) and kubernetes.io/arch (amd64) are set unless given here.
	Labels map[string]string `mapstructure:"labels" flag:"node-labels" help:"labels of every node, as kubelet --node-labels"`
	// Annotations are added to the node at registration; stub.miniplane.io/* fault
	// annotations set here take effect like ones added later with kubectl.
	Annotations map[string]string `mapstructure:"annotations" flag:"node-annotations" help:"annotations of every node (stub.miniplane.io/* faults among them)"`
	// Taints are set on the node at registration (like kubelet --register-with-taints).
	Taints []StubTaint `mapstructure:"taints"`
	// Capacity is the node's capacity; default cpu 4, memory 16Gi, pods 110,
	// ephemeral-storage 100Gi.
	Capacity StubResources `mapstructure:"capacity"`
	// Allocatable is what pods may use; fields left empty take the capacity's value.
	Allocatable StubResources `mapstructure:"allocatable"`
	// Addresses are the node's addresses; the text "{name}" is replaced by the node name.
	// Empty means InternalIP (from internal-ip-cidr) and Hostname (the node name).
	Addresses []StubAddress `mapstructure:"addresses"`
	// StartDelay keeps an admitted pod Pending (ContainerCreating) this long before it runs;
	// default 0.
	StartDelay time.Duration `mapstructure:"start-delay"`
	// ReadyDelay is how long a running pod waits before its Ready condition turns True;
	// default 0. The node annotation stub.miniplane.io/ready-delay overrides it.
	ReadyDelay time.Duration `mapstructure:"ready-delay"`
	// CompleteAfter, when positive, ends the containers of pods that are not restarted
	// (restartPolicy Never or OnFailure) this long after they started, with exit code 0:
	// the pod Succeeds, as a finished Job's or `helm test`'s pod does. Default 0: such
	// containers run until the pod is deleted, like every other. The node annotation
	// stub.miniplane.io/complete-after overrides it.
	CompleteAfter time.Duration `mapstructure:"complete-after"`
	// RuntimeHandlers are the container runtime handlers the node has besides the default
	// one: a pod whose RuntimeClass names another handler stays Pending (ContainerCreating)
	// with FailedCreatePodSandBox events, as on a node whose containerd has no such runtime.
	// Default [runc]. The node reports them in status.runtimeHandlers; the node annotation
	// stub.miniplane.io/runtime-handlers adds handlers for one node (a runtime installed
	// later, say).
	RuntimeHandlers []string `mapstructure:"runtime-handlers"`
	// Faults injects failures, each applied to a share of pods given by its rate.
	Faults StubFaults `mapstructure:"faults"`
}

// StubResources lists the quantities a node offers. Quantities use the Kubernetes notation
// ("500m", "16Gi").
type StubResources struct {
	CPU              string `mapstructure:"cpu"`
	Memory           string `mapstructure:"memory"`
	Pods             int    `mapstructure:"pods"`
	EphemeralStorage string `mapstructure:"ephemeral-storage"`
}

// StubTaint is a node taint; effect is NoSchedule, PreferNoSchedule or NoExecute.
type StubTaint struct {
	Key    string `mapstructure:"key"`
	Value  string `mapstructure:"value"`
	Effect string `mapstructure:"effect"`
}

// StubAddress is a node address; type is InternalIP, ExternalIP, Hostname, InternalDNS or
// ExternalDNS.
type StubAddress struct {
	Type    string `mapstructure:"type"`
	Address string `mapstructure:"address"`
}

// StubFaults are the configured counterparts of the stub.miniplane.io/* node annotations.
// An annotation on the node, when present, wins over the configuration.
type StubFaults struct {
	// RejectPods, when not empty, rejects new pods (phase Failed) with this reason.
	RejectPods string `mapstructure:"reject-pods"`
	// RejectRate is the share of new pods RejectPods applies to, 0..1; default 1 (all).
	RejectRate float64 `mapstructure:"reject-rate"`
	// FailAfter, when positive, fails running pods this long after they started.
	FailAfter time.Duration `mapstructure:"fail-after"`
	// FailRate is the share of admitted pods FailAfter applies to, 0..1; default 1 (all).
	FailRate float64 `mapstructure:"fail-rate"`
	// Conditions force node conditions, e.g. {MemoryPressure: "True"}. Keys match the
	// condition type case-insensitively; values are True, False or Unknown.
	Conditions NodeConditions `mapstructure:"conditions" flag:"node-conditions" help:"node conditions every node reports, e.g. MemoryPressure=True"`
	// StopHeartbeats stops status updates and lease renewals.
	StopHeartbeats bool `mapstructure:"stop-heartbeats"`
}

// NodeConditions maps a node condition type to the status a stub forces it to.
type NodeConditions map[string]string

// CanonicalKey spells a condition type the stub reports the canonical way (MemoryPressure),
// so that one written in another case is the same entry; others are kept for Validate.
func (NodeConditions) CanonicalKey(name string) string {
	if t, ok := StubConditionType(name); ok {
		return t
	}
	return name
}

// StubNodeOverride customises the node called Name; its fields override the template's when
// they are not zero.
type StubNodeOverride struct {
	Name             string `mapstructure:"name"`
	StubNodeTemplate `mapstructure:",squash"`
}

// The kubelet's defaults for its event budget (eventRecordQPS, eventBurst), applied to a
// whole fleet.
const (
	DefaultStubEventQPS   = 50
	DefaultStubEventBurst = 100
)

// DefaultStubRuntimeHandler is the handler every stub node has unless configured otherwise:
// containerd's default runtime.
const DefaultStubRuntimeHandler = "runc"

// DefaultKubeletStub returns the defaults: one fleet node named stub-node-0 with 4 cpus,
// 16Gi of memory and 110 pods, heartbeating like a kubelet.
func DefaultKubeletStub() KubeletStub {
	return KubeletStub{
		Nodes:              1,
		NodePrefix:         DefaultStubNodePrefix,
		HeartbeatInterval:  DefaultStubHeartbeatInterval,
		ReportInterval:     DefaultStubReportInterval,
		LeaseDuration:      DefaultStubLeaseDuration,
		LeaseRenewInterval: DefaultStubLeaseRenewInterval,
		RecordEvents:       true,
		EventQPS:           DefaultStubEventQPS,
		EventBurst:         DefaultStubEventBurst,
		NodeCIDRMaskSize:   DefaultStubNodeCIDRMaskSize,
		InternalIPCIDR:     DefaultStubInternalIPCIDR,
		FaultSeed:          1,
		ImagePullFailures:  DefaultStubImagePullFailures(),
		Template: StubNodeTemplate{
			Capacity:        StubResources{CPU: "4", Memory: "16Gi", Pods: 110, EphemeralStorage: "100Gi"},
			RuntimeHandlers: []string{DefaultStubRuntimeHandler},
			Faults:          StubFaults{RejectRate: 1, FailRate: 1},
		},
	}
}

// Worker counts of a fleet sized by PodWorkerCount and HeartbeatWorkerCount: a fleet of N
// nodes stands for N kubelets, each of which syncs its pods and renews its Lease on its
// own, so a fleet's concurrency grows with N, up to where the API server, not the fleet,
// is what a rollout waits for. At 5,000 nodes numberReady came 16.2 s after the DaemonSet
// with 8 pod workers and 12–13.5 s with 32 to 128 (docs/performance.md); a 10,000-node
// fleet renews 1,000 Leases a second, which 16 workers at 16 ms a request could only just
// do.
const (
	minPodWorkers       = 8
	maxPodWorkers       = 64
	nodesPerPodWorker   = 32
	minHeartbeatWorkers = 16
	maxHeartbeatWorkers = 64
	nodesPerBeatWorker  = 128
)

// PodWorkerCount is PodWorkers, or when that is 0 one worker per 32 nodes, between 8
// and 64.
func (c KubeletStub) PodWorkerCount() int {
	return workerCount(c.PodWorkers, c.nodeCount(), nodesPerPodWorker, minPodWorkers, maxPodWorkers)
}

// HeartbeatWorkerCount is HeartbeatWorkers, or when that is 0 one worker per 128 nodes,
// between 16 and 64.
func (c KubeletStub) HeartbeatWorkerCount() int {
	return workerCount(c.HeartbeatWorkers, c.nodeCount(), nodesPerBeatWorker, minHeartbeatWorkers, maxHeartbeatWorkers)
}

// nodeCount is len(NodeNames()), without making the names.
func (c KubeletStub) nodeCount() int {
	if c.NodeName != "" {
		return 1
	}
	return c.Nodes
}

func workerCount(configured, nodes, nodesPerWorker, lo, hi int) int {
	if configured > 0 {
		return configured
	}
	return min(max(nodes/nodesPerWorker, lo), hi)
}

// NodeNames returns the names of the nodes this configuration runs, in index order.
func (c KubeletStub) NodeNames() []string {
	if c.NodeName != "" {
		return []string{c.NodeName}
	}
	prefix := c.NodePrefix
	if c.NodeInstance != "" {
		prefix += "-" + c.NodeInstance
	}
	names := make([]string, c.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return names
}

// NodeTemplate returns the template of the named node: Template with the node's override
// applied.
func (c KubeletStub) NodeTemplate(name string) StubNodeTemplate {
	t := c.Template
	for _, o := range c.Overrides {
		if o.Name == name {
			t = t.merge(o.StubNodeTemplate)
		}
	}
	return t
}

// merge returns t with the non-zero fields of o applied; maps are merged key by key.
func (t StubNodeTemplate) merge(o StubNodeTemplate) StubNodeTemplate {
	t.Labels = mergeStringMaps(t.Labels, o.Labels)
	t.Annotations = mergeStringMaps(t.Annotations, o.Annotations)
	if o.Taints != nil {
		t.Taints = o.Taints
	}
	t.Capacity = t.Capacity.merge(o.Capacity)
	t.Allocatable = t.Allocatable.merge(o.Allocatable)
	if o.Addresses != nil {
		t.Addresses = o.Addresses
	}
	if o.StartDelay != 0 {
		t.StartDelay = o.StartDelay
	}
	if o.ReadyDelay != 0 {
		t.ReadyDelay = o.ReadyDelay
	}
	if o.CompleteAfter != 0 {
		t.CompleteAfter = o.CompleteAfter
	}
	if o.RuntimeHandlers != nil {
		t.RuntimeHandlers = o.RuntimeHandlers
	}
	f, of := t.Faults, o.Faults
	if of.RejectPods != "" {
		f.RejectPods = of.RejectPods
	}
	if of.RejectRate != 0 {
		f.RejectRate = of.RejectRate
	}
	if of.FailAfter != 0 {
		f.FailAfter = of.FailAfter
	}
	if of.FailRate != 0 {
		f.FailRate = of.FailRate
	}
	f.Conditions = mergeStringMaps(f.Conditions, of.Conditions)
	f.StopHeartbeats = f.StopHeartbeats || of.StopHeartbeats
	t.Faults = f
	return t
}

func (r StubResources) merge(o StubResources) StubResources {
	if o.CPU != "" {
		r.CPU = o.CPU
	}
	if o.Memory != "" {
		r.Memory = o.Memory
	}
	if o.Pods != 0 {
		r.Pods = o.Pods
	}
	if o.EphemeralStorage != "" {
		r.EphemeralStorage = o.EphemeralStorage
	}
	return r
}

func mergeStringMaps[M ~map[string]string](a, b M) M {
	if len(b) == 0 {
		return a
	}
	out := make(M, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// Validate reports the first problem with c.
func (c KubeletStub) Validate() error {
	if c.NodeName != "" && c.Nodes > 1 {
		return invalid("node-name", "runs one node: do not combine it with %s > 1", "nodes")
	}
	if c.NodeName == "" {
		if c.Nodes < 1 {
			return invalid("nodes", "must be at least 1 (or set %s)", "node-name")
		}
		if c.NodePrefix == "" {
			return invalid("node-prefix", "must not be empty")
		}
	}
	// Placeholders are replaced when the stub starts; check the names with stand-ins.
	named := c
	named.NodeInstance = strings.NewReplacer(StubInstanceHostname, "host", StubInstanceReplica, "1").Replace(c.NodeInstance)
	names := named.NodeNames()
	for _, name := range []string{names[0], names[len(names)-1]} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			key := "node-prefix"
			if c.NodeName != "" {
				key = "node-name"
			}
			return invalidf(key, "node name %q: %s", name, strings.Join(errs, "; "))
		}
		// The node's kubernetes.io/hostname label is its name, and label values are at
		// most 63 characters.
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 && c.NodeName == "" {
			return invalidf("node-instance", "node name %q: %s", name, strings.Join(errs, "; "))
		}
	}
	if err := validateHealthListen(c.HealthListen); err != nil {
		return err
	}
	if err := validateProfiling(c.Profiling, c.HealthListen); err != nil {
		return err
	}
	switch {
	case c.ClientBurst < 0:
		return invalid("client-burst", "must not be negative")
	case c.HeartbeatInterval <= 0:
		return invalid("heartbeat-interval", "must be positive")
	case c.ReportInterval < c.HeartbeatInterval:
		return invalid("report-interval", "must not be shorter than %s", "heartbeat-interval")
	case c.LeaseDuration <= 0 || c.LeaseDuration%time.Second != 0:
		return invalid("lease-duration", "must be a positive whole number of seconds")
	case c.LeaseRenewInterval <= 0 || c.LeaseRenewInterval >= c.LeaseDuration:
		return invalid("lease-renew-interval", "must be positive and shorter than %s", "lease-duration")
	case c.HeartbeatWorkers < 0:
		return invalid("heartbeat-workers", "must not be negative (0 sizes them to the fleet)")
	case c.PodWorkers < 0:
		return invalid("pod-workers", "must not be negative (0 sizes them to the fleet)")
	case c.EventQPS < 0:
		return invalid("event-qps", "must not be negative (0 removes the limit)")
	case c.EventQPS > 0 && c.EventBurst < 1:
		return invalid("event-burst", "must be at least 1 while %s limits events", "event-qps")
	}
	if err := c.validateNetworks(len(names)); err != nil {
		return err
	}
	for _, e := range c.ImagePullFailures {
		if err := ValidateImagePattern(e); err != nil {
			return invalidf("image-pull-failures", "%v", err)
		}
	}
	if err := c.Template.validate("", c.NodeCIDRMaskSize); err != nil {
		return within("template", err)
	}
	for i, o := range c.Overrides {
		if o.Name == "" {
			return invalidf("overrides", "entry %d: name is required", i)
		}
		if err := c.NodeTemplate(o.Name).validate(fmt.Sprintf("entry %d (%s): ", i, o.Name), c.NodeCIDRMaskSize); err != nil {
			var oe *OptionError
			if errors.As(err, &oe) {
				// The override's key inside the entry names the option; the message says which entry.
				return invalid("overrides", oe.Keys[0]+": "+oe.Format)
			}
			return err
		}
	}
	return nil
}

// validateNetworks checks that the pod and node address ranges hold nodes nodes.
func (c KubeletStub) validateNetworks(nodes int) error {
	if c.PodCIDR == "" {
		if c.NodeCIDRMaskSize < 1 || c.NodeCIDRMaskSize > 30 {
			return invalid("node-cidr-mask-size", "must be between 1 and 30")
		}
	} else {
		_, podNet, err := net.ParseCIDR(c.PodCIDR)
		if err != nil || podNet.IP.To4() == nil {
			return invalidf("pod-cidr", "%q must be an IPv4 CIDR", c.PodCIDR)
		}
		ones, _ := podNet.Mask.Size()
		if c.NodeCIDRMaskSize < ones || c.NodeCIDRMaskSize > 30 {
			return invalidf("node-cidr-mask-size", "must be between %d (the pod-cidr's) and 30", ones)
		}
		if blocks := 1 << (c.NodeCIDRMaskSize - ones); c.NodeName == "" && c.Nodes > blocks {
			return invalidf("pod-cidr", "%s has %d blocks of /%d, fewer than the %d nodes", c.PodCIDR, blocks, c.NodeCIDRMaskSize, c.Nodes)
		}
	}
	_, ipNet, err := net.ParseCIDR(c.InternalIPCIDR)
	if err != nil || ipNet.IP.To4() == nil {
		return invalidf("internal-ip-cidr", "%q must be an IPv4 CIDR", c.InternalIPCIDR)
	}
	if ipOnes, _ := ipNet.Mask.Size(); nodes+2 > 1<<(32-ipOnes) {
		return invalidf("internal-ip-cidr", "%s is too small for %d nodes", c.InternalIPCIDR, nodes)
	}
	return nil
}

// ReplicaInternalIPCIDR returns the replica-th block (counting from 1) of internal-ip-cidr,
// each block the smallest that numbers the fleet's nodes. Replicas of one compose service
// share a configuration, so without it every replica would give its node i the same
// InternalIP, and host-network pods (which take the node's address) the same pod IP.
// Replica 1 keeps the addresses the whole range gives.
func (c KubeletStub) ReplicaInternalIPCIDR(replica int) (string, error) {
	_, ipNet, err := net.ParseCIDR(c.InternalIPCIDR)
	if err != nil || ipNet.IP.To4() == nil {
		return "", invalidf("internal-ip-cidr", "%q must be an IPv4 CIDR", c.InternalIPCIDR)
	}
	if replica < 1 {
		return "", fmt.Errorf("replica %d: replicas count from 1", replica)
	}
	nodes := max(c.Nodes, 1)
	if c.NodeName != "" {
		nodes = 1
	}
	hostBits := bits.Len(uint(nodes + 1)) // a block of 1<<hostBits holds addresses 1..nodes and a broadcast
	ones, _ := ipNet.Mask.Size()
	if 32-ones < hostBits {
		return "", invalidf("internal-ip-cidr", "%s is too small for %d nodes", c.InternalIPCIDR, nodes)
	}
	if blocks := uint64(1) << (32 - ones - hostBits); uint64(replica) > blocks {
		return "", invalidf("internal-ip-cidr", "%s has %d blocks of /%d for fleets of %d nodes, fewer than replica %d needs",
			c.InternalIPCIDR, blocks, 32-hostBits, nodes, replica)
	}
	block, err := CIDRBlock(c.InternalIPCIDR, 32-hostBits, replica-1)
	if err != nil {
		return "", err
	}
	return block.String(), nil
}

// CIDRBlock returns the index-th block of maskSize bits inside the IPv4 CIDR cidr.
func CIDRBlock(cidr string, maskSize, index int) (*net.IPNet, error) {
	_, ipNet, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, err
	}
	ones, _ := ipNet.Mask.Size()
	if ipNet.IP.To4() == nil || maskSize < ones || maskSize > 32 || index < 0 || uint64(index) >= uint64(1)<<(maskSize-ones) {
		return nil, fmt.Errorf("%s has no block %d of /%d", cidr, index, maskSize)
	}
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, binary.BigEndian.Uint32(ipNet.IP.To4())+uint32(index)<<(32-maskSize))
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(maskSize, 32)}, nil
}

// ValidateStandalone is Validate for `miniplane kubeletstub`, which needs a kubeconfig to
// reach the API server.
func (c KubeletStub) ValidateStandalone() error {
	if c.Kubeconfig == "" {
		return invalid("kubeconfig", "is required")
	}
	return c.Validate()
}

// stubConditionTypes are the node conditions a stub reports, in the kubelet's order.
var stubConditionTypes = []string{"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"}

// StubConditionType returns the canonical spelling of a node condition type the stub reports
// (matching case-insensitively, as the stub.miniplane.io/conditions annotation does), or false.
func StubConditionType(name string) (string, bool) {
	for _, t := range stubConditionTypes {
		if strings.EqualFold(t, name) {
			return t, true
		}
	}
	return "", false
}

// StubConditionStatus returns the canonical spelling of a condition status (True, False,
// Unknown), matching case-insensitively, or false.
func StubConditionStatus(value string) (string, bool) {
	for _, s := range []string{"True", "False", "Unknown"} {
		if strings.EqualFold(s, value) {
			return s, true
		}
	}
	return "", false
}

// validate checks a node template; where prefixes every message (the override entry).
func (t StubNodeTemplate) validate(where string, nodeMaskSize int) error {
	bad := func(key, format string, args ...any) error { return invalidf(key, where+format, args...) }
	for k, v := range t.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return bad("labels", "key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return bad("labels", "%s value %q: %s", k, v, strings.Join(errs, "; "))
		}
	}
	for _, taint := range t.Taints {
		if errs := validation.IsQualifiedName(taint.Key); len(errs) > 0 {
			return bad("taints", "key %q: %s", taint.Key, strings.Join(errs, "; "))
		}
		switch taint.Effect {
		case "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			return bad("taints", "%s: effect must be NoSchedule, PreferNoSchedule or NoExecute, not %q", taint.Key, taint.Effect)
		}
	}
	for _, r := range []struct {
		key string
		res StubResources
	}{{"capacity", t.Capacity}, {"allocatable", t.Allocatable}} {
		for field, q := range map[string]string{"cpu": r.res.CPU, "memory": r.res.Memory, "ephemeral-storage": r.res.EphemeralStorage} {
			if q == "" {
				continue
			}
			if v, err := resource.ParseQuantity(q); err != nil || v.Sign() < 0 {
				return bad(r.key, "%s %q is not a non-negative quantity", field, q)
			}
		}
		if r.res.Pods < 0 {
			return bad(r.key, "pods must not be negative")
		}
	}
	if t.Capacity.CPU == "" || t.Capacity.Memory == "" || t.Capacity.Pods == 0 {
		return bad("capacity", "needs cpu, memory and pods")
	}
	maxPods := t.Capacity.Pods
	if t.Allocatable.Pods != 0 {
		maxPods = t.Allocatable.Pods
	}
	if ips := 1<<(32-nodeMaskSize) - 2; maxPods > ips {
		return bad("capacity", "%d pods do not fit the %d pod IPs of a /%d node block", maxPods, ips, nodeMaskSize)
	}
	for _, h := range t.RuntimeHandlers {
		if errs := validation.IsDNS1123Label(h); len(errs) > 0 {
			return bad("runtime-handlers", "%q: %s", h, strings.Join(errs, "; "))
		}
	}
	for _, a := range t.Addresses {
		switch a.Type {
		case "InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS":
		default:
			return bad("addresses", "type %q is not a node address type", a.Type)
		}
		if a.Address == "" {
			return bad("addresses", "%s address is empty", a.Type)
		}
	}
	switch {
	case t.StartDelay < 0:
		return bad("start-delay", "must not be negative")
	case t.ReadyDelay < 0:
		return bad("ready-delay", "must not be negative")
	case t.CompleteAfter < 0:
		return bad("complete-after", "must not be negative")
	case t.Faults.RejectRate < 0 || t.Faults.RejectRate > 1:
		return bad("faults::reject-rate", "must be between 0 and 1")
	case t.Faults.FailRate < 0 || t.Faults.FailRate > 1:
		return bad("faults::fail-rate", "must be between 0 and 1")
	case t.Faults.FailAfter < 0:
		return bad("faults::fail-after", "must not be negative")
	}
	for k, v := range t.Faults.Conditions {
		if _, ok := StubConditionType(k); !ok {
			return bad("faults::conditions", "%q is not one of %s", k, strings.Join(stubConditionTypes, ", "))
		}
		if _, ok := StubConditionStatus(v); !ok {
			return bad("faults::conditions", "%s=%q must be True, False or Unknown", k, v)
		}
	}
	return nil
}

// ValidateImagePattern checks the syntax of one image-pull-failures entry (see
// KubeletStub.ImagePullFailures); the stub's matcher and its node annotation use the same
// rules.
func ValidateImagePattern(e string) error {
	switch {
	case e == "" || strings.TrimSpace(e) != e || strings.ContainsAny(e, " \t,"):
		return fmt.Errorf("entry %q is empty or contains spaces or commas", e)
	case e == "*":
	case strings.HasPrefix(e, ":"):
		if len(e) == 1 || len(e) > 129 || strings.ContainsAny(e[1:], ":/@") {
			return fmt.Errorf("entry %q: a tag is 1 to 128 characters without ':', '/' or '@'", e)
		}
	case strings.HasPrefix(e, "."), strings.HasSuffix(e, "/"):
		host := strings.TrimSuffix(strings.TrimPrefix(e, "."), "/")
		if host == "" || strings.ContainsAny(host, "/@") {
			return fmt.Errorf("entry %q: want .DOMAIN or REGISTRY/ with a host name", e)
		}
	case strings.Contains(e, "*"):
		return fmt.Errorf("entry %q: '*' stands alone; use :TAG, .DOMAIN or REGISTRY/ for a group of images", e)
	}
	return nil
}
