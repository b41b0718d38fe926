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
		{FleetUserPrefix + "fleet", "fleet-1-2", true},
		{FleetUserPrefix + "fleet", "fleet-3f2a9c1b7d4e-17", true},
		{FleetUserPrefix + "fleet", "fleet-host-a-17", true},
		{FleetUserPrefix + "fleet", "fleet-host-", false},
		{FleetUserPrefix + "fleet", "fleet--2", false},
		{FleetUserPrefix + "fleet", "fleet-host--2", false},
		{FleetUserPrefix + "fleet", "fleet-host-x", false},
		{FleetUserPrefix + "fleet", "other-host-2", false},
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
