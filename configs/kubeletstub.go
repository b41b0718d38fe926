package configs

// KubeletStub configures `miniplane kubeletstub` (and the stub nodes of `miniplane up`).
type KubeletStub struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig"`
}

// DefaultKubeletStub returns the defaults.
func DefaultKubeletStub() KubeletStub { return KubeletStub{} }

// Validate reports the first problem with c.
func (c KubeletStub) Validate() error { return nil }
