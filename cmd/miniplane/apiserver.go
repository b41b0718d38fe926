package main

import (
	"log/slog"

	"github.com/spf13/cobra"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/store"
)

func init() { register(newAPIServerCommand) }

func newAPIServerCommand() *cobra.Command {
	var configFile string
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Run the Kubernetes-compatible API server on etcd (embedded, or --etcd-servers)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := configs.DefaultAPIServer()
			if err := configs.Load(&cfg, configFile, cmd.Flags(), nil); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			endpoints := cfg.EtcdServers
			if len(endpoints) == 0 {
				etcdCfg := configs.DefaultEtcd()
				etcdCfg.Name = "miniplane"
				etcdCfg.DataDir = cfg.EmbeddedEtcdDir
				etcdCfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
				etcdCfg.ListenPeerURLs = []string{"http://127.0.0.1:0"}
				member, err := store.StartEmbeddedEtcd(etcdCfg, etcdLogLevel())
				if err != nil {
					return err
				}
				defer member.Close()
				endpoints = member.ClientURLs()
				slog.Info("embedded etcd started", "dataDir", etcdCfg.DataDir)
			}
			client, err := store.NewClient(ctx, store.ClientConfig{
				Endpoints: endpoints, CAFile: cfg.EtcdCAFile, CertFile: cfg.EtcdCertFile, KeyFile: cfg.EtcdKeyFile,
			})
			if err != nil {
				return err
			}
			defer client.Close()
			st := store.NewEtcdStore(client, store.NewProtobufCodec(clientscheme.Scheme), slog.Default())
			go st.RunCompactor(ctx, cfg.CompactionInterval)
			srv, err := apiserver.New(apiserver.Options{Config: cfg, Store: st})
			if err != nil {
				return err
			}
			if err := srv.Start(ctx); err != nil {
				return err
			}
			slog.Info("API server serving", "address", srv.Addr().String(), "etcd", endpoints)
			return srv.Wait()
		},
	}
	f := cmd.Flags()
	def := configs.DefaultAPIServer()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	f.String("listen", def.Listen, "HTTPS address")
	f.String("insecure-listen", "", "opt-in plain-HTTP address without authentication; loopback only")
	f.String("cert-dir", def.CertDir, "directory for the generated CA and serving certificate")
	f.StringSlice("tls-sans", nil, "extra DNS names or IPs for the serving certificate")
	f.String("tls-cert-file", "", "serving certificate made elsewhere (default: generate one in --cert-dir)")
	f.String("tls-private-key-file", "", "key of --tls-cert-file")
	f.StringSlice("admin-groups", def.AdminGroups, "groups that may do anything")
	f.StringSlice("read-only-groups", def.ReadOnlyGroups, "groups that may get, list and watch everything")
	f.String("token-file", "", "static token file: CSV lines token,user,uid,\"group1,group2\" (required)")
	f.StringSlice("etcd-servers", nil, "etcd client URLs; empty runs an embedded member")
	f.String("embedded-etcd-dir", def.EmbeddedEtcdDir, "data dir of the embedded etcd member")
	f.String("etcd-cafile", "", "CA bundle to verify etcd")
	f.String("etcd-certfile", "", "client certificate for etcd")
	f.String("etcd-keyfile", "", "client key for etcd")
	f.String("etcd-prefix", def.EtcdPrefix, "root of every key in etcd")
	f.Duration("compaction-interval", def.CompactionInterval, "how often etcd history is compacted (0 disables)")
	f.Duration("event-ttl", def.EventTTL, "how long events are kept")
	f.Int("watch-cache-events", def.WatchCacheEvents, "recent changes kept per resource for resuming watches")
	return cmd
}
