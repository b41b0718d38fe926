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
	var configFile string
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run one etcd member (alone, or as part of a cluster with --initial-cluster)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := configs.DefaultEtcd()
			if err := configs.Load(&cfg, configFile, cmd.Flags(), nil); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			// Health is served before the member is ready: /healthz answers at once, /readyz
			// once the member serves clients (a new cluster needs a quorum first).
			ready := make(chan struct{})
			if cfg.HealthListen != "" {
				go serveEtcdHealth(ctx, cfg.HealthListen, ready)
			}
			member, err := store.StartEmbeddedEtcd(cfg, etcdLogLevel())
			if err != nil {
				return err
			}
			close(ready)
			return runMember(ctx, member, cfg)
		},
	}
	f := cmd.Flags()
	def := configs.DefaultEtcd()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	f.String("name", def.Name, "member name")
	f.String("data-dir", def.DataDir, "member data directory")
	f.StringSlice("listen-client-urls", def.ListenClientURLs, "URLs to serve clients on")
	f.StringSlice("advertise-client-urls", nil, "client URLs to advertise (default: the listen URLs)")
	f.StringSlice("listen-peer-urls", def.ListenPeerURLs, "URLs to serve peers on")
	f.StringSlice("initial-advertise-peer-urls", nil, "peer URLs to advertise (default: the listen URLs)")
	f.String("initial-cluster", "", "name=peerURL,... of every member at bootstrap (default: this member alone)")
	f.String("initial-cluster-state", def.InitialClusterState, "new or existing")
	f.String("initial-cluster-token", def.InitialClusterToken, "token that tells clusters apart")
	f.String("cert-file", "", "client TLS certificate")
	f.String("key-file", "", "client TLS key")
	f.String("trusted-ca-file", "", "CA for client certificates")
	f.Bool("client-cert-auth", false, "require client certificates")
	f.String("peer-cert-file", "", "peer TLS certificate")
	f.String("peer-key-file", "", "peer TLS key")
	f.String("peer-trusted-ca-file", "", "CA for peer certificates (enables peer client-cert auth)")
	f.Bool("unsafe-no-fsync", false, "skip fsync (tests only)")
	f.String("health-listen", "", "address for /healthz, /readyz and /metrics (empty: off)")
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
