// Package ui serves the browser view of rollouts at /ui/ on the API server's own port
// (docs/ui.md): a page, embedded in the binary, that draws every node's daemon pod of a
// DaemonSet from the API's own list and watch streams.
//
// The page is a client like kubectl. It holds no credential: signing in (with a bearer
// token, or with a short-lived single-use link `miniplane up` prints) makes a server-side
// session, named by an HttpOnly, Secure, SameSite=Strict cookie, and the page's API calls
// under /ui/proxy/ are handed to the API server's ordinary handler with the session's bearer
// token in place of the cookie. So every call is authenticated and authorized as that user,
// exactly as the same call from kubectl would be. Every proxied call must carry the
// session's CSRF token in a header and, when it changes something, come from the page's own
// origin.
package ui
