package browser

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/ui"
	"github.com/miniplane/miniplane/test/testenv"
)

// session is a signed-in HTTP client of the view, as the page is.
type session struct {
	t    *testing.T
	env  *testenv.Env
	c    *http.Client
	csrf string
}

// signInWithToken posts token to the sign-in form and reads the session's CSRF token.
func signInWithToken(t *testing.T, env *testenv.Env, token string) *session {
	t.Helper()
	c := httpClient(t, env)
	jar, _ := cookiejar.New(nil)
	c.Jar = jar
	req, _ := http.NewRequest(http.MethodPost, env.URL+ui.SignInPath, strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", env.URL)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != ui.Prefix {
		t.Fatalf("sign-in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	s := &session{t: t, env: env, c: c}
	var info struct{ User, CSRFToken string }
	s.decode(s.do(http.MethodGet, "/ui/session", ""), &info)
	s.csrf = info.CSRFToken
	return s
}

func (s *session) do(method, path, body string) *http.Response {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.env.URL+path, strings.NewReader(body))
	req.Header.Set(ui.CSRFHeader, s.csrf)
	req.Header.Set("Origin", s.env.URL)
	if body != "" {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	resp, err := s.c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp
}

func (s *session) decode(resp *http.Response, out any) {
	s.t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		s.t.Fatal(err)
	}
}

// TestProxyAsTheUser: calls through the view are the signed-in user's, authorized by the
// API server as the same calls from kubectl: the viewer reads but may not cordon, the
// administrator may; and a watch streams through the view as it happens.
func TestProxyAsTheUser(t *testing.T) {
	env := testenv.New(t, testenv.Config{})
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	viewer := signInWithToken(t, env, env.Token(testenv.ViewerUser))
	var nodes corev1.NodeList
	viewer.decode(viewer.do(http.MethodGet, "/ui/proxy/api/v1/nodes", ""), &nodes)
	if len(nodes.Items) != 1 || nodes.Items[0].Name != "n1" {
		t.Fatalf("the viewer's node list: %+v", nodes.Items)
	}
	var st metav1.Status
	viewer.decode(viewer.do(http.MethodPatch, "/ui/proxy/api/v1/nodes/n1", `{"spec":{"unschedulable":true}}`), &st)
	if st.Code != http.StatusForbidden || !strings.Contains(st.Message, `"viewer"`) {
		t.Fatalf("the viewer cordoning: %+v, want 403 naming the viewer", st)
	}

	admin := signInWithToken(t, env, env.Token(testenv.AdminUser))
	// A watch through the view delivers the change the administrator then makes.
	w := admin.do(http.MethodGet, "/ui/proxy/api/v1/nodes?watch=true&fieldSelector=metadata.name%3Dn1&resourceVersion="+nodes.ResourceVersion, "")
	defer w.Body.Close()
	if w.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(w.Body)
		t.Fatalf("watch: %d %s", w.StatusCode, b)
	}
	var patched corev1.Node
	admin.decode(admin.do(http.MethodPatch, "/ui/proxy/api/v1/nodes/n1", `{"spec":{"unschedulable":true}}`), &patched)
	if !patched.Spec.Unschedulable {
		t.Fatalf("the administrator's cordon did not take: %+v", patched.Spec)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(w.Body)
		sc.Buffer(nil, 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line := <-lines:
		var ev struct {
			Type   string
			Object corev1.Node
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Type != "MODIFIED" || !ev.Object.Spec.Unschedulable {
			t.Fatalf("watch event %q (%v), want n1 MODIFIED and cordoned", line, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event through the view within 10 s")
	}
}
