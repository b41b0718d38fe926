package credentials

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/configs"
)

// EnsureDeployment writes whatever is missing of the credentials of a deployment of separate
// processes under cfg.Dir and keeps the rest: EnsureCA and EnsureLeaf reuse valid files,
// EnsureTokens keeps existing tokens, and kubeconfigs are rewritten from those (their content
// only changes when an option such as the server URL does). The layout is:
//
//	pki/ca.crt, ca.key                      the CA every component trusts
//	pki/etcd/<member>-server.crt/.key       etcd client-facing certificate of each member
//	pki/etcd/<member>-peer.crt/.key         etcd member-to-member certificate
//	pki/etcd/client.crt/.key                the API servers' client certificate for etcd
//	pki/apiserver/<name>.crt/.key           serving certificate of each API server
//	pki/sa.key, sa.pub                      the key signing ServiceAccount tokens
//	tokens.csv                              bearer tokens (the API servers' token file)
//	kubeconfig                              the administrator, for use from the host
//	kubeconfigs/<component>.kubeconfig      admin, viewer, controller-manager, scheduler
//	kubeconfigs/nodes/<node>.kubeconfig     one per single node: user system:node:<node>
//	kubeconfigs/fleets/<prefix>.kubeconfig  one per fleet: nodes <prefix>-<n>
func EnsureDeployment(cfg configs.Certs, log *slog.Logger) error {
	pkiDir := filepath.Join(cfg.Dir, "pki")
	ca, err := pki.EnsureCA(pkiDir, "miniplane-ca")
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	leaves := deploymentLeaves(cfg, pkiDir)
	for _, l := range leaves {
		if _, _, err := ca.EnsureLeaf(l.dir, l.LeafRequest); err != nil {
			return fmt.Errorf("certificate %s: %w", filepath.Join(l.dir, l.Name), err)
		}
	}

	type kubeconfig struct {
		path string
		user auth.User
	}
	var users []auth.User
	var kubeconfigs []kubeconfig
	for _, c := range Components() {
		users = append(users, c.User)
		kubeconfigs = append(kubeconfigs, kubeconfig{filepath.Join(cfg.Dir, "kubeconfigs", c.File+".kubeconfig"), c.User})
	}
	for _, n := range cfg.Nodes {
		u := NodeIdentity(n)
		users = append(users, u)
		kubeconfigs = append(kubeconfigs, kubeconfig{filepath.Join(cfg.Dir, "kubeconfigs", "nodes", n+".kubeconfig"), u})
	}
	for _, p := range cfg.Fleets {
		u := FleetIdentity(p)
		users = append(users, u)
		kubeconfigs = append(kubeconfigs, kubeconfig{filepath.Join(cfg.Dir, "kubeconfigs", "fleets", p+".kubeconfig"), u})
	}
	// Both API servers sign and verify ServiceAccount tokens with this one key.
	if _, err := pki.EnsureServiceAccountKey(filepath.Join(pkiDir, "sa.key")); err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	tokens, err := EnsureTokens(filepath.Join(cfg.Dir, "tokens.csv"), users)
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	for _, k := range kubeconfigs {
		if err := pki.WriteKubeconfig(k.path, cfg.Server, ca.CertPEM, k.user.Name, tokens[k.user.Name]); err != nil {
			return fmt.Errorf("kubeconfig %s: %w", k.path, err)
		}
	}
	adminPath := filepath.Join(cfg.Dir, "kubeconfig")
	if err := pki.WriteKubeconfig(adminPath, cfg.AdminURL(), ca.CertPEM, AdminUser, tokens[AdminUser]); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", adminPath, err)
	}
	if uid, gid, ok := cfg.OwnerIDs(); ok {
		if err := chownTree(cfg.Dir, uid, gid); err != nil {
			return fmt.Errorf("owner %s: %w", cfg.Owner, err)
		}
	}
	log.Info("credentials ready", "dir", cfg.Dir, "certificates", len(leaves)+1, "identities", len(users),
		"adminKubeconfig", adminPath, "server", cfg.Server)
	return nil
}

type leaf struct {
	dir string
	pki.LeafRequest
}

// deploymentLeaves lists the certificates of cfg's etcd members and API servers.
func deploymentLeaves(cfg configs.Certs, pkiDir string) []leaf {
	loopback := []string{"localhost", "127.0.0.1", "::1"}
	etcdDir, apiDir := filepath.Join(pkiDir, "etcd"), filepath.Join(pkiDir, "apiserver")
	var leaves []leaf
	for _, m := range cfg.EtcdMembers {
		hosts := append([]string{m}, loopback...)
		// Both usages on both certificates: members dial each other as clients over the peer
		// port, and etcd's own gRPC gateway dials the member with the server certificate.
		leaves = append(leaves,
			leaf{etcdDir, pki.LeafRequest{Name: m + "-server", CommonName: m, Hosts: hosts, Usage: pki.ServerAuth | pki.ClientAuth}},
			leaf{etcdDir, pki.LeafRequest{Name: m + "-peer", CommonName: m, Hosts: hosts, Usage: pki.ServerAuth | pki.ClientAuth}},
		)
	}
	if len(cfg.EtcdMembers) > 0 {
		leaves = append(leaves, leaf{etcdDir, pki.LeafRequest{Name: "client", CommonName: "miniplane-apiserver", Usage: pki.ClientAuth}})
	}
	for _, a := range cfg.APIServers {
		hosts := append([]string{a, "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, cfg.APIServerSANs...)
		leaves = append(leaves, leaf{apiDir, pki.LeafRequest{Name: a, CommonName: "miniplane-apiserver", Hosts: hosts, Usage: pki.ServerAuth}})
	}
	return leaves
}

// chownTree gives root and everything below it to uid:gid.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}
