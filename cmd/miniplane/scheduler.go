package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/scheduler"
)

func init() { register(newSchedulerCommand) }

func newSchedulerCommand() *cobra.Command {
	var configFile string
	def := configs.DefaultScheduler()
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
			cfg := configs.DefaultScheduler()
			if err := configs.Load(&cfg, configFile, cmd.Flags(), configs.LeaderElectionFlagKeys); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			restConfig, err := restConfigFrom(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			return scheduler.Run(cmd.Context(), cfg, restConfig, scheduler.Options{Logger: slog.Default()})
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	f.String("kubeconfig", def.Kubeconfig, "kubeconfig of the scheduler's API credentials")
	f.String("scheduler-name", def.SchedulerName, "spec.schedulerName served")
	f.String("health-listen", def.HealthListen, `serve /healthz, /readyz and /metrics on HOST:PORT (port 0 picks one; "" disables)`)
	f.Float32("kube-api-qps", def.KubeAPIQPS, "queries per second of the API client")
	f.Int("kube-api-burst", def.KubeAPIBurst, "burst of the API client")
	f.Int("workers", def.Workers, "pods scheduled and bound concurrently")
	f.Duration("pod-initial-backoff", def.PodInitialBackoff, "first retry delay of an unschedulable pod")
	f.Duration("pod-max-backoff", def.PodMaxBackoff, "longest retry delay of an unschedulable pod")
	f.Duration("unschedulable-flush-interval", def.UnschedulableFlushInterval, "retry unschedulable pods at least this often")
	addLeaderElectionFlags(f, def.LeaderElection)
	return cmd
}
