package store

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ClientConfig says how to reach an etcd cluster.
type ClientConfig struct {
	Endpoints []string
	// CAFile, CertFile and KeyFile secure the connection; all empty means plain TCP.
	CAFile, CertFile, KeyFile string
}

// NewClient connects to etcd and checks that the cluster answers.
func NewClient(ctx context.Context, cfg ClientConfig) (*clientv3.Client, error) {
	var tlsConfig *tls.Config
	if cfg.CAFile != "" || cfg.CertFile != "" {
		info := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}
		var err error
		if tlsConfig, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: 10 * time.Second,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
		// Large lists (thousands of pods) exceed gRPC's 4 MiB default.
		MaxCallRecvMsgSize: 1 << 30,
		// Keepalives detect a dead member so the client fails over in a cluster.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.Get(checkCtx, "/", clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
		client.Close()
		return nil, fmt.Errorf("etcd %v does not answer: %w", cfg.Endpoints, err)
	}
	slog.Debug("connected to etcd", "endpoints", cfg.Endpoints)
	return client, nil
}
