package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/controlplane"
)

func init() { register(newAPIServerCommand) }

func newAPIServerCommand() *cobra.Command {
	cfg := configs.DefaultAPIServer()
	var b *configs.Binding
	var proc *processBinding
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Run the Kubernetes-compatible API server on etcd (embedded, or --etcd-servers)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfig(b, &cfg, configs.APIServer.Validate); err != nil {
				return err
			}
			if err := proc.start(cmd.Context()); err != nil {
				return err
			}
			ctx := cmd.Context()
			storage, err := controlplane.OpenStorage(ctx, cfg, controlplane.StorageOptions{EtcdLogLevel: logging.EtcdLevel()})
			if err != nil {
				return err
			}
			defer storage.Close()
			go storage.Store.RunCompactor(ctx, cfg.CompactionInterval)
			srv, err := apiserver.New(apiserver.Options{Config: cfg, Store: storage.Store})
			if err != nil {
				return err
			}
			if err := srv.Start(ctx); err != nil {
				return err
			}
			slog.Info("API server serving", "address", srv.Addr().String(), "etcd", storage.Endpoints)
			select {
			case err := <-storage.Err():
				return err
			case err := <-waitErr(srv.Wait):
				return err
			}
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	proc = bindProcess(cmd, configs.DefaultMemoryBudget)
	return cmd
}

// waitErr runs wait in the background and delivers its result.
func waitErr(wait func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- wait() }()
	return ch
}
