package browser

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// updateScreenshot makes TestRollout write the README's screenshot, docs/ui.png.
var updateScreenshot = flag.Bool("update-screenshot", false, "write docs/ui.png from TestRollout's screenshot")

// chromiumNames are the executables of the Debian package and of other distributions.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

func findChromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MINIPLANE_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := "no Chromium found (tried " + strings.Join(chromiumNames, ", ") + "; apt-get install -y chromium): the browser tests did NOT run"
	if os.Getenv("MINIPLANE_BROWSER_REQUIRED") != "" {
		t.Fatal(msg)
	}
	t.Log("!!! " + msg + " !!!")
	t.Skip(msg)
	return ""
}

// browser is one headless Chromium with its own profile directory; it is stopped when the
// test ends (chromedp kills the process it started and waits for it).
type browser struct {
	t      testing.TB
	ctx    context.Context
	cancel context.CancelFunc
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	exe := findChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium keeps its singleton socket in a folder of TMPDIR that it leaves behind
		// when it is stopped; give it one the test removes.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.WindowSize(1400, 1000),
		// The API server's certificate is signed by the control plane's own CA, which this
		// throw-away profile does not trust.
		chromedp.IgnoreCertErrors,
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run its sandbox as root
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		acancel()
		if os.Getenv("MINIPLANE_BROWSER_REQUIRED") != "" {
			t.Fatalf("start %s: %v", exe, err)
		}
		t.Skipf("!!! %s does not start (%v): the browser tests did NOT run !!!", exe, err)
	}
	b := &browser{t: t, ctx: ctx, cancel: func() { cancel(); acancel() }}
	t.Cleanup(b.cancel)
	return b
}

// run runs actions with a deadline and fails the test on error.
func (b *browser) run(timeout time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page, awaiting it when it is a promise,
// into out.
func (b *browser) eval(expr string, out any) error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// waitJS polls a JavaScript expression until it is true, failing the test at the deadline
// with the last value of status (another expression) in the message.
func (b *browser) waitJS(timeout time.Duration, what, cond, status string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := b.eval(cond, &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var st any
			_ = b.eval(status, &st)
			b.t.Fatalf("timed out after %s waiting for %s (eval error %v; status %v)", timeout, what, err, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves a PNG of the page as a test artifact under MINIPLANE_ARTIFACTS (default
// _output/artifacts in the repository) and returns its bytes.
func (b *browser) screenshot(name string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("MINIPLANE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "_output", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	b.t.Logf("screenshot: %s (%d bytes)", abs, len(png))
	return png
}

// cellStates returns node → "state/rev" of every grid cell.
func (b *browser) cellStates() (map[string]string, error) {
	var out map[string]string
	err := b.eval(`Object.fromEntries([...document.querySelectorAll('#grid .cell')].map(c => [c.dataset.node, (c.dataset.state||'') + '/' + (c.dataset.rev||'')]))`, &out)
	return out, err
}
