package credentials

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
)

func composeCertsOptions(dir string) configs.Certs {
	return configs.Certs{
		Dir:           dir,
		EtcdMembers:   []string{"etcd-1", "etcd-2"},
		APIServers:    []string{"apiserver-1"},
		APIServerSANs: []string{"apiserver", "127.0.0.1"},
		Server:        "https://apiserver:6443",
		AdminServer:   "https://127.0.0.1:16443",
		Nodes:         []string{"node-a"},
		Fleets:        []string{"fleet"},
	}
}

func TestEnsureDeployment(t *testing.T) {
	dir := t.TempDir()
	opts := composeCertsOptions(dir)
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := EnsureDeployment(opts, quiet); err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, filepath.Join(dir, "pki", "ca.crt"))
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	certs := []struct {
		file  string
		host  string // must verify for this name; "" for client-only certificates
		usage x509.ExtKeyUsage
	}{
		{"etcd/etcd-1-server.crt", "etcd-1", x509.ExtKeyUsageServerAuth},
		{"etcd/etcd-1-server.crt", "localhost", x509.ExtKeyUsageClientAuth},
		{"etcd/etcd-2-peer.crt", "etcd-2", x509.ExtKeyUsageServerAuth},
		{"etcd/etcd-2-peer.crt", "etcd-2", x509.ExtKeyUsageClientAuth},
		{"etcd/client.crt", "", x509.ExtKeyUsageClientAuth},
		{"apiserver/apiserver-1.crt", "apiserver-1", x509.ExtKeyUsageServerAuth},
		{"apiserver/apiserver-1.crt", "apiserver", x509.ExtKeyUsageServerAuth},
		{"apiserver/apiserver-1.crt", "127.0.0.1", x509.ExtKeyUsageServerAuth},
	}
	for _, c := range certs {
		cert := readCert(t, filepath.Join(dir, "pki", c.file))
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.host, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s for %q (usage %v): %v", c.file, c.host, c.usage, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "pki", strings.TrimSuffix(c.file, ".crt")+".key")); err != nil {
			t.Errorf("key of %s: %v", c.file, err)
		}
	}
	if readCert(t, filepath.Join(dir, "pki", "apiserver/apiserver-1.crt")).VerifyHostname("etcd-1") == nil {
		t.Error("the API server certificate must not cover an etcd member")
	}

	f, err := os.Open(filepath.Join(dir, "tokens.csv"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := auth.ParseTokens(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string][]string{}
	tokens := map[string]string{}
	for _, e := range entries {
		groups[e.User.Name] = e.User.Groups
		tokens[e.User.Name] = e.Token
	}
	// The components are in no group: RBAC binds their roles to their user names.
	wantGroups := map[string][]string{
		"admin":                          {"system:masters"},
		"viewer":                         {"miniplane:viewers"},
		"system:kube-controller-manager": nil,
		"system:kube-scheduler":          nil,
		"system:node:node-a":             {"system:nodes"},
		"system:node-fleet:fleet":        {"system:nodes"},
	}
	if len(groups) != len(wantGroups) {
		t.Errorf("token file users = %v, want %d users", groups, len(wantGroups))
	}
	for user, g := range wantGroups {
		if !slices.Equal(groups[user], g) {
			t.Errorf("user %s groups = %v, want %v", user, groups[user], g)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pki", "sa.key")); err != nil {
		t.Errorf("service account key: %v", err)
	}

	kubeconfigs := []struct{ file, server, user string }{
		{"kubeconfig", "https://127.0.0.1:16443", "admin"},
		{"kubeconfigs/admin.kubeconfig", "https://apiserver:6443", "admin"},
		{"kubeconfigs/viewer.kubeconfig", "https://apiserver:6443", "viewer"},
		{"kubeconfigs/controller-manager.kubeconfig", "https://apiserver:6443", "system:kube-controller-manager"},
		{"kubeconfigs/scheduler.kubeconfig", "https://apiserver:6443", "system:kube-scheduler"},
		{"kubeconfigs/nodes/node-a.kubeconfig", "https://apiserver:6443", "system:node:node-a"},
		{"kubeconfigs/fleets/fleet.kubeconfig", "https://apiserver:6443", "system:node-fleet:fleet"},
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	for _, k := range kubeconfigs {
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, k.file))
		if err != nil {
			t.Errorf("%s: %v", k.file, err)
			continue
		}
		if cfg.Host != k.server || cfg.BearerToken != tokens[k.user] || !bytes.Equal(cfg.CAData, caPEM) {
			t.Errorf("%s: server %s, token of %s = %v, CA matches = %v; want server %s with %s's token",
				k.file, cfg.Host, k.user, cfg.BearerToken == tokens[k.user], bytes.Equal(cfg.CAData, caPEM), k.server, k.user)
		}
	}

	// A second run with one more node keeps every certificate and token and adds the node.
	before := snapshotFiles(t, filepath.Join(dir, "pki"))
	opts.Nodes = append(opts.Nodes, "node-b")
	if err := EnsureDeployment(opts, quiet); err != nil {
		t.Fatal(err)
	}
	after := snapshotFiles(t, filepath.Join(dir, "pki"))
	for name, data := range before {
		if !bytes.Equal(after[name], data) {
			t.Errorf("second run changed %s", name)
		}
	}
	newTokens, err := os.ReadFile(filepath.Join(dir, "tokens.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for user, token := range tokens {
		if !bytes.Contains(newTokens, []byte(token+","+user+",")) {
			t.Errorf("second run changed the token of %s", user)
		}
	}
	if !bytes.Contains(newTokens, []byte(",system:node:node-b,")) {
		t.Error("second run did not add node-b")
	}
	if _, err := os.Stat(filepath.Join(dir, "kubeconfigs", "nodes", "node-b.kubeconfig")); err != nil {
		t.Error(err)
	}
}

// TestEnsureTokensUpdatesIdentities: a token file from before keeps its tokens but its
// users get the groups they have now.
func TestEnsureTokensUpdatesIdentities(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.csv")
	old := auth.User{Name: ControllerManagerUser, UID: "kube-controller-manager", Groups: []string{"system:masters"}}
	first, err := EnsureTokens(path, []auth.User{old})
	if err != nil {
		t.Fatal(err)
	}
	now := auth.User{Name: ControllerManagerUser, UID: "kube-controller-manager"}
	second, err := EnsureTokens(path, []auth.User{now})
	if err != nil {
		t.Fatal(err)
	}
	if first[ControllerManagerUser] != second[ControllerManagerUser] {
		t.Fatal("the token changed")
	}
	a, err := auth.LoadTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if u := a.Lookup(second[ControllerManagerUser]); u == nil || len(u.Groups) != 0 {
		t.Fatalf("user after update = %+v, want no groups", u)
	}
}

func TestCertsValidate(t *testing.T) {
	tests := []struct {
		name    string
		change  func(o *configs.Certs)
		wantErr string
	}{
		{"valid", func(*configs.Certs) {}, ""},
		{"admin server defaults to server", func(o *configs.Certs) { o.AdminServer = "" }, ""},
		{"owner", func(o *configs.Certs) { o.Owner = "1000:1000" }, ""},
		{"no dir", func(o *configs.Certs) { o.Dir = "" }, "dir: is required"},
		{"member name is not a host name", func(o *configs.Certs) { o.EtcdMembers = []string{"Etcd_1"} }, "etcd-members: \"Etcd_1\""},
		{"duplicate node", func(o *configs.Certs) { o.Nodes = []string{"a", "a"} }, "twice"},
		{"plain-HTTP server", func(o *configs.Certs) { o.Server = "http://apiserver:6443" }, "server: "},
		{"server without host", func(o *configs.Certs) { o.AdminServer = "https://" }, "admin-server: "},
		{"owner without group", func(o *configs.Certs) { o.Owner = "1000" }, "owner: "},
		{"owner not numeric", func(o *configs.Certs) { o.Owner = "me:me" }, "owner: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := composeCertsOptions(t.TempDir())
			tc.change(&o)
			err := o.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if o.AdminURL() == "" {
					t.Fatal("admin server was not defaulted")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.wantErr)
			}
		})
	}
}

func TestEnsureDeploymentOwner(t *testing.T) {
	dir := t.TempDir()
	opts := composeCertsOptions(dir)
	opts.Owner = strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDeployment(opts, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("chown to the current user must work without privileges: %v", err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: not PEM", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func snapshotFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out[path] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStubIdentityMatchesDeployment: the stub identity up makes and the one certs makes for
// the same fleet or node are the same user, UID included.
func TestStubIdentityMatchesDeployment(t *testing.T) {
	fleet := configs.DefaultKubeletStub()
	fleet.NodePrefix = "edge"
	if got, want := StubIdentity(fleet), FleetIdentity("edge"); got.Name != want.Name || got.UID != want.UID || got.UID != "node-fleet-edge" {
		t.Errorf("fleet identity = %+v, want %+v with UID node-fleet-edge", got, want)
	}
	single := configs.DefaultKubeletStub()
	single.NodeName = "node-a"
	if got := StubIdentity(single); got.Name != "system:node:node-a" || got.UID != "node-node-a" {
		t.Errorf("node identity = %+v", got)
	}
}
