package configs

import "time"

// Probe configures `miniplane probe URL`, the health check of images that hold nothing but
// the miniplane binary.
type Probe struct {
	// CAFile verifies an https URL; default the system roots. Flag --cacert.
	CAFile string `mapstructure:"cacert" flag:"cacert" help:"PEM CA bundle to verify an https URL (default: the system roots)"`
	// InsecureSkipVerify does not verify the server certificate. Flag
	// --insecure-skip-tls-verify.
	InsecureSkipVerify bool `mapstructure:"insecure-skip-tls-verify" flag:"insecure-skip-tls-verify" help:"do not verify the server certificate"`
	// Timeout gives up after this long; default 2s. Flag --timeout.
	Timeout time.Duration `mapstructure:"timeout" flag:"timeout" help:"give up after this long"`
}

// DefaultProbe returns the defaults.
func DefaultProbe() Probe { return Probe{Timeout: 2 * time.Second} }

// Validate reports the first problem with c.
func (c Probe) Validate() error {
	if c.Timeout <= 0 {
		return invalid("timeout", "must be positive")
	}
	return nil
}
