package configs

import "net/url"

// Etcd configures one etcd member started in-process (`miniplane etcd`, and the embedded
// member of `miniplane up`).
type Etcd struct {
	// Name of this member; default "default". Flag --name.
	Name string `mapstructure:"name" flag:"name" help:"member name"`
	// DataDir holds the member's WAL and snapshots. Flag --data-dir.
	DataDir string `mapstructure:"data-dir" flag:"data-dir" help:"member data directory"`
	// ListenClientURLs: where clients connect; default http://127.0.0.1:2379.
	ListenClientURLs []string `mapstructure:"listen-client-urls" flag:"listen-client-urls" help:"URLs to serve clients on"`
	// AdvertiseClientURLs: client URLs told to the cluster; default ListenClientURLs.
	AdvertiseClientURLs []string `mapstructure:"advertise-client-urls" flag:"advertise-client-urls" help:"client URLs to advertise (default: the listen URLs)"`
	// ListenPeerURLs: where other members connect; default http://127.0.0.1:2380.
	ListenPeerURLs []string `mapstructure:"listen-peer-urls" flag:"listen-peer-urls" help:"URLs to serve peers on"`
	// InitialAdvertisePeerURLs: peer URLs told to the cluster; default ListenPeerURLs.
	InitialAdvertisePeerURLs []string `mapstructure:"initial-advertise-peer-urls" flag:"initial-advertise-peer-urls" help:"peer URLs to advertise (default: the listen URLs)"`
	// InitialCluster: "name=peerURL,..." for bootstrapping; default this member alone.
	InitialCluster string `mapstructure:"initial-cluster" flag:"initial-cluster" help:"name=peerURL,... of every member at bootstrap (default: this member alone)"`
	// InitialClusterState: "new" or "existing"; default "new".
	InitialClusterState string `mapstructure:"initial-cluster-state" flag:"initial-cluster-state" help:"new or existing"`
	// InitialClusterToken distinguishes clusters bootstrapped on one network.
	InitialClusterToken string `mapstructure:"initial-cluster-token" flag:"initial-cluster-token" help:"token that tells clusters apart"`

	// CertFile/KeyFile serve client connections over TLS; TrustedCAFile with
	// ClientCertAuth requires clients to present a certificate signed by that CA.
	CertFile       string `mapstructure:"cert-file" flag:"cert-file" help:"client TLS certificate"`
	KeyFile        string `mapstructure:"key-file" flag:"key-file" help:"client TLS key"`
	TrustedCAFile  string `mapstructure:"trusted-ca-file" flag:"trusted-ca-file" help:"CA for client certificates"`
	ClientCertAuth bool   `mapstructure:"client-cert-auth" flag:"client-cert-auth" help:"require client certificates"`
	// PeerCertFile/PeerKeyFile/PeerTrustedCAFile secure member-to-member traffic.
	PeerCertFile      string `mapstructure:"peer-cert-file" flag:"peer-cert-file" help:"peer TLS certificate"`
	PeerKeyFile       string `mapstructure:"peer-key-file" flag:"peer-key-file" help:"peer TLS key"`
	PeerTrustedCAFile string `mapstructure:"peer-trusted-ca-file" flag:"peer-trusted-ca-file" help:"CA for peer certificates (enables peer client-cert auth)"`

	// UnsafeNoFsync skips fsync: only for tests, where durability does not matter.
	UnsafeNoFsync bool `mapstructure:"unsafe-no-fsync" flag:"unsafe-no-fsync" help:"skip fsync (tests only)"`
	// QuotaBackendBytes caps the backend size; default 8 GiB (etcd's recommended maximum).
	QuotaBackendBytes int64 `mapstructure:"quota-backend-bytes" flag:"quota-backend-bytes" help:"backend size limit"`
	// SnapshotCatchUpEntries is how many applied raft entries the member keeps in memory for
	// a slow follower to catch up from; default 5000, etcd's. Flag --snapshot-catchup-entries.
	SnapshotCatchUpEntries int `mapstructure:"snapshot-catchup-entries" flag:"snapshot-catchup-entries" help:"applied raft entries kept in memory for slow followers"`
	// HealthListen serves /healthz, /readyz and /metrics for this member; "" disables.
	HealthListen string `mapstructure:"health-listen" flag:"health-listen" help:"address for /healthz, /readyz and /metrics (empty: off)"`
}

// DefaultEtcd returns the configuration of a single loopback member.
func DefaultEtcd() Etcd {
	return Etcd{
		Name:                "default",
		DataDir:             "./.miniplane/etcd",
		ListenClientURLs:    []string{"http://127.0.0.1:2379"},
		ListenPeerURLs:      []string{"http://127.0.0.1:2380"},
		InitialClusterState: "new",
		InitialClusterToken: "miniplane",
		QuotaBackendBytes:   8 << 30,
		// etcd's own default; a member alone can keep far fewer (EmbeddedSnapshotCatchUpEntries).
		SnapshotCatchUpEntries: 5000,
	}
}

// EmbeddedSnapshotCatchUpEntries is SnapshotCatchUpEntries of the member `miniplane up`
// embeds. That member is the whole cluster and has no follower to catch up, while each entry
// kept is a whole write request: etcd's 5000 held about 10 MiB of the all-in-one's heap at
// 1,000 nodes (docs/performance.md).
const EmbeddedSnapshotCatchUpEntries = 100

// Validate reports the first problem with c.
func (c Etcd) Validate() error {
	switch {
	case c.Name == "":
		return invalid("name", "must not be empty")
	case c.DataDir == "":
		return invalid("data-dir", "must not be empty")
	case len(c.ListenClientURLs) == 0:
		return invalid("listen-client-urls", "must not be empty")
	case c.SnapshotCatchUpEntries < 1:
		return invalid("snapshot-catchup-entries", "must be at least 1")
	}
	for _, list := range []struct {
		key  string
		urls []string
	}{
		{"listen-client-urls", c.ListenClientURLs}, {"advertise-client-urls", c.AdvertiseClientURLs},
		{"listen-peer-urls", c.ListenPeerURLs}, {"initial-advertise-peer-urls", c.InitialAdvertisePeerURLs},
	} {
		for _, u := range list.urls {
			if _, err := url.Parse(u); err != nil {
				return invalidf(list.key, "%v", err)
			}
		}
	}
	switch {
	case c.InitialClusterState != "new" && c.InitialClusterState != "existing":
		return invalidf("initial-cluster-state", "must be \"new\" or \"existing\", not %q", c.InitialClusterState)
	case (c.CertFile == "") != (c.KeyFile == ""):
		return invalid("cert-file", "and %s go together", "key-file")
	case (c.PeerCertFile == "") != (c.PeerKeyFile == ""):
		return invalid("peer-cert-file", "and %s go together", "peer-key-file")
	}
	return nil
}
