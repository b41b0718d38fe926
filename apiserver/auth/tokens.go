package auth

import (
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// User is an authenticated identity.
type User struct {
	Name   string
	UID    string
	Groups []string
	// Extra is what else the authenticator knows (a ServiceAccount token's pod), keyed as
	// Kubernetes keys user extras.
	Extra map[string][]string
}

// InGroup reports whether u belongs to any of groups.
func (u *User) InGroup(groups ...string) bool {
	for _, g := range u.Groups {
		for _, want := range groups {
			if g == want {
				return true
			}
		}
	}
	return false
}

// Well-known identities.
const (
	// NodesGroup is the group of every kubelet identity.
	NodesGroup = "system:nodes"
	// NodeUserPrefix starts a single node's user name: system:node:<nodeName>.
	NodeUserPrefix = "system:node:"
	// FleetUserPrefix starts a fleet's user name: system:node-fleet:<prefix>; it may act as
	// every node named <prefix>-<n>.
	FleetUserPrefix = "system:node-fleet:"
	// AdminGroup is kube-apiserver's superuser group.
	AdminGroup = "system:masters"
)

// TokenEntry is one line of a token file.
type TokenEntry struct {
	Token string
	User  User
}

// TokenAuthenticator maps bearer tokens to users.
type TokenAuthenticator struct {
	tokens map[string]*User
}

// LoadTokenFile reads a kube-apiserver static token file: CSV lines
// `token,user,uid[,"group1,group2,..."]`; blank lines and lines starting with # are skipped.
func LoadTokenFile(path string) (*TokenAuthenticator, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	entries, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return NewTokenAuthenticator(entries), nil
}

// NewTokenAuthenticator returns an authenticator for entries.
func NewTokenAuthenticator(entries []TokenEntry) *TokenAuthenticator {
	a := &TokenAuthenticator{tokens: map[string]*User{}}
	for _, e := range entries {
		u := e.User
		a.tokens[e.Token] = &u
	}
	return a
}

// ParseTokens parses token-file content.
func ParseTokens(r io.Reader) ([]TokenEntry, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	var out []TokenEntry
	seen := map[string]bool{}
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(rec) < 3 {
			return nil, fmt.Errorf("line %d: want token,user,uid[,groups]", line)
		}
		if rec[0] == "" || rec[1] == "" {
			return nil, fmt.Errorf("line %d: empty token or user", line)
		}
		if seen[rec[0]] {
			return nil, fmt.Errorf("line %d: duplicate token", line)
		}
		seen[rec[0]] = true
		e := TokenEntry{Token: rec[0], User: User{Name: rec[1], UID: rec[2]}}
		if len(rec) > 3 && rec[3] != "" {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					e.User.Groups = append(e.User.Groups, g)
				}
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// WriteTokenFile writes entries in the token-file format (0600: it holds credentials).
func WriteTokenFile(path string, entries []TokenEntry) error {
	var b strings.Builder
	w := csv.NewWriter(&b)
	for _, e := range entries {
		if err := w.Write([]string{e.Token, e.User.Name, e.User.UID, strings.Join(e.User.Groups, ",")}); err != nil {
			return err
		}
	}
	w.Flush()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// NewToken returns a random 256-bit token in hex.
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b)
}

// Authenticate returns the user for an Authorization header value, or nil. The header
// must be "Bearer <token>".
func (a *TokenAuthenticator) Authenticate(header string) *User {
	token, ok := BearerToken(header)
	if !ok {
		return nil
	}
	return a.Lookup(token)
}

// Lookup returns the user of a static token, or nil. The user is shared: callers copy
// it before changing it.
func (a *TokenAuthenticator) Lookup(token string) *User { return a.tokens[token] }

// BearerToken returns the token of an Authorization header value "Bearer <token>"; ok is
// false when the header carries none.
func BearerToken(header string) (token string, ok bool) {
	const prefix = "bearer "
	if len(header) <= len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", false
	}
	token = strings.TrimSpace(header[len(prefix):])
	return token, token != ""
}

// WithGroups returns a copy of u that also belongs to groups (those it is not in yet).
func (u *User) WithGroups(groups ...string) *User {
	out := *u
	out.Groups = append([]string(nil), u.Groups...)
	for _, g := range groups {
		if !out.InGroup(g) {
			out.Groups = append(out.Groups, g)
		}
	}
	return &out
}
