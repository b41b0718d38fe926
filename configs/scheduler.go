package configs

// Scheduler configures `miniplane scheduler` (and its part of `miniplane up`).
type Scheduler struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig"`
}

// DefaultScheduler returns the defaults.
func DefaultScheduler() Scheduler { return Scheduler{} }

// Validate reports the first problem with c.
func (c Scheduler) Validate() error { return nil }
