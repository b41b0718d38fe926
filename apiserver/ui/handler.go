package ui

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/configs"
)

// Paths under which the view lives.
const (
	// Prefix is where the view is mounted.
	Prefix = "/ui/"
	// SignInPath takes a sign-in link (GET ?link=…) or a pasted bearer token (POST).
	SignInPath = Prefix + "signin"
	// proxyPrefix carries the page's Kubernetes API calls: /ui/proxy/api/v1/nodes is
	// /api/v1/nodes as the signed-in user.
	proxyPrefix  = Prefix + "proxy"
	sessionPath  = Prefix + "session"
	signOutPath  = Prefix + "signout"
	staticPrefix = Prefix + "static/"
)

// CookieName names the session cookie. The __Host- prefix makes browsers accept it only
// with Secure, Path=/ and no Domain, so no other host or plain-HTTP page can set or shadow it.
const CookieName = "__Host-miniplane-session"

// CSRFHeader must carry the session's CSRF token on every proxied call. A page of another
// origin can make a browser send requests with the cookie (were it not SameSite=Strict), but
// it cannot read the token nor set this header without a CORS preflight the server refuses.
const CSRFHeader = "X-CSRF-Token"

//go:embed assets
var assets embed.FS

// Options are what New needs.
type Options struct {
	Config configs.UI
	// API is the API server's ordinary handler (authentication, authorization, limits and
	// all): proxied calls and sign-in checks go through it with the user's bearer token.
	API http.Handler
	// Clock times sessions and sign-in links; nil means the real clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// Handler serves the view under Prefix.
type Handler struct {
	api      http.Handler
	log      *slog.Logger
	sessions *sessions
	static   http.Handler
	index    []byte
}

// New returns the view's handler.
func New(opts Options) (*Handler, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.API == nil {
		return nil, errors.New("ui: the API handler is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	index, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		return nil, err
	}
	return &Handler{
		api:      opts.API,
		log:      opts.Logger.With("component", "ui"),
		sessions: newSessions(opts.Clock, opts.Config.SessionTTL, opts.Config.SignInLinkTTL),
		static:   http.StripPrefix(staticPrefix, http.FileServerFS(sub)),
		index:    index,
	}, nil
}

// Mount returns a handler that serves the view under Prefix and hands every other request
// to api untouched.
func (h *Handler) Mount(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, Prefix) {
			h.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// SignInLink returns a path with a fresh sign-in secret (Prefix + "signin?link=…") that
// signs a browser in once, as the user token authenticates as, within the configured TTL.
// `miniplane up` prints it with the server's URL in front.
func (h *Handler) SignInLink(token string) string {
	return SignInPath + "?link=" + url.QueryEscape(h.sessions.issueLink(token))
}

// ServeHTTP serves the view.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The cookie is Secure: over plain HTTP (the opt-in loopback listener) it would never
	// come back, and a credential must not travel in the clear.
	if r.TLS == nil {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the browser view is served on the HTTPS port only")
		return
	}
	securityHeaders(w.Header())
	p := r.URL.Path
	switch {
	case p == "/ui":
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
	case p == Prefix:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(h.index)
	case strings.HasPrefix(p, staticPrefix):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r)
			return
		}
		h.static.ServeHTTP(w, r)
	case p == SignInPath:
		h.serveSignIn(w, r)
	case p == sessionPath:
		h.serveSession(w, r)
	case p == signOutPath:
		h.serveSignOut(w, r)
	case p == proxyPrefix || strings.HasPrefix(p, proxyPrefix+"/"):
		h.serveProxy(w, r)
	default:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("the server could not find the requested resource (%s %s)", r.Method, p))
	}
}

// contentSecurityPolicy lets the page load only its own scripts and styles and talk only to
// its own origin; nothing is fetched from elsewhere and no other site may frame it.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// A sign-in link in the address bar must not leak through Referer to another site.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// sessionFrom returns the request's session and its secret.
func (h *Handler) sessionFrom(r *http.Request) (*session, string, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return nil, "", false
	}
	sess, ok := h.sessions.lookup(c.Value)
	return sess, c.Value, ok
}

func (h *Handler) setCookie(w http.ResponseWriter, secret string, ttl time.Duration) {
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: secret, Path: "/",
		MaxAge: int(ttl / time.Second), Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
}

func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// sameOrigin reports whether a browser says the request comes from the page's own origin.
// Browsers send Origin on every POST, PUT, PATCH and DELETE, and Sec-Fetch-Site on every
// request; a request with neither is not from a current browser's page and is refused.
// Origin "null" (a form posted under some referrer policies, or from a sandboxed frame)
// says nothing, so Sec-Fetch-Site decides then.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		return o == "https://"+r.Host
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin"
	}
	return false
}

func safeMethod(m string) bool { return m == http.MethodGet || m == http.MethodHead }

// writeStatus answers with a Kubernetes Status, as the API server does, so the page reads
// every error the same way.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, fmt.Sprintf("%s is not supported on %s", r.Method, r.URL.Path))
}
