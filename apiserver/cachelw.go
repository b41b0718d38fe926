package apiserver

import (
	"context"
	"errors"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/miniplane/miniplane/store"
)

// cacheListerWatcher lets a client-go informer inside the API server follow one resource
// straight from its watch cache, with no request, token or connection: what the library's
// admission webhook plugins read (webhook configurations, namespaces) is kept this way, as
// kube-apiserver keeps it with informers on its loopback client. Objects are deep copies:
// the cache's own are shared.
type cacheListerWatcher struct {
	s   *Server
	res *resource
	ctx context.Context
}

var _ cache.ListerWatcher = (*cacheListerWatcher)(nil)

// List returns every object of the resource and the cache's revision.
func (lw *cacheListerWatcher) List(metav1.ListOptions) (runtime.Object, error) {
	if err := lw.s.ensureCache(lw.ctx, lw.res); err != nil {
		return nil, err
	}
	items, rv := lw.res.cache.list(&watchFilter{})
	objs := make([]runtime.Object, len(items))
	for i, it := range items {
		objs[i] = it.object().DeepCopyObject()
	}
	list := lw.res.newListFunc()
	if err := meta.SetList(list, objs); err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	lm.SetResourceVersion(strconv.FormatInt(rv, 10))
	return list, nil
}

// Watch follows the cache from opts.ResourceVersion.
func (lw *cacheListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	from, err := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	if err != nil {
		return nil, apierrors.NewBadRequest("a cache watch needs the resourceVersion of a list")
	}
	w, err := lw.res.cache.watch(&watchFilter{}, watchStart{fromRV: from}, maxCacheLWQueue)
	if errors.Is(err, store.ErrExpired) {
		return nil, apierrors.NewResourceExpired(err.Error())
	}
	if err != nil {
		return nil, err
	}
	cw := &cacheWatch{result: make(chan watch.Event), stop: make(chan struct{})}
	go cw.pump(lw.ctx, lw.res.cache, w)
	return cw, nil
}

// maxCacheLWQueue is how far an in-server informer may fall behind before its watch ends
// and it lists again. Webhook configurations and namespaces change seldom.
const maxCacheLWQueue = 1024

// cacheWatch is a cache watcher as a watch.Interface.
type cacheWatch struct {
	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (cw *cacheWatch) Stop() { cw.stopOnce.Do(func() { close(cw.stop) }) }

func (cw *cacheWatch) ResultChan() <-chan watch.Event { return cw.result }

// pump hands w's frames to the informer until either side stops. A watcher the cache
// dropped (it fell behind) ends the watch, and the informer lists again.
func (cw *cacheWatch) pump(ctx context.Context, c *cacher, w *cacheWatcher) {
	defer close(cw.result)
	defer c.stopWatch(w)
	send := func(items []watchItem) bool {
		for _, it := range items {
			if it.typ == watch.Bookmark {
				continue
			}
			select {
			case cw.result <- watch.Event{Type: it.typ, Object: it.obj.object().DeepCopyObject()}:
			case <-cw.stop:
				return false
			case <-ctx.Done():
				return false
			}
		}
		return true
	}
	for {
		if !send(w.take()) {
			return
		}
		select {
		case <-w.signal:
		case <-w.done:
			send(w.take()) // frames queued before the end still count
			return
		case <-cw.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}
