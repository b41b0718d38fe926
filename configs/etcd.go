package configs

import (
	"errors"
	"fmt"
	"net/url"
)

// Etcd configures one etcd member started in-process (`miniplane etcd`, and the embedded
// member of `miniplane up`).
type Etcd struct {
	// Name of this member; default "default". Flag --name.
	Name string `mapstructure:"name"`
	// DataDir holds the member's WAL and snapshots. Flag --data-dir.
	DataDir string `mapstructure:"data-dir"`
	// ListenClientURLs: where clients connect; default http://127.0.0.1:2379.
	ListenClientURLs []string `mapstructure:"listen-client-urls"`
	// AdvertiseClientURLs: client URLs told to the cluster; default ListenClientURLs.
	AdvertiseClientURLs []string `mapstructure:"advertise-client-urls"`
	// ListenPeerURLs: where other members connect; default http://127.0.0.1:2380.
	ListenPeerURLs []string `mapstructure:"listen-peer-urls"`
	// InitialAdvertisePeerURLs: peer URLs told to the cluster; default ListenPeerURLs.
	InitialAdvertisePeerURLs []string `mapstructure:"initial-advertise-peer-urls"`
	// InitialCluster: "name=peerURL,..." for bootstrapping; default this member alone.
	InitialCluster string `mapstructure:"initial-cluster"`
	// InitialClusterState: "new" or "existing"; default "new".
	InitialClusterState string `mapstructure:"initial-cluster-state"`
	// InitialClusterToken distinguishes clusters bootstrapped on one network.
	InitialClusterToken string `mapstructure:"initial-cluster-token"`

	// CertFile/KeyFile serve client connections over TLS; TrustedCAFile with
	// ClientCertAuth requires clients to present a certificate signed by that CA.
	CertFile       string `mapstructure:"cert-file"`
	KeyFile        string `mapstructure:"key-file"`
	TrustedCAFile  string `mapstructure:"trusted-ca-file"`
	ClientCertAuth bool   `mapstructure:"client-cert-auth"`
	// PeerCertFile/PeerKeyFile/PeerTrustedCAFile secure member-to-member traffic.
	PeerCertFile      string `mapstructure:"peer-cert-file"`
	PeerKeyFile       string `mapstructure:"peer-key-file"`
	PeerTrustedCAFile string `mapstructure:"peer-trusted-ca-file"`

	// UnsafeNoFsync skips fsync: only for tests, where durability does not matter.
	UnsafeNoFsync bool `mapstructure:"unsafe-no-fsync"`
	// QuotaBackendBytes caps the backend size; default 8 GiB (etcd's recommended maximum).
	QuotaBackendBytes int64 `mapstructure:"quota-backend-bytes"`
	// HealthListen serves /healthz, /readyz and /metrics for this member; "" disables.
	HealthListen string `mapstructure:"health-listen"`
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
	}
}

// Validate reports the first problem with c, naming the flag.
func (c Etcd) Validate() error {
	if c.Name == "" {
		return errors.New("--name must not be empty")
	}
	if c.DataDir == "" {
		return errors.New("--data-dir must not be empty")
	}
	for flag, urls := range map[string][]string{
		"--listen-client-urls": c.ListenClientURLs, "--advertise-client-urls": c.AdvertiseClientURLs,
		"--listen-peer-urls": c.ListenPeerURLs, "--initial-advertise-peer-urls": c.InitialAdvertisePeerURLs,
	} {
		for _, u := range urls {
			if _, err := url.Parse(u); err != nil {
				return fmt.Errorf("%s: %w", flag, err)
			}
		}
	}
	if len(c.ListenClientURLs) == 0 {
		return errors.New("--listen-client-urls must not be empty")
	}
	if c.InitialClusterState != "new" && c.InitialClusterState != "existing" {
		return fmt.Errorf("--initial-cluster-state must be \"new\" or \"existing\", not %q", c.InitialClusterState)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("--cert-file and --key-file go together")
	}
	if (c.PeerCertFile == "") != (c.PeerKeyFile == "") {
		return errors.New("--peer-cert-file and --peer-key-file go together")
	}
	return nil
}
