package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/apiserver/pki"
	"github.com/miniplane/miniplane/apiserver/ui"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/profiling"
	"github.com/miniplane/miniplane/store"
)

// Options are what New needs besides configuration.
type Options struct {
	Config configs.APIServer
	Store  store.Store
	// Clock is the server's time: creation and deletion timestamps, what strategies stamp
	// (a pod's PodScheduled condition), `kubectl get` ages and how long an empty
	// Terminating namespace waits. nil means the real clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// Server is a running (or ready to run) API server.
type Server struct {
	cfg     configs.APIServer
	store   store.Store
	clock   clock.Clock
	log     *slog.Logger
	reg     *registry
	authn   *auth.TokenAuthenticator
	authz   auth.Chain
	metrics *metrics
	// inflight queues, then answers 429, beyond --max-requests-inflight and
	// --max-mutating-requests-inflight.
	inflight *inflightLimiter
	handler  http.Handler
	nsFinal  *namespaceFinalizer
	openapi  *openAPIDocs
	fields   *fieldManagers
	// services hands out Services' cluster IPs and node ports.
	services *serviceAllocator
	quota    *quotaTracker
	// webhooks calls the admission webhooks; nil until Start.
	webhooks atomic.Pointer[admissionWebhooks]
	// policies enforces the admission policies; nil until Start.
	policies atomic.Pointer[admissionPolicies]
	budgets  *budgetTracker
	// podSecurity is the PodSecurity admission plugin.
	podSecurity *podSecurity
	crds        *crdController
	// equivalents knows which served resources are one resource in several versions (a
	// definition's), for the webhooks' matchPolicy Equivalent.
	equivalents runtime.EquivalentResourceRegistry
	// labels name each request's resource and verb in CPU profiles.
	labels *requestLabels
	// runCtx is the context Start was given, for what starts later (custom resources' caches).
	runCtx context.Context
	// ui is the browser view at /ui/; nil when it is off.
	ui *ui.Handler

	// rbac is the chain's RBAC authorizer; aggregator keeps aggregated ClusterRoles'
	// rules current.
	rbac       *rbacAuthorizer
	aggregator *roleAggregator
	// apiServices keeps APIServices' Available condition.
	apiServices *apiServiceAvailability
	// policyStatus keeps ValidatingAdmissionPolicies' type checking.
	policyStatus *policyTypeChecking
	// saIssuer signs ServiceAccount tokens, saVerifier checks them (see
	// serviceaccount_token.go).
	saIssuer   *auth.TokenIssuer
	saVerifier *auth.TokenVerifier
	audit      *auditLog
	// router serves every path; handler is router behind the secure listener's filters.
	router http.Handler

	mu      sync.Mutex
	servers []*http.Server
	addr    net.Addr
	// insecureAddr is the plain-HTTP listener's address, when there is one.
	insecureAddr net.Addr
	caPEM        []byte
	ready        bool
	done         chan struct{}
	errs         chan error
}

// New builds a server from its configuration; Start runs it.
func New(opts Options) (*Server, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Store == nil {
		return nil, errors.New("apiserver: a store is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	authn, err := auth.LoadTokenFile(opts.Config.TokenFile)
	if err != nil {
		return nil, err
	}
	cidr, err := opts.Config.ServiceCIDR()
	if err != nil {
		return nil, err
	}
	firstPort, lastPort, err := opts.Config.NodePortRange()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      opts.Config,
		store:    opts.Store,
		clock:    opts.Clock,
		log:      opts.Logger.With("component", "apiserver"),
		authn:    authn,
		services: newServiceAllocator(opts.Store, opts.Config.EtcdPrefix, cidr, firstPort, lastPort),
		done:     make(chan struct{}),
		errs:     make(chan error, 4),
		labels:   newRequestLabels(),
	}
	s.rbac = &rbacAuthorizer{newPolicy: s.buildPolicy}
	s.authz = s.newAuthorizer()
	s.aggregator = newRoleAggregator(s)
	s.apiServices = newAPIServiceAvailability(s)
	s.policyStatus = newPolicyTypeChecking(s)
	if err := s.loadServiceAccountKey(); err != nil {
		return nil, err
	}
	if s.audit, err = newAuditLog(opts.Config.AuditLogPath, opts.Config.AuditLevel, s.clock); err != nil {
		return nil, err
	}
	s.quota = newQuotaTracker(s)
	s.budgets = newBudgetTracker(s)
	if s.podSecurity, err = newPodSecurity(s); err != nil {
		return nil, err
	}
	if s.reg, err = newBuiltinRegistry(builtinDeps{eventTTL: opts.Config.EventTTL, services: s.services, quota: s.quota}); err != nil {
		return nil, err
	}
	s.equivalents = runtime.NewEquivalentResourceRegistry()
	if s.crds, err = newCRDController(s); err != nil {
		return nil, err
	}
	for _, r := range s.reg.resources() {
		s.newCache(r)
	}
	s.metrics = newMetrics(s.reg)
	for _, r := range s.reg.resources() {
		r.cache.readWait = s.metrics.cacheReadWait.WithLabelValues(r.group, r.name)
	}
	s.inflight = newInflightLimiter(s.cfg.MaxRequestsInflight, s.cfg.MaxMutatingRequestsInflight, s.cfg.InflightQueueWait, func(st *requestState) bool {
		return st.user != nil && st.user.InGroup(s.cfg.AdminGroups...)
	})
	s.metrics.registry.MustRegister(s.inflight.collectors()...)
	s.nsFinal = newNamespaceFinalizer(s)
	s.openapi = newOpenAPIDocs(s.reg)
	s.fields = newFieldManagers(s.reg, s.openapi)
	s.handler = s.routes()
	if opts.Config.UI.Enabled {
		// The view calls the API through the whole handler chain above, as its users.
		if s.ui, err = ui.New(ui.Options{Config: opts.Config.UI, API: s.handler, Clock: opts.Clock, Logger: opts.Logger}); err != nil {
			return nil, err
		}
		s.handler = s.ui.Mount(s.handler)
	}
	return s, nil
}

// newCache gives r its watch cache, wired to what follows every change.
func (s *Server) newCache(r *resource) {
	// The watch cache paces its waits on etcd in real time even when the server's clock
	// is a test's fake one: a fake clock that is not stepped must not stall consistent
	// reads (see cacher.clock).
	r.cache = newCacher(r, s.storeFor(r), s.cfg.EtcdPrefix, s.cfg.WatchCacheEvents, clock.RealClock{}, s.log)
	isQuota, isCRD := r.groupResource() == quotasResource, r.groupResource() == crdsResource
	// RBAC decides from these four kinds; aggregated ClusterRoles follow the others.
	isRBAC, isClusterRole := isRBACResource(r.groupResource()), r.groupResource() == clusterRolesResource
	// An APIService's availability follows its Service and the Service's EndpointSlices.
	gr := r.groupResource()
	availabilityInput := gr == apiServicesResource || gr == servicesResource || gr == endpointSlicesResource
	isPolicy := gr == validatingPoliciesResource
	r.cache.onEvent = func(key, namespace string) {
		// Every change may change what a quota or a disruption budget of its namespace counts.
		if isQuota {
			s.quota.quotaChanged(key)
		}
		if isCRD {
			s.crds.changed(crdsResource.String())
		}
		if isRBAC {
			s.rbac.changed()
		}
		if isClusterRole {
			s.aggregator.trigger()
		}
		if availabilityInput {
			s.apiServices.trigger()
		}
		if isPolicy {
			s.policyStatus.trigger()
		}
		s.quota.changed(namespace)
		s.budgets.changed(namespace)
	}
	if s.metrics != nil {
		r.cache.readWait = s.metrics.cacheReadWait.WithLabelValues(r.group, r.name)
	}
}

// expireWatchHistories lets every watch cache forget the changes its window has passed
// (cacher.expireHistory), a fifth of the window at a time, until ctx ends. One loop for all
// the caches, on the real clock, as their waits on etcd are.
func (s *Server) expireWatchHistories(ctx context.Context) {
	tick := time.NewTicker(historyWindow / 5)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, r := range s.reg.resources() {
			if r.cache != nil {
				r.cache.expireHistory()
			}
		}
	}
}

// replaceResource serves r from now on: it starts r's watch cache, waits until it holds
// what etcd holds, and registers r. When the same group/version/resource is already served
// (a definition whose schema changed), the new entry's cache is filled first and the entries
// are swapped in one step, so requests meanwhile are served by the old one, never answered
// 404. The old entry's watches end (clients watch again).
func (s *Server) replaceResource(ctx context.Context, r *resource) error {
	if err := s.startCache(ctx, r); err != nil {
		return err
	}
	old, err := s.reg.replace(r)
	if err != nil {
		r.stop()
		return err
	}
	if old != nil {
		old.cache.terminateAll()
		if old.stop != nil {
			old.stop()
		}
	}
	return nil
}

// startCache starts r's watch cache and waits until it holds what etcd has.
func (s *Server) startCache(ctx context.Context, r *resource) error {
	s.mu.Lock()
	runCtx := s.runCtx
	s.mu.Unlock()
	if runCtx == nil {
		return errors.New("apiserver: the server has not started")
	}
	s.newCache(r)
	cacheCtx, stop := context.WithCancel(runCtx)
	r.stop = stop
	go r.cache.run(cacheCtx)
	if r.custom != nil && r.custom.conv != nil {
		// This version's cache converts what is not stored in its version (all of it for
		// a version other than the storage version), and cannot start while the conversion
		// webhook fails; the version is served meanwhile, its reads from etcd failing as
		// the webhook does.
		if err := r.cache.waitForRV(ctx, 1, convertedCacheWait); err != nil {
			s.log.Warn("custom resources served before their watch cache could convert them", "resource", r.gvr().String(), "err", err)
		}
		return nil
	}
	if err := r.cache.waitForRV(ctx, 1, time.Minute); err != nil {
		stop()
		return fmt.Errorf("watch cache for %s did not start: %w", r.name, err)
	}
	return nil
}

// convertedCacheWait bounds how long serving a converted version waits for its cache.
const convertedCacheWait = 5 * time.Second

// ensureCache starts r's watch cache if it waits for its first use (resource.lazyCache),
// and returns once the cache holds what etcd had when it started.
func (s *Server) ensureCache(ctx context.Context, r *resource) error {
	if !r.lazyCache {
		return nil
	}
	s.mu.Lock()
	runCtx := s.runCtx
	s.mu.Unlock()
	if runCtx == nil {
		return errors.New("apiserver: the server has not started")
	}
	r.lazyCacheStart.Do(func() { go r.cache.run(runCtx) })
	if err := r.cache.waitForRV(ctx, 1, time.Minute); err != nil {
		return fmt.Errorf("watch cache for %s did not start: %w", r.name, err)
	}
	return nil
}

// NodeCount is how many Nodes the server's watch cache holds. It is cheap enough to read
// several times a second (the memory budget of `up` follows it).
func (s *Server) NodeCount() int {
	res := s.reg.lookupGroupResource(nodesResource)
	if res == nil || res.cache == nil {
		return 0
	}
	return res.cache.len()
}

// UI returns the browser view, or nil when it is off.
func (s *Server) UI() *ui.Handler { return s.ui }

// Handler returns the HTTP handler, for tests that serve it themselves.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	r := mux.NewRouter()
	r.HandleFunc("/healthz", s.serveHealth).Methods(http.MethodGet)
	r.HandleFunc("/livez", s.serveHealth).Methods(http.MethodGet)
	r.HandleFunc("/readyz", s.serveReady).Methods(http.MethodGet)
	r.HandleFunc("/version", serveVersion).Methods(http.MethodGet)
	r.Handle("/metrics", s.metrics.handler()).Methods(http.MethodGet)
	if s.cfg.Profiling {
		// Administrators only: the authorizer denies /debug/ to everyone else.
		r.PathPrefix(profiling.Path).Handler(profiling.Handler())
	}
	r.HandleFunc("/api", s.serveCoreVersions).Methods(http.MethodGet)
	r.HandleFunc("/api/", s.serveCoreVersions).Methods(http.MethodGet)
	r.HandleFunc("/apis", s.serveGroups).Methods(http.MethodGet)
	r.HandleFunc("/apis/", s.serveGroups).Methods(http.MethodGet)
	r.HandleFunc("/openapi/v2", s.serveOpenAPIV2).Methods(http.MethodGet)
	r.HandleFunc("/openapi/v3", s.serveOpenAPIRoot).Methods(http.MethodGet)
	r.HandleFunc("/openapi/v3/{path:.+}", s.serveOpenAPIGroupVersion).Methods(http.MethodGet)
	r.HandleFunc(oidcDiscoveryPath, s.serveOIDCDiscovery).Methods(http.MethodGet)
	r.HandleFunc(jwksPath, s.serveJWKS).Methods(http.MethodGet)
	// Each discovery path also with a trailing slash, as kube-apiserver answers both.
	for _, suffix := range []string{"", "/"} {
		r.HandleFunc("/api/{version}"+suffix, s.serveResourceList).Methods(http.MethodGet)
		r.HandleFunc("/apis/{group}"+suffix, s.serveGroup).Methods(http.MethodGet)
		r.HandleFunc("/apis/{group}/{version}"+suffix, s.serveResourceList).Methods(http.MethodGet)
	}
	for _, api := range reviewAPIs {
		r.HandleFunc(api.path(), s.serveReview(api)).Methods(http.MethodPost)
	}
	r.PathPrefix("/api/").HandlerFunc(s.serveResource)
	r.PathPrefix("/apis/").HandlerFunc(s.serveResource)
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeStatus(w, &metav1.Status{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("the server could not find the requested resource (%s %s)", req.Method, req.URL.Path)})
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeStatus(w, &metav1.Status{Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
			Message: fmt.Sprintf("%s is not supported on %s", req.Method, req.URL.Path)})
	})
	s.router = r
	return s.serving(false)
}

// serving is the router behind the filters every request passes, outermost first:
// recovery (which makes the request's state), audit, metrics, authentication (the
// plain-HTTP listener marks its requests as an administrator's first), the in-flight
// limit.
func (s *Server) serving(insecure bool) http.Handler {
	h := s.withAuthentication(s.inflight.wrap(s.router))
	if insecure {
		h = s.withInsecureAdmin(h)
	}
	return s.withRecovery(s.audit.wrap(s.metrics.instrument(h)))
}

// Start starts the watch caches, creates the bootstrap namespaces and begins serving
// HTTPS (and the opt-in plain-HTTP listener). It returns once requests can be served;
// the server stops when ctx ends, and Wait reports how.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	var resources []*resource
	for _, r := range s.reg.resources() {
		if !r.lazyCache {
			resources = append(resources, r)
		}
	}
	for _, r := range resources {
		go r.cache.run(ctx)
	}
	for _, r := range resources {
		if err := r.cache.waitForRV(ctx, 1, time.Minute); err != nil {
			return fmt.Errorf("watch cache for %s did not start: %w", r.name, err)
		}
	}
	if err := s.startAdmission(ctx); err != nil {
		return err
	}
	if err := s.bootstrap(ctx); err != nil {
		return err
	}
	if err := s.reconcileBootstrapPolicy(ctx); err != nil {
		return err
	}
	go s.expireWatchHistories(ctx)
	go s.aggregator.run(ctx)
	go s.apiServices.run(ctx)
	go s.policyStatus.run(ctx)
	// Custom resources of existing definitions are served from the first request on.
	if err := s.crds.reconcile(ctx); err != nil {
		s.log.Warn("custom resource definitions not all served", "err", err)
	}
	go s.nsFinal.run(ctx)
	go s.quota.run(ctx)
	go s.budgets.run(ctx)
	go s.crds.run(ctx)

	tlsConfig, err := s.tlsConfig()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	secure := s.newHTTPServer()
	secure.TLSConfig = tlsConfig
	s.mu.Lock()
	s.addr = ln.Addr()
	s.servers = append(s.servers, secure)
	s.mu.Unlock()
	go func() { s.errs <- ignoreClosed(secure.Serve(tls.NewListener(ln, tlsConfig))) }()

	if s.cfg.InsecureListen != "" {
		iln, err := net.Listen("tcp", s.cfg.InsecureListen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", s.cfg.InsecureListen, err)
		}
		insecure := s.newHTTPServer()
		insecure.Handler = s.serving(true)
		s.mu.Lock()
		s.servers = append(s.servers, insecure)
		s.insecureAddr = iln.Addr()
		s.mu.Unlock()
		s.log.Warn("serving plain HTTP without authentication", "address", iln.Addr().String())
		go func() { s.errs <- ignoreClosed(insecure.Serve(iln)) }()
	}
	// The kubernetes Service names the port this server listens on, known only now.
	if err := s.bootstrapObjects(ctx); err != nil {
		return err
	}
	go s.runKubernetesEndpoints(ctx)
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.shutdown()
	}()
	return nil
}

func (s *Server) newHTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// kube-apiserver allows 1000 streams per HTTP/2 connection: one client-go
		// transport carries every informer's watch on one connection.
		HTTP2:    &http.HTTP2Config{MaxConcurrentStreams: 1000},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) shutdown() {
	s.mu.Lock()
	servers := s.servers
	s.ready = false
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		// Watches never finish on their own; close what Shutdown could not drain.
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}
	s.audit.stop()
	close(s.done)
}

// Wait blocks until the server has stopped and returns the first serving error.
func (s *Server) Wait() error {
	<-s.done
	select {
	case err := <-s.errs:
		return err
	default:
		return nil
	}
}

// Addr is the HTTPS listener's address (useful with port 0).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// InsecureAddr is the plain-HTTP listener's address (useful with port 0), or nil when the
// server has none.
func (s *Server) InsecureAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.insecureAddr
}

// CAPEM returns the CA certificate clients should trust.
func (s *Server) CAPEM() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caPEM
}

// tlsConfig loads the configured serving certificate, or loads or creates the CA and a
// serving certificate in the cert dir.
func (s *Server) tlsConfig() (*tls.Config, error) {
	if s.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSPrivateKeyFile)
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
		caPEM, _ := os.ReadFile(filepath.Join(s.cfg.CertDir, "ca.crt"))
		s.mu.Lock()
		s.caPEM = caPEM
		s.mu.Unlock()
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
	}
	ca, err := pki.EnsureCA(s.cfg.CertDir, "miniplane-ca")
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	hosts := append(pki.DefaultServingHosts(), "kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if host, _, err := net.SplitHostPort(s.cfg.Listen); err == nil && host != "" && !net.ParseIP(host).IsUnspecified() {
		hosts = append(hosts, host)
	}
	hosts = append(hosts, s.cfg.TLSSANs...)
	certPath, keyPath, err := ca.EnsureLeaf(s.cfg.CertDir, pki.LeafRequest{
		Name: "apiserver", CommonName: "miniplane-apiserver", Hosts: hosts, Usage: pki.ServerAuth,
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.caPEM = ca.CertPEM
	s.mu.Unlock()
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if ready {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if _, err := s.store.CurrentRevision(ctx); err != nil {
			http.Error(w, "etcd: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		s.serveHealth(w, r)
		return
	}
	http.Error(w, "not ready", http.StatusServiceUnavailable)
}
