package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/store"
)

func init() { register(newEtcdCommand) }

func newEtcdCommand() *cobra.Command {
	cfg := configs.DefaultEtcd()
	var b *configs.Binding
	var proc *processBinding
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run one etcd member (alone, or as part of a cluster with --initial-cluster)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfig(b, &cfg, configs.Etcd.Validate); err != nil {
				return err
			}
			if err := proc.start(cmd.Context()); err != nil {
				return err
			}
			ctx := cmd.Context()
			// Health is served before the member is ready: /healthz answers at once, /readyz
			// once the member serves clients (a new cluster needs a quorum first).
			ready := make(chan struct{})
			if cfg.HealthListen != "" {
				go serveEtcdHealth(ctx, cfg.HealthListen, ready)
			}
			member, err := store.StartEmbeddedEtcd(cfg, logging.EtcdLevel())
			if err != nil {
				return err
			}
			close(ready)
			return runMember(ctx, member, cfg)
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	proc = bindProcess(cmd, configs.DefaultMemoryBudget)
	return cmd
}

func runMember(ctx context.Context, member *store.EmbeddedEtcd, cfg configs.Etcd) error {
	defer member.Close()
	slog.Info("etcd member ready", "name", cfg.Name, "clientURLs", member.ClientURLs())
	select {
	case <-ctx.Done():
		return nil
	case err := <-member.Err():
		return err
	}
}

func serveEtcdHealth(ctx context.Context, addr string, ready <-chan struct{}) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-ready:
			_, _ = w.Write([]byte("ok"))
		default:
			http.Error(w, "etcd member not ready", http.StatusServiceUnavailable)
		}
	})
	mux.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		slog.Error("health listener failed", "address", addr, "err", err)
	}
}
