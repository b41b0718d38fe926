package browser

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/miniplane/miniplane/test/testenv"
)

var benchNodes = flag.Int("ui.nodes", 5000, "stub nodes of BenchmarkUI")

// BenchmarkUI measures the view at scale: the time from navigating to a DaemonSet's page to
// the complete grid (every node's cell drawn from the lists), and the page's frame times
// while a rolling update over every node runs (10% of the nodes unavailable at a time).
//
//	CGO_ENABLED=0 go test -run '^$' -bench UI -benchtime 1x ./test/browser/
func BenchmarkUI(b *testing.B) {
	// As `miniplane` itself runs (cmd/miniplane/main.go).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	n := *benchNodes
	br := newBrowser(b)
	env := testenv.New(b, testenv.Everything(n))
	ctx := context.Background()
	ds := daemonSet("agent", "registry.example/agent:1")
	ds.Spec.MinReadySeconds = 0
	tenth := intstr.FromString("10%")
	ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &tenth}
	if _, err := env.Client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitRolledOut(b, env.Client, "agent", int32(n), 5*time.Minute)

	link := env.APIServer.UI().SignInLink(env.Token(testenv.AdminUser))
	br.run(time.Minute, "sign in", chromedp.Navigate(env.URL+link), chromedp.WaitVisible(chromedp.ID("app")))
	br.metrics() // starts collecting them
	allNew := fmt.Sprintf(`[...document.querySelectorAll('#grid .cell')].filter(c => c.dataset.state === 'available' && c.dataset.rev === 'new').length === %d`, n)

	var loads []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br.run(time.Minute, "open the DaemonSet", chromedp.Navigate(env.URL+"/ui/#/ds/default/agent"), chromedp.Reload())
		br.waitJS(2*time.Minute, "the complete grid", `window.miniplaneUI.gridCompleteAt > 0 && `+allNew,
			`({complete: window.miniplaneUI.gridCompleteAt, cells: document.querySelectorAll('#grid .cell').length})`)
		var at float64
		if err := br.eval(`window.miniplaneUI.gridCompleteAt`, &at); err != nil {
			b.Fatal(err)
		}
		loads = append(loads, at)
	}
	b.StopTimer()
	slices.Sort(loads)
	load := loads[len(loads)/2]
	b.ReportMetric(load, "ms-to-full-grid")

	// A rolling update over every node while the page follows it.
	if err := br.eval(`(window.miniplaneUI.frames = [], window.miniplaneUI.longTasks = 0, true)`, new(bool)); err != nil {
		b.Fatal(err)
	}
	before := br.metrics()
	start := time.Now()
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"registry.example/agent:2"}]}}}}`)
	if _, err := env.Client.AppsV1().DaemonSets("default").Patch(ctx, "agent", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	waitRolledOut(b, env.Client, "agent", int32(n), 10*time.Minute)
	serverDone := time.Since(start)
	br.waitJS(2*time.Minute, "the page to show the update done", allNew+` && document.querySelectorAll('#revision-rows tr').length === 2`,
		`document.querySelectorAll('#grid .cell[data-rev=new]').length`)
	pageDone := time.Since(start)
	after := br.metrics()
	// The page's main thread: time in tasks, and of that in script, style and layout.
	busy := func(name string) float64 { return (after[name] - before[name]) / pageDone.Seconds() * 100 }
	var frames []float64
	if err := br.eval(`window.miniplaneUI.frames`, &frames); err != nil {
		b.Fatal(err)
	}
	var longTasks int
	_ = br.eval(`window.miniplaneUI.longTasks`, &longTasks)
	if len(frames) == 0 {
		b.Fatal("no frames recorded during the rolling update")
	}
	slices.Sort(frames)
	pct := func(p float64) float64 { return frames[min(len(frames)-1, int(p*float64(len(frames))))] }
	over50 := 0
	for _, f := range frames {
		if f > 50 {
			over50++
		}
	}
	b.ReportMetric(pct(0.5), "ms-frame-p50")
	b.ReportMetric(pct(0.95), "ms-frame-p95")
	b.ReportMetric(pct(0.99), "ms-frame-p99")
	b.ReportMetric(frames[len(frames)-1], "ms-frame-max")
	b.ReportMetric(busy("TaskDuration"), "%-main-thread-busy")
	fmt.Printf("UI at %d nodes: page load to full grid %.0f ms (median of %d); rolling update %.1f s on the server, on the page %.1f s; "+
		"%d frames: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms, %d over 50 ms, %d long tasks; "+
		"main thread busy %.1f%% of the time (script %.1f%%, style %.1f%%, layout %.1f%%); load average %s\n",
		n, load, len(loads), serverDone.Seconds(), pageDone.Seconds(), len(frames), pct(0.5), pct(0.95), pct(0.99), frames[len(frames)-1], over50, longTasks,
		busy("TaskDuration"), busy("ScriptDuration"), busy("RecalcStyleDuration"), busy("LayoutDuration"), loadAverage())
}

// metrics reads the page's cumulative main-thread figures (seconds): TaskDuration,
// ScriptDuration, RecalcStyleDuration, LayoutDuration, …
func (b *browser) metrics() map[string]float64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, performance.Enable, performance.EnableParams{}); err != nil {
		b.t.Fatalf("performance metrics: %v", err)
	}
	res, err := chromedp.Call(ctx, performance.GetMetrics, cdp.Empty{})
	if err != nil {
		b.t.Fatalf("performance metrics: %v", err)
	}
	out := map[string]float64{}
	for _, m := range res.Metrics {
		out[m.Name] = m.Value
	}
	return out
}

// loadAverage is the machine's 1-minute load average: frame times depend on what else runs.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
