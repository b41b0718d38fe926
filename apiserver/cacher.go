package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/miniplane/miniplane/store"
)

// cachedObject is one stored version of an object as the watch cache keeps it. It is
// immutable once built and shared by every reader: handlers deep-copy what object returns
// before changing anything.
//
// A version that has been superseded (or deleted) for a while is only read by watches that
// replay history, and most of those speak protobuf: compact then drops the decoded object,
// three times the size of its encoding, and packs the encoding. A current version that has
// not changed for as long loses its decoded object too, keeping the encoding whole, since
// the components list and watch in protobuf. object decodes either again for the reader
// that needs it (docs/watch-cache.md, "Memory").
type cachedObject struct {
	key       string
	namespace string
	name      string
	rv        int64
	res       *resource
	// decoded holds the object until compact drops it; nil after that.
	decoded atomic.Pointer[decodedObject]
	labels  labels.Set
	fields  fieldValues
	// The object's JSON (with apiVersion and kind) and protobuf (without envelope)
	// encodings are made on first use and then reused by every list, get and watch event
	// that serves this version. Components speak protobuf and kubectl JSON, so most
	// versions only ever need one of them. The JSON is kept only until compact: a
	// compacted version is read by lists and by watches that lag, not by many at once.
	jsonMu    sync.Mutex
	jsonData  []byte
	protoOnce sync.Once
	proto     atomic.Pointer[protoEncoding] // set by protoOnce, replaced by compact
	protoErr  error
}

// decodedObject boxes an object for an atomic pointer.
type decodedObject struct{ obj runtime.Object }

func newCachedObjectOf(res *resource, obj runtime.Object) *cachedObject {
	o := &cachedObject{res: res}
	o.decoded.Store(&decodedObject{obj})
	return o
}

// object returns the decoded object: the one the cache was given, or, once compacted, a
// fresh decoding of its protobuf encoding.
func (o *cachedObject) object() runtime.Object {
	if d := o.decoded.Load(); d != nil {
		return d.obj
	}
	// compact stores nil only after the encoding was made, so proto is set here.
	data, err := o.proto.Load().bytes()
	if err != nil {
		panic(err.Error()) // the bytes are this server's own packing
	}
	obj := o.res.newFunc()
	if err := obj.(protoUnmarshaler).Unmarshal(data); err != nil {
		// The bytes are this server's own encoding of a valid object.
		panic(fmt.Sprintf("watch cache: decoding %s at %d: %v", o.key, o.rv, err))
	}
	obj.GetObjectKind().SetGroupVersionKind(o.res.gvk())
	return obj
}

// compact drops the decoded object and its JSON, keeping only the protobuf encoding, when
// the kind has one (custom resources have none and stay decoded); with a packer it packs
// the encoding as well. Compacting one version twice at once is not allowed (the cache's
// lock serializes it); once compacted, it may be compacted again to pack it.
func (o *cachedObject) compact(pack *packer) {
	if o.decoded.Load() != nil {
		if data, err := o.protobuf(); err != nil || data == nil {
			return
		}
	}
	// The encoding is set now: made above, or before an earlier compact dropped the object.
	if e := o.proto.Load(); pack != nil && e.raw != nil {
		if packed := pack.pack(e.raw); packed != nil {
			o.proto.Store(packed)
		}
	}
	o.decoded.Store(nil)
	o.jsonMu.Lock()
	o.jsonData = nil
	o.jsonMu.Unlock()
}

// protobuf returns the object's protobuf encoding, making it once. The bytes of a compacted
// version are a fresh unpacked copy.
func (o *cachedObject) protobuf() ([]byte, error) {
	o.protoOnce.Do(func() {
		data, err := rawProto(o.object())
		o.protoErr = err
		o.proto.Store(&protoEncoding{raw: data})
	})
	if o.protoErr != nil {
		return nil, o.protoErr
	}
	return o.proto.Load().bytes()
}

// json returns the object's JSON encoding, made on first use and kept until compact.
func (o *cachedObject) json() ([]byte, error) {
	o.jsonMu.Lock()
	defer o.jsonMu.Unlock()
	if o.jsonData != nil {
		return o.jsonData, nil
	}
	data, err := json.Marshal(o.object())
	if err == nil && o.decoded.Load() != nil {
		o.jsonData = data
	}
	return data, err
}

// cacheEvent is one change, in revision order.
type cacheEvent struct {
	typ  watch.EventType // Added, Modified or Deleted
	cur  *cachedObject   // the new state; for Deleted the last state, at the deletion revision
	prev *cachedObject   // the previous state; nil for Added
	rv   int64
	at   time.Duration // when the cache applied it, on the cache's clock since its start
}

// cacheSource is the part of the store a watch cache reads: a list to start from, a
// watch to follow, and revisions to know how fresh it is. store.Store is one; unit tests
// feed a cache from a fake.
type cacheSource interface {
	List(ctx context.Context, prefix string, opts store.ListOptions) (*store.ListResult, error)
	Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan store.Event, error)
	RequestProgress(ctx context.Context, prefix string) error
	CurrentRevision(ctx context.Context) (int64, error)
}

var _ cacheSource = store.Store(nil)

// cacher is the watch cache of one resource: a copy of every object, kept current by one
// etcd watch, and a window of recent changes from which watches resume. It lets thousands
// of watchers and most lists cost no etcd reads at all.
//
// Invariants, under mu: every change with revision ≤ rv has been applied to objects and
// dispatched to every registered watcher; history holds every change with revision in
// (evictedRV, rv], oldest first.
type cacher struct {
	res         *resource
	store       cacheSource
	root        string // the store-wide key prefix, e.g. /registry
	prefix      string // the resource's key prefix
	historySize int
	// born is when the cache was made: changes are stamped with the time since, a
	// monotonic reading that wall-clock steps do not move.
	born time.Time
	// clock paces the cache's waits on etcd: how long a read waits for a revision, how
	// often progress is asked for, when a lost watch is retried. These follow etcd's
	// real time, so the server gives every cache the real clock; unit tests step a
	// fake one.
	clock clock.Clock
	log   *slog.Logger

	mu        sync.RWMutex
	ready     bool
	objects   map[string]*cachedObject
	rv        int64
	history   []*cacheEvent // ring buffer
	hStart    int
	hLen      int
	evictedRV int64
	watchers  map[*cacheWatcher]struct{}
	packer    packer // packs the encodings of the versions it compacts
	// advanced is closed and replaced whenever rv grows, waking waitForRV callers.
	advanced chan struct{}

	// onEvent, when set, is told of every change applied, with the object's key and
	// namespace (after a re-list, of every object); it runs under mu and must be quick.
	onEvent func(key, namespace string)
	// progress asks etcd where the cache's watch is while reads wait for a revision.
	progress *progressRequester
	// readWait, when set, observes how long each read that had to wait did.
	readWait prometheus.Observer
}

func newCacher(res *resource, st cacheSource, root string, historySize int, clk clock.Clock, log *slog.Logger) *cacher {
	c := &cacher{
		res: res, store: st, root: root, prefix: res.keyPrefix(root, ""), historySize: historySize,
		clock:    clk,
		born:     clk.Now(),
		log:      log.With("resource", res.name),
		objects:  map[string]*cachedObject{},
		history:  make([]*cacheEvent, min(historySize, initialHistory)),
		watchers: map[*cacheWatcher]struct{}{},
		advanced: make(chan struct{}),
	}
	c.progress = newProgressRequester(func(ctx context.Context) error {
		return st.RequestProgress(ctx, c.prefix)
	}, clk, c.log)
	return c
}

// run keeps the cache current until ctx ends, re-listing after any watch failure: a
// second later, and when lists keep failing (a custom resource's conversion webhook that
// is down) twice as long after each, up to relistMaxDelay.
func (c *cacher) run(ctx context.Context) {
	go c.progress.run(ctx)
	var delay time.Duration
	for {
		listed, err := c.listAndWatch(ctx)
		if ctx.Err() != nil {
			c.terminateAll()
			return
		}
		delay = relistDelay(delay, listed)
		c.log.Warn("watch cache lost its etcd watch; re-listing", "err", err, "after", delay)
		select {
		case <-ctx.Done():
			c.terminateAll()
			return
		case <-c.clock.After(delay):
		}
	}
}

// relistDelay is the wait before the next list, given the wait before the last one (0 for
// none) and whether that list succeeded.
func relistDelay(last time.Duration, listed bool) time.Duration {
	if listed || last == 0 {
		return time.Second
	}
	return min(2*last, relistMaxDelay)
}

// relistMaxDelay bounds the wait between lists that fail.
const relistMaxDelay = 30 * time.Second

// listAndWatch fills the cache from a list and follows the watch from there, until the
// watch fails; listed reports whether the list succeeded.
func (c *cacher) listAndWatch(ctx context.Context) (listed bool, err error) {
	list, err := c.store.List(ctx, c.prefix, store.ListOptions{})
	if err != nil {
		return false, err
	}
	objects := make(map[string]*cachedObject, len(list.Items))
	for _, obj := range list.Items {
		co, err := c.newCachedObject(obj)
		if err != nil {
			return false, err
		}
		objects[co.key] = co
	}
	c.mu.Lock()
	// Watchers registered before a re-list may have missed changes: end them so their
	// clients resume (or re-list on 410) against the new state.
	for w := range c.watchers {
		w.terminate()
	}
	c.watchers = map[*cacheWatcher]struct{}{}
	old, relisted := c.objects, c.ready
	c.objects = objects
	c.history, c.hStart, c.hLen = make([]*cacheEvent, min(c.historySize, initialHistory)), 0, 0
	c.evictedRV = list.Revision
	c.setRVLocked(list.Revision)
	c.ready = true
	if relisted && c.onEvent != nil {
		// What changed while the watch was lost came with no event: tell of every object
		// that may have (RBAC would otherwise go on deciding from the old bindings).
		for key, co := range old {
			if _, ok := objects[key]; !ok {
				c.onEvent(key, co.namespace)
			}
		}
		for key, co := range objects {
			c.onEvent(key, co.namespace)
		}
	}
	c.mu.Unlock()

	events, err := c.store.Watch(ctx, c.prefix, list.Revision)
	if err != nil {
		return true, err
	}
	for ev := range events {
		switch ev.Type {
		case store.ErrorEvent:
			return true, ev.Err
		case store.Progress:
			c.mu.Lock()
			if ev.Revision > c.rv {
				c.setRVLocked(ev.Revision)
			}
			c.mu.Unlock()
		default:
			if err := c.apply(ev); err != nil {
				c.log.Error("watch cache skipped an event", "key", ev.Key, "err", err)
			}
		}
	}
	return true, errors.New("etcd watch ended")
}

// newCachedObject wraps an object decoded from etcd (a custom resource gets its schema's
// defaults first, see defaultOnRead).
func (c *cacher) newCachedObject(obj runtime.Object) (*cachedObject, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if c.res.custom != nil {
		c.res.custom.defaultOnRead(obj)
	}
	obj.GetObjectKind().SetGroupVersionKind(c.res.gvk())
	var rv int64
	_, _ = fmt.Sscan(m.GetResourceVersion(), &rv)
	co := newCachedObjectOf(c.res, obj)
	co.key = c.res.key(c.root, m.GetNamespace(), m.GetName())
	co.namespace, co.name, co.rv = m.GetNamespace(), m.GetName(), rv
	co.labels = labels.Set(m.GetLabels())
	co.fields = c.res.objectFields(obj, m.GetName(), m.GetNamespace())
	return co, nil
}

func (c *cacher) apply(ev store.Event) error {
	obj := ev.Object
	if ev.Type == store.Deleted {
		var err error
		if obj, err = c.lastState(ev.Key, ev.Revision); err != nil {
			return err
		}
	}
	cur, err := c.newCachedObject(obj)
	if err != nil {
		return err
	}
	ce := &cacheEvent{cur: cur, rv: ev.Revision, at: c.clock.Since(c.born)}
	c.mu.Lock()
	defer c.mu.Unlock()
	ce.prev = c.objects[cur.key]
	if ce.prev != nil {
		// Most changes (status updates) leave the labels and the selectable fields as
		// they were: the versions then share one copy of each, which history would
		// otherwise hold once per version (a map of a dozen fields per pod version).
		if cur.fields.equal(&ce.prev.fields) {
			cur.fields.values = ce.prev.fields.values
		}
		if maps.Equal(cur.labels, ce.prev.labels) {
			cur.labels = ce.prev.labels
		}
	}
	switch ev.Type {
	case store.Added:
		ce.typ = watch.Added
		c.objects[cur.key] = cur
	case store.Modified:
		ce.typ = watch.Modified
		c.objects[cur.key] = cur
	case store.Deleted:
		ce.typ = watch.Deleted
		delete(c.objects, cur.key)
	}
	if ce.prev == nil && ce.typ == watch.Modified {
		ce.typ = watch.Added // cannot happen with an in-order watch; be safe for filters
	}
	c.pushHistoryLocked(ce)
	for w := range c.watchers {
		if !w.offer(ce) {
			c.log.Debug("terminating a watcher that fell too far behind")
			w.terminate()
			delete(c.watchers, w)
		}
	}
	c.setRVLocked(ev.Revision)
	if c.onEvent != nil {
		c.onEvent(cur.key, cur.namespace)
	}
	return nil
}

// lastState is the object a Deleted event reports: the cache's last state of key, at the
// revision of the deletion, as kube-apiserver reports it. The store's watch does not send
// it (store.Event), and the cache holds every key whose deletion the watch can report: those
// of the list it started from and those added since.
func (c *cacher) lastState(key string, rev int64) (runtime.Object, error) {
	c.mu.Lock()
	last := c.objects[key]
	c.mu.Unlock()
	if last == nil {
		return nil, fmt.Errorf("deletion at revision %d of an object the cache does not hold", rev)
	}
	obj := last.object().DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetResourceVersion(strconv.FormatInt(rev, 10))
	return obj, nil
}

// initialHistory is the ring's first size. It doubles as changes come, up to historySize:
// most of the seventy-odd resources see a few changes in a run, and a full ring of each
// from the start held 6 MB of the API server's heap (docs/watch-cache.md, "Memory").
const initialHistory = 64

func (c *cacher) pushHistoryLocked(ev *cacheEvent) {
	if c.hLen == len(c.history) && len(c.history) < c.historySize {
		// A ring that filled over a long quiet time need not grow: let the window go first.
		c.expireLocked(ev.at)
	}
	if c.hLen == len(c.history) && len(c.history) < c.historySize {
		c.resizeLocked(min(2*len(c.history), c.historySize))
	}
	if c.hLen == len(c.history) {
		c.dropOldestLocked()
	}
	c.history[(c.hStart+c.hLen)%len(c.history)] = ev
	c.hLen++
	c.compactOldLocked()
}

func (c *cacher) resizeLocked(size int) {
	resized := make([]*cacheEvent, size)
	for i := range c.hLen {
		resized[i] = c.history[(c.hStart+i)%len(c.history)]
	}
	c.history, c.hStart = resized, 0
}

func (c *cacher) dropOldestLocked() {
	c.evictedRV = c.history[c.hStart].rv
	c.history[c.hStart] = nil
	c.hStart = (c.hStart + 1) % len(c.history)
	c.hLen--
}

// historyWindow is how long a change stays in history once minHistory newer changes of
// its resource have followed it. Clients resume watches from the revisions of their last
// event or bookmark, seconds old; after a burst (a rollout over thousands of nodes) the
// full ring of old pod versions was the largest part of an idle server's heap
// (docs/watch-cache.md, "Memory"). kube-apiserver's watch cache also keeps about the last
// 75 s, and at least 100 changes.
const historyWindow = 75 * time.Second

// minHistory is how many of the newest changes stay in history, however old: a client
// that saw the last change of a quiet resource can still resume from it.
const minHistory = 100

// expireHistory forgets the changes that historyWindow has passed, beyond the newest
// minHistory, and gives the ring back the room they took. Their versions are compacted
// first when they are recent enough not to be already: the current ones are then kept
// encoded, as those of a busier resource would have been.
func (c *cacher) expireHistory() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(c.clock.Since(c.born))
	size := len(c.history)
	for size/2 >= max(initialHistory, 2*c.hLen) {
		size /= 2
	}
	if size < len(c.history) {
		c.resizeLocked(size)
	}
}

// expireLocked drops the changes older than historyWindow at now, keeping minHistory.
func (c *cacher) expireLocked(now time.Duration) {
	for c.hLen > minHistory {
		ev := c.history[c.hStart]
		if now-ev.at < historyWindow {
			return
		}
		if c.hLen <= compactLag {
			c.compactLocked(ev)
		}
		c.dropOldestLocked()
	}
}

// compactLag is how many changes of a resource a version stays decoded after the change
// that made it, or that superseded it: watchers that keep up read it decoded, and only a
// watch that replays older history (or lags further behind) decodes it again. The current
// version of an object that has not changed for that long is compacted too: in a fleet of
// thousands most Nodes and Pods sit unchanged between bursts, and their decoded copies were
// most of the cache (docs/watch-cache.md, "Memory").
const compactLag = 500

// compactOldLocked compacts the change compactLag back in history.
func (c *cacher) compactOldLocked() {
	if c.hLen <= compactLag {
		return
	}
	c.compactLocked(c.history[(c.hStart+c.hLen-1-compactLag)%len(c.history)])
}

// compactLocked compacts and packs the versions of one change: the state it replaced and
// its own, current or not.
func (c *cacher) compactLocked(ev *cacheEvent) {
	if ev.prev != nil {
		ev.prev.compact(&c.packer)
	}
	ev.cur.compact(&c.packer)
}

func (c *cacher) setRVLocked(rv int64) {
	c.rv = rv
	close(c.advanced)
	c.advanced = make(chan struct{})
}

// currentRV returns the revision the cache has reached.
func (c *cacher) currentRV() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rv
}

// errTooLargeRV means the cache did not reach a requested revision in time.
var errTooLargeRV = errors.New("too large resource version")

// waitForRV blocks until the cache has reached rv, for at most timeout.
//
// Every revision the server hands out (a write's, a list's) is a store revision, and
// most of them are changes to other resources: this cache's watch sees nothing at them,
// so waiting for a change of its own could take as long as the resource stays quiet.
// While it waits, the cache asks etcd for a progress report, which tells it within
// milliseconds that its watch has seen everything up to the store's current revision.
func (c *cacher) waitForRV(ctx context.Context, rv int64, timeout time.Duration) error {
	c.mu.RLock()
	reached := c.ready && c.rv >= rv
	c.mu.RUnlock()
	if reached {
		return nil
	}
	if c.readWait != nil {
		start := c.clock.Now()
		defer func() { c.readWait.Observe(c.clock.Since(start).Seconds()) }()
	}
	deadline := c.clock.NewTimer(timeout)
	defer deadline.Stop()
	asking := false
	defer func() {
		if asking {
			c.progress.done()
		}
	}()
	for {
		c.mu.RLock()
		reached, ready, advanced := c.rv >= rv, c.ready, c.advanced
		c.mu.RUnlock()
		if ready && reached {
			return nil
		}
		// Until the first list is in, there is no watch to report on.
		if ready && !asking {
			c.progress.add()
			asking = true
		}
		select {
		case <-advanced:
		case <-deadline.C():
			return errTooLargeRV
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitFresh blocks until the cache holds every change committed to etcd before the call,
// so that a list served from it is as consistent as a quorum read: it reads the store's
// current revision (with quorum) and waits for the cache to reach it.
func (c *cacher) waitFresh(ctx context.Context) error {
	rev, err := c.store.CurrentRevision(ctx)
	if err != nil {
		return err
	}
	return c.waitForRV(ctx, rev, waitForRVTimeout)
}

// len is how many objects the cache holds.
func (c *cacher) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.objects)
}

// get returns the cached version of key.
func (c *cacher) get(key string) (*cachedObject, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	o, ok := c.objects[key]
	return o, ok
}

// list returns the objects f matches, sorted by key, and the cache's revision.
func (c *cacher) list(f *watchFilter) ([]*cachedObject, int64) {
	c.mu.RLock()
	out := make([]*cachedObject, 0, len(c.objects))
	for _, o := range c.objects {
		if f.matches(o) {
			out = append(out, o)
		}
	}
	rv := c.rv
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, rv
}

// watchStart says where a new watch begins.
type watchStart struct {
	// fromRV > 0 replays changes after that revision; 0 starts with the current state.
	fromRV int64
	// initialState sends the current state as ADDED events first (resourceVersion "0",
	// or "" with sendInitialEvents).
	initialState bool
	// initialEventsEnd ends the initial state with a bookmark carrying the
	// k8s.io/initial-events-end annotation (sendInitialEvents=true).
	initialEventsEnd bool
}

// watch registers a watcher. It fails with ErrExpired (410) when fromRV is older than the
// history the cache still holds.
func (c *cacher) watch(f *watchFilter, start watchStart, maxQueue int) (*cacheWatcher, error) {
	w := newCacheWatcher(f, maxQueue)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case start.initialState:
		keys := make([]string, 0, len(c.objects))
		for k, o := range c.objects {
			if f.matches(o) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			w.queue = append(w.queue, watchItem{typ: watch.Added, obj: c.objects[k]})
		}
		if start.initialEventsEnd {
			w.queue = append(w.queue, watchItem{typ: watch.Bookmark, rv: c.rv, initialEventsEnd: true})
		}
	case start.fromRV > 0:
		if start.fromRV < c.evictedRV {
			return nil, store.ErrExpired
		}
		for i := 0; i < c.hLen; i++ {
			ev := c.history[(c.hStart+i)%len(c.history)]
			if ev.rv > start.fromRV {
				w.offer(ev)
			}
		}
	}
	c.watchers[w] = struct{}{}
	return w, nil
}

// stopWatch unregisters w.
func (c *cacher) stopWatch(w *cacheWatcher) {
	c.mu.Lock()
	delete(c.watchers, w)
	c.mu.Unlock()
	w.terminate()
}

// bookmark queues a BOOKMARK at the cache's revision for w. Holding the read lock keeps
// dispatch out, so every change up to that revision is already queued before it.
func (c *cacher) bookmark(w *cacheWatcher) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	w.enqueue(watchItem{typ: watch.Bookmark, rv: c.rv})
}

func (c *cacher) terminateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.watchers {
		w.terminate()
	}
	c.watchers = map[*cacheWatcher]struct{}{}
}

func (c *cacher) watcherCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.watchers)
}

// watchFilter selects the objects a list or watch is about.
type watchFilter struct {
	namespace string
	label     labels.Selector
	field     fields.Selector
}

func (f *watchFilter) matches(o *cachedObject) bool {
	if f.namespace != "" && o.namespace != f.namespace {
		return false
	}
	if f.label != nil && !f.label.Empty() && !f.label.Matches(o.labels) {
		return false
	}
	if f.field != nil && !f.field.Empty() && !f.field.Matches(&o.fields) {
		return false
	}
	return true
}

// matchesObject is matches for an object not (yet) in the cache.
func (f *watchFilter) matchesObject(res *resource, obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if f.namespace != "" && m.GetNamespace() != f.namespace {
		return false
	}
	if f.label != nil && !f.label.Empty() && !f.label.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	if f.field != nil && !f.field.Empty() {
		fv := res.objectFields(obj, m.GetName(), m.GetNamespace())
		if !f.field.Matches(&fv) {
			return false
		}
	}
	return true
}

// watchItem is one frame a watcher will send.
type watchItem struct {
	typ              watch.EventType
	obj              *cachedObject
	rv               int64 // for bookmarks
	initialEventsEnd bool
}

// cacheWatcher buffers the frames of one watch request. The dispatcher appends under a
// short lock and never blocks; the request's goroutine takes the whole queue at once and
// writes it with a single flush, so bursts cost one flush, not one per event. A watcher
// that falls maxQueue frames behind is terminated; its client resumes from its last
// resourceVersion.
type cacheWatcher struct {
	filter   *watchFilter
	maxQueue int

	mu      sync.Mutex
	queue   []watchItem
	signal  chan struct{}
	done    chan struct{}
	stopped bool
}

func newCacheWatcher(f *watchFilter, maxQueue int) *cacheWatcher {
	return &cacheWatcher{filter: f, maxQueue: maxQueue, signal: make(chan struct{}, 1), done: make(chan struct{})}
}

// offer queues what ev means for this watcher given its filter: an object entering the
// selection is ADDED, one leaving it is DELETED. It returns false when the queue is full.
func (w *cacheWatcher) offer(ev *cacheEvent) bool {
	curMatch := w.filter.matches(ev.cur)
	prevMatch := ev.prev != nil && w.filter.matches(ev.prev)
	var typ watch.EventType
	switch ev.typ {
	case watch.Added:
		if !curMatch {
			return true
		}
		typ = watch.Added
	case watch.Modified:
		switch {
		case curMatch && prevMatch:
			typ = watch.Modified
		case curMatch:
			typ = watch.Added
		case prevMatch:
			typ = watch.Deleted
		default:
			return true
		}
	case watch.Deleted:
		if !curMatch {
			return true
		}
		typ = watch.Deleted
	}
	return w.enqueue(watchItem{typ: typ, obj: ev.cur})
}

func (w *cacheWatcher) enqueue(item watchItem) bool {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return true
	}
	if len(w.queue) >= w.maxQueue {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, item)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
	return true
}

// take returns every queued frame and empties the queue.
func (w *cacheWatcher) take() []watchItem {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

func (w *cacheWatcher) terminate() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.done)
	}
}
