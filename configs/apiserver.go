package configs

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// APIServer configures the Kubernetes-compatible API server (`miniplane apiserver`, and the
// API server inside `miniplane up`).
type APIServer struct {
	// Listen is the HTTPS address; default 127.0.0.1:6443. Flag --listen.
	Listen string `mapstructure:"listen" flag:"listen" help:"HTTPS address"`
	// InsecureListen opts in to a plain-HTTP listener without authentication. It must be a
	// loopback address; default "" (off). Flag --insecure-listen.
	InsecureListen string `mapstructure:"insecure-listen" flag:"insecure-listen" help:"opt-in plain-HTTP address without authentication; loopback only"`
	// CertDir holds the generated CA and serving certificate (ca.crt, ca.key,
	// apiserver.crt, apiserver.key); they are created on first start and kept. Flag --cert-dir.
	CertDir string `mapstructure:"cert-dir" flag:"cert-dir" help:"directory for the generated CA and serving certificate"`
	// TLSSANs are extra DNS names or IPs for the generated serving certificate, for example
	// the compose service name. Flag --tls-sans.
	TLSSANs []string `mapstructure:"tls-sans" flag:"tls-sans" help:"extra DNS names or IPs for the serving certificate"`
	// TLSCertFile and TLSPrivateKeyFile serve a certificate made elsewhere (for example by
	// `miniplane certs`) instead of generating one; CertDir/ca.crt is then only reported
	// to clients. Flags --tls-cert-file, --tls-private-key-file.
	TLSCertFile       string `mapstructure:"tls-cert-file" flag:"tls-cert-file" help:"serving certificate made elsewhere (default: generate one in --cert-dir)"`
	TLSPrivateKeyFile string `mapstructure:"tls-private-key-file" flag:"tls-private-key-file" help:"key of the serving certificate given with --tls-cert-file"`
	// TokenFile is a kube-apiserver token file: CSV lines `token,user,uid,"group1,group2"`.
	// Flag --token-file.
	TokenFile string `mapstructure:"token-file" flag:"token-file" help:"static token file: CSV lines token,user,uid,\"group1,group2\" (required)"`
	// AdminGroups may do anything, whatever RBAC says, as kube-apiserver's system:masters;
	// the bootstrap ClusterRoleBinding cluster-admin names them too. Default
	// [system:masters]. Flag --admin-groups.
	AdminGroups []string `mapstructure:"admin-groups" flag:"admin-groups" help:"groups that may do anything, whatever RBAC says"`
	// ReadOnlyGroups are the subjects the bootstrap ClusterRoleBinding miniplane:viewers
	// gives the ClusterRole miniplane:viewer (get, list, watch everything; read /metrics);
	// default [miniplane:viewers]. Reconciliation on start adds groups, it never removes
	// any. Flag --read-only-groups.
	ReadOnlyGroups []string `mapstructure:"read-only-groups" flag:"read-only-groups" help:"groups bound to the ClusterRole miniplane:viewer (get, list, watch everything)"`
	// AnonymousAuth serves requests without a bearer token as system:anonymous (group
	// system:unauthenticated), authorized by RBAC; default false: such requests get 401,
	// except on /healthz, /livez, /readyz and /version, which the bootstrap role
	// system:public-info-viewer opens to everyone. Flag --anonymous-auth.
	AnonymousAuth bool `mapstructure:"anonymous-auth" flag:"anonymous-auth" help:"serve requests without a token as system:anonymous, authorized by RBAC (default: 401 except on health and version)"`

	// ServiceAccountSigningKeyFile is the private key (PEM, RSA or ECDSA) that signs and
	// verifies ServiceAccount tokens; default CertDir/sa.key, an RSA key created on first
	// start when missing. Every API server of a cluster needs the same key. Flag
	// --service-account-signing-key-file.
	ServiceAccountSigningKeyFile string `mapstructure:"service-account-signing-key-file" flag:"service-account-signing-key-file" help:"PEM private key signing ServiceAccount tokens (default: CERT_DIR/sa.key, created when missing)"`
	// ServiceAccountIssuer is the iss claim of ServiceAccount tokens and the issuer of the
	// OpenID discovery document; default https://kubernetes.default.svc.cluster.local.
	// Flag --service-account-issuer.
	ServiceAccountIssuer string `mapstructure:"service-account-issuer" flag:"service-account-issuer" help:"iss claim of ServiceAccount tokens"`
	// ServiceAccountJWKSURI is the jwks_uri of /.well-known/openid-configuration; default
	// the issuer followed by /openid/v1/jwks. Flag --service-account-jwks-uri.
	ServiceAccountJWKSURI string `mapstructure:"service-account-jwks-uri" flag:"service-account-jwks-uri" help:"jwks_uri of the OpenID discovery document (default: ISSUER/openid/v1/jwks)"`
	// APIAudiences are the audiences a token must name to authenticate to this server,
	// and those of a TokenRequest that names none; default [ServiceAccountIssuer].
	// Flag --api-audiences.
	APIAudiences []string `mapstructure:"api-audiences" flag:"api-audiences" help:"audiences a ServiceAccount token must name to authenticate here (default: the issuer)"`
	// ServiceAccountMaxTokenExpiration caps the lifetime a TokenRequest may ask for;
	// default 0, no cap, as kube-apiserver. Flag --service-account-max-token-expiration.
	ServiceAccountMaxTokenExpiration time.Duration `mapstructure:"service-account-max-token-expiration" flag:"service-account-max-token-expiration" help:"longest lifetime of a requested ServiceAccount token (0: no cap)"`

	// AuditLogPath receives one JSON line (an audit.k8s.io/v1 Event) per write request;
	// "-" is standard output, "" (the default) turns the audit log off. Flag
	// --audit-log-path.
	AuditLogPath string `mapstructure:"audit-log-path" flag:"audit-log-path" help:"file receiving a JSON audit event per write (\"-\": stdout; default off)"`
	// AuditLevel is how much each audit event holds: Metadata (who, what, when, the
	// answer), Request (also the request body) or RequestResponse (also the response
	// body); default Metadata. Flag --audit-level.
	AuditLevel string `mapstructure:"audit-level" flag:"audit-level" help:"detail of audit events: Metadata, Request or RequestResponse"`

	// EtcdServers selects an external etcd cluster; empty means an embedded member that
	// keeps its data in EmbeddedEtcdDir. Flag --etcd-servers.
	EtcdServers []string `mapstructure:"etcd-servers" flag:"etcd-servers" help:"etcd client URLs; empty runs an embedded member"`
	// EmbeddedEtcdDir is the embedded member's data dir; default ./.miniplane/etcd.
	// Flag --embedded-etcd-dir.
	EmbeddedEtcdDir string `mapstructure:"embedded-etcd-dir" flag:"embedded-etcd-dir" help:"data dir of the embedded etcd member"`
	// EtcdCAFile, EtcdCertFile, EtcdKeyFile secure the connection to etcd.
	EtcdCAFile   string `mapstructure:"etcd-cafile" flag:"etcd-cafile" help:"CA bundle to verify etcd"`
	EtcdCertFile string `mapstructure:"etcd-certfile" flag:"etcd-certfile" help:"client certificate for etcd"`
	EtcdKeyFile  string `mapstructure:"etcd-keyfile" flag:"etcd-keyfile" help:"client key for etcd"`
	// EtcdPrefix is the root of every key; default /registry.
	EtcdPrefix string `mapstructure:"etcd-prefix" flag:"etcd-prefix" help:"root of every key in etcd"`
	// CompactionInterval is how often etcd history is compacted, keeping the revisions
	// written during the last interval; default 5m; 0 disables. Flag --compaction-interval.
	CompactionInterval time.Duration `mapstructure:"compaction-interval" flag:"compaction-interval" help:"how often etcd history is compacted (0 disables)"`
	// EventTTL is how long Events live; default 1h, as kube-apiserver.
	EventTTL time.Duration `mapstructure:"event-ttl" flag:"event-ttl" help:"how long events are kept"`
	// MaxRequestBodyBytes rejects larger bodies with 413; default 3 MiB, as kube-apiserver.
	MaxRequestBodyBytes int64 `mapstructure:"max-request-body-bytes" flag:"max-request-body-bytes" help:"larger request bodies are rejected with 413"`
	// WatchCacheEvents is how many recent changes per resource the watch cache keeps at
	// most for watches that resume from an older resourceVersion; default 10000. Changes
	// older than 75 s go sooner, once 100 newer ones follow (docs/watch-cache.md).
	WatchCacheEvents int `mapstructure:"watch-cache-events" flag:"watch-cache-events" help:"most recent changes kept per resource for resuming watches (those older than 75s go once 100 newer follow)"`
	// MinRequestTimeout bounds watches that name no timeoutSeconds: each lasts a random
	// time between this and twice this; default 30m, as kube-apiserver.
	MinRequestTimeout time.Duration `mapstructure:"min-request-timeout" flag:"min-request-timeout" help:"watches without timeoutSeconds last between this and twice this"`

	// ServiceClusterIPRange is the CIDR Services' cluster IPs are allocated from; its first
	// address goes to the `kubernetes` Service. Default 10.96.0.0/12, as kubeadm. Changing it
	// on a data dir that holds Services leaves their addresses as allocated. Flag
	// --service-cluster-ip-range.
	ServiceClusterIPRange string `mapstructure:"service-cluster-ip-range" flag:"service-cluster-ip-range" help:"CIDR Services' cluster IPs are allocated from"`
	// ServiceNodePortRange is the port range NodePort Services get their ports from, as
	// FIRST-LAST; default 30000-32767, as kube-apiserver. Flag --service-node-port-range.
	ServiceNodePortRange string `mapstructure:"service-node-port-range" flag:"service-node-port-range" help:"port range of NodePort Services, FIRST-LAST"`
	// AdvertiseAddress is the IP the `kubernetes` Service's endpoints name; default the
	// host of Listen, or the first non-loopback address when Listen's host is unspecified.
	// Flag --advertise-address.
	AdvertiseAddress string `mapstructure:"advertise-address" flag:"advertise-address" help:"IP the kubernetes Service's endpoints name (default: the host of --listen)"`
	// MaxRequestsInflight bounds the non-mutating requests (get, list, discovery) served at
	// once; beyond it a request waits in a short queue (InflightQueueWait), then the server
	// answers 429 TooManyRequests with Retry-After: 1. Watches and pods/log do not count,
	// and members of AdminGroups are served anyway, as kube-apiserver serves system:masters.
	// Default 400, as kube-apiserver; 0 disables. Flag --max-requests-inflight.
	MaxRequestsInflight int `mapstructure:"max-requests-inflight" flag:"max-requests-inflight" help:"non-mutating requests served at once; more queue, then get 429 (watches and pods/log do not count; admins are exempt; 0 disables)"`
	// MaxMutatingRequestsInflight is MaxRequestsInflight for create, update, patch and
	// delete; default 200, as kube-apiserver; 0 disables. Flag
	// --max-mutating-requests-inflight.
	MaxMutatingRequestsInflight int `mapstructure:"max-mutating-requests-inflight" flag:"max-mutating-requests-inflight" help:"mutating requests served at once; more queue, then get 429 (admins are exempt; 0 disables)"`
	// InflightQueueWait is the longest a request waits for a slot when its kind's limit is
	// reached, as kube-apiserver's priority and fairness queues requests: at most as many
	// wait as the limit allows in flight, and a request that finds the queue full or waits
	// longer gets the 429. Default 1s, the Retry-After a refused client would wait anyway;
	// 0 refuses at once. Flag --inflight-queue-wait.
	InflightQueueWait time.Duration `mapstructure:"inflight-queue-wait" flag:"inflight-queue-wait" help:"longest a request waits for a slot beyond the in-flight limits before it gets 429 (as many may wait as the limit serves; 0: refuse at once)"`
	// Profiling serves Go's profiles under /debug/pprof/ to administrators only; default
	// true, as kube-apiserver's --profiling. Flag --profiling.
	Profiling bool `mapstructure:"profiling" flag:"profiling" help:"serve /debug/pprof/ to administrators"`

	// UI is the browser view at /ui/ (docs/ui.md); flags --ui-….
	UI UI `mapstructure:"ui" flag:"ui-"`
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

		ServiceClusterIPRange: "10.96.0.0/12",
		ServiceNodePortRange:  "30000-32767",
		// kube-apiserver's defaults.
		MaxRequestsInflight:         400,
		MaxMutatingRequestsInflight: 200,
		InflightQueueWait:           time.Second,
		Profiling:                   true,
		UI:                          DefaultUI(),

		// kubeadm's issuer: what in-cluster clients of a real cluster see.
		ServiceAccountIssuer: "https://kubernetes.default.svc.cluster.local",
		AuditLevel:           AuditLevelMetadata,
	}
}

// Validate reports the first problem with c.
func (c APIServer) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return invalidf("listen", "%q: %v", c.Listen, err)
	}
	if c.InsecureListen != "" {
		host, _, err := net.SplitHostPort(c.InsecureListen)
		if err != nil {
			return invalidf("insecure-listen", "%q: %v", c.InsecureListen, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return invalidf("insecure-listen", "%q: the plain-HTTP listener is only allowed on a loopback address", c.InsecureListen)
		}
	}
	switch {
	case c.CertDir == "":
		return invalid("cert-dir", "must not be empty")
	case c.TLSCertFile != "" && c.TLSPrivateKeyFile == "":
		return invalid("tls-private-key-file", "is required with %s", "tls-cert-file")
	case c.TLSCertFile == "" && c.TLSPrivateKeyFile != "":
		return invalid("tls-cert-file", "is required with %s", "tls-private-key-file")
	case c.TokenFile == "":
		return invalid("token-file", "is required: every request must carry a bearer token")
	case c.EtcdCertFile != "" && c.EtcdKeyFile == "":
		return invalid("etcd-keyfile", "is required with %s", "etcd-certfile")
	case c.EtcdCertFile == "" && c.EtcdKeyFile != "":
		return invalid("etcd-certfile", "is required with %s", "etcd-keyfile")
	case len(c.EtcdServers) == 0 && c.EmbeddedEtcdDir == "":
		return invalid("embedded-etcd-dir", "must not be empty without %s", "etcd-servers")
	case c.CompactionInterval < 0:
		return invalid("compaction-interval", "must not be negative")
	case c.EventTTL <= 0:
		return invalid("event-ttl", "must be positive")
	case c.MaxRequestBodyBytes <= 0:
		return invalid("max-request-body-bytes", "must be positive")
	case c.WatchCacheEvents < 100:
		return invalid("watch-cache-events", "must be at least 100")
	case c.MinRequestTimeout <= 0:
		return invalid("min-request-timeout", "must be positive")
	case c.MaxRequestsInflight < 0:
		return invalid("max-requests-inflight", "must not be negative (0 disables the limit)")
	case c.MaxMutatingRequestsInflight < 0:
		return invalid("max-mutating-requests-inflight", "must not be negative (0 disables the limit)")
	case c.InflightQueueWait < 0:
		return invalid("inflight-queue-wait", "must not be negative (0 refuses at once)")
	case c.ServiceAccountIssuer == "":
		return invalid("service-account-issuer", "must not be empty")
	case c.ServiceAccountMaxTokenExpiration < 0:
		return invalid("service-account-max-token-expiration", "must not be negative (0: no cap)")
	case c.ServiceAccountMaxTokenExpiration > 0 && c.ServiceAccountMaxTokenExpiration < 10*time.Minute:
		return invalid("service-account-max-token-expiration", "must be at least 10m, the shortest token a TokenRequest may ask for")
	}
	switch c.AuditLevel {
	case AuditLevelMetadata, AuditLevelRequest, AuditLevelRequestResponse:
	default:
		return invalidf("audit-level", "%q: want %s, %s or %s", c.AuditLevel, AuditLevelMetadata, AuditLevelRequest, AuditLevelRequestResponse)
	}
	if _, err := c.ServiceCIDR(); err != nil {
		return invalidf("service-cluster-ip-range", "%v", err)
	}
	if _, _, err := c.NodePortRange(); err != nil {
		return invalidf("service-node-port-range", "%v", err)
	}
	if c.AdvertiseAddress != "" && net.ParseIP(c.AdvertiseAddress) == nil {
		return invalidf("advertise-address", "%q is not an IP address", c.AdvertiseAddress)
	}
	return within("ui", c.UI.Validate())
}

// Audit levels, as audit.k8s.io/v1 names them.
const (
	AuditLevelMetadata        = "Metadata"
	AuditLevelRequest         = "Request"
	AuditLevelRequestResponse = "RequestResponse"
)

// ServiceAccountKeyPath is the ServiceAccount signing key's file.
func (c APIServer) ServiceAccountKeyPath() string {
	if c.ServiceAccountSigningKeyFile != "" {
		return c.ServiceAccountSigningKeyFile
	}
	return filepath.Join(c.CertDir, "sa.key")
}

// Audiences are the API audiences: APIAudiences, or the issuer.
func (c APIServer) Audiences() []string {
	if len(c.APIAudiences) > 0 {
		return c.APIAudiences
	}
	return []string{c.ServiceAccountIssuer}
}

// JWKSURI is the jwks_uri of the OpenID discovery document.
func (c APIServer) JWKSURI() string {
	if c.ServiceAccountJWKSURI != "" {
		return c.ServiceAccountJWKSURI
	}
	return strings.TrimSuffix(c.ServiceAccountIssuer, "/") + "/openid/v1/jwks"
}

// ServiceCIDR parses ServiceClusterIPRange. Like kube-apiserver it takes an IPv4 range of
// at least 8 addresses and at most 2^20 (a /12), since every address is tracked.
func (c APIServer) ServiceCIDR() (*net.IPNet, error) {
	ip, cidr, err := net.ParseCIDR(c.ServiceClusterIPRange)
	if err != nil {
		return nil, fmt.Errorf("%q: want a CIDR such as 10.96.0.0/12", c.ServiceClusterIPRange)
	}
	if ip.To4() == nil {
		return nil, fmt.Errorf("%q: only IPv4 service ranges are supported", c.ServiceClusterIPRange)
	}
	if !ip.Equal(cidr.IP) {
		return nil, fmt.Errorf("%q: host bits are set; the range starts at %s", c.ServiceClusterIPRange, cidr.IP)
	}
	if ones, _ := cidr.Mask.Size(); ones < 12 || ones > 29 {
		return nil, fmt.Errorf("%q: the prefix length must be between /12 and /29", c.ServiceClusterIPRange)
	}
	return cidr, nil
}

// NodePortRange parses ServiceNodePortRange into its first and last port.
func (c APIServer) NodePortRange() (first, last int, err error) {
	a, b, ok := strings.Cut(c.ServiceNodePortRange, "-")
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || first < 1 || last > 65535 || first > last {
		return 0, 0, fmt.Errorf("%q: want FIRST-LAST, two ports with FIRST <= LAST, such as 30000-32767", c.ServiceNodePortRange)
	}
	return first, last, nil
}
