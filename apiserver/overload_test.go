package apiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

// Overload test sizes: many more clients than the limits, for long enough that rejected
// requests would pile up if the server queued them.
const (
	overloadReadLimit  = 4
	overloadWriteLimit = 2
	overloadReaders    = 300
	overloadWriters    = 100
	overloadAdmins     = 4
	overloadFor        = 2 * time.Second
	// overloadAtMost is how long the storm may go on, past overloadFor, until every kind
	// of request has been both served and refused: on a machine busy with other tests (CI
	// runs this under the race detector beside other packages) a fixed two seconds once
	// saw no read refused.
	overloadAtMost = 30 * time.Second
)

// stormClient sends requests without client-go, which would retry a 429 by itself, over
// one HTTP/2 connection, and reports failures instead of ending the test (its callers are
// goroutines).
type stormClient struct {
	t     testing.TB
	http  *http.Client
	base  string
	token string
}

func newStormClient(t testing.TB, env *testenv.Env, user string) *stormClient {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(env.CAPEM) {
		t.Fatal("no CA certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &stormClient{t: t, http: &http.Client{Transport: tr, Timeout: time.Minute}, base: env.URL, token: env.Token(user)}
}

// do sends a request and returns the status code, the Retry-After header and the body.
func (c *stormClient) do(ctx context.Context, method, path, body string) (int, string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), data, err
}

// overloadCounts tallies what the clients got.
type overloadCounts struct {
	ok, rejected, other atomic.Int64
	firstOther          atomic.Value // string
}

func (c *overloadCounts) record(code int, retryAfter string, body []byte, err error, okCode int) bool {
	switch {
	case err == nil && code == okCode:
		c.ok.Add(1)
		return true
	case err == nil && code == http.StatusTooManyRequests && retryAfter == "1" && isTooManyRequests(body):
		c.rejected.Add(1)
		return false
	}
	c.other.Add(1)
	c.firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %s %v", code, body, err))
	return false
}

func isTooManyRequests(body []byte) bool {
	var st metav1.Status
	return json.Unmarshal(body, &st) == nil && st.Reason == metav1.StatusReasonTooManyRequests && st.Code == 429
}

// TestOverload: with 300 readers and 100 writers against limits of 4 and 2 requests in
// flight, the server queues as many more as it serves and answers the rest 429 (a
// TooManyRequests Status with Retry-After: 1), and nothing else fails; administrators and a watch are served all the
// same; its memory stays bounded during the storm and returns afterwards; every write it
// accepted is stored and no rejected one is. (Without the limits, the same storm takes the
// heap some 400 MiB up.)
//
// It does not run in parallel: the heap it reads is the whole test process's, and the other
// tests' servers would move it (once by 101 MiB).
func TestOverload(t *testing.T) {
	dir := t.TempDir()
	_, err := testenv.EnsureTokens(filepath.Join(dir, "tokens.csv"), []auth.User{
		{Name: fleetUser, UID: "fleet", Groups: []string{auth.NodesGroup}},
	})
	check(t, err)
	cfg := configs.DefaultAPIServer()
	cfg.MaxRequestsInflight, cfg.MaxMutatingRequestsInflight = overloadReadLimit, overloadWriteLimit
	env := testenv.New(t, testenv.Config{DataDir: dir, APIServer: &cfg})
	ctx := testCtx(t)
	reader := newStormClient(t, env, testenv.ViewerUser)
	writer := newStormClient(t, env, fleetUser) // nodes may create events
	admin := newStormClient(t, env, testenv.AdminUser)
	// Each client opens its connection before the storm. Otherwise the storm's first
	// requests each dial their own TLS connection (the transport does not wait for one
	// dial to bring HTTP/2), and under the race detector on a busy machine 300 handshakes
	// outlast the storm: the readers barely reached the server and none was refused.
	if code, _, body, err := writer.do(ctx, "POST", "/api/v1/namespaces/default/events", overloadEvent("warm-up")); err != nil || code != 201 {
		t.Fatalf("warm-up write: %d %s %v", code, body, err)
	}
	for _, c := range []*stormClient{reader, admin} {
		if code, _, body, err := c.do(ctx, "GET", "/api/v1/namespaces/default/events", ""); err != nil || code != 200 {
			t.Fatalf("warm-up read: %d %s %v", code, body, err)
		}
	}

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peakHeap atomic.Uint64
	peakGoroutines := runtime.NumGoroutine()
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peakHeap.Load() {
				peakHeap.Store(m.HeapInuse)
			}
			peakGoroutines = max(peakGoroutines, runtime.NumGoroutine())
		}
	}()

	var reads, writes overloadCounts
	var mu sync.Mutex
	accepted, rejected := map[string]bool{}, map[string]bool{}
	stormCtx, stop := context.WithTimeout(ctx, overloadAtMost)
	defer stop()
	var wg sync.WaitGroup
	begin := time.Now()
	// The storm ends after overloadFor once reads and writes have each been both served
	// and refused, or at overloadAtMost, when the checks below say which did not happen.
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stormCtx.Done():
				return
			case <-tick.C:
			}
			if time.Since(begin) >= overloadFor && reads.ok.Load() > 0 && reads.rejected.Load() > 0 &&
				writes.ok.Load() > 0 && writes.rejected.Load() > 0 {
				stop()
				return
			}
		}
	})
	for i := 0; i < overloadReaders; i++ {
		wg.Go(func() {
			for stormCtx.Err() == nil {
				code, retryAfter, body, err := reader.do(ctx, "GET", "/api/v1/namespaces/default/events", "")
				reads.record(code, retryAfter, body, err, 200)
			}
		})
	}
	// Administrators are served beyond the limit, as kube-apiserver serves system:masters.
	var adminReads overloadCounts
	for i := 0; i < overloadAdmins; i++ {
		wg.Go(func() {
			for stormCtx.Err() == nil {
				code, retryAfter, body, err := admin.do(ctx, "GET", "/api/v1/namespaces/default/events", "")
				adminReads.record(code, retryAfter, body, err, 200)
			}
		})
	}
	// A watch does not count, and is not refused.
	wg.Go(func() {
		code, _, body, err := reader.do(ctx, "GET", "/api/v1/namespaces/default/events?watch=true&timeoutSeconds=1", "")
		if err != nil || code != 200 {
			t.Errorf("a watch during the storm: %d %.200s %v", code, body, err)
		}
	})
	for i := 0; i < overloadWriters; i++ {
		wg.Go(func() {
			for n := 0; stormCtx.Err() == nil; n++ {
				name := fmt.Sprintf("storm-%d-%d", i, n)
				code, retryAfter, body, err := writer.do(ctx, "POST", "/api/v1/namespaces/default/events", overloadEvent(name))
				ok := writes.record(code, retryAfter, body, err, 201)
				mu.Lock()
				if ok {
					accepted[name] = true
				} else if code == http.StatusTooManyRequests {
					rejected[name] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	close(stopSampling)
	<-sampled
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	for _, c := range []struct {
		kind   string
		counts *overloadCounts
	}{{"reads", &reads}, {"writes", &writes}} {
		if n := c.counts.other.Load(); n > 0 {
			t.Errorf("%s: %d answers neither success nor 429 with Retry-After: 1, the first: %v", c.kind, n, c.counts.firstOther.Load())
		}
		if c.counts.rejected.Load() == 0 || c.counts.ok.Load() == 0 {
			t.Errorf("%s: %d served, %d rejected; want both under %d clients", c.kind, c.counts.ok.Load(), c.counts.rejected.Load(), overloadReaders+overloadWriters)
		}
	}
	if n := adminReads.rejected.Load() + adminReads.other.Load(); n > 0 || adminReads.ok.Load() == 0 {
		t.Errorf("administrators: %d served, %d not; want every one served", adminReads.ok.Load(), n)
	}
	const mib = 1 << 20
	grew := int64(peakHeap.Load()) - int64(base.HeapInuse)
	left := int64(after.HeapInuse) - int64(base.HeapInuse)
	t.Logf("%v of %d readers and %d writers against limits %d/%d: reads %d served, %d rejected; writes %d served, %d rejected (%.0f requests/s); heap in use %d MiB before, peak +%d MiB, +%d MiB after; peak %d goroutines",
		took.Round(time.Millisecond), overloadReaders, overloadWriters, overloadReadLimit, overloadWriteLimit,
		reads.ok.Load(), reads.rejected.Load(), writes.ok.Load(), writes.rejected.Load(),
		float64(reads.ok.Load()+reads.rejected.Load()+writes.ok.Load()+writes.rejected.Load())/took.Seconds(),
		base.HeapInuse/mib, grew/mib, left/mib, peakGoroutines)
	// The clients live in this process too, so the peak (logged above) says little; what
	// must not happen is rejected work left queued, which would stay after the storm.
	if left > 64*mib {
		t.Errorf("heap in use is %d MiB above its level before the storm, after it", left/mib)
	}

	// Every accepted write is stored, no rejected one is.
	code, _, body, err := newStormClient(t, env, testenv.AdminUser).do(ctx, "GET", "/api/v1/namespaces/default/events", "")
	if err != nil || code != 200 {
		t.Fatalf("list events: %d %v", code, err)
	}
	var list struct {
		Items []metav1.PartialObjectMetadata `json:"items"`
	}
	check(t, json.Unmarshal(body, &list))
	stored := map[string]bool{}
	for _, item := range list.Items {
		stored[item.Name] = true
	}
	for name := range accepted {
		if !stored[name] {
			t.Errorf("accepted write %s is not stored", name)
		}
	}
	for name := range rejected {
		if stored[name] {
			t.Errorf("rejected write %s is stored", name)
		}
	}
	if got := len(list.Items) - 1; got != len(accepted) { // the warm-up
		t.Errorf("%d storm events stored, %d writes accepted", got, len(accepted))
	}
}

func overloadEvent(name string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":%q},"involvedObject":{"kind":"Node","name":"fleet-0"},"reason":"Storm","message":"overload test","type":"Normal"}`, name)
}
