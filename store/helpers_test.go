package store_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/store"
)

// startEtcd runs an embedded etcd member for one test: data in t.TempDir(), free loopback
// ports, no fsync, and etcd's own logging off (it reports a normal shutdown as errors).
func startEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := configs.DefaultEtcd()
	cfg.Name = "test"
	cfg.DataDir = filepath.Join(t.TempDir(), "etcd")
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.ListenPeerURLs = []string{"http://127.0.0.1:0"}
	cfg.UnsafeNoFsync = true
	member, err := store.StartEmbeddedEtcd(cfg, "fatal")
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(member.Close)
	client, err := store.NewClient(context.Background(), store.ClientConfig{Endpoints: member.ClientURLs()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// quietLogger discards the store's own logs.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newEtcdBackend is the etcd implementation of the contract's backend.
func newEtcdBackend(t *testing.T) backend {
	client := startEtcd(t)
	st := store.NewEtcdStore(client, store.NewProtobufCodec(clientscheme.Scheme), quietLogger())
	return backend{
		Store:   st,
		compact: st.Compact,
		expire: func(ctx context.Context, key string) error {
			resp, err := client.Get(ctx, key)
			if err != nil {
				return err
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
				return errors.New("key has no lease")
			}
			_, err = client.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
			return err
		},
		ttlOf: func(ctx context.Context, key string) (time.Duration, error) {
			resp, err := client.Get(ctx, key)
			if err != nil {
				return 0, err
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
				return 0, nil
			}
			ttl, err := client.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
			if err != nil {
				return 0, err
			}
			return time.Duration(ttl.TTL) * time.Second, nil
		},
	}
}

func TestEtcdStoreContract(t *testing.T) {
	runContract(t, newEtcdBackend)
}
