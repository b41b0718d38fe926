package ui

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// maxLinks bounds the sign-in links waiting to be used. Only the process that embeds the
// server issues them (up prints one at start), so a handful is plenty; the oldest goes first.
const maxLinks = 64

// session is one signed-in browser.
type session struct {
	// token is the user's bearer token: proxied calls carry it, so the API server
	// authenticates and authorizes them as it would the same call from kubectl.
	token string
	// user and groups are what the API server said the token is (a SelfSubjectReview),
	// shown on the page.
	user   string
	groups []string
	// csrf must come back in the X-CSRF-Token header of every proxied call.
	csrf    string
	expires time.Time
}

// link is a sign-in link not yet used.
type link struct {
	token   string
	expires time.Time
	issued  time.Time
}

// sessions keeps sessions and sign-in links in memory: a restart of the API server signs
// everyone out, which for a development control plane is the right trade for keeping no
// credential on disk. Keys are SHA-256 digests of the secrets, so a map lookup's timing
// says nothing about a secret's bytes.
type sessions struct {
	clock      clock.Clock
	sessionTTL time.Duration
	linkTTL    time.Duration

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*session
	links    map[[sha256.Size]byte]*link
}

func newSessions(c clock.Clock, sessionTTL, linkTTL time.Duration) *sessions {
	return &sessions{
		clock: c, sessionTTL: sessionTTL, linkTTL: linkTTL,
		sessions: map[[sha256.Size]byte]*session{},
		links:    map[[sha256.Size]byte]*link{},
	}
}

// randomSecret returns 256 random bits, URL-safe.
func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func digest(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

// issueLink returns a new sign-in secret that, once, signs in with token.
func (s *sessions) issueLink(token string) string {
	secret := randomSecret()
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	if len(s.links) >= maxLinks {
		var oldest [sha256.Size]byte
		var oldestAt time.Time
		for k, l := range s.links {
			if oldestAt.IsZero() || l.issued.Before(oldestAt) {
				oldest, oldestAt = k, l.issued
			}
		}
		delete(s.links, oldest)
	}
	s.links[digest(secret)] = &link{token: token, issued: now, expires: now.Add(s.linkTTL)}
	return secret
}

// redeemLink returns the bearer token of a valid link and forgets the link: it works once.
func (s *sessions) redeemLink(secret string) (string, bool) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := digest(secret)
	l, ok := s.links[k]
	if !ok {
		return "", false
	}
	delete(s.links, k)
	if !now.Before(l.expires) {
		return "", false
	}
	return l.token, true
}

// create starts a session and returns its secret (the cookie's value).
func (s *sessions) create(token, user string, groups []string) (string, *session) {
	secret := randomSecret()
	now := s.clock.Now()
	sess := &session{token: token, user: user, groups: groups, csrf: randomSecret(), expires: now.Add(s.sessionTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	s.sessions[digest(secret)] = sess
	return secret, sess
}

// lookup returns the live session named by secret.
func (s *sessions) lookup(secret string) (*session, bool) {
	if secret == "" {
		return nil, false
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := digest(secret)
	sess, ok := s.sessions[k]
	if !ok {
		return nil, false
	}
	if !now.Before(sess.expires) {
		delete(s.sessions, k)
		return nil, false
	}
	return sess, true
}

// end forgets the session named by secret.
func (s *sessions) end(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, digest(secret))
}

// pruneLocked drops what has expired; it runs on every insertion, so the maps never hold
// more than what was created within one TTL.
func (s *sessions) pruneLocked(now time.Time) {
	for k, sess := range s.sessions {
		if !now.Before(sess.expires) {
			delete(s.sessions, k)
		}
	}
	for k, l := range s.links {
		if !now.Before(l.expires) {
			delete(s.links, k)
		}
	}
}
