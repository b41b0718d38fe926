package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/controlplane"
)

func init() { register(newUpCommand) }

func newUpCommand() *cobra.Command {
	cfg := configs.DefaultUp()
	var b *configs.Binding
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole control plane in one process on an embedded etcd",
		Long: `Run etcd, the API server, the controller-manager, the scheduler and N stub nodes in one
process. State lives in --data-dir (default ./.miniplane): restarting on the same directory keeps
every object. The admin kubeconfig is written to DIR/kubeconfig.

Every option of the components' own commands is available, prefixed by the component:
--controller-manager-feature-gates ScheduleDaemonSetPods=false, --scheduler-workers 4,
--apiserver-event-ttl 10m, --kubeletstub-node-labels zone=a. In the environment they are
MINIPLANE_CONTROLLER_MANAGER_FEATURE_GATES and so on, and in the --config file the sections
controller-manager:, scheduler:, apiserver: and kubeletstub: (see configs/miniplane.yaml).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := b.Load(); err != nil {
				return err
			}
			cfg.Resolve()
			if err := b.Check(cfg.Validate()); err != nil {
				return err
			}
			// The budget grows with the Nodes the API server holds, up's own and any fleet's
			// elsewhere; until the server has started, with up's own.
			var srv atomic.Pointer[apiserver.Server]
			perNode, ownNodes := uint64(cfg.MemoryBudgetPerNodeBytes()), uint64(len(cfg.KubeletStub.NodeNames()))
			startBudget(cmd.Context(), cfg.Process, func() uint64 {
				if s := srv.Load(); s != nil {
					return perNode * uint64(s.NodeCount())
				}
				return perNode * ownNodes
			})
			slog.Info("starting miniplane", "dataDir", cfg.DataDir, "listen", cfg.Listen, "nodes", cfg.KubeletStub.NodeNames())
			cp, err := controlplane.Start(cmd.Context(), controlplane.FromUp(cfg, logging))
			if err != nil {
				return err
			}
			srv.Store(cp.APIServer)
			defer cp.Stop()
			printUsage(cmd, cp, cfg)
			select {
			case <-cmd.Context().Done():
				slog.Info("shutting down")
				return nil
			case err := <-cp.Failed():
				return err
			}
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	return cmd
}

func printUsage(cmd *cobra.Command, cp *controlplane.ControlPlane, cfg configs.Up) {
	fmt.Fprintf(cmd.OutOrStdout(), `miniplane is up: API server at %s

  export KUBECONFIG=%s
  kubectl get nodes
  kubectl apply -f configs/examples/daemonset.yaml

  curl --cacert %s -H "Authorization: Bearer $(awk -F, '$2=="admin"{print $1}' %s)" %s/api/v1/namespaces

Press Ctrl-C to stop; state is kept in %s.
`, cp.URL, absPath(cp.KubeconfigPath), absPath(filepath.Join(cfg.APIServer.CertDir, "ca.crt")),
		absPath(cfg.APIServer.TokenFile), cp.URL, absPath(cfg.DataDir))
	if link := cp.SignInURL(); link != "" {
		// The link works once and for a short while; after that the page asks for a token.
		fmt.Fprintf(cmd.OutOrStdout(), `
The browser view (trust %s, or accept the certificate):
  %s
  (works once within %s; then sign in with the admin token from %s)
`, absPath(filepath.Join(cfg.APIServer.CertDir, "ca.crt")), link, cfg.APIServer.UI.SignInLinkTTL, absPath(cfg.APIServer.TokenFile))
	}
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	if wd, err := os.Getwd(); err == nil {
		return filepath.Join(wd, p)
	}
	return p
}
