package apiserver

import (
	"errors"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/miniplane/miniplane/store"
)

// waitForRVTimeout bounds how long a read at a future resourceVersion waits for the cache,
// as kube-apiserver does before answering "Too large resource version".
const waitForRVTimeout = 3 * time.Second

// get serves GET of one object: from etcd for resourceVersion "" (a quorum read), from the
// watch cache otherwise.
func (c *call) get() {
	key := c.key(c.info.namespace, c.info.name)
	rv := c.r.URL.Query().Get("resourceVersion")
	if rv == "" {
		obj, err := c.s.storeFor(c.info.res).Get(c.r.Context(), key)
		if err != nil {
			c.fail(err)
			return
		}
		if c.info.res.custom != nil {
			c.info.res.custom.defaultOnRead(obj)
		}
		c.respond(200, obj, nil)
		return
	}
	if _, err := parseListParams(c.r.URL.Query(), c.info.res); err != nil {
		c.fail(err)
		return
	}
	if n := rvInt(rv); n > 0 {
		if err := c.info.res.cache.waitForRV(c.r.Context(), n, waitForRVTimeout); err != nil {
			c.fail(tooLargeRV(err))
			return
		}
	}
	co, ok := c.info.res.cache.get(key)
	if !ok {
		c.fail(store.ErrNotFound)
		return
	}
	c.respond(200, co.object(), co)
}

func tooLargeRV(err error) error {
	if errors.Is(err, errTooLargeRV) {
		se := apierrors.NewTimeoutError("Too large resource version", 1)
		se.ErrStatus.Details.Causes = append(se.ErrStatus.Details.Causes, metaCause("ResourceVersionTooLarge", "Too large resource version"))
		return se
	}
	return err
}

// list serves LIST. The watch cache answers resourceVersion "0" (any state), "" without a
// limit (after catching up with etcd, so the answer is as fresh as a quorum read) and
// "N" (not older than N). etcd answers paginated lists, continuations and exact reads, so
// continue tokens stay consistent snapshots.
func (c *call) list() {
	p, err := parseListParams(c.r.URL.Query(), c.info.res)
	if err != nil {
		c.fail(err)
		return
	}
	filter := &watchFilter{namespace: c.info.namespace, label: p.label, field: p.field}
	fromEtcd := p.continueToken != "" ||
		(p.limit > 0 && p.resourceVersion == "") ||
		(p.resourceVersionMatch == "Exact")
	if fromEtcd {
		c.listFromEtcd(p, filter)
		return
	}
	switch {
	case p.resourceVersion == "":
		if err := c.info.res.cache.waitFresh(c.r.Context()); err != nil {
			c.listFromEtcd(p, filter) // the cache lags: etcd still gives a correct answer
			return
		}
	case p.resourceVersion != "0":
		if err := c.info.res.cache.waitForRV(c.r.Context(), rvInt(p.resourceVersion), waitForRVTimeout); err != nil {
			c.fail(tooLargeRV(err))
			return
		}
	}
	items, rv := c.info.res.cache.list(filter)
	c.respondList(items, rv, "", nil)
}

func (c *call) listFromEtcd(p *listParams, filter *watchFilter) {
	res := c.info.res
	opts := store.ListOptions{Limit: p.limit, Continue: p.continueToken}
	if p.resourceVersionMatch == "Exact" {
		opts.Revision = rvInt(p.resourceVersion)
	}
	// The namespace is already in the key prefix; a predicate is needed only for selectors
	// (and without one etcd can report how many items remain).
	if !filter.label.Empty() || !filter.field.Empty() {
		opts.Predicate = func(obj runtime.Object) bool { return filter.matchesObject(res, obj) }
	}
	result, err := c.s.storeFor(res).List(c.r.Context(), res.keyPrefix(c.s.cfg.EtcdPrefix, c.info.namespace), opts)
	if err != nil {
		c.fail(err)
		return
	}
	items := make([]*cachedObject, 0, len(result.Items))
	for _, obj := range result.Items {
		co, err := res.cache.newCachedObject(obj)
		if err != nil {
			c.fail(err)
			return
		}
		items = append(items, co)
	}
	c.respondList(items, result.Revision, result.Continue, result.RemainingItemCount)
}

// respondList writes a list in the negotiated shape.
func (c *call) respondList(items []*cachedObject, rv int64, continueToken string, remaining *int64) {
	listMeta := metav1.ListMeta{ResourceVersion: strconv.FormatInt(rv, 10), Continue: continueToken, RemainingItemCount: remaining}
	switch c.out.kind {
	case outputTable:
		objs := make([]runtime.Object, len(items))
		for i, it := range items {
			objs[i] = it.object()
		}
		writeOutput(c.w, c.out, 200, c.s.toTable(c.info.res, objs, c.out, c.r.URL.Query().Get("includeObject"), listMeta))
	case outputMetadata:
		list := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadataList", APIVersion: "meta.k8s.io/v1"}, ListMeta: listMeta}
		for _, it := range items {
			list.Items = append(list.Items, *partialMetadata(it.object()))
		}
		writeOutput(c.w, c.out, 200, list)
	default:
		encoded := make([][]byte, len(items))
		if c.out.protobuf {
			for i, it := range items {
				raw, err := it.protobuf()
				if err != nil {
					c.fail(err)
					return
				}
				encoded[i] = raw
			}
			writeEnveloped(c.w, 200, c.info.res.apiVersion(), c.info.res.listKind(), listProto(listMeta, encoded))
			return
		}
		for i, it := range items {
			data, err := it.json()
			if err != nil {
				c.fail(err)
				return
			}
			encoded[i] = data
		}
		writeBytes(c.w, 200, listJSON(c.info.res.listKind(), c.info.res.apiVersion(), listMeta, encoded), c.out.yaml)
	}
}

func metaCause(typ, msg string) metav1.StatusCause {
	return metav1.StatusCause{Type: metav1.CauseType(typ), Message: msg}
}
