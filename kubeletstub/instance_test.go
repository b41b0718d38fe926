package kubeletstub

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func TestReplicaNumber(t *testing.T) {
	cases := []struct {
		name, want string
		ok         bool
	}{
		{"miniplane_kubelet-fleet_3.miniplane_default.", "3", true},   // compose v1
		{"miniplane-kubelet-fleet-12.miniplane_default.", "12", true}, // compose v2
		{"3f2a9c1b7d4e.", "", false},                                  // a container ID
		{"kubelet-fleet_.net.", "", false},
		{"kubelet-fleet_x1.net.", "", false},
	}
	for _, tc := range cases {
		got, ok := replicaNumber(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("replicaNumber(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// fakeDNS answers every PTR query with name, as Docker's DNS names a compose container.
func fakeDNS(t *testing.T, name string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true})
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			_ = b.PTRResource(dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypePTR, Class: dnsmessage.ClassINET},
				dnsmessage.PTRResource{PTR: dnsmessage.MustNewName(name)})
			out, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(out, addr)
			}
		}
	}()
	return pc.LocalAddr().String()
}

func TestComposeReplicaFromDNS(t *testing.T) {
	addrs, _ := net.InterfaceAddrs()
	hasIPv4 := false
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			hasIPv4 = true
		}
	}
	if !hasIPv4 {
		t.Skip("no non-loopback IPv4 address to look up")
	}
	got, err := composeReplica(context.Background(), fakeDNS(t, "proj_kubelet-fleet_3.proj_default."))
	if err != nil || got != "3" {
		t.Fatalf("composeReplica = %q, %v; want 3", got, err)
	}
	if _, err := composeReplica(context.Background(), fakeDNS(t, "3f2a9c1b7d4e.")); err == nil {
		t.Fatal("a name without a replica number was accepted")
	}
}

func TestResolveInstanceHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	got, replica, err := ResolveInstance(context.Background(), "x-{hostname}")
	if err != nil {
		t.Fatal(err)
	}
	if want := "x-" + nameSegment(host); got != want || strings.ContainsAny(got, "{}_.") || replica != 0 {
		t.Errorf("ResolveInstance = %q, %d; want %q, 0", got, replica, want)
	}
	if got, replica, err := ResolveInstance(context.Background(), "plain"); err != nil || got != "plain" || replica != 0 {
		t.Errorf("ResolveInstance(plain) = %q, %d, %v", got, replica, err)
	}
}

func TestResolveInstanceReplica(t *testing.T) {
	got, replica, err := resolveInstance(context.Background(), "r{replica}", fakeDNS(t, "proj-kubelet-fleet-7.proj_default."))
	if err != nil {
		t.Fatal(err)
	}
	if got != "r7" || replica != 7 {
		t.Errorf("resolveInstance = %q, %d; want r7, 7", got, replica)
	}
}
