package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/kubeletstub"
)

func init() { register(newKubeletStubCommand) }

func newKubeletStubCommand() *cobra.Command {
	cfg := configs.DefaultKubeletStub()
	var b *configs.Binding
	var proc *processBinding
	cmd := &cobra.Command{
		Use:   "kubeletstub --kubeconfig FILE [--node-name NAME | --nodes N --node-prefix P] [--config FILE]",
		Short: "Run stub kubelets: one node, or a fleet of N nodes sharing one pod and one node watch",
		Long: `Run stub kubelets that register Nodes, heartbeat (node conditions and a Lease in
kube-node-lease), and admit, run, fail and delete the pods bound to them like a kubelet.
Faults can be injected at run time with node annotations (stub.miniplane.io/reject-pods,
fail-after, ready-delay, complete-after, conditions, stop-heartbeats, …) or in the
configuration file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfig(b, &cfg, configs.KubeletStub.ValidateStandalone); err != nil {
				return err
			}
			if err := proc.start(cmd.Context()); err != nil {
				return err
			}
			instance, replica, err := kubeletstub.ResolveInstance(cmd.Context(), cfg.NodeInstance)
			if err != nil {
				return err
			}
			if replica > 0 {
				// Replicas share the configuration; each numbers its nodes' InternalIPs
				// in a block of its own, as its node names are its own.
				if cfg.InternalIPCIDR, err = cfg.ReplicaInternalIPCIDR(replica); err != nil {
					return err
				}
			}
			if instance != cfg.NodeInstance || replica > 0 {
				cfg.NodeInstance = instance
				if err := cfg.ValidateStandalone(); err != nil {
					return err
				}
			}
			return runKubeletStub(cmd.Context(), cfg)
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	proc = bindProcess(cmd, configs.DefaultMemoryBudget)
	return cmd
}

func runKubeletStub(ctx context.Context, cfg configs.KubeletStub) error {
	restConfig, err := restConfigFrom(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fleet, err := kubeletstub.New(cfg, kubeletstub.Options{RestConfig: restConfig, Logger: slog.Default(), Registerer: reg})
	if err != nil {
		return err
	}
	if cfg.HealthListen != "" {
		if _, err := fleet.ServeHealth(ctx, cfg.HealthListen, reg, slog.Default()); err != nil {
			return err
		}
	}
	return fleet.Run(ctx)
}
