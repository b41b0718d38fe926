package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/scheduler"
)

func init() { register(newSchedulerCommand) }

func newSchedulerCommand() *cobra.Command {
	cfg := configs.DefaultScheduler()
	var b *configs.Binding
	var proc *processBinding
	cmd := &cobra.Command{
		Use:   "scheduler --kubeconfig FILE [--leader-elect] [--config FILE]",
		Short: "Bind pending pods to nodes",
		Long: `Run the scheduler as an API client: pods without spec.nodeName whose schedulerName is
default-scheduler are filtered against every node (unschedulable, taints and tolerations,
node selector and required node affinity, host ports, resource fit) and bound to the least
allocated one; a pod that fits nowhere gets PodScheduled=False and a FailedScheduling event,
and is retried with backoff. With --leader-elect, replicas elect one active instance through
the Lease kube-system/kube-scheduler. Serves /healthz, /readyz and /metrics on --health-listen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfig(b, &cfg, configs.Scheduler.ValidateStandalone); err != nil {
				return err
			}
			if err := proc.start(cmd.Context()); err != nil {
				return err
			}
			restConfig, err := restConfigFrom(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			return scheduler.Run(cmd.Context(), cfg, scheduler.RunOptions{RestConfig: restConfig, Logger: slog.Default()})
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	proc = bindProcess(cmd, configs.DefaultMemoryBudget)
	return cmd
}
