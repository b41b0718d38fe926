package browser

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/miniplane/miniplane/apiserver/ui"
	"github.com/miniplane/miniplane/internal/poll"
	"github.com/miniplane/miniplane/test/testenv"
)

// daemonSet is a DaemonSet of one container that rolls one node at a time.
func daemonSet(name, image string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	one := intstr.FromInt32(1)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// Each node stays "Ready, not yet available" for 2 s, so a rollout lasts long
			// enough for the page to show the nodes still on the old revision.
			MinReadySeconds: 2,
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: image}}},
			},
		},
	}
}

// waitRolledOut waits until every node runs the DaemonSet's current template, available. It
// reads the status every 20 ms rather than poll's 2 ms: at 5,000 nodes the benchmark must
// not load the server it measures.
func waitRolledOut(t testing.TB, c kubernetes.Interface, name string, nodes int32, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ds, err := c.AppsV1().DaemonSets("default").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			s := ds.Status
			if s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled == nodes && s.UpdatedNumberScheduled == nodes &&
				s.NumberAvailable == nodes && s.NumberUnavailable == 0 {
				return ds
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("DaemonSet %s not rolled out on %d nodes after %s (last error %v)", name, nodes, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// httpClient trusts the control plane's CA and follows no redirects.
func httpClient(t *testing.T, env *testenv.Env) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(env.CAPEM) {
		t.Fatal("bad CA")
	}
	return &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
}

// transitions installs a recorder of every cell change: node → list of "state/rev".
const recordTransitions = `(() => {
  window.__cellLog = {};
  const note = (c) => {
    const v = (c.dataset.state||'') + '/' + (c.dataset.rev||'');
    const l = (window.__cellLog[c.dataset.node] ||= []);
    if (l[l.length-1] !== v) l.push(v);
  };
  document.querySelectorAll('#grid .cell').forEach(note);
  new MutationObserver((ms) => ms.forEach((m) => note(m.target)))
    .observe(document.getElementById('grid'), {subtree: true, attributes: true, attributeFilter: ['data-state', 'data-rev']});
  return true;
})()`

// TestRollout drives a rolling update and a rejecting node from the page and watches the
// grid, the counters and the events follow; then checks what the page shows without the
// session cookie. It saves screenshots as test artifacts (and, with -update-screenshot, the
// one of the failing node as the README's docs/ui.png).
func TestRollout(t *testing.T) {
	b := newBrowser(t)
	env := testenv.New(t, testenv.Everything(3))
	ctx := context.Background()
	if _, err := env.Client.AppsV1().DaemonSets("default").Create(ctx, daemonSet("agent", "registry.example/agent:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, env.Client, "agent", 3, time.Minute)
	hc := httpClient(t, env)

	// Without a session the page is the sign-in form and the proxy serves nothing.
	b.run(30*time.Second, "open the view signed out", chromedp.Navigate(env.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("signin")))
	var signedOut struct {
		Cells  int
		Status int
		App    bool
	}
	if err := b.eval(`(async () => ({
		Cells: document.querySelectorAll('#grid .cell').length,
		Status: (await fetch('/ui/proxy/api/v1/nodes', {headers: {'X-CSRF-Token': 'guess'}})).status,
		App: !document.getElementById('app').hidden,
	}))()`, &signedOut); err != nil {
		t.Fatalf("signed-out page: %v", err)
	}
	if signedOut.Cells != 0 || signedOut.Status != http.StatusUnauthorized || signedOut.App {
		t.Fatalf("signed out: %+v, want no cells, 401 from the proxy, the app hidden", signedOut)
	}

	// The sign-in link signs in once and redirects to the page.
	link := env.APIServer.UI().SignInLink(env.Token(testenv.AdminUser))
	b.run(30*time.Second, "sign in with the link", chromedp.Navigate(env.URL+link), chromedp.WaitVisible(chromedp.ID("app")))
	var loc string
	if err := b.eval(`location.pathname + location.search`, &loc); err != nil || loc != "/ui/" {
		t.Fatalf("after sign-in the page is at %q (%v), want /ui/ without the link", loc, err)
	}
	checkCookie(t, b)
	resp, err := hc.Get(env.URL + link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || got != "/ui/?signin=expired" || len(resp.Cookies()) != 0 {
		t.Fatalf("second use of the link: %d to %q with cookies %v, want 303 to /ui/?signin=expired and no cookie", resp.StatusCode, got, resp.Cookies())
	}

	// Every node of the DaemonSet, Available on the current revision.
	b.run(10*time.Second, "open the DaemonSet", chromedp.Navigate(env.URL+"/ui/#/ds/default/agent"))
	// The overview's cells may read the same until the page has switched views: wait for the
	// DaemonSet's grid, drawn from its own listed pods.
	b.waitJS(30*time.Second, "3 available cells on the new revision in the DaemonSet's grid",
		`document.getElementById('grid-title').textContent === 'Nodes: default/agent' && document.getElementById('grid').dataset.complete === 'true' &&
		[...document.querySelectorAll('#grid .cell')].filter(c => c.dataset.state === 'available' && c.dataset.rev === 'new').length === 3`,
		`document.getElementById('grid-title').textContent + ' ' + document.getElementById('grid').innerHTML.slice(0, 2000)`)
	states, err := b.cellStates()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"stub-node-0", "stub-node-1", "stub-node-2"} {
		if states[n] != "available/new" {
			t.Fatalf("cell of %s: %q, want available/new (all: %v)", n, states[n], states)
		}
	}
	var label string
	if err := b.eval(`document.querySelector('#grid .cell[data-node="stub-node-0"]').getAttribute('aria-label')`, &label); err != nil ||
		!strings.HasPrefix(label, "stub-node-0: Available") {
		t.Fatalf("aria-label of stub-node-0: %q (%v)", label, err)
	}
	b.waitJS(10*time.Second, "counters", `document.querySelector('[data-counter=numberAvailable] strong').textContent === '3'`,
		`document.getElementById('counters').textContent`)

	// A rolling update started from the page moves every cell from the old revision to the new.
	var ok bool
	if err := b.eval(recordTransitions, &ok); err != nil {
		t.Fatal(err)
	}
	b.run(10*time.Second, "set image from the page",
		chromedp.SetValue(chromedp.ID("image"), "registry.example/agent:2"),
		chromedp.Click(chromedp.ID("set-image")))
	waitImage(t, b, env.Client, "agent", "registry.example/agent:2")
	waitRolledOut(t, env.Client, "agent", 3, time.Minute)
	b.waitJS(30*time.Second, "every cell new again after the update",
		`[...document.querySelectorAll('#grid .cell')].filter(c => c.dataset.state === 'available' && c.dataset.rev === 'new').length === 3 &&
		 document.querySelectorAll('#revision-rows tr').length === 2`,
		`JSON.stringify(window.__cellLog)`)
	var log map[string][]string
	if err := b.eval(`window.__cellLog`, &log); err != nil {
		t.Fatal(err)
	}
	// The first node the controller replaces may turn over between two frames; the others
	// wait for it to be available (2 s) and are seen on the old revision meanwhile.
	sawOld, sawReady := 0, false
	for _, n := range []string{"stub-node-0", "stub-node-1", "stub-node-2"} {
		h := log[n]
		if len(h) == 0 || h[len(h)-1] != "available/new" {
			t.Fatalf("cell of %s went %v: want it to end available on the new revision", n, h)
		}
		if sawOldThenNew(h) {
			sawOld++
		}
		sawReady = sawReady || slices.Contains(h, "ready/new")
	}
	if sawOld < 2 || !sawReady {
		t.Fatalf("cell transitions %v: want at least two nodes seen on the old revision and one Ready before available", log)
	}
	t.Logf("cell transitions during the update: %v", log)

	// reject-pods on one node from the page: the next pod there fails, and the controller
	// retries with a doubling backoff.
	b.run(10*time.Second, "inject reject-pods on stub-node-1",
		chromedp.Click(chromedp.CSS(`#grid .cell[data-node="stub-node-1"]`)),
		chromedp.WaitVisible(chromedp.ID("node-actions")),
		chromedp.SetValue(chromedp.ID("fault-key"), "stub.miniplane.io/reject-pods"),
		chromedp.SetValue(chromedp.ID("fault-value"), "Rejected"),
		chromedp.Click(chromedp.ID("fault-set")))
	poll.UntilErr(t, 10*time.Second, "reject-pods annotation on stub-node-1", func() (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, "stub-node-1", metav1.GetOptions{})
		return err == nil && n.Annotations["stub.miniplane.io/reject-pods"] == "Rejected", err
	})
	b.run(10*time.Second, "start a third revision from the page",
		chromedp.SetValue(chromedp.ID("image"), "registry.example/agent:3"),
		chromedp.Click(chromedp.ID("set-image")))
	waitImage(t, b, env.Client, "agent", "registry.example/agent:3")
	b.waitJS(30*time.Second, "stub-node-1 Failed",
		`document.querySelector('#grid .cell[data-node="stub-node-1"]').dataset.state === 'failed'`,
		`JSON.stringify(window.__cellLog['stub-node-1'])`)
	// Backoff 1 s, 2 s, 4 s: four failures, the gaps between them growing.
	b.waitJS(40*time.Second, "four FailedDaemonPod events",
		`document.querySelectorAll('#events li[data-reason=FailedDaemonPod]').length >= 4`,
		`document.getElementById('events').textContent.slice(0, 2000)`)
	var gaps []float64
	if err := b.eval(`[...document.querySelectorAll('#events li[data-reason=FailedDaemonPod]')].map(li => Number(li.dataset.gap || -1)).reverse()`, &gaps); err != nil {
		t.Fatal(err)
	}
	checkBackoff(t, gaps)
	// The README's picture: a rollout held up by a rejecting node, its backoff on the timeline.
	if png := b.screenshot("ui-reject-pods.png"); *updateScreenshot {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "ui.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Removing the fault lets the node catch up.
	b.run(10*time.Second, "remove reject-pods",
		chromedp.SetValue(chromedp.ID("fault-key"), "stub.miniplane.io/reject-pods"),
		chromedp.Click(chromedp.ID("fault-remove")))
	waitRolledOut(t, env.Client, "agent", 3, time.Minute)
	b.waitJS(60*time.Second, "every cell available on revision 3",
		`[...document.querySelectorAll('#grid .cell')].filter(c => c.dataset.state === 'available' && c.dataset.rev === 'new').length === 3 &&
		 document.querySelectorAll('#revision-rows tr').length === 3`,
		`JSON.stringify(window.__cellLog)`)
	b.screenshot("ui-rollout.png")

	// Roll back to revision 1 from the page, as kubectl rollout undo --to-revision=1.
	b.run(10*time.Second, "roll back to revision 1", chromedp.Click(chromedp.CSS(`#revision-rows tr[data-revision="1"] button`)))
	waitImage(t, b, env.Client, "agent", "registry.example/agent:1")
	waitRolledOut(t, env.Client, "agent", 3, time.Minute)
	b.waitJS(30*time.Second, "revision 1 renumbered to 4 and current",
		`document.querySelector('#revision-rows tr.current') && document.querySelector('#revision-rows tr.current').dataset.revision === '4' &&
		 [...document.querySelectorAll('#grid .cell')].filter(c => c.dataset.state === 'available' && c.dataset.rev === 'new').length === 3`,
		`document.getElementById('revision-rows').innerText`)

	// The overview lists the DaemonSet with its counters and shows every node.
	b.run(10*time.Second, "open the overview", chromedp.Click(chromedp.CSS(`#ds-pick`)), chromedp.SetValue(chromedp.ID("ds-pick"), "#/"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('ds-pick').dispatchEvent(new Event('change'))`))
	b.waitJS(30*time.Second, "the overview",
		`location.hash === '#/' && document.querySelector('#ds-rows a').textContent === 'default/agent' &&
		 [...document.querySelectorAll('#grid .cell')].filter(c => c.dataset.state === 'available' && c.dataset.rev === 'new').length === 3`,
		`document.getElementById('overview').innerText + ' | ' + JSON.stringify([...document.querySelectorAll('#grid .cell')].map(c => c.dataset.state + '/' + c.dataset.rev))`)

	// Signed in with the viewer's token in the form, the page acts as the viewer: it may look
	// but not cordon, and says why.
	b.run(10*time.Second, "sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("signin")))
	b.run(20*time.Second, "sign in as the viewer",
		chromedp.SetValue(chromedp.ID("signin-token"), env.Token(testenv.ViewerUser)),
		chromedp.Submit(chromedp.CSS("#signin form")), chromedp.WaitVisible(chromedp.ID("app")))
	b.waitJS(20*time.Second, "the viewer sees the nodes", `document.querySelectorAll('#grid .cell[data-state=available]').length === 3 && document.getElementById('whoami').textContent === 'viewer'`,
		`document.getElementById('whoami').textContent`)
	b.run(10*time.Second, "cordon as the viewer", chromedp.Click(chromedp.CSS(`#grid .cell[data-node="stub-node-2"]`)), chromedp.Click(chromedp.ID("cordon")))
	b.waitJS(10*time.Second, "the refusal", `document.getElementById('action-log').textContent.includes('"viewer" cannot patch')`,
		`document.getElementById('action-log').textContent`)
	if n, err := env.Client.CoreV1().Nodes().Get(ctx, "stub-node-2", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("stub-node-2 after the viewer's cordon: unschedulable %v (%v)", n.Spec.Unschedulable, err)
	}

	// Signed out (the cookie gone), the same page shows the form and no object data.
	b.run(10*time.Second, "drop the cookie", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{})
		return err
	}), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("signin")))
	var after struct {
		Cells, Status int
		Text          string
	}
	if err := b.eval(`(async () => ({
		Cells: document.querySelectorAll('#grid .cell').length,
		Status: (await fetch('/ui/proxy/api/v1/nodes', {headers: {'X-CSRF-Token': 'guess'}})).status,
		Text: document.body.innerText,
	}))()`, &after); err != nil {
		t.Fatalf("page without the cookie: %v", err)
	}
	if after.Cells != 0 || after.Status != http.StatusUnauthorized || strings.Contains(after.Text, "stub-node-") {
		t.Fatalf("without the cookie: %d cells, proxy %d, text mentions nodes: %v", after.Cells, after.Status, strings.Contains(after.Text, "stub-node-"))
	}
}

// waitImage waits until the page's patch has set the DaemonSet's image.
func waitImage(t *testing.T, b *browser, c kubernetes.Interface, name, image string) {
	t.Helper()
	poll.UntilErr(t, 10*time.Second, "the page to set image "+image, func() (bool, error) {
		ds, err := c.AppsV1().DaemonSets("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != image {
			var toast string
			_ = b.eval(`document.getElementById('toast').textContent`, &toast)
			return false, fmt.Errorf("image %q; the page says %q", got, toast)
		}
		return true, nil
	})
}

// sawOldThenNew reports whether a cell's history shows the old revision before ending
// available on the new one.
func sawOldThenNew(h []string) bool {
	if len(h) == 0 || h[len(h)-1] != "available/new" {
		return false
	}
	for _, v := range h {
		if strings.HasSuffix(v, "/old") {
			return true
		}
	}
	return false
}

// checkBackoff: gaps (seconds; -1 for the first event) between FailedDaemonPod events grow
// as the controller's backoff doubles: 1 s, 2 s, 4 s, … Event timestamps have whole seconds,
// so each gap may be off by one.
func checkBackoff(t *testing.T, gaps []float64) {
	t.Helper()
	var g []float64
	for _, v := range gaps {
		if v >= 0 {
			g = append(g, v)
		}
	}
	if len(g) < 3 {
		t.Fatalf("FailedDaemonPod gaps %v: want at least three", gaps)
	}
	for i := 1; i < len(g); i++ {
		if g[i]+1 < g[i-1] {
			t.Fatalf("FailedDaemonPod gaps %v shrink: want a growing backoff", g)
		}
	}
	if g[len(g)-1] < 2*g[0] && g[len(g)-1] < 3 {
		t.Fatalf("FailedDaemonPod gaps %v do not grow: want a doubling backoff", g)
	}
	t.Logf("FailedDaemonPod gaps as the page shows them: %v s", g)
}

// checkCookie: the session cookie is HttpOnly, Secure and SameSite=Strict.
func checkCookie(t *testing.T, b *browser) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatalf("read cookies: %v", err)
	}
	cookies := res.Cookies
	for _, c := range cookies {
		if c.Name != ui.CookieName {
			continue
		}
		if !c.HTTPOnly || !c.Secure || c.SameSite != network.CookieSameSiteStrict || c.Path != "/" {
			js, _ := json.Marshal(c)
			t.Fatalf("session cookie %s: want HttpOnly, Secure, SameSite=Strict, Path=/", js)
		}
		return
	}
	t.Fatalf("no %s cookie after sign-in (cookies: %d)", ui.CookieName, len(cookies))
}
