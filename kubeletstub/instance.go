package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/miniplane/miniplane/configs"
)

// dockerDNS is the resolver Docker runs inside every container on a user-defined network
// (compose's networks are).
const dockerDNS = "127.0.0.11:53"

// ResolveInstance replaces the placeholders of a node-instance value: {hostname} by the
// host's name and {replica} by the replica number docker compose gave this container. It
// also returns that replica number, 0 when the value has no {replica}.
func ResolveInstance(ctx context.Context, instance string) (resolved string, replica int, err error) {
	return resolveInstance(ctx, instance, dockerDNS)
}

func resolveInstance(ctx context.Context, instance, dns string) (string, int, error) {
	if strings.Contains(instance, configs.StubInstanceHostname) {
		host, err := os.Hostname()
		if err != nil {
			return "", 0, fmt.Errorf("node-instance %s: %w", configs.StubInstanceHostname, err)
		}
		instance = strings.ReplaceAll(instance, configs.StubInstanceHostname, nameSegment(host))
	}
	replica := 0
	if strings.Contains(instance, configs.StubInstanceReplica) {
		n, err := composeReplica(ctx, dns)
		if err != nil {
			return "", 0, fmt.Errorf("node-instance %s: cannot tell this container's compose replica number: %w", configs.StubInstanceReplica, err)
		}
		if replica, err = strconv.Atoi(n); err != nil {
			return "", 0, fmt.Errorf("node-instance %s: replica number %q: %w", configs.StubInstanceReplica, n, err)
		}
		instance = strings.ReplaceAll(instance, configs.StubInstanceReplica, n)
	}
	return instance, replica, nil
}

// nameSegment turns s into lower-case letters, digits and inner dashes.
func nameSegment(s string) string {
	b := []byte(strings.ToLower(s))
	for i, ch := range b {
		if (ch < 'a' || ch > 'z') && (ch < '0' || ch > '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// composeReplica asks Docker's DNS for the name of this container's own address: compose
// names containers <project>_<service>_<n> (v1) or <project>-<service>-<n> (v2), and n is
// the replica number. The container's hostname is its ID, which `down`/`up` changes; the
// number stays. The query goes to the server directly: the resolver would answer from
// /etc/hosts, which names the address after the hostname.
func composeReplica(ctx context.Context, server string) (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	var errs []error
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil {
			continue
		}
		name, err := lookupPTR(ctx, server, ipn.IP.To4())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n, ok := replicaNumber(name); ok {
			return n, nil
		}
		errs = append(errs, fmt.Errorf("%s is %s, not <project>_<service>_<n>", ipn.IP, name))
	}
	if len(errs) == 0 {
		return "", errors.New("no IPv4 address")
	}
	return "", errors.Join(errs...)
}

// replicaNumber is the trailing number of the first label of a compose container's name.
func replicaNumber(name string) (string, bool) {
	label, _, _ := strings.Cut(name, ".")
	i := strings.LastIndexAny(label, "_-")
	if i < 0 || i == len(label)-1 {
		return "", false
	}
	n := label[i+1:]
	for _, ch := range n {
		if ch < '0' || ch > '9' {
			return "", false
		}
	}
	return n, true
}

// lookupPTR sends one PTR query for ip to server over UDP.
func lookupPTR(ctx context.Context, server string, ip net.IP) (string, error) {
	qname, err := dnsmessage.NewName(fmt.Sprintf("%d.%d.%d.%d.in-addr.arpa.", ip[3], ip[2], ip[1], ip[0]))
	if err != nil {
		return "", err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return "", err
	}
	if err := b.Question(dnsmessage.Question{Name: qname, Type: dnsmessage.TypePTR, Class: dnsmessage.ClassINET}); err != nil {
		return "", err
	}
	query, err := b.Finish()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write(query); err != nil {
		return "", err
	}
	buf := make([]byte, 1232)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil {
		return "", err
	}
	if h.RCode != dnsmessage.RCodeSuccess {
		return "", fmt.Errorf("PTR %s: %s", ip, h.RCode)
	}
	if err := p.SkipAllQuestions(); err != nil {
		return "", err
	}
	for {
		ah, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return "", fmt.Errorf("PTR %s: no answer", ip)
		}
		if err != nil {
			return "", err
		}
		if ah.Type != dnsmessage.TypePTR {
			if err := p.SkipAnswer(); err != nil {
				return "", err
			}
			continue
		}
		r, err := p.PTRResource()
		if err != nil {
			return "", err
		}
		return r.PTR.String(), nil
	}
}
