package controlplane

import (
	"context"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/store"
)

// Storage is the API server's connection to etcd: the cluster cfg.EtcdServers names, or an
// embedded member that keeps its data in cfg.EmbeddedEtcdDir.
type Storage struct {
	// Store is what the API server reads and writes through.
	Store *store.EtcdStore
	// Endpoints are etcd's client URLs.
	Endpoints []string

	client *clientv3.Client
	member *store.EmbeddedEtcd
}

// StorageOptions are the settings of an embedded member that the API server's configuration
// does not hold.
type StorageOptions struct {
	// EtcdLogLevel is the embedded member's zap level; "" means configs.DefaultLogging's
	// EtcdLevel.
	EtcdLogLevel string
	// UnsafeNoFsync makes the embedded member skip fsync: for tests only.
	UnsafeNoFsync bool
	// Logger receives the store's logs; nil means slog.Default().
	Logger *slog.Logger
}

// OpenStorage connects to etcd as cfg says, starting an embedded member when it names no
// servers. Close releases both.
func OpenStorage(ctx context.Context, cfg configs.APIServer, opts StorageOptions) (s *Storage, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.EtcdLogLevel == "" {
		opts.EtcdLogLevel = configs.DefaultLogging().EtcdLevel()
	}
	s = &Storage{Endpoints: cfg.EtcdServers}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if len(s.Endpoints) == 0 {
		member := configs.DefaultEtcd()
		member.Name = "miniplane"
		member.DataDir = cfg.EmbeddedEtcdDir
		// Loopback on free ports: the member serves only this process.
		member.ListenClientURLs = []string{"http://127.0.0.1:0"}
		member.ListenPeerURLs = []string{"http://127.0.0.1:0"}
		member.UnsafeNoFsync = opts.UnsafeNoFsync
		member.SnapshotCatchUpEntries = configs.EmbeddedSnapshotCatchUpEntries
		if s.member, err = store.StartEmbeddedEtcd(member, opts.EtcdLogLevel); err != nil {
			return nil, err
		}
		s.Endpoints = s.member.ClientURLs()
		log.Info("embedded etcd started", "dataDir", member.DataDir)
	}
	if s.member != nil {
		s.client = s.member.InProcessClient()
	} else if s.client, err = store.NewClient(ctx, store.ClientConfig{
		Endpoints: s.Endpoints, CAFile: cfg.EtcdCAFile, CertFile: cfg.EtcdCertFile, KeyFile: cfg.EtcdKeyFile,
	}); err != nil {
		return nil, err
	}
	s.Store = store.NewEtcdStore(s.client, store.NewProtobufCodec(apiserver.Scheme), log)
	return s, nil
}

// Close disconnects from etcd and stops the embedded member, if any.
func (s *Storage) Close() {
	if s.client != nil {
		_ = s.client.Close()
	}
	if s.member != nil {
		s.member.Close()
	}
}

// Err reports a failure of the embedded member; it never fires for an external cluster.
func (s *Storage) Err() <-chan error {
	if s.member == nil {
		return nil
	}
	return s.member.Err()
}
