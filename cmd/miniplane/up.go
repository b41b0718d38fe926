package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

func init() { register(newUpCommand) }

func newUpCommand() *cobra.Command {
	var configFile string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole control plane in one process on an embedded etcd",
		Long: `Run etcd, the API server, the controller-manager, the scheduler and N stub nodes in one
process. State lives in --data-dir (default ./.miniplane): restarting on the same directory keeps
every object. The admin kubeconfig is written to DIR/kubeconfig.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := configs.DefaultUp()
			if err := configs.Load(&cfg, configFile, cmd.Flags(), nil); err != nil {
				return err
			}
			cfg.Resolve()
			if err := cfg.Validate(); err != nil {
				return err
			}
			apiCfg, cm, sched, stub := cfg.APIServer, cfg.ControllerManager, cfg.Scheduler, cfg.KubeletStub
			env, err := testenv.Start(cmd.Context(), testenv.Config{
				DataDir:           cfg.DataDir,
				Listen:            cfg.Listen,
				APIServer:         &apiCfg,
				ControllerManager: &cm,
				Scheduler:         &sched,
				KubeletStub:       &stub,
				Logger:            slog.Default(),
			})
			if err != nil {
				return err
			}
			defer env.Stop()
			printUsage(cmd, env)
			<-cmd.Context().Done()
			slog.Info("shutting down")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file (see configs/miniplane.yaml)")
	def := configs.DefaultUp()
	f.String("data-dir", def.DataDir, "directory for etcd data, certificates, tokens and the kubeconfig (env MINIPLANE_DATA_DIR)")
	f.String("listen", def.Listen, "HTTPS address of the API server (env MINIPLANE_LISTEN)")
	f.Int("nodes", def.Nodes, "number of stub nodes to run in-process (env MINIPLANE_NODES)")
	return cmd
}

func printUsage(cmd *cobra.Command, env *testenv.Env) {
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, `miniplane is up: API server at %s

  export KUBECONFIG=%s
  kubectl get nodes
  kubectl apply -f configs/examples/daemonset.yaml

  curl --cacert %s -H "Authorization: Bearer $(awk -F, '$2=="admin"{print $1}' %s)" %s/api/v1/namespaces

Press Ctrl-C to stop; state is kept in %s.
`, env.URL, absPath(env.KubeconfigPath), absPath(env.DataDir+"/pki/ca.crt"), absPath(env.DataDir+"/tokens.csv"), env.URL, absPath(env.DataDir))
}

func absPath(p string) string {
	if wd, err := os.Getwd(); err == nil && len(p) > 0 && p[0] != '/' {
		return wd + "/" + p
	}
	return p
}
