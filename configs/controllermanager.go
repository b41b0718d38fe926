package configs

import (
	"fmt"
	"strings"
)

// FeatureScheduleDaemonSetPods selects the DaemonSet placement mode: on (the default, current
// Kubernetes) pins daemon pods with node affinity and lets the scheduler bind them; off (the
// v1.12 era's LEGACY-BIND) makes the controller run the predicates and set spec.nodeName.
const FeatureScheduleDaemonSetPods = "ScheduleDaemonSetPods"

// ControllerManager configures `miniplane controller-manager` (and its part of `miniplane up`).
type ControllerManager struct {
	// Kubeconfig is the client configuration; flag --kubeconfig.
	Kubeconfig string `mapstructure:"kubeconfig"`
	// FeatureGates switch features on or off, e.g. ScheduleDaemonSetPods: false.
	// Flag --feature-gates=ScheduleDaemonSetPods=false.
	FeatureGates map[string]bool `mapstructure:"feature-gates"`
	// DaemonSet configures the DaemonSet controller.
	DaemonSet DaemonSetController `mapstructure:"daemonset"`
}

// DefaultControllerManager returns the defaults.
func DefaultControllerManager() ControllerManager {
	return ControllerManager{
		FeatureGates: map[string]bool{FeatureScheduleDaemonSetPods: true},
		DaemonSet:    DefaultDaemonSetController(),
	}
}

// FeatureEnabled reports whether the named gate is on (unknown gates are off). Names match
// case-insensitively because viper lower-cases map keys read from files and flags.
func (c ControllerManager) FeatureEnabled(name string) bool {
	for k, v := range c.FeatureGates {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return false
}

// Validate reports the first problem with c.
func (c ControllerManager) Validate() error {
	for name := range c.FeatureGates {
		if !strings.EqualFold(name, FeatureScheduleDaemonSetPods) {
			return fmt.Errorf("--feature-gates: unknown feature gate %q", name)
		}
	}
	if err := c.DaemonSet.Validate(); err != nil {
		return err
	}
	return nil
}
