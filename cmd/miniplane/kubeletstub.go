package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/kubeletstub"
)

func init() { register(newKubeletStubCommand) }

func newKubeletStubCommand() *cobra.Command {
	cfg := configs.DefaultKubeletStub()
	var b *configs.Binding
	cmd := &cobra.Command{
		Use:   "kubeletstub --kubeconfig FILE [--node-name NAME | --nodes N --node-prefix P] [--config FILE]",
		Short: "Run stub kubelets: one node, or a fleet of N nodes sharing one pod and one node watch",
		Long: `Run stub kubelets that register Nodes, heartbeat (node conditions and a Lease in
kube-node-lease), and admit, run, fail and delete the pods bound to them like a kubelet.
Faults can be injected at run time with node annotations (stub.miniplane.io/reject-pods,
fail-after, ready-delay, conditions, stop-heartbeats) or in the configuration file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfig(b, cfg.ValidateStandalone); err != nil {
				return err
			}
			return runKubeletStub(cmd.Context(), cfg)
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	return cmd
}

func runKubeletStub(ctx context.Context, cfg configs.KubeletStub) error {
	restConfig, err := restConfigFrom(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fleet, err := kubeletstub.New(cfg, restConfig, kubeletstub.Options{Logger: slog.Default(), Registerer: reg})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	healthErr := make(chan error, 1)
	if cfg.HealthListen != "" {
		ln, err := net.Listen("tcp", cfg.HealthListen)
		if err != nil {
			return fmt.Errorf("health listener %s: %w", cfg.HealthListen, err)
		}
		srv := kubeletStubHealthServer(fleet, reg)
		slog.Info("kubeletstub health endpoints listening", "addr", ln.Addr().String())
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				healthErr <- err
				cancel()
			}
		}()
		defer func() {
			shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
			defer stop()
			_ = srv.Shutdown(shutdownCtx)
		}()
	}
	if err := fleet.Run(ctx); err != nil {
		return err
	}
	select {
	case err := <-healthErr:
		return fmt.Errorf("health server: %w", err)
	default:
		return nil
	}
}

// kubeletStubHealthServer serves liveness (the process answers), readiness (every node is
// registered and heartbeating) and the metrics in reg.
func kubeletStubHealthServer(fleet *kubeletstub.Fleet, reg *prometheus.Registry) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !fleet.Ready() {
			http.Error(w, "stub nodes are not all registered and heartbeating yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}
