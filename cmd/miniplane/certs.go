package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/test/testenv"
)

func init() { register(newCertsCommand) }

// certsOptions are the flags of `miniplane certs`: the hosts and identities of a
// multi-process deployment (docker compose) whose credentials are made once, up front.
type certsOptions struct {
	dir           string
	etcdMembers   []string
	apiServers    []string
	apiServerSANs []string
	server        string
	adminServer   string
	nodes         []string
	fleets        []string
	owner         string
	uid, gid      int
	chown         bool
}

func newCertsCommand() *cobra.Command {
	var opts certsOptions
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
  DIR/tokens.csv                              bearer tokens (--token-file of the API servers)
  DIR/kubeconfig                              the administrator, for use from the host (--admin-server)
  DIR/kubeconfigs/<identity>.kubeconfig       admin, viewer, controller-manager, scheduler (--server)
  DIR/kubeconfigs/nodes/<node>.kubeconfig     one per --nodes entry: user system:node:<node>
  DIR/kubeconfigs/fleets/<prefix>.kubeconfig  one per --fleets entry: nodes <prefix>-<n>

With --owner UID:GID every file and folder under DIR is handed to that user, so that files a
container writes into a host folder can be read and removed by the host user.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return err
			}
			return ensureCredentials(opts, slog.Default())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.dir, "dir", "", "folder for every file written (required)")
	f.StringSliceVar(&opts.etcdMembers, "etcd-members", nil, "etcd member names, also their host names (e.g. etcd-1,etcd-2,etcd-3)")
	f.StringSliceVar(&opts.apiServers, "apiservers", nil, "API server host names; each gets a serving certificate (e.g. apiserver-1,apiserver-2)")
	f.StringSliceVar(&opts.apiServerSANs, "apiserver-sans", []string{"localhost", "127.0.0.1"}, "extra DNS names or IPs in every API server certificate (e.g. a shared alias)")
	f.StringVar(&opts.server, "server", "https://127.0.0.1:6443", "API server URL in DIR/kubeconfigs/* (what the components dial)")
	f.StringVar(&opts.adminServer, "admin-server", "", "API server URL in DIR/kubeconfig (what the host dials; default --server)")
	f.StringSliceVar(&opts.nodes, "nodes", nil, "single-node stub kubelets; each gets the identity system:node:<name>")
	f.StringSliceVar(&opts.fleets, "fleets", nil, "node-fleet prefixes; each gets the identity system:node-fleet:<prefix>")
	f.StringVar(&opts.owner, "owner", "", "UID:GID to own everything under --dir (default: leave as written)")
	return cmd
}

func (o *certsOptions) validate() error {
	if o.dir == "" {
		return errors.New("--dir is required")
	}
	for flag, names := range map[string][]string{
		"--etcd-members": o.etcdMembers, "--apiservers": o.apiServers, "--nodes": o.nodes, "--fleets": o.fleets,
	} {
		seen := map[string]bool{}
		for _, n := range names {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				return fmt.Errorf("%s: %q: %s", flag, n, strings.Join(errs, "; "))
			}
			if seen[n] {
				return fmt.Errorf("%s: %q is listed twice", flag, n)
			}
			seen[n] = true
		}
	}
	if o.adminServer == "" {
		o.adminServer = o.server
	}
	for flag, s := range map[string]string{"--server": o.server, "--admin-server": o.adminServer} {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("%s %q: want an https://host:port URL", flag, s)
		}
	}
	if o.owner != "" {
		uid, gid, ok := strings.Cut(o.owner, ":")
		var err1, err2 error
		o.uid, err1 = strconv.Atoi(uid)
		o.gid, err2 = strconv.Atoi(gid)
		if !ok || err1 != nil || err2 != nil || o.uid < 0 || o.gid < 0 {
			return fmt.Errorf("--owner %q: want UID:GID, two non-negative numbers", o.owner)
		}
		o.chown = true
	}
	return nil
}

// Identities of the control-plane components. They share testenv's user names, so a token
// file made here and one made by `miniplane up` mean the same users.
func componentIdentities() map[string]auth.User {
	return map[string]auth.User{
		"admin":              {Name: testenv.AdminUser, UID: "admin", Groups: []string{auth.AdminGroup}},
		"viewer":             {Name: testenv.ViewerUser, UID: "viewer", Groups: []string{testenv.ViewerGroup}},
		"controller-manager": {Name: testenv.ControllerManagerUser, UID: "kube-controller-manager", Groups: []string{auth.AdminGroup}},
		"scheduler":          {Name: testenv.SchedulerUser, UID: "kube-scheduler", Groups: []string{auth.AdminGroup}},
	}
}

// componentOrder fixes the order of component identities in a new token file.
var componentOrder = []string{"admin", "viewer", "controller-manager", "scheduler"}

// ensureCredentials writes whatever is missing under o.dir and keeps the rest: EnsureCA and
// EnsureLeaf reuse valid files, EnsureTokens keeps existing tokens, and kubeconfigs are
// rewritten from those (their content only changes when a flag such as --server does).
func ensureCredentials(o certsOptions, log *slog.Logger) error {
	pkiDir := filepath.Join(o.dir, "pki")
	ca, err := pki.EnsureCA(pkiDir, "miniplane-ca")
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	loopback := []string{"localhost", "127.0.0.1", "::1"}
	type leaf struct {
		dir string
		pki.LeafRequest
	}
	etcdDir, apiDir := filepath.Join(pkiDir, "etcd"), filepath.Join(pkiDir, "apiserver")
	var leaves []leaf
	for _, m := range o.etcdMembers {
		hosts := append([]string{m}, loopback...)
		// Both usages on both certificates: members dial each other as clients over the peer
		// port, and etcd's own gRPC gateway dials the member with the server certificate.
		leaves = append(leaves,
			leaf{etcdDir, pki.LeafRequest{Name: m + "-server", CommonName: m, Hosts: hosts, Usage: pki.ServerAuth | pki.ClientAuth}},
			leaf{etcdDir, pki.LeafRequest{Name: m + "-peer", CommonName: m, Hosts: hosts, Usage: pki.ServerAuth | pki.ClientAuth}},
		)
	}
	if len(o.etcdMembers) > 0 {
		leaves = append(leaves, leaf{etcdDir, pki.LeafRequest{Name: "client", CommonName: "miniplane-apiserver", Usage: pki.ClientAuth}})
	}
	for _, a := range o.apiServers {
		hosts := append([]string{a, "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, o.apiServerSANs...)
		leaves = append(leaves, leaf{apiDir, pki.LeafRequest{Name: a, CommonName: "miniplane-apiserver", Hosts: hosts, Usage: pki.ServerAuth}})
	}
	for _, l := range leaves {
		if _, _, err := ca.EnsureLeaf(l.dir, l.LeafRequest); err != nil {
			return fmt.Errorf("certificate %s: %w", filepath.Join(l.dir, l.Name), err)
		}
	}

	type kubeconfig struct {
		path string
		user auth.User
	}
	components := componentIdentities()
	var users []auth.User
	var kubeconfigs []kubeconfig
	for _, name := range componentOrder {
		u := components[name]
		users = append(users, u)
		kubeconfigs = append(kubeconfigs, kubeconfig{filepath.Join(o.dir, "kubeconfigs", name+".kubeconfig"), u})
	}
	for _, n := range o.nodes {
		u := auth.User{Name: auth.NodeUserPrefix + n, UID: "node-" + n, Groups: []string{auth.NodesGroup}}
		users = append(users, u)
		kubeconfigs = append(kubeconfigs, kubeconfig{filepath.Join(o.dir, "kubeconfigs", "nodes", n+".kubeconfig"), u})
	}
	for _, p := range o.fleets {
		u := auth.User{Name: auth.FleetUserPrefix + p, UID: "node-fleet-" + p, Groups: []string{auth.NodesGroup}}
		users = append(users, u)
		kubeconfigs = append(kubeconfigs, kubeconfig{filepath.Join(o.dir, "kubeconfigs", "fleets", p+".kubeconfig"), u})
	}
	tokens, err := testenv.EnsureTokens(filepath.Join(o.dir, "tokens.csv"), users)
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	for _, k := range kubeconfigs {
		if err := pki.WriteKubeconfig(k.path, o.server, ca.CertPEM, k.user.Name, tokens[k.user.Name]); err != nil {
			return fmt.Errorf("kubeconfig %s: %w", k.path, err)
		}
	}
	admin := components["admin"]
	adminPath := filepath.Join(o.dir, "kubeconfig")
	if err := pki.WriteKubeconfig(adminPath, o.adminServer, ca.CertPEM, admin.Name, tokens[admin.Name]); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", adminPath, err)
	}
	if o.chown {
		if err := chownTree(o.dir, o.uid, o.gid); err != nil {
			return fmt.Errorf("--owner: %w", err)
		}
	}
	log.Info("credentials ready", "dir", o.dir, "certificates", len(leaves)+1, "identities", len(users),
		"adminKubeconfig", adminPath, "server", o.server)
	return nil
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
