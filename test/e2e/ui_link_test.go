package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miniplane/miniplane/internal/poll"
)

// TestUpPrintsSignInLink: `miniplane up` prints a link to the browser view that signs in
// once, on the API server's own HTTPS port, with a Secure, HttpOnly, SameSite=Strict cookie.
func TestUpPrintsSignInLink(t *testing.T) {
	bin := ksBuild(t, t.TempDir())
	_, out := startUp(t, bin, nil, "--nodes", "0")
	linkRE := regexp.MustCompile(`https://[^\s]+/ui/signin\?link=[A-Za-z0-9_-]+`)
	var link string
	poll.Until(t, ksTimeout, "up to print the sign-in link", func() bool {
		link = linkRE.FindString(out.String())
		return link != ""
	})
	caFile := regexp.MustCompile(`--cacert (\S+)`).FindStringSubmatch(out.String())
	if caFile == nil {
		t.Fatalf("no CA path in up's output:\n%s", out)
	}
	ca, err := os.ReadFile(filepath.Clean(caFile[1]))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
	for i, want := range []string{"/ui/", "/ui/?signin=expired"} {
		resp, err := c.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
			t.Fatalf("use %d of the link: %d to %q, want 303 to %q", i+1, resp.StatusCode, resp.Header.Get("Location"), want)
		}
		cookie := resp.Header.Get("Set-Cookie")
		if i == 0 && (!strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "Secure") || !strings.Contains(cookie, "SameSite=Strict")) {
			t.Fatalf("session cookie %q: want HttpOnly, Secure, SameSite=Strict", cookie)
		}
		if i == 1 && cookie != "" {
			t.Fatalf("the used link set a cookie: %q", cookie)
		}
	}
}
