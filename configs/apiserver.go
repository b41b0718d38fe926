package configs

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// APIServer configures the Kubernetes-compatible API server (`miniplane apiserver`, and the
// API server inside `miniplane up`).
type APIServer struct {
	// Listen is the HTTPS address; default 127.0.0.1:6443. Flag --listen.
	Listen string `mapstructure:"listen"`
	// InsecureListen opts in to a plain-HTTP listener without authentication. It must be a
	// loopback address; default "" (off). Flag --insecure-listen.
	InsecureListen string `mapstructure:"insecure-listen"`
	// CertDir holds the generated CA and serving certificate (ca.crt, ca.key,
	// apiserver.crt, apiserver.key); they are created on first start and kept. Flag --cert-dir.
	CertDir string `mapstructure:"cert-dir"`
	// TLSSANs are extra DNS names or IPs for the generated serving certificate, for example
	// the compose service name. Flag --tls-sans.
	TLSSANs []string `mapstructure:"tls-sans"`
	// TLSCertFile and TLSPrivateKeyFile serve a certificate made elsewhere (for example by
	// `miniplane certs`) instead of generating one; CertDir/ca.crt is then only reported
	// to clients. Flags --tls-cert-file, --tls-private-key-file.
	TLSCertFile       string `mapstructure:"tls-cert-file"`
	TLSPrivateKeyFile string `mapstructure:"tls-private-key-file"`
	// TokenFile is a kube-apiserver token file: CSV lines `token,user,uid,"group1,group2"`.
	// Flag --token-file.
	TokenFile string `mapstructure:"token-file"`
	// AdminGroups may do anything; default [system:masters].
	AdminGroups []string `mapstructure:"admin-groups"`
	// ReadOnlyGroups may get, list and watch everything; default [miniplane:viewers].
	ReadOnlyGroups []string `mapstructure:"read-only-groups"`

	// EtcdServers selects an external etcd cluster; empty means an embedded member that
	// keeps its data in EmbeddedEtcdDir. Flag --etcd-servers.
	EtcdServers []string `mapstructure:"etcd-servers"`
	// EmbeddedEtcdDir is the embedded member's data dir; default ./.miniplane/etcd.
	// Flag --embedded-etcd-dir.
	EmbeddedEtcdDir string `mapstructure:"embedded-etcd-dir"`
	// EtcdCAFile, EtcdCertFile, EtcdKeyFile secure the connection to etcd.
	EtcdCAFile   string `mapstructure:"etcd-cafile"`
	EtcdCertFile string `mapstructure:"etcd-certfile"`
	EtcdKeyFile  string `mapstructure:"etcd-keyfile"`
	// EtcdPrefix is the root of every key; default /registry.
	EtcdPrefix string `mapstructure:"etcd-prefix"`
	// CompactionInterval is how often etcd history is compacted, keeping the revisions
	// written during the last interval; default 5m; 0 disables. Flag --compaction-interval.
	CompactionInterval time.Duration `mapstructure:"compaction-interval"`
	// EventTTL is how long Events live; default 1h, as kube-apiserver.
	EventTTL time.Duration `mapstructure:"event-ttl"`
	// MaxRequestBodyBytes rejects larger bodies with 413; default 3 MiB, as kube-apiserver.
	MaxRequestBodyBytes int64 `mapstructure:"max-request-body-bytes"`
	// WatchCacheEvents is how many recent changes per resource the watch cache keeps for
	// watches that resume from an older resourceVersion; default 10000.
	WatchCacheEvents int `mapstructure:"watch-cache-events"`
	// MinRequestTimeout bounds watches that name no timeoutSeconds: each lasts a random
	// time between this and twice this; default 30m, as kube-apiserver.
	MinRequestTimeout time.Duration `mapstructure:"min-request-timeout"`
}

// DefaultAPIServer returns the secure loopback defaults.
func DefaultAPIServer() APIServer {
	return APIServer{
		Listen:              "127.0.0.1:6443",
		CertDir:             "./.miniplane/pki",
		EmbeddedEtcdDir:     "./.miniplane/etcd",
		AdminGroups:         []string{"system:masters"},
		ReadOnlyGroups:      []string{"miniplane:viewers"},
		EtcdPrefix:          "/registry",
		CompactionInterval:  5 * time.Minute,
		EventTTL:            time.Hour,
		MaxRequestBodyBytes: 3 << 20,
		WatchCacheEvents:    10000,
		MinRequestTimeout:   30 * time.Minute,
	}
}

// Validate reports the first problem with c, naming the flag.
func (c APIServer) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if c.InsecureListen != "" {
		host, _, err := net.SplitHostPort(c.InsecureListen)
		if err != nil {
			return fmt.Errorf("--insecure-listen %q: %w", c.InsecureListen, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("--insecure-listen %q: the plain-HTTP listener is only allowed on a loopback address", c.InsecureListen)
		}
	}
	if c.CertDir == "" {
		return errors.New("--cert-dir must not be empty")
	}
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if c.TokenFile == "" {
		return errors.New("--token-file is required: every request must carry a bearer token")
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		return errors.New("--etcd-certfile and --etcd-keyfile go together")
	}
	if c.CompactionInterval < 0 {
		return errors.New("--compaction-interval must not be negative")
	}
	if c.EventTTL <= 0 {
		return errors.New("--event-ttl must be positive")
	}
	if c.MaxRequestBodyBytes <= 0 {
		return errors.New("--max-request-body-bytes must be positive")
	}
	if c.WatchCacheEvents < 100 {
		return errors.New("--watch-cache-events must be at least 100")
	}
	if c.MinRequestTimeout <= 0 {
		return errors.New("--min-request-timeout must be positive")
	}
	return nil
}
