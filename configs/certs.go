package configs

import (
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Certs configures `miniplane certs`: the hosts and identities of a deployment of separate
// processes (docker compose) whose credentials are made once, up front.
type Certs struct {
	// Dir receives every file written; required. Flag --dir.
	Dir string `mapstructure:"dir" flag:"dir" help:"folder for every file written (required)"`
	// EtcdMembers are the etcd member names, also their host names. Flag --etcd-members.
	EtcdMembers []string `mapstructure:"etcd-members" flag:"etcd-members" help:"etcd member names, also their host names (e.g. etcd-1,etcd-2,etcd-3)"`
	// APIServers are the API servers' host names; each gets a serving certificate.
	// Flag --apiservers.
	APIServers []string `mapstructure:"apiservers" flag:"apiservers" help:"API server host names; each gets a serving certificate (e.g. apiserver-1,apiserver-2)"`
	// APIServerSANs are extra names in every API server certificate; default localhost and
	// 127.0.0.1. Flag --apiserver-sans.
	APIServerSANs []string `mapstructure:"apiserver-sans" flag:"apiserver-sans" help:"extra DNS names or IPs in every API server certificate (e.g. a shared alias)"`
	// Server is the API server URL the components dial; default https://127.0.0.1:6443.
	// Flag --server.
	Server string `mapstructure:"server" flag:"server" help:"API server URL in DIR/kubeconfigs/* (what the components dial)"`
	// AdminServer is the URL in the administrator's kubeconfig; default Server.
	// Flag --admin-server.
	AdminServer string `mapstructure:"admin-server" flag:"admin-server" help:"API server URL in DIR/kubeconfig (what the host dials; default --server)"`
	// Nodes are single-node stub kubelets, each with the identity system:node:<name>.
	// Flag --nodes.
	Nodes []string `mapstructure:"nodes" flag:"nodes" help:"single-node stub kubelets; each gets the identity system:node:<name>"`
	// Fleets are node-fleet prefixes, each with the identity system:node-fleet:<prefix>.
	// Flag --fleets.
	Fleets []string `mapstructure:"fleets" flag:"fleets" help:"node-fleet prefixes; each gets the identity system:node-fleet:<prefix>"`
	// Owner, UID:GID, is given every file and folder under Dir, so that files a container
	// writes into a host folder can be read and removed by the host user. Flag --owner.
	Owner string `mapstructure:"owner" flag:"owner" help:"UID:GID to own everything under --dir (default: leave as written)"`
}

// DefaultCerts returns the defaults.
func DefaultCerts() Certs {
	return Certs{APIServerSANs: []string{"localhost", "127.0.0.1"}, Server: "https://127.0.0.1:6443"}
}

// AdminURL is the URL of the administrator's kubeconfig.
func (c Certs) AdminURL() string {
	if c.AdminServer == "" {
		return c.Server
	}
	return c.AdminServer
}

// OwnerIDs returns the UID and GID of Owner; ok is false when Owner is empty.
func (c Certs) OwnerIDs() (uid, gid int, ok bool) {
	u, g, found := strings.Cut(c.Owner, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !found || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, false
	}
	return uid, gid, true
}

// Validate reports the first problem with c.
func (c Certs) Validate() error {
	if c.Dir == "" {
		return invalid("dir", "is required")
	}
	for _, list := range []struct {
		key   string
		names []string
	}{{"etcd-members", c.EtcdMembers}, {"apiservers", c.APIServers}, {"nodes", c.Nodes}, {"fleets", c.Fleets}} {
		seen := map[string]bool{}
		for _, n := range list.names {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				return invalidf(list.key, "%q: %s", n, strings.Join(errs, "; "))
			}
			if seen[n] {
				return invalidf(list.key, "%q is listed twice", n)
			}
			seen[n] = true
		}
	}
	for _, s := range []struct{ key, url string }{{"server", c.Server}, {"admin-server", c.AdminURL()}} {
		u, err := url.Parse(s.url)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return invalidf(s.key, "%q: want an https://host:port URL", s.url)
		}
	}
	if _, _, ok := c.OwnerIDs(); c.Owner != "" && !ok {
		return invalidf("owner", "%q: want UID:GID, two non-negative numbers", c.Owner)
	}
	return nil
}
