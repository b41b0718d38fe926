package store

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/miniplane/miniplane/configs"
)

// startTimeout bounds how long a member may take to become ready. A member of a new
// multi-member cluster is ready only once a quorum has started, so this is generous.
const startTimeout = 2 * time.Minute

// EmbeddedEtcd is an etcd member running inside this process.
type EmbeddedEtcd struct {
	etcd    *embed.Etcd
	cfg     configs.Etcd
	closing *atomic.Bool
}

// StartEmbeddedEtcd starts a member as cfg describes and waits until it serves clients.
// logLevel is etcd's own (debug, info, warn, error); etcd logs through zap to stderr.
func StartEmbeddedEtcd(cfg configs.Etcd, logLevel string) (*EmbeddedEtcd, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd data dir: %w", err)
	}
	var err error
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.LogLevel = logLevel
	closing := new(atomic.Bool)
	if ec.ZapLoggerBuilder, err = quietOnCloseLogger(logLevel, closing); err != nil {
		return nil, err
	}
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	ec.SnapshotCatchUpEntries = uint64(cfg.SnapshotCatchUpEntries)
	// Watch progress lets the API server's watch cache learn the current revision without
	// waiting for a change; kube-apiserver relies on the same.
	ec.WatchProgressNotifyInterval = 5 * time.Second
	if ec.ListenClientUrls, err = parseURLs(cfg.ListenClientURLs); err != nil {
		return nil, fmt.Errorf("--listen-client-urls: %w", err)
	}
	ec.AdvertiseClientUrls = ec.ListenClientUrls
	if len(cfg.AdvertiseClientURLs) > 0 {
		if ec.AdvertiseClientUrls, err = parseURLs(cfg.AdvertiseClientURLs); err != nil {
			return nil, fmt.Errorf("--advertise-client-urls: %w", err)
		}
	}
	if ec.ListenPeerUrls, err = parseURLs(cfg.ListenPeerURLs); err != nil {
		return nil, fmt.Errorf("--listen-peer-urls: %w", err)
	}
	ec.AdvertisePeerUrls = ec.ListenPeerUrls
	if len(cfg.InitialAdvertisePeerURLs) > 0 {
		if ec.AdvertisePeerUrls, err = parseURLs(cfg.InitialAdvertisePeerURLs); err != nil {
			return nil, fmt.Errorf("--initial-advertise-peer-urls: %w", err)
		}
	}
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	}
	ec.ClusterState = cfg.InitialClusterState
	ec.InitialClusterToken = cfg.InitialClusterToken
	ec.ClientTLSInfo.CertFile = cfg.CertFile
	ec.ClientTLSInfo.KeyFile = cfg.KeyFile
	ec.ClientTLSInfo.TrustedCAFile = cfg.TrustedCAFile
	ec.ClientTLSInfo.ClientCertAuth = cfg.ClientCertAuth
	ec.PeerTLSInfo.CertFile = cfg.PeerCertFile
	ec.PeerTLSInfo.KeyFile = cfg.PeerKeyFile
	ec.PeerTLSInfo.TrustedCAFile = cfg.PeerTrustedCAFile
	ec.PeerTLSInfo.ClientCertAuth = cfg.PeerTrustedCAFile != ""

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd stopped while starting: %w", err)
	case <-time.After(startTimeout):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("etcd did not become ready within 2m (is a quorum of members up?)")
	}
	return &EmbeddedEtcd{etcd: e, cfg: cfg, closing: closing}, nil
}

// ClientURLs returns the URLs clients should use to reach this member.
func (e *EmbeddedEtcd) ClientURLs() []string {
	var out []string
	for _, u := range e.etcd.Clients {
		scheme := "http"
		if e.cfg.CertFile != "" {
			scheme = "https"
		}
		out = append(out, scheme+"://"+u.Addr().String())
	}
	return out
}

// InProcessClient is a client of this member that calls its gRPC services as functions:
// no loopback connection, no HTTP/2 framing and no protobuf encoding of requests and
// responses, which cost a sixth of `up`'s CPU in a rollout (docs/performance.md). Close it
// before the member.
func (e *EmbeddedEtcd) InProcessClient() *clientv3.Client { return v3client.New(e.etcd.Server) }

// Err reports a fatal error of the running member.
func (e *EmbeddedEtcd) Err() <-chan error { return e.etcd.Err() }

// Close stops the member, flushing its data to disk.
func (e *EmbeddedEtcd) Close() {
	e.closing.Store(true)
	e.etcd.Close()
}

// serveFailed is what etcd logs, at error level with a stack trace, for each of its listeners
// when Close stops them: on a clean stop it reports nothing wrong.
const serveFailed = "setting up serving from embedded etcd failed."

// quietOnCloseLogger builds etcd's usual logger (JSON to stderr at level), except that once
// closing is set it drops serveFailed, so that Ctrl-C does not end in error stack traces.
func quietOnCloseLogger(level string, closing *atomic.Bool) (func(*embed.Config) error, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("etcd log level: %w", err)
	}
	zc := logutil.DefaultZapLoggerConfig
	zc.Level = zap.NewAtomicLevelAt(lvl)
	lg, err := zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return quietOnClose{Core: c, closing: closing} }))
	if err != nil {
		return nil, fmt.Errorf("etcd logger: %w", err)
	}
	return embed.NewZapLoggerBuilder(lg), nil
}

// quietOnClose is a zap core that drops serveFailed once closing is set.
type quietOnClose struct {
	zapcore.Core
	closing *atomic.Bool
}

func (q quietOnClose) With(fields []zapcore.Field) zapcore.Core {
	return quietOnClose{Core: q.Core.With(fields), closing: q.closing}
}

func (q quietOnClose) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if ent.Message == serveFailed && q.closing.Load() {
		return ce
	}
	return q.Core.Check(ent, ce)
}

func parseURLs(ss []string) ([]url.URL, error) {
	out := make([]url.URL, 0, len(ss))
	for _, s := range ss {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, *u)
	}
	return out, nil
}
