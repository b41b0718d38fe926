package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/credentials"
)

func init() { register(newCertsCommand) }

func newCertsCommand() *cobra.Command {
	cfg := configs.DefaultCerts()
	var b *configs.Binding
	cmd := &cobra.Command{
		Use:   "certs --dir DIR [--etcd-members a,b,c] [--apiservers x,y] [--nodes n1,n2] [--fleets p]",
		Short: "Create (or reuse) the CA, certificates, tokens and kubeconfigs of a multi-process deployment",
		Long: `Create, once, every credential a deployment of separate miniplane processes needs, and reuse
what already exists on later runs (so restarting keeps the identities clients trust):

  DIR/pki/ca.crt, ca.key                      the CA every component trusts
  DIR/pki/etcd/<member>-server.crt/.key       etcd client-facing certificate of each member
  DIR/pki/etcd/<member>-peer.crt/.key         etcd member-to-member certificate
  DIR/pki/etcd/client.crt/.key                the API servers' client certificate for etcd
  DIR/pki/apiserver/<name>.crt/.key           serving certificate of each API server
  DIR/pki/sa.key, sa.pub                      ServiceAccount token signing key (every API server's)
  DIR/tokens.csv                              bearer tokens (--token-file of the API servers)
  DIR/kubeconfig                              the administrator, for use from the host (--admin-server)
  DIR/kubeconfigs/<identity>.kubeconfig       admin, viewer, controller-manager, scheduler (--server)
  DIR/kubeconfigs/nodes/<node>.kubeconfig     one per --nodes entry: user system:node:<node>
  DIR/kubeconfigs/fleets/<prefix>.kubeconfig  one per --fleets entry: nodes <prefix>-<n>

With --owner UID:GID every file and folder under DIR is handed to that user, so that files a
container writes into a host folder can be read and removed by the host user.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfig(b, &cfg, configs.Certs.Validate); err != nil {
				return err
			}
			return credentials.EnsureDeployment(cfg, slog.Default())
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	return cmd
}
