package bench

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/miniplane/miniplane/internal/poll"
	"github.com/miniplane/miniplane/test/testenv"
)

var (
	flagWatchNodes    = flag.Int("bench.watch-nodes", 100, "fleet size of TestWatchersDuringRollout")
	flagWatchers      = flag.Int("bench.watchers", 100, "long-lived pod watches of TestWatchersDuringRollout")
	flagWatchChurners = flag.Int("bench.watch-churners", 8, "clients of TestWatchersDuringRollout that list and watch again and again, as kubectl get -w does")
)

// watchersTimeout bounds each phase of TestWatchersDuringRollout.
const watchersTimeout = 3 * time.Minute

// churnWatchFor is how long a churner follows each watch before it lists again.
const churnWatchFor = 50 * time.Millisecond

// quickWatchStart bounds how long a watch from a resourceVersion the server just returned
// may take to be answered: far below the 3s "Too large resource version" timeout.
const quickWatchStart = time.Second

// change is one write to a pod as a watch reports it.
type change struct {
	typ watch.EventType
	key string // namespace/name
	rv  int64
}

func (c change) String() string { return fmt.Sprintf("%s %s@%d", c.typ, c.key, c.rv) }

// changeLog is a sequence of changes that grows while the test reads it.
type changeLog struct {
	mu      sync.Mutex
	changes []change
	errs    []string
	// stopped is set before the test stops the watch: client-go may report the closed
	// stream as an error event, which is then no failure.
	stopped atomic.Bool
}

// stop ends w, which feeds l.
func (l *changeLog) stop(w watch.Interface) {
	l.stopped.Store(true)
	w.Stop()
}

func (l *changeLog) add(c change) {
	l.mu.Lock()
	l.changes = append(l.changes, c)
	l.mu.Unlock()
}

func (l *changeLog) fail(format string, args ...any) {
	l.mu.Lock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *changeLog) snapshot() ([]change, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.changes), slices.Clone(l.errs)
}

func (l *changeLog) has(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.changes, func(c change) bool { return c.key == key })
}

// TestWatchersDuringRollout rolls a DaemonSet through a restart while many clients watch
// every pod: long-lived watches (half JSON, half protobuf) from a resourceVersion a list
// returned, and churners that list and watch from the list's resourceVersion again and
// again, as `kubectl get -w` and informers do. etcd's own watch of the pods is the truth:
// every watch must report exactly its changes (none missed, none twice), in
// resourceVersion order, with no error, and every watch must be answered quickly.
func TestWatchersDuringRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole control plane through a rollout")
	}
	nodes := *flagWatchNodes
	cfg := testenv.Everything(nodes)
	env := testenv.New(t, cfg)
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*watchersTimeout)
	defer cancel()

	ds, err := c.AppsV1().DaemonSets("default").Create(ctx, newDaemonSet("watched"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, c, ds, 1)

	// Every watch starts from the resourceVersion of one list, as a client would.
	list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	from, _ := strconv.ParseInt(list.ResourceVersion, 10, 64)
	truth := etcdPodChanges(t, ctx, env, from)

	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var wg sync.WaitGroup
	defer wg.Wait()
	protoCfg := env.ConfigFor(testenv.AdminUser)
	protoCfg.ContentType = "application/vnd.kubernetes.protobuf"
	protoClient, err := kubernetes.NewForConfig(protoCfg)
	if err != nil {
		t.Fatal(err)
	}
	var startsMu sync.Mutex
	var starts []time.Duration
	recordStart := func(d time.Duration) {
		startsMu.Lock()
		starts = append(starts, d)
		startsMu.Unlock()
	}
	watchers := make([]*changeLog, *flagWatchers)
	// Watches end with Stop, not by cancelling their context, which client-go reports as
	// an error event.
	var open []watch.Interface // of watchers[i]
	for i := range watchers {
		watchers[i] = &changeLog{}
		client := c
		if i%2 == 1 {
			client = protoClient
		}
		begin := time.Now()
		w, err := client.CoreV1().Pods("").Watch(watchCtx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatalf("watch %d from %s: %v", i, list.ResourceVersion, err)
		}
		recordStart(time.Since(begin))
		open = append(open, w)
		wg.Go(func() { follow(w, watchers[i], from) })
	}

	type segment struct {
		from int64
		log  *changeLog
	}
	var segMu sync.Mutex
	var segments []segment
	var churning atomic.Bool
	churning.Store(true)
	var churnWG sync.WaitGroup
	for i := 0; i < *flagWatchChurners; i++ {
		churnWG.Go(func() {
			for churning.Load() {
				page, err := c.CoreV1().Pods("").List(watchCtx, metav1.ListOptions{Limit: 500})
				if err != nil {
					t.Errorf("churner %d: list: %v", i, err)
					return
				}
				rv, _ := strconv.ParseInt(page.ResourceVersion, 10, 64)
				seg := segment{from: rv, log: &changeLog{}}
				begin := time.Now()
				w, err := c.CoreV1().Pods("").Watch(watchCtx, metav1.ListOptions{ResourceVersion: page.ResourceVersion})
				if err != nil {
					t.Errorf("churner %d: watch from the list's resourceVersion %s after %v: %v", i, page.ResourceVersion, time.Since(begin), err)
					return
				}
				recordStart(time.Since(begin))
				stop := time.AfterFunc(churnWatchFor, func() { seg.log.stop(w) })
				follow(w, seg.log, rv)
				stop.Stop()
				segMu.Lock()
				segments = append(segments, seg)
				segMu.Unlock()
			}
		})
	}

	// The rollout: kubectl rollout restart's patch.
	rolloutStart := time.Now()
	var generation int64
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.AppsV1().DaemonSets("default").Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Spec.Template.Annotations == nil {
			cur.Spec.Template.Annotations = map[string]string{}
		}
		cur.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339)
		upd, err := c.AppsV1().DaemonSets("default").Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			generation = upd.Generation
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, c, ds, generation)
	rolloutTook := time.Since(rolloutStart)
	churning.Store(false)
	churnWG.Wait()

	// A last pod bounds what every watch must have seen.
	sentinel, err := c.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-sentinel"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}, NodeName: "nowhere"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	end, _ := strconv.ParseInt(sentinel.ResourceVersion, 10, 64)
	const sentinelKey = "default/zz-sentinel"
	poll.Until(t, watchersTimeout, "every watch and etcd's to see the sentinel pod", func() bool {
		if !truth.has(sentinelKey) {
			return false
		}
		for _, w := range watchers {
			if !w.has(sentinelKey) {
				return false
			}
		}
		return true
	})
	for i, w := range open {
		watchers[i].stop(w)
	}
	wg.Wait()

	want, errs := truth.snapshot()
	if len(errs) > 0 {
		t.Fatalf("etcd's watch: %v", errs)
	}
	want = slices.DeleteFunc(want, func(c change) bool { return c.rv > end })
	if len(want) < 3*nodes {
		t.Fatalf("etcd saw only %d pod changes during a rollout over %d nodes", len(want), nodes)
	}
	failures := 0
	for i, w := range watchers {
		got, errs := w.snapshot()
		got = slices.DeleteFunc(got, func(c change) bool { return c.rv > end })
		if len(errs) > 0 || !slices.Equal(got, want) {
			failures++
			if failures <= 3 {
				t.Errorf("watch %d: errors %v; %s", i, errs, diffChanges(got, want))
			}
		}
	}
	segMu.Lock()
	defer segMu.Unlock()
	churned := 0
	for _, s := range segments {
		got, errs := s.log.snapshot()
		churned += len(got)
		i, _ := slices.BinarySearchFunc(want, s.from+1, func(c change, rv int64) int { return cmp.Compare(c.rv, rv) })
		if len(errs) > 0 || len(got) > len(want)-i || !slices.Equal(got, want[i:i+len(got)]) {
			failures++
			if failures <= 3 {
				t.Errorf("churned watch from %d: errors %v; %s", s.from, errs, diffChanges(got, want[i:min(len(want), i+len(got))]))
			}
		}
	}
	if failures > 0 {
		t.Errorf("%d of %d watches differ from etcd's", failures, len(watchers)+len(segments))
	}
	slices.Sort(starts)
	t.Logf("rollout over %d nodes in %v: %d pod changes, %d long-lived watches; %d churned watches (%d changes); watch answered in median %v, p99 %v, max %v",
		nodes, rolloutTook.Round(time.Millisecond), len(want), len(watchers), len(segments), churned,
		starts[len(starts)/2], starts[len(starts)*99/100], starts[len(starts)-1])
	for _, d := range starts {
		if d > quickWatchStart {
			t.Errorf("a watch took %v to be answered, want < %v", d, quickWatchStart)
			break
		}
	}
	t.Logf("pods watch cache: %s", readWaits(t, c))
	if len(segments) < *flagWatchChurners {
		t.Errorf("only %d churned watches during the rollout", len(segments))
	}
}

// follow records w's pod changes in log until the watch ends. Every change must come after
// the last one (and after from) in resourceVersion order; an error event, a bookmark going
// backwards or an object of another kind is recorded as an error.
func follow(w watch.Interface, log *changeLog, from int64) {
	defer w.Stop()
	last := from
	for ev := range w.ResultChan() {
		if log.stopped.Load() {
			return
		}
		if ev.Type == watch.Error {
			log.fail("error event: %v", ev.Object)
			return
		}
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			log.fail("%s event with %T", ev.Type, ev.Object)
			return
		}
		rv, err := strconv.ParseInt(p.ResourceVersion, 10, 64)
		if err != nil {
			log.fail("%s %s/%s: resourceVersion %q", ev.Type, p.Namespace, p.Name, p.ResourceVersion)
			return
		}
		if ev.Type == watch.Bookmark {
			if rv < last {
				log.fail("bookmark at %d after a change at %d", rv, last)
			}
			continue
		}
		if rv <= last {
			log.fail("%s %s/%s at %d after %d: out of order or repeated", ev.Type, p.Namespace, p.Name, rv, last)
		}
		last = rv
		log.add(change{typ: ev.Type, key: p.Namespace + "/" + p.Name, rv: rv})
	}
}

// etcdPodChanges follows etcd's own watch of every pod from revision from on, as the truth
// the API's watches are held to.
func etcdPodChanges(t *testing.T, ctx context.Context, env *testenv.Env, from int64) *changeLog {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: env.EtcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	const prefix = "/registry/pods/"
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1))
	log := &changeLog{}
	go func() {
		for resp := range wch {
			if err := resp.Err(); err != nil {
				if wctx.Err() == nil {
					log.fail("etcd watch: %v", err)
				}
				return
			}
			for _, e := range resp.Events {
				c := change{typ: watch.Modified, key: strings.TrimPrefix(string(e.Kv.Key), prefix), rv: e.Kv.ModRevision}
				switch {
				case e.Type == clientv3.EventTypeDelete:
					c.typ = watch.Deleted
				case e.IsCreate():
					c.typ = watch.Added
				}
				log.add(c)
			}
		}
	}()
	return log
}

// waitRolledOut waits until every pod of ds runs the template of generation and is
// available.
func waitRolledOut(t *testing.T, c kubernetes.Interface, ds *appsv1.DaemonSet, generation int64) {
	t.Helper()
	poll.UntilErr(t, watchersTimeout, fmt.Sprintf("DaemonSet %s generation %d rolled out", ds.Name, generation), func() (bool, error) {
		cur, err := c.AppsV1().DaemonSets(ds.Namespace).Get(context.Background(), ds.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := cur.Status
		return s.ObservedGeneration >= generation && s.DesiredNumberScheduled > 0 &&
				s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled,
			fmt.Errorf("status %+v", s)
	})
}

// diffChanges describes the first difference between two change sequences.
func diffChanges(got, want []change) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("change %d is %v, want %v (%d vs %d changes)", i, got[i], want[i], len(got), len(want))
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d changes, want %d", len(got), len(want))
	}
	return "same changes"
}

// readWaits summarises the server's apiserver_watch_cache_read_wait_seconds for pods: how
// many reads waited for the watch cache, and how many of them waited up to each bound.
func readWaits(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	data, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	var buckets []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "apiserver_watch_cache_read_wait_seconds_bucket{") || !strings.Contains(line, `resource="pods"`) {
			continue
		}
		le := line[strings.Index(line, `le="`)+4:]
		le = le[:strings.Index(le, `"`)]
		buckets = append(buckets, "≤"+le+"s: "+strings.TrimSpace(line[strings.LastIndex(line, " "):]))
	}
	return "reads that waited, by wait: " + strings.Join(buckets, ", ")
}
