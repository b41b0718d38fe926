package main

import (
	"log/slog"
	"maps"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/controllers/manager"
)

func init() { register(newControllerManagerCommand) }

func newControllerManagerCommand() *cobra.Command {
	var configFile string
	def := configs.DefaultControllerManager()
	cmd := &cobra.Command{
		Use:   "controller-manager --kubeconfig FILE [--controllers daemonset,garbagecollector,nodelifecycle] [--leader-elect] [--config FILE]",
		Short: "Run the DaemonSet controller, the garbage collector and the node lifecycle controller",
		Long: `Run the controllers as an API client: the DaemonSet controller, the garbage collector
(ownerReference cascades, foreground and orphan deletion) and the node lifecycle controller
(heartbeat timeouts, condition taints, taint-based eviction). With --leader-elect, replicas
elect one active instance through the Lease kube-system/kube-controller-manager.
Serves /healthz, /readyz and /metrics on --health-listen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := configs.DefaultControllerManager()
			flagKeys := map[string]string{
				"concurrent-daemonset-syncs": "daemonset::workers",
				"concurrent-gc-syncs":        "garbagecollector::workers",
			}
			maps.Copy(flagKeys, configs.LeaderElectionFlagKeys)
			maps.Copy(flagKeys, configs.NodeLifecycleFlagKeys)
			if err := configs.Load(&cfg, configFile, cmd.Flags(), flagKeys); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			restConfig, err := restConfigFrom(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			return manager.Run(cmd.Context(), cfg, restConfig, manager.Options{Logger: slog.Default()})
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	f.String("kubeconfig", def.Kubeconfig, "kubeconfig of the controller-manager's API credentials")
	f.StringSlice("controllers", def.Controllers, `controllers to run: names, "*" for all, "-name" to drop one (known: `+strings.Join(configs.KnownControllers, ", ")+")")
	f.StringToString("feature-gates", nil, "feature gates, e.g. ScheduleDaemonSetPods=false")
	f.String("health-listen", def.HealthListen, `serve /healthz, /readyz and /metrics on HOST:PORT (port 0 picks one; "" disables)`)
	f.Float32("kube-api-qps", def.KubeAPIQPS, "queries per second of each controller's API client")
	f.Int("kube-api-burst", def.KubeAPIBurst, "burst of each controller's API client")
	f.Int("concurrent-daemonset-syncs", def.DaemonSet.Workers, "DaemonSets synced concurrently")
	f.Int("concurrent-gc-syncs", def.GarbageCollector.Workers, "garbage collector workers")
	nl := def.NodeLifecycle
	f.Duration("node-monitor-period", nl.MonitorPeriod, "how often node health is checked")
	f.Duration("node-monitor-grace-period", nl.GracePeriod, "how long a node may stop heartbeating before it is marked Unknown and tainted unreachable")
	f.Duration("node-startup-grace-period", nl.StartupGracePeriod, "grace period of a node that never posted Ready")
	addLeaderElectionFlags(f, def.LeaderElection)
	return cmd
}

// addLeaderElectionFlags adds kube-controller-manager's leader-election flags.
func addLeaderElectionFlags(f *pflag.FlagSet, def configs.LeaderElection) {
	f.Bool("leader-elect", def.LeaderElect, "elect a leader through a Lease before acting, so that several replicas can run")
	f.Duration("leader-elect-lease-duration", def.LeaseDuration, "how long followers wait after the last renewal before taking over")
	f.Duration("leader-elect-renew-deadline", def.RenewDeadline, "how long the leader retries renewing before it stops acting")
	f.Duration("leader-elect-retry-period", def.RetryPeriod, "interval between acquire and renew attempts")
	f.String("leader-elect-resource-namespace", def.ResourceNamespace, "namespace of the Lease")
	f.String("leader-elect-resource-name", def.ResourceName, "name of the Lease")
}
