package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// predicatePageSize is how many keys a filtered, limited list reads per round trip:
// large enough that selective predicates do not cost a round trip per item.
const predicatePageSize = 1000

// EtcdStore implements Store on an etcd v3 cluster.
type EtcdStore struct {
	client *clientv3.Client
	codec  Codec
	leases leaseManager
	log    *slog.Logger

	// watching counts the open watches of each prefix, so that RequestProgress for a
	// prefix nobody watches does not open an idle etcd stream.
	watchMu  sync.Mutex
	watching map[string]int
}

var _ Store = (*EtcdStore)(nil)

// NewEtcdStore returns a Store over client that encodes objects with codec.
func NewEtcdStore(client *clientv3.Client, codec Codec, log *slog.Logger) *EtcdStore {
	if log == nil {
		log = slog.Default()
	}
	return &EtcdStore{client: client, codec: codec, leases: leaseManager{client: client}, log: log, watching: map[string]int{}}
}

// Client returns the underlying etcd client.
func (s *EtcdStore) Client() *clientv3.Client { return s.client }

func (s *EtcdStore) decode(kv *mvccpb.KeyValue) (runtime.Object, error) {
	obj, err := s.codec.Decode(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kv.Key, err)
	}
	if err := setResourceVersion(obj, kv.ModRevision); err != nil {
		return nil, err
	}
	return obj, nil
}

func setResourceVersion(obj runtime.Object, rev int64) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if rev == 0 {
		m.SetResourceVersion("")
	} else {
		m.SetResourceVersion(strconv.FormatInt(rev, 10))
	}
	return nil
}

// encodeForStorage encodes obj without its resourceVersion: the version lives in etcd's
// mod revision, never in the stored bytes.
func (s *EtcdStore) encodeForStorage(obj runtime.Object) ([]byte, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rv := m.GetResourceVersion()
	m.SetResourceVersion("")
	data, err := s.codec.Encode(obj)
	m.SetResourceVersion(rv)
	return data, err
}

// Create implements Store.
func (s *EtcdStore) Create(ctx context.Context, key string, obj runtime.Object, ttl time.Duration) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if m.GetResourceVersion() != "" {
		return nil, newError(ErrInvalidObject, key, "resourceVersion should not be set on objects to be created")
	}
	data, err := s.codec.Encode(obj)
	if err != nil {
		return nil, err
	}
	var opts []clientv3.OpOption
	if ttl > 0 {
		id, err := s.leases.get(ctx, ttl)
		if err != nil {
			return nil, err
		}
		opts = append(opts, clientv3.WithLease(id))
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(data), opts...)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", key, err)
	}
	if !resp.Succeeded {
		return nil, newError(ErrAlreadyExists, key, "%s already exists", key)
	}
	if err := setResourceVersion(obj, resp.Header.Revision); err != nil {
		return nil, err
	}
	return obj, nil
}

// Get implements Store.
func (s *EtcdStore) Get(ctx context.Context, key string) (runtime.Object, error) {
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, newError(ErrNotFound, key, "%s not found", key)
	}
	return s.decode(resp.Kvs[0])
}

// continueToken is the opaque pagination token, in the shape kube-apiserver uses so that
// tokens look familiar: the list's revision and the key (relative to the prefix) to resume at.
type continueToken struct {
	APIVersion string `json:"v"`
	Revision   int64  `json:"rv"`
	StartKey   string `json:"start"`
}

// inconsistentRevision in a continue token means "the newest revision".
const inconsistentRevision = -1

func encodeContinue(rev int64, nextKeyRel string) string {
	data, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", Revision: rev, StartKey: nextKeyRel})
	return base64.RawURLEncoding.EncodeToString(data)
}

func decodeContinue(token, prefix string) (rev int64, startKey string, err error) {
	data, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, "", newError(ErrInvalidObject, "", "continue key is not valid: %v", err)
	}
	var t continueToken
	if err := json.Unmarshal(data, &t); err != nil || t.APIVersion != "meta.k8s.io/v1" {
		return 0, "", newError(ErrInvalidObject, "", "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	}
	// Revision -1 (inconsistentRevision) is a token handed out with an expired one: it
	// continues at the newest revision.
	if t.Revision == 0 || t.Revision < inconsistentRevision || strings.Contains(t.StartKey, "..") || strings.HasPrefix(t.StartKey, "/") {
		return 0, "", newError(ErrInvalidObject, "", "continue key is not valid")
	}
	if t.Revision == inconsistentRevision {
		return 0, prefix + t.StartKey, nil
	}
	return t.Revision, prefix + t.StartKey, nil
}

// List implements Store.
func (s *EtcdStore) List(ctx context.Context, prefix string, opts ListOptions) (*ListResult, error) {
	rangeEnd := clientv3.GetPrefixRangeEnd(prefix)
	startKey := prefix
	rev := opts.Revision
	if opts.Continue != "" {
		var err error
		rev, startKey, err = decodeContinue(opts.Continue, prefix)
		if err != nil {
			return nil, err
		}
	}
	result := &ListResult{}
	pageSize := opts.Limit
	if opts.Predicate != nil && pageSize > 0 && pageSize < predicatePageSize {
		pageSize = predicatePageSize
	}
	for {
		getOpts := []clientv3.OpOption{clientv3.WithRange(rangeEnd)}
		if rev > 0 {
			getOpts = append(getOpts, clientv3.WithRev(rev))
		}
		if pageSize > 0 {
			getOpts = append(getOpts, clientv3.WithLimit(pageSize+1))
		}
		resp, err := s.client.Get(ctx, startKey, getOpts...)
		if err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				if opts.Continue != "" {
					return nil, &Error{Err: ErrExpired, Key: prefix,
						Message:  "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
						Continue: encodeContinue(inconsistentRevision, strings.TrimPrefix(startKey, prefix))}
				}
				return nil, newError(ErrExpired, prefix, "The resourceVersion for the provided list is too old.")
			}
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		kvs := resp.Kvs
		more := pageSize > 0 && int64(len(kvs)) > pageSize
		if more {
			kvs = kvs[:pageSize]
		}
		for i, kv := range kvs {
			obj, err := s.decode(kv)
			if err != nil {
				return nil, err
			}
			if opts.Predicate != nil && !opts.Predicate(obj) {
				continue
			}
			result.Items = append(result.Items, obj)
			if opts.Limit > 0 && int64(len(result.Items)) == opts.Limit {
				if i < len(kvs)-1 || more {
					next := string(kv.Key) + "\x00"
					result.Continue = encodeContinue(rev, strings.TrimPrefix(next, prefix))
					if opts.Predicate == nil {
						remaining := resp.Count - int64(i) - 1
						result.RemainingItemCount = &remaining
					}
				}
				result.Revision = rev
				return result, nil
			}
		}
		if !more {
			break
		}
		startKey = string(kvs[len(kvs)-1].Key) + "\x00"
	}
	result.Revision = rev
	return result, nil
}

// updateBase is the version of an object a GuaranteedUpdate attempt starts from: the decoded
// object, its stored bytes and its mod revision (the compare-and-swap condition).
type updateBase struct {
	obj  runtime.Object
	data []byte
	rev  int64
	// fromSuggestion marks a copy the caller passed in (a watch cache's), which may be
	// stale: any doubt about it is settled by reading etcd rather than by failing.
	fromSuggestion bool
}

// GuaranteedUpdate implements Store.
//
// Each attempt applies tryUpdate to a base version and writes the result in a transaction
// that succeeds only if the key's mod revision is still the base's. A lost race retries on
// the version the failed transaction read back, so the loop ends when a write lands, when
// tryUpdate fails on a version read from etcd, or when the key is gone.
func (s *EtcdStore) GuaranteedUpdate(ctx context.Context, key string, tryUpdate UpdateFunc, opts UpdateOptions) (runtime.Object, error) {
	base := s.suggestedBase(opts.Suggestion)
	for {
		if base == nil {
			var err error
			if base, err = s.readBase(ctx, key); err != nil {
				return nil, err
			}
		}
		cur := base.obj
		if base.fromSuggestion {
			cur = cur.DeepCopyObject() // the caller's copy is shared; one read from etcd is not
		}
		next, err := tryUpdate(cur)
		if err != nil {
			if base.fromSuggestion {
				// The error may come from the cached copy being stale (a resourceVersion
				// precondition fails against it): decide on what etcd holds.
				base = nil
				continue
			}
			return nil, err
		}
		op, unchanged, err := s.updateOp(ctx, key, base, next, opts.TTL)
		if err != nil {
			return nil, err
		}
		if unchanged {
			if base.fromSuggestion {
				// A cached copy may be stale: confirm against etcd before skipping.
				base = nil
				continue
			}
			// Nothing changed: no write, no new resourceVersion, as kube-apiserver.
			return next, setResourceVersion(next, base.rev)
		}
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", base.rev)).
			Then(op).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("update %s: %w", key, err)
		}
		if resp.Succeeded {
			if next == nil {
				return nil, nil
			}
			return next, setResourceVersion(next, resp.Header.Revision)
		}
		// Lost the race (or the suggestion was stale): retry on what is there now.
		if base, err = s.baseFrom(key, resp.Responses[0].GetResponseRange().Kvs); err != nil {
			return nil, err
		}
	}
}

// suggestedBase turns a caller's suggestion into the first attempt's base, or nil when there
// is none or it is unusable (no resourceVersion, or it does not encode). The suggestion is
// shared (other requests read the same cached object), so it is only read: the encoding
// without resourceVersion is made from a shallow copy.
func (s *EtcdStore) suggestedBase(suggestion runtime.Object) *updateBase {
	if suggestion == nil {
		return nil
	}
	var rev int64
	if _, rv, err := uidAndRV(suggestion); err == nil {
		rev, _ = strconv.ParseInt(rv, 10, 64)
	}
	if rev == 0 {
		return nil
	}
	data, err := s.encodeForStorage(shallowCopy(suggestion))
	if err != nil {
		return nil
	}
	return &updateBase{obj: suggestion, data: data, rev: rev, fromSuggestion: true}
}

// shallowCopy returns a copy of obj whose own metadata fields may be set without touching
// obj: a copy of the struct of a typed object (its ObjectMeta is a field of the struct, so
// the copy has its own; everything the metadata points to stays shared), and a deep copy of
// anything else (an unstructured object keeps its metadata in a shared map).
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if _, unstructured := obj.(runtime.Unstructured); unstructured || v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return obj.DeepCopyObject()
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	return cp.Interface().(runtime.Object)
}

// readBase reads key's current version from etcd.
func (s *EtcdStore) readBase(ctx context.Context, key string) (*updateBase, error) {
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return s.baseFrom(key, resp.Kvs)
}

// baseFrom decodes the version kvs holds (a Get's answer, or the Else branch of a lost
// transaction); no kvs means the key is gone.
func (s *EtcdStore) baseFrom(key string, kvs []*mvccpb.KeyValue) (*updateBase, error) {
	if len(kvs) == 0 {
		return nil, newError(ErrNotFound, key, "%s not found", key)
	}
	obj, err := s.decode(kvs[0])
	if err != nil {
		return nil, err
	}
	return &updateBase{obj: obj, data: kvs[0].Value, rev: kvs[0].ModRevision}, nil
}

// updateOp is the write that replaces base with next: a delete when next is nil, else a put
// (under a lease when ttl is positive). unchanged reports that next encodes to base's bytes
// and no TTL asks for a rewrite, so nothing needs writing.
func (s *EtcdStore) updateOp(ctx context.Context, key string, base *updateBase, next runtime.Object, ttl time.Duration) (op clientv3.Op, unchanged bool, err error) {
	if next == nil {
		return clientv3.OpDelete(key), false, nil
	}
	data, err := s.encodeForStorage(next)
	if err != nil {
		return clientv3.Op{}, false, err
	}
	if bytes.Equal(data, base.data) && ttl == 0 {
		return clientv3.Op{}, true, nil
	}
	var putOpts []clientv3.OpOption
	if ttl > 0 {
		id, err := s.leases.get(ctx, ttl)
		if err != nil {
			return clientv3.Op{}, false, err
		}
		putOpts = append(putOpts, clientv3.WithLease(id))
	}
	return clientv3.OpPut(key, string(data), putOpts...), false, nil
}

// Delete implements Store.
func (s *EtcdStore) Delete(ctx context.Context, key string, preconditions *Preconditions, validate func(cur runtime.Object) error) (runtime.Object, error) {
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	for {
		if len(resp.Kvs) == 0 {
			return nil, newError(ErrNotFound, key, "%s not found", key)
		}
		kv := resp.Kvs[0]
		cur, err := s.decode(kv)
		if err != nil {
			return nil, err
		}
		if err := preconditions.Check(key, cur); err != nil {
			return nil, err
		}
		if validate != nil {
			if err := validate(cur); err != nil {
				return nil, err
			}
		}
		txn, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(key)).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("delete %s: %w", key, err)
		}
		if txn.Succeeded {
			return cur, nil
		}
		resp = (*clientv3.GetResponse)(txn.Responses[0].GetResponseRange())
	}
}

// watchStreamKey is the gRPC metadata key that gives each watched prefix an etcd watch
// stream of its own. etcd answers a progress request on a stream only when every watch
// on that stream has caught up, and answers it for all of them at once: on one shared
// stream, a busy prefix would hold back the progress reports of every quiet one, and each
// request would wake every watch. The -bin suffix lets the prefix hold any byte.
const watchStreamKey = "miniplane-watch-prefix-bin"

// watchStreamCtx is ctx bound to prefix's watch stream. clientv3 picks a watch's stream,
// and the stream a progress request goes to, by the context's whole outgoing metadata, so
// it replaces any the caller's context carries: Watch and RequestProgress must agree.
func watchStreamCtx(ctx context.Context, prefix string) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(watchStreamKey, prefix))
}

// Watch implements Store.
func (s *EtcdStore) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan Event, error) {
	// No WithPrevKV: etcd would read every changed key's previous value back from its
	// backend for the event, and the watch cache already holds that state.
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithProgressNotify()}
	if fromRevision > 0 {
		opts = append(opts, clientv3.WithRev(fromRevision+1))
	}
	s.watchMu.Lock()
	s.watching[prefix]++
	s.watchMu.Unlock()
	wch := s.client.Watch(watchStreamCtx(ctx, prefix), prefix, opts...)
	out := make(chan Event, 256)
	go func() {
		defer close(out)
		defer func() {
			s.watchMu.Lock()
			if s.watching[prefix]--; s.watching[prefix] == 0 {
				delete(s.watching, prefix)
			}
			s.watchMu.Unlock()
		}()
		send := func(ev Event) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for resp := range wch {
			if resp.CompactRevision != 0 {
				send(Event{Type: ErrorEvent, Err: newError(ErrExpired, prefix,
					"too old resource version: %d (%d)", fromRevision, resp.CompactRevision)})
				return
			}
			if err := resp.Err(); err != nil {
				send(Event{Type: ErrorEvent, Err: fmt.Errorf("watch %s: %w", prefix, err)})
				return
			}
			if resp.IsProgressNotify() {
				if !send(Event{Type: Progress, Revision: resp.Header.Revision}) {
					return
				}
				continue
			}
			for _, e := range resp.Events {
				ev, err := s.toEvent(e)
				if err != nil {
					// A value we cannot decode is skipped rather than ending every watch on
					// the prefix; it is logged so it is not silent.
					s.log.Error("skipping undecodable watch event", "key", string(e.Kv.Key), "err", err)
					continue
				}
				if !send(ev) {
					return
				}
			}
		}
		if ctx.Err() == nil {
			send(Event{Type: ErrorEvent, Err: fmt.Errorf("watch %s: etcd closed the watch", prefix)})
		}
	}()
	return out, nil
}

func (s *EtcdStore) toEvent(e *clientv3.Event) (Event, error) {
	ev := Event{Key: string(e.Kv.Key), Revision: e.Kv.ModRevision}
	var err error
	switch {
	case e.Type == clientv3.EventTypeDelete:
		ev.Type = Deleted
	case e.IsCreate():
		ev.Type = Added
		ev.Object, err = s.decode(e.Kv)
	default:
		ev.Type = Modified
		ev.Object, err = s.decode(e.Kv)
	}
	return ev, err
}

// RequestProgress implements Store.
//
// etcd (3.5 and later) answers on the prefix's stream with one notification for all its
// watches, at its current revision, and only once each of them has sent everything up to
// it; otherwise it drops the request, hence the contract's "ask again".
func (s *EtcdStore) RequestProgress(ctx context.Context, prefix string) error {
	s.watchMu.Lock()
	open := s.watching[prefix] > 0
	s.watchMu.Unlock()
	if !open {
		return nil
	}
	if err := s.client.RequestProgress(watchStreamCtx(ctx, prefix)); err != nil {
		return fmt.Errorf("progress request %s: %w", prefix, err)
	}
	return nil
}

// CurrentRevision implements Store.
func (s *EtcdStore) CurrentRevision(ctx context.Context) (int64, error) {
	// A count-only range read is linearizable and cheap; its header carries the revision.
	resp, err := s.client.Get(ctx, "/", clientv3.WithCountOnly(), clientv3.WithLimit(1))
	if err != nil {
		return 0, fmt.Errorf("current revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Count implements Store.
func (s *EtcdStore) Count(ctx context.Context, prefix string) (int64, error) {
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", prefix, err)
	}
	return resp.Count, nil
}

// RunCompactor compacts etcd history every interval, keeping the revisions written during
// the last interval, until ctx ends. Several API servers may run it against one cluster:
// a compare-and-swap on a marker key lets one of them compact each round.
func (s *EtcdStore) RunCompactor(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	const markerKey = "compact_rev_key"
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var lastRev, markerVersion int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		// Record the current revision; compact to the one recorded a round ago, so history
		// written during the last interval survives for watches that fall behind.
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.Version(markerKey), "=", markerVersion)).
			Then(clientv3.OpPut(markerKey, strconv.FormatInt(lastRev, 10))).
			Else(clientv3.OpGet(markerKey)).
			Commit()
		if err != nil {
			s.log.Warn("compaction: marker update failed", "err", err)
			continue
		}
		compactTo := lastRev
		lastRev = resp.Header.Revision
		if !resp.Succeeded {
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				markerVersion = kvs[0].Version
			}
			continue // another server compacts this round
		}
		markerVersion++
		if compactTo <= 0 {
			continue
		}
		if _, err := s.client.Compact(ctx, compactTo); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			s.log.Warn("compaction failed", "revision", compactTo, "err", err)
			continue
		}
		s.log.Debug("compacted", "revision", compactTo)
	}
}

// Compact compacts history up to rev; tests use it to provoke ErrExpired.
func (s *EtcdStore) Compact(ctx context.Context, rev int64) error {
	_, err := s.client.Compact(ctx, rev)
	return err
}

// leaseManager hands out etcd leases for objects with a TTL. Granting a lease per object
// would cost a write each; instead one lease is shared by every object written within
// reuseWindow, and is granted for ttl+reuseWindow so each of them lives at least ttl.
type leaseManager struct {
	client *clientv3.Client
	mu     sync.Mutex
	id     clientv3.LeaseID
	ttl    time.Duration
	expiry time.Time
}

const leaseReuseWindow = time.Minute

func (l *leaseManager) get(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.id != 0 && l.ttl == ttl && now.Before(l.expiry) {
		return l.id, nil
	}
	seconds := int64((ttl + leaseReuseWindow) / time.Second)
	resp, err := l.client.Grant(ctx, seconds)
	if err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	l.id, l.ttl, l.expiry = resp.ID, ttl, now.Add(leaseReuseWindow)
	return l.id, nil
}
