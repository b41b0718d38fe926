package apiserver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/miniplane/miniplane/store"
)

const (
	// watchQueueLimit is how many frames a watcher may fall behind before it is ended;
	// its client then resumes from its last resourceVersion out of the cache's history.
	watchQueueLimit = 100000
	// bookmarkInterval is how often watches that allow bookmarks get one, so clients can
	// resume from a recent resourceVersion even when their selection is quiet.
	bookmarkInterval = 30 * time.Second
)

// watch serves a watch from the watch cache: it registers a watcher for the request's
// selection and starting point, then streams its frames until the watch times out, the
// cache ends it or the client leaves.
func (c *call) watch() {
	p, err := parseListParams(c.r.URL.Query(), c.info.res)
	if err != nil {
		c.fail(err)
		return
	}
	w, err := c.openWatch(p)
	if err != nil {
		c.fail(err)
		return
	}
	defer c.info.res.cache.stopWatch(w)
	c.streamWatch(w, c.watchTimeout(p), p.allowWatchBookmarks)
}

// openWatch registers a watcher on the resource's cache. A start older than the cache's
// history is 410 Expired, which tells the client to list again.
func (c *call) openWatch(p *listParams) (*cacheWatcher, error) {
	res := c.info.res
	filter := &watchFilter{namespace: c.info.namespace, label: p.label, field: p.field}
	if c.info.name != "" {
		// The legacy single-object watch path is a watch with a name selector.
		filter.field = fields.AndSelectors(filter.field, fields.OneTermEqualSelector("metadata.name", c.info.name))
	}
	start, err := c.watchStart(p)
	if err != nil {
		return nil, err
	}
	w, err := res.cache.watch(filter, start, watchQueueLimit)
	if errors.Is(err, store.ErrExpired) {
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %s (%d)", p.resourceVersion, res.cache.currentRV()))
	}
	return w, err
}

// watchTimeout is how long the watch lasts: the client's timeoutSeconds, or a random
// time between the minimum request timeout and twice it, so that reconnections spread.
func (c *call) watchTimeout(p *listParams) time.Duration {
	if p.timeoutSeconds > 0 {
		return time.Duration(p.timeoutSeconds) * time.Second
	}
	minT := c.s.cfg.MinRequestTimeout
	return minT + time.Duration(rand.Int64N(int64(minT)))
}

// streamWatch writes the response and w's frames as they come, with a bookmark every
// bookmarkInterval when the client allows them, until the timeout (after a last batch),
// the cache ends the watch (likewise) or the client leaves.
func (c *call) streamWatch(w *cacheWatcher, timeout time.Duration, allowBookmarks bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var bookmarks <-chan time.Time
	if allowBookmarks {
		t := time.NewTicker(bookmarkInterval)
		defer t.Stop()
		bookmarks = t.C
	}
	out := c.beginWatchStream()
	if !out.send(w) {
		return
	}
	for {
		select {
		case <-w.signal:
			if !out.send(w) {
				return
			}
		case <-bookmarks:
			c.info.res.cache.bookmark(w)
		case <-w.done:
			out.send(w)
			return
		case <-timer.C:
			out.send(w)
			return
		case <-c.r.Context().Done():
			return
		}
	}
}

// watchStream writes the frames of one watch response.
type watchStream struct {
	c       *call
	flusher http.Flusher // nil when the ResponseWriter cannot flush
	counter prometheus.Counter
}

// beginWatchStream writes the response header and flushes it, so the client knows the
// watch is established before the first event.
func (c *call) beginWatchStream() *watchStream {
	flusher, _ := c.w.(http.Flusher)
	if c.out.protobuf {
		c.w.Header().Set("Content-Type", protobufStreamMediaType)
	} else {
		c.w.Header().Set("Content-Type", "application/json")
	}
	c.w.Header().Set("Cache-Control", "no-cache, private")
	c.w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	return &watchStream{c: c, flusher: flusher,
		counter: c.s.metrics.watchEvents.WithLabelValues(c.info.res.group, c.info.res.name)}
}

// watchBuffers lend a send its write buffer. A buffer is empty between sends, and `up` at
// 1,000 nodes has about sixty watches open, mostly idle: a buffer each held 3.7 MB of live
// heap, which the collector's goal doubles at the memory budget.
var watchBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// send writes every frame queued on w with a single flush, so a burst of events costs
// one flush. It returns false once the client can no longer be written to.
func (s *watchStream) send(w *cacheWatcher) bool {
	items := w.take()
	if len(items) == 0 {
		return true
	}
	bw := watchBuffers.Get().(*bufio.Writer)
	bw.Reset(s.c.w)
	defer func() {
		bw.Reset(nil) // drops the ResponseWriter and any write error
		watchBuffers.Put(bw)
	}()
	for _, it := range items {
		if err := s.c.writeWatchFrame(bw, it); err != nil {
			return false
		}
	}
	s.counter.Add(float64(len(items)))
	if err := bw.Flush(); err != nil {
		return false
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return true
}

// watchStart turns the list parameters into where the watch begins, following the
// Kubernetes semantics of resourceVersion, resourceVersionMatch and sendInitialEvents.
func (c *call) watchStart(p *listParams) (watchStart, error) {
	res := c.info.res
	ctx := c.r.Context()
	if p.sendInitialEvents != nil && *p.sendInitialEvents {
		var errs field.ErrorList
		if p.resourceVersionMatch != string(metav1.ResourceVersionMatchNotOlderThan) {
			errs = append(errs, field.Forbidden(field.NewPath("resourceVersionMatch"), "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
		}
		if !p.allowWatchBookmarks {
			errs = append(errs, field.Forbidden(field.NewPath("allowWatchBookmarks"), "sendInitialEvents requires allowWatchBookmarks to be set"))
		}
		if len(errs) > 0 {
			return watchStart{}, apierrors.NewInvalid(metav1.SchemeGroupVersion.WithKind("ListOptions").GroupKind(), "", errs)
		}
		switch p.resourceVersion {
		case "":
			// Consistent: the initial state holds every change committed before the call.
			if err := res.cache.waitFresh(ctx); err != nil && !errors.Is(err, errTooLargeRV) {
				return watchStart{}, err
			}
		case "0":
		default:
			if err := res.cache.waitForRV(ctx, rvInt(p.resourceVersion), waitForRVTimeout); err != nil {
				return watchStart{}, tooLargeRV(err)
			}
		}
		return watchStart{initialState: true, initialEventsEnd: true}, nil
	}
	switch p.resourceVersion {
	case "":
		if p.sendInitialEvents != nil { // explicitly false: start at the most recent change
			return watchStart{}, nil
		}
		if err := res.cache.waitFresh(ctx); err != nil && !errors.Is(err, errTooLargeRV) {
			return watchStart{}, err
		}
		return watchStart{initialState: true}, nil
	case "0":
		return watchStart{initialState: true}, nil
	}
	rv := rvInt(p.resourceVersion)
	if err := res.cache.waitForRV(ctx, rv, waitForRVTimeout); err != nil {
		return watchStart{}, tooLargeRV(err)
	}
	return watchStart{fromRV: rv}, nil
}

// initialEventsEndAnnotation marks the bookmark that ends the initial state of a watch
// with sendInitialEvents (metav1.InitialEventsAnnotationKey).
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

func (c *call) writeWatchFrame(bw *bufio.Writer, it watchItem) error {
	if c.out.protobuf {
		return c.writeWatchFrameProto(bw, it)
	}
	var objJSON []byte
	var err error
	if it.typ == watch.Bookmark {
		objJSON, err = c.bookmarkObject(it)
	} else {
		switch c.out.kind {
		case outputTable:
			objJSON, err = json.Marshal(c.s.toTable(c.info.res, []runtime.Object{it.obj.object()}, c.out, c.r.URL.Query().Get("includeObject"), metav1.ListMeta{ResourceVersion: strconv.FormatInt(it.obj.rv, 10)}))
		case outputMetadata:
			objJSON, err = json.Marshal(partialMetadata(it.obj.object()))
		default:
			objJSON, err = it.obj.json()
		}
	}
	if err != nil {
		return err
	}
	bw.WriteString(`{"type":"`)
	bw.WriteString(string(it.typ))
	bw.WriteString(`","object":`)
	bw.Write(objJSON)
	_, err = bw.WriteString("}\n")
	return err
}

// bookmarkObject is an object of the watched kind that carries only a resourceVersion
// (and, at the end of initial events, the annotation saying so).
func (c *call) bookmarkObject(it watchItem) ([]byte, error) {
	kind, apiVersion := c.info.res.kind, c.info.res.apiVersion()
	switch c.out.kind {
	case outputTable:
		kind, apiVersion = "Table", "meta.k8s.io/"+c.out.tableVersion
	case outputMetadata:
		kind, apiVersion = "PartialObjectMetadata", "meta.k8s.io/v1"
	}
	om := metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(it.rv, 10)}
	if it.initialEventsEnd {
		om.Annotations = map[string]string{initialEventsEndAnnotation: "true"}
	}
	if c.out.kind == outputTable {
		return json.Marshal(&metav1.Table{TypeMeta: metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}, ListMeta: metav1.ListMeta{ResourceVersion: om.ResourceVersion}})
	}
	return json.Marshal(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}, ObjectMeta: om})
}

// writeWatchFrameProto writes one length-delimited protobuf watch frame.
func (c *call) writeWatchFrameProto(bw *bufio.Writer, it watchItem) error {
	res := c.info.res
	var raw []byte
	var err error
	if it.typ == watch.Bookmark {
		obj := res.newFunc()
		m, _ := meta.Accessor(obj)
		m.SetResourceVersion(strconv.FormatInt(it.rv, 10))
		if it.initialEventsEnd {
			m.SetAnnotations(map[string]string{initialEventsEndAnnotation: "true"})
		}
		raw, err = rawProto(obj)
	} else {
		raw, err = it.obj.protobuf()
	}
	if err != nil {
		return err
	}
	return writeWatchEventProto(bw, string(it.typ), res.apiVersion(), res.kind, raw)
}
