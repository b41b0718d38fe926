package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []TokenEntry
		wantErr string
	}{
		{name: "groups quoted", in: "t1,alice,1,\"g1,g2\"\n", want: []TokenEntry{{Token: "t1", User: User{Name: "alice", UID: "1", Groups: []string{"g1", "g2"}}}}},
		{name: "no groups", in: "t2,bob,2\n", want: []TokenEntry{{Token: "t2", User: User{Name: "bob", UID: "2"}}}},
		{name: "comments and blanks", in: "# header\n\nt3,carol,3,g\n", want: []TokenEntry{{Token: "t3", User: User{Name: "carol", UID: "3", Groups: []string{"g"}}}}},
		{name: "too few fields", in: "t4,dave\n", wantErr: "want token,user,uid"},
		{name: "empty user", in: "t5,,5\n", wantErr: "empty token or user"},
		{name: "duplicate token", in: "t6,a,1\nt6,b,2\n", wantErr: "duplicate token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTokens(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d entries, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i].Token != tt.want[i].Token || got[i].User.Name != tt.want[i].User.Name ||
					got[i].User.UID != tt.want[i].User.UID || strings.Join(got[i].User.Groups, ",") != strings.Join(tt.want[i].User.Groups, ",") {
					t.Fatalf("entry %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestTokenFileRoundTripAndAuthenticate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.csv")
	entries := []TokenEntry{
		{Token: NewToken(), User: User{Name: "admin", UID: "a", Groups: []string{AdminGroup, "x"}}},
		{Token: NewToken(), User: User{Name: "system:node:n1", UID: "n", Groups: []string{NodesGroup}}},
	}
	if err := WriteTokenFile(path, entries); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	a, err := LoadTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		header string
		want   string
	}{
		{"Bearer " + entries[0].Token, "admin"},
		{"bearer " + entries[1].Token, "system:node:n1"},
		{"Bearer " + entries[0].Token + "x", ""},
		{"Basic " + entries[0].Token, ""},
		{"Bearer ", ""},
		{"", ""},
	} {
		u := a.Authenticate(tt.header)
		got := ""
		if u != nil {
			got = u.Name
		}
		if got != tt.want {
			t.Errorf("Authenticate(%q) = %q, want %q", tt.header, got, tt.want)
		}
	}
	if u := a.Authenticate("Bearer " + entries[0].Token); !u.InGroup(AdminGroup) || u.InGroup(NodesGroup) {
		t.Fatalf("admin groups %v", u.Groups)
	}
}

func TestAuthorize(t *testing.T) {
	z := &Authorizer{AdminGroups: []string{AdminGroup}, ReadOnlyGroups: []string{"viewers"}}
	admin := &User{Name: "admin", Groups: []string{AdminGroup}}
	viewer := &User{Name: "v", Groups: []string{"viewers"}}
	nobody := &User{Name: "nobody"}
	node := &User{Name: NodeUserPrefix + "n1", Groups: []string{NodesGroup}}
	fleet := &User{Name: FleetUserPrefix + "f", Groups: []string{NodesGroup}}
	pods := func(verb, name, sub string) Attributes {
		return Attributes{Verb: verb, Resource: "pods", Namespace: "default", Name: name, Subresource: sub}
	}
	tests := []struct {
		name string
		user *User
		a    Attributes
		want Decision
	}{
		{"admin deletes a DaemonSet", admin, Attributes{Verb: "delete", Group: "apps", Resource: "daemonsets", Namespace: "d", Name: "x"}, Allow},
		{"viewer lists pods", viewer, pods("list", "", ""), Allow},
		{"viewer watches nodes", viewer, Attributes{Verb: "watch", Resource: "nodes"}, Allow},
		{"viewer may not create", viewer, pods("create", "", ""), Deny},
		{"viewer reads metrics", viewer, Attributes{NonResourcePath: "/metrics"}, Allow},
		{"nobody reads discovery", nobody, Attributes{NonResourcePath: "/apis"}, Allow},
		{"nobody may not read metrics", nobody, Attributes{NonResourcePath: "/metrics"}, Deny},
		{"admin reads profiles", admin, Attributes{NonResourcePath: "/debug/pprof/heap"}, Allow},
		{"viewer may not read profiles", viewer, Attributes{NonResourcePath: "/debug/pprof/"}, Deny},
		{"nobody may not read profiles", nobody, Attributes{NonResourcePath: "/debug/pprof/profile"}, Deny},
		{"nobody may not reach /debug", nobody, Attributes{NonResourcePath: "/debug"}, Deny},
		{"a path merely starting with debug is not /debug/", nobody, Attributes{NonResourcePath: "/debugger"}, Allow},
		{"nobody may not list pods", nobody, pods("list", "", ""), Deny},
		{"node updates its node", node, Attributes{Verb: "patch", Resource: "nodes", Name: "n1", Subresource: "status"}, Allow},
		{"node may not update another node", node, Attributes{Verb: "update", Resource: "nodes", Name: "n2"}, Deny},
		{"node creates a node (checked on the body)", node, Attributes{Verb: "create", Resource: "nodes"}, NodeObjectCheck},
		{"node reads pods", node, pods("watch", "", ""), Allow},
		{"node updates pod status (checked on the pod)", node, pods("update", "p", "status"), NodeObjectCheck},
		{"node deletes a pod (checked on the pod)", node, pods("delete", "p", ""), NodeObjectCheck},
		{"node may not change a pod's spec", node, pods("patch", "p", ""), Deny},
		{"node may not bind", node, pods("create", "p", "binding"), Deny},
		{"node may not create pods", node, pods("create", "", ""), Deny},
		{"node renews its lease", node, Attributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "n1"}, Allow},
		{"node may not renew another lease", node, Attributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "n2"}, Deny},
		{"node may not use leases elsewhere", node, Attributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "n1"}, Deny},
		{"node writes events", node, Attributes{Verb: "create", Resource: "events", Namespace: "default"}, Allow},
		{"node reads DaemonSets", node, Attributes{Verb: "list", Group: "apps", Resource: "daemonsets"}, Allow},
		{"node may not delete DaemonSets", node, Attributes{Verb: "delete", Group: "apps", Resource: "daemonsets", Namespace: "d", Name: "x"}, Deny},
		{"fleet updates its member", fleet, Attributes{Verb: "update", Resource: "nodes", Name: "f-12"}, Allow},
		{"fleet may not update outsiders", fleet, Attributes{Verb: "update", Resource: "nodes", Name: "g-1"}, Deny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, reason := z.Authorize(tt.user, tt.a); got != tt.want {
				t.Fatalf("Authorize = %v (%s), want %v", got, reason, tt.want)
			}
		})
	}
}

func TestNodeNames(t *testing.T) {
	tests := []struct {
		user string
		name string
		want bool
	}{
		{NodeUserPrefix + "n1", "n1", true},
		{NodeUserPrefix + "n1", "n10", false},
		{FleetUserPrefix + "fleet", "fleet-0", true},
		{FleetUserPrefix + "fleet", "fleet-4999", true},
		{FleetUserPrefix + "fleet", "fleet-", false},
		{FleetUserPrefix + "fleet", "fleet-x", false},
		{FleetUserPrefix + "fleet", "fleetish-0", false},
		{FleetUserPrefix + "fleet", "fleet-1-2", false},
		{"someone", "someone", false},
	}
	for _, tt := range tests {
		if got := NodeNames(&User{Name: tt.user})(tt.name); got != tt.want {
			t.Errorf("NodeNames(%q)(%q) = %v, want %v", tt.user, tt.name, got, tt.want)
		}
		d, _ := AuthorizeNodeObject(&User{Name: tt.user}, tt.name)
		if (d == Allow) != tt.want {
			t.Errorf("AuthorizeNodeObject(%q, %q) = %v", tt.user, tt.name, d)
		}
	}
}
