package configs

import "path/filepath"

// Up configures `miniplane up`: every component in one process on an embedded etcd (or the
// etcd cluster named by apiserver::etcd-servers).
//
// Each component's section takes the same keys as the component's own command; on the command
// line they are prefixed by the section, so the controller-manager's --feature-gates is
// --controller-manager-feature-gates here and MINIPLANE_CONTROLLER_MANAGER_FEATURE_GATES in
// the environment. Some options derive from the top-level ones unless set: the API server's
// listen address (from listen), cert dir, token file and embedded etcd dir (under data-dir),
// and the stub fleet's size (from nodes).
type Up struct {
	// DataDir holds etcd data, certificates, tokens and the admin kubeconfig; default
	// ./.miniplane. Flag --data-dir.
	DataDir string `mapstructure:"data-dir" flag:"data-dir" help:"directory for etcd data, certificates, tokens and the kubeconfig"`
	// Listen is the API server's HTTPS address; default 127.0.0.1:6443. Flag --listen.
	Listen string `mapstructure:"listen" flag:"listen" help:"HTTPS address of the API server"`
	// Nodes is how many stub nodes run in-process; default 3. Flag --nodes.
	Nodes int `mapstructure:"nodes" flag:"nodes" help:"number of stub nodes to run in-process"`
	// Process holds the memory budget (memory-budget, flag --memory-budget); see Process.
	Process `mapstructure:",squash"`
	// MemoryBudgetPerNode makes the memory budget grow with the cluster: the budget is the
	// larger of memory-budget and this much for every Node the API server holds, whether
	// the nodes are up's own or a fleet's elsewhere. A fleet's pods are most of what a
	// control plane holds, and a larger budget spends memory on a lazier collector: at
	// 5,000 nodes its marking and the allocation it paces took about a quarter of the CPU
	// of a rollout at the flat default (docs/performance.md, "Sixteenth round"). Default
	// 150Ki; "0" keeps the budget flat. Flag --memory-budget-per-node.
	MemoryBudgetPerNode string `mapstructure:"memory-budget-per-node" flag:"memory-budget-per-node" help:"memory budget for every registered Node, when that is more than --memory-budget (a quantity: 150Ki; 0: a flat budget)"`

	APIServer         APIServer         `mapstructure:"apiserver" flag:"apiserver-"`
	ControllerManager ControllerManager `mapstructure:"controller-manager" flag:"controller-manager-"`
	Scheduler         Scheduler         `mapstructure:"scheduler" flag:"scheduler-"`
	KubeletStub       KubeletStub       `mapstructure:"kubeletstub" flag:"kubeletstub-"`
}

// DefaultUp returns the defaults of `miniplane up`. The components' health listeners are off:
// the API server's own /healthz and /readyz cover the process, and the components' usual
// ports (10257, 10259) would collide with a real control plane on the same machine.
func DefaultUp() Up {
	c := Up{
		DataDir:             "./.miniplane",
		Listen:              "127.0.0.1:6443",
		Nodes:               3,
		Process:             DefaultProcess(),
		MemoryBudgetPerNode: DefaultMemoryBudgetPerNode,
		APIServer:           DefaultAPIServer(),
		ControllerManager:   DefaultControllerManager(),
		Scheduler:           DefaultScheduler(),
		KubeletStub:         DefaultKubeletStub(),
	}
	// Derived from the top-level options by Resolve unless set.
	c.APIServer.Listen, c.APIServer.CertDir, c.APIServer.EmbeddedEtcdDir = "", "", ""
	c.KubeletStub.Nodes = 0
	c.ControllerManager.HealthListen, c.Scheduler.HealthListen = "", ""
	return c
}

// Resolve fills the options that derive from DataDir, Listen and Nodes and were not set;
// call it after loading and before Validate.
func (c *Up) Resolve() {
	if c.APIServer.Listen == "" {
		c.APIServer.Listen = c.Listen
	}
	if c.APIServer.CertDir == "" {
		c.APIServer.CertDir = filepath.Join(c.DataDir, "pki")
	}
	if c.APIServer.TokenFile == "" {
		c.APIServer.TokenFile = filepath.Join(c.DataDir, "tokens.csv")
	}
	if c.APIServer.EmbeddedEtcdDir == "" {
		c.APIServer.EmbeddedEtcdDir = filepath.Join(c.DataDir, "etcd")
	}
	if c.KubeletStub.NodeName == "" && c.KubeletStub.Nodes == 0 {
		c.KubeletStub.Nodes = c.Nodes
	}
}

// DefaultMemoryBudgetPerNode is the default MemoryBudgetPerNode: the budget passes the flat
// default at 1,420 nodes, so the 1,000-node figures are those of the flat budget, and it
// keeps `up` within the memory goals of issue 13 at 5,000 nodes (1 GiB) and 10,000 (2 GiB)
// with room for file pages (docs/performance.md).
const DefaultMemoryBudgetPerNode = "150Ki"

// MemoryBudgetPerNodeBytes is MemoryBudgetPerNode in bytes; 0 when it is 0 or does not
// parse (Validate reports that).
func (c Up) MemoryBudgetPerNodeBytes() int64 { return quantityBytes(c.MemoryBudgetPerNode) }

// KubeconfigPath is where the admin kubeconfig is written.
func (c Up) KubeconfigPath() string { return filepath.Join(c.DataDir, "kubeconfig") }

// RunsNodes reports whether up runs stub nodes in-process.
func (c Up) RunsNodes() bool { return c.KubeletStub.NodeName != "" || c.KubeletStub.Nodes > 0 }

// Validate reports the first problem with c (after Resolve).
func (c Up) Validate() error {
	switch {
	case c.DataDir == "":
		return invalid("data-dir", "must not be empty")
	case c.Nodes < 0:
		return invalid("nodes", "must not be negative")
	}
	if err := c.Process.Validate(); err != nil {
		return err
	}
	if err := validateQuantity("memory-budget-per-node", c.MemoryBudgetPerNode); err != nil {
		return err
	}
	switch {
	case c.APIServer.Listen != c.Listen:
		return invalid("apiserver::listen", "differs from %s; set only %s", "listen", "listen")
	case c.KubeletStub.NodeName == "" && c.KubeletStub.Nodes != c.Nodes:
		return invalid("kubeletstub::nodes", "differs from %s; set only %s", "nodes", "nodes")
	}
	// The in-process components reach the API server with tokens up makes for them.
	for _, section := range []struct{ key, kubeconfig string }{
		{"controller-manager", c.ControllerManager.Kubeconfig},
		{"scheduler", c.Scheduler.Kubeconfig},
		{"kubeletstub", c.KubeletStub.Kubeconfig},
	} {
		if section.kubeconfig != "" {
			return invalid(section.key+keyDelimiter+"kubeconfig", "is not used by up: its components get their own credentials")
		}
	}
	if err := c.APIServer.Validate(); err != nil {
		return within("apiserver", err)
	}
	if err := c.ControllerManager.Validate(); err != nil {
		return within("controller-manager", err)
	}
	if err := c.Scheduler.Validate(); err != nil {
		return within("scheduler", err)
	}
	if c.RunsNodes() {
		return within("kubeletstub", c.KubeletStub.Validate())
	}
	return nil
}
