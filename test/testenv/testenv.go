package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/apiserver"
	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/store"
)

// Identities the all-in-one creates tokens for.
const (
	AdminUser             = "admin"
	ViewerUser            = "viewer"
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
	// ViewerGroup is the read-only group of the default authorizer configuration.
	ViewerGroup = "miniplane:viewers"
)

// Config describes the control plane to start.
type Config struct {
	// DataDir holds etcd data, certificates, tokens.csv and kubeconfig. Required.
	DataDir string
	// Listen is the API server's address; default 127.0.0.1:0 (a free port).
	Listen string
	// APIServer overrides the API server's configuration; Listen, CertDir and TokenFile
	// are set from the fields above. Zero value: defaults.
	APIServer *configs.APIServer
	// UnsafeNoFsync makes etcd skip fsync: for tests only.
	UnsafeNoFsync bool
	// Logger receives every component's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Env is a running control plane.
type Env struct {
	// AdminConfig is a client configuration with the admin token.
	AdminConfig *rest.Config
	// Client is a clientset built from AdminConfig.
	Client kubernetes.Interface
	// KubeconfigPath is the admin kubeconfig written into the data dir.
	KubeconfigPath string
	// URL is the API server's https URL.
	URL string
	// CAPEM is the CA certificate clients trust.
	CAPEM []byte
	// DataDir is the data directory.
	DataDir string
	// APIServer is the running server.
	APIServer *apiserver.Server

	tokens map[string]string // user name → token
	cancel context.CancelFunc
	wg     sync.WaitGroup
	etcd   *store.EmbeddedEtcd
	client *clientv3.Client
	once   sync.Once
}

// Start starts the control plane and returns once the API server answers.
func Start(ctx context.Context, cfg Config) (env *Env, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("testenv: DataDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	env = &Env{DataDir: cfg.DataDir, cancel: cancel, KubeconfigPath: filepath.Join(cfg.DataDir, "kubeconfig")}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()

	tokenFile := filepath.Join(cfg.DataDir, "tokens.csv")
	if env.tokens, err = EnsureTokens(tokenFile, defaultIdentities()); err != nil {
		return nil, err
	}

	etcdCfg := configs.DefaultEtcd()
	etcdCfg.Name = "miniplane"
	etcdCfg.DataDir = filepath.Join(cfg.DataDir, "etcd")
	etcdCfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	etcdCfg.ListenPeerURLs = []string{"http://127.0.0.1:0"}
	etcdCfg.UnsafeNoFsync = cfg.UnsafeNoFsync
	if env.etcd, err = store.StartEmbeddedEtcd(etcdCfg, "error"); err != nil {
		return nil, err
	}
	if env.client, err = store.NewClient(ctx, store.ClientConfig{Endpoints: env.etcd.ClientURLs()}); err != nil {
		return nil, err
	}
	st := store.NewEtcdStore(env.client, store.NewProtobufCodec(clientscheme.Scheme), log)

	apiCfg := configs.DefaultAPIServer()
	if cfg.APIServer != nil {
		apiCfg = *cfg.APIServer
	}
	apiCfg.Listen = cfg.Listen
	apiCfg.CertDir = filepath.Join(cfg.DataDir, "pki")
	apiCfg.TokenFile = tokenFile
	env.wg.Add(1)
	go func() {
		defer env.wg.Done()
		st.RunCompactor(ctx, apiCfg.CompactionInterval)
	}()
	srv, err := apiserver.New(apiserver.Options{Config: apiCfg, Store: st, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	env.APIServer = srv
	env.wg.Add(1)
	go func() {
		defer env.wg.Done()
		if err := srv.Wait(); err != nil {
			log.Error("api server stopped", "err", err)
		}
	}()
	env.CAPEM = srv.CAPEM()
	env.URL = "https://" + clientAddress(srv.Addr())
	env.AdminConfig = env.ConfigFor(AdminUser)
	if env.Client, err = kubernetes.NewForConfig(env.AdminConfig); err != nil {
		return nil, err
	}
	if err := pki.WriteKubeconfig(env.KubeconfigPath, env.URL, env.CAPEM, AdminUser, env.tokens[AdminUser]); err != nil {
		return nil, err
	}
	return env, nil
}

// clientAddress turns a listen address into one a client can dial: a wildcard host
// becomes loopback.
func clientAddress(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// ConfigFor returns a client configuration that authenticates as user (one of the
// identities in the token file). Client-side rate limits are lifted: in-process
// components must not be throttled by client-go's defaults of 5 QPS.
func (e *Env) ConfigFor(user string) *rest.Config {
	return &rest.Config{
		Host:            e.URL,
		BearerToken:     e.tokens[user],
		TLSClientConfig: rest.TLSClientConfig{CAData: e.CAPEM},
		QPS:             5000,
		Burst:           10000,
		UserAgent:       "miniplane/" + user,
	}
}

// Token returns the bearer token of user.
func (e *Env) Token(user string) string { return e.tokens[user] }

// Stop stops every component and etcd, and waits for them.
func (e *Env) Stop() {
	e.once.Do(func() {
		e.cancel()
		e.wg.Wait()
		if e.client != nil {
			_ = e.client.Close()
		}
		if e.etcd != nil {
			e.etcd.Close()
		}
	})
}

// defaultIdentities are the users the all-in-one needs.
func defaultIdentities() []auth.User {
	return []auth.User{
		{Name: AdminUser, UID: "admin", Groups: []string{auth.AdminGroup}},
		{Name: ViewerUser, UID: "viewer", Groups: []string{ViewerGroup}},
		{Name: ControllerManagerUser, UID: "kube-controller-manager", Groups: []string{auth.AdminGroup}},
		{Name: SchedulerUser, UID: "kube-scheduler", Groups: []string{auth.AdminGroup}},
	}
}

// EnsureTokens makes sure the token file holds a token for each user, keeping tokens that
// already exist (so kubeconfigs written earlier stay valid), and returns user → token.
func EnsureTokens(path string, users []auth.User) (map[string]string, error) {
	var entries []auth.TokenEntry
	if f, err := os.Open(path); err == nil {
		entries, err = auth.ParseTokens(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	tokens := map[string]string{}
	for _, e := range entries {
		tokens[e.User.Name] = e.Token
	}
	changed := false
	for _, u := range users {
		if _, ok := tokens[u.Name]; ok {
			continue
		}
		t := auth.NewToken()
		entries = append(entries, auth.TokenEntry{Token: t, User: u})
		tokens[u.Name] = t
		changed = true
	}
	if changed {
		if err := auth.WriteTokenFile(path, entries); err != nil {
			return nil, err
		}
	}
	return tokens, nil
}

// waitTimeout is how long helpers wait for components to become ready.
const waitTimeout = 2 * time.Minute
