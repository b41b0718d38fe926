// Package credentials makes and keeps the identities of a miniplane control plane: who the
// components are (user names, UIDs, groups), their bearer tokens in a kube-apiserver token
// file, and the kubeconfigs that carry them. `miniplane up`, `miniplane certs` (and through
// it the docker compose stack) and the test harness all use it, so a user means the same
// thing wherever it was made.
package credentials

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
)

// User names of the control-plane identities.
const (
	AdminUser             = "admin"
	ViewerUser            = "viewer"
	ControllerManagerUser = auth.ControllerManagerUser
	SchedulerUser         = auth.SchedulerUser
	// ViewerGroup is the group the bootstrap policy binds to the ClusterRole
	// miniplane:viewer by default (configs.APIServer.ReadOnlyGroups).
	ViewerGroup = "miniplane:viewers"
)

// A Component is a control-plane identity and the short name its kubeconfig file takes.
type Component struct {
	// File names the identity's kubeconfig in a deployment: kubeconfigs/<File>.kubeconfig.
	File string
	User auth.User
}

// Components are the identities of every control plane, in the order a new token file
// lists them.
func Components() []Component {
	return []Component{
		{"admin", auth.User{Name: AdminUser, UID: "admin", Groups: []string{auth.AdminGroup}}},
		{"viewer", auth.User{Name: ViewerUser, UID: "viewer", Groups: []string{ViewerGroup}}},
		// The components are in no group: the bootstrap policy binds their roles to their
		// user names, as upstream's does.
		{"controller-manager", auth.User{Name: ControllerManagerUser, UID: "kube-controller-manager"}},
		{"scheduler", auth.User{Name: SchedulerUser, UID: "kube-scheduler"}},
	}
}

// ComponentUsers are the users of Components.
func ComponentUsers() []auth.User {
	var users []auth.User
	for _, c := range Components() {
		users = append(users, c.User)
	}
	return users
}

// NodeIdentity is the identity of a single stub kubelet: system:node:<name>, as a real
// kubelet's.
func NodeIdentity(name string) auth.User {
	return auth.User{Name: auth.NodeUserPrefix + name, UID: "node-" + name, Groups: []string{auth.NodesGroup}}
}

// FleetIdentity is the one credential a fleet of stub nodes shares: it may act as every node
// <prefix>-<n>.
func FleetIdentity(prefix string) auth.User {
	return auth.User{Name: auth.FleetUserPrefix + prefix, UID: "node-fleet-" + prefix, Groups: []string{auth.NodesGroup}}
}

// StubIdentity is the identity of the stub nodes cfg runs: a single node's, or its fleet's.
func StubIdentity(cfg configs.KubeletStub) auth.User {
	if cfg.NodeName != "" {
		return NodeIdentity(cfg.NodeName)
	}
	return FleetIdentity(cfg.NodePrefix)
}

// EnsureTokens makes sure the token file at path holds a token for each user, keeping
// tokens that already exist (so kubeconfigs written earlier stay valid) but giving each
// listed user the UID and groups it has now (a data dir made by an older miniplane had the
// components in system:masters), and returns user name → token.
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
	index := map[string]int{}
	for i, e := range entries {
		index[e.User.Name] = i
	}
	changed := false
	for _, u := range users {
		if i, ok := index[u.Name]; ok {
			if e := &entries[i]; e.User.UID != u.UID || !slices.Equal(e.User.Groups, u.Groups) {
				e.User.UID, e.User.Groups = u.UID, u.Groups
				changed = true
			}
			continue
		}
		index[u.Name] = len(entries)
		entries = append(entries, auth.TokenEntry{Token: auth.NewToken(), User: u})
		changed = true
	}
	if changed {
		if err := auth.WriteTokenFile(path, entries); err != nil {
			return nil, err
		}
	}
	tokens := map[string]string{}
	for _, e := range entries {
		tokens[e.User.Name] = e.Token
	}
	return tokens, nil
}
