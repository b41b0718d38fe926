package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/manager"
)

func init() { register(newControllerManagerCommand) }

func newControllerManagerCommand() *cobra.Command {
	cfg := configs.DefaultControllerManager()
	var b *configs.Binding
	var proc *processBinding
	cmd := &cobra.Command{
		Use:   "controller-manager --kubeconfig FILE [--controllers daemonset,garbagecollector,nodelifecycle] [--leader-elect] [--config FILE]",
		Short: "Run the DaemonSet controller, the garbage collectors, node lifecycle and the other controllers",
		Long: `Run the controllers as an API client: the DaemonSet controller, the garbage collector
(ownerReference cascades, foreground and orphan deletion), the node lifecycle controller
(heartbeat timeouts, condition taints, taint-based eviction), node IPAM (pod CIDRs), the root
CA publisher (kube-root-ca.crt) and the pod garbage collector (pods of deleted Nodes, terminated
pods over --terminated-pod-gc-threshold). With --leader-elect, replicas elect one active
instance through the Lease kube-system/kube-controller-manager.
Serves /healthz, /readyz and /metrics on --health-listen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfig(b, &cfg, configs.ControllerManager.ValidateStandalone); err != nil {
				return err
			}
			if err := proc.start(cmd.Context()); err != nil {
				return err
			}
			restConfig, err := restConfigFrom(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			return manager.Run(cmd.Context(), cfg, manager.RunOptions{RestConfig: restConfig, Logger: slog.Default()})
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	proc = bindProcess(cmd, configs.DefaultMemoryBudget)
	return cmd
}
