package configs

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Up configures `miniplane up`: every component in one process on an embedded etcd.
type Up struct {
	// DataDir holds etcd data, certificates, tokens and the admin kubeconfig; default
	// ./.miniplane. Flag --data-dir.
	DataDir string `mapstructure:"data-dir"`
	// Listen is the API server's HTTPS address; default 127.0.0.1:6443. Flag --listen.
	Listen string `mapstructure:"listen"`
	// Nodes is how many stub nodes run in-process; default 3. Flag --nodes.
	Nodes int `mapstructure:"nodes"`

	APIServer         APIServer         `mapstructure:"apiserver"`
	ControllerManager ControllerManager `mapstructure:"controller-manager"`
	Scheduler         Scheduler         `mapstructure:"scheduler"`
	KubeletStub       KubeletStub       `mapstructure:"kubeletstub"`
}

// DefaultUp returns the defaults of `miniplane up`.
func DefaultUp() Up {
	return Up{
		DataDir:           "./.miniplane",
		Listen:            "127.0.0.1:6443",
		Nodes:             3,
		APIServer:         DefaultAPIServer(),
		ControllerManager: DefaultControllerManager(),
		Scheduler:         DefaultScheduler(),
		KubeletStub:       DefaultKubeletStub(),
	}
}

// Resolve fills the paths that derive from DataDir and Listen; call it after Load.
func (c *Up) Resolve() {
	c.APIServer.Listen = c.Listen
	if c.APIServer.CertDir == DefaultAPIServer().CertDir {
		c.APIServer.CertDir = filepath.Join(c.DataDir, "pki")
	}
	if c.APIServer.TokenFile == "" {
		c.APIServer.TokenFile = filepath.Join(c.DataDir, "tokens.csv")
	}
	if c.KubeletStub.NodeName == "" {
		c.KubeletStub.Nodes = c.Nodes
	}
}

// EtcdDir is where the embedded member keeps its data.
func (c Up) EtcdDir() string { return filepath.Join(c.DataDir, "etcd") }

// KubeconfigPath is where the admin kubeconfig is written.
func (c Up) KubeconfigPath() string { return filepath.Join(c.DataDir, "kubeconfig") }

// Validate reports the first problem with c.
func (c Up) Validate() error {
	if c.DataDir == "" {
		return errors.New("--data-dir must not be empty")
	}
	if c.Nodes < 0 {
		return errors.New("--nodes must not be negative")
	}
	if err := c.APIServer.Validate(); err != nil {
		return fmt.Errorf("apiserver: %w", err)
	}
	if err := c.ControllerManager.Validate(); err != nil {
		return fmt.Errorf("controller-manager: %w", err)
	}
	if err := c.Scheduler.Validate(); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if c.Nodes > 0 || c.KubeletStub.NodeName != "" {
		if err := c.KubeletStub.Validate(); err != nil {
			return fmt.Errorf("kubeletstub: %w", err)
		}
	}
	return nil
}
