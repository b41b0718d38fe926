package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/miniplane/miniplane/store"
)

// deleteOptions reads DeleteOptions from the body (if any) and the query.
func (c *call) deleteOptions() (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	data, err := c.readBody()
	if err != nil {
		return nil, err
	}
	if len(data) > 0 && c.isProtobuf() {
		// Clients send DeleteOptions under any group version; only the kind matters.
		if err := c.decodeProtobuf(data, schema.GroupVersionKind{Kind: "DeleteOptions"}, opts); err != nil {
			return nil, err
		}
	} else if len(data) > 0 {
		if err := c.decodeJSON(data, c.deleteOptionsKind(data), opts); err != nil {
			return nil, err
		}
	}
	q := c.r.URL.Query()
	if v := q.Get("gracePeriodSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, badRequest("gracePeriodSeconds: invalid value %q", v)
		}
		opts.GracePeriodSeconds = &n
	}
	if v := q.Get("propagationPolicy"); v != "" {
		p := metav1.DeletionPropagation(v)
		opts.PropagationPolicy = &p
	}
	if v := q.Get("orphanDependents"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, badRequest("orphanDependents: invalid value %q", v)
		}
		opts.OrphanDependents = &b //nolint:staticcheck // still part of the API
	}
	if len(q["dryRun"]) > 0 {
		opts.DryRun = q["dryRun"]
	}
	if opts.PropagationPolicy != nil {
		switch *opts.PropagationPolicy {
		case metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan:
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("propagationPolicy: Unsupported value: %q: supported values: \"Background\", \"Foreground\", \"Orphan\"", *opts.PropagationPolicy))
		}
		if opts.OrphanDependents != nil { //nolint:staticcheck // still part of the API
			return nil, badRequest("orphanDependents and propagationPolicy cannot both be set")
		}
	}
	for _, v := range opts.DryRun {
		if v != "All" {
			return nil, badRequest("dryRun: Unsupported value: %q: supported values: \"All\"", v)
		}
	}
	return opts, nil
}

// delete serves DELETE of one object.
func (c *call) delete() {
	opts, err := c.deleteOptions()
	if err != nil {
		c.fail(err)
		return
	}
	obj, deleted, err := c.s.deleteOne(c.r.Context(), c.info.res, c.info.namespace, c.info.name, opts, c.admitDeleteOf(opts))
	if err != nil {
		c.fail(err)
		return
	}
	c.respondDeleted(obj, deleted)
}

// admitDeleteOf is what a client's delete checks of the object it is about to delete, on
// each attempt: that a node deletes only its own, then the admission webhooks. The deletes
// the server makes itself (an eviction's, a definition's custom resources, a namespace's
// contents) are not sent to the webhooks; kube-apiserver sends none of the first two either.
func (c *call) admitDeleteOf(opts *metav1.DeleteOptions) func(runtime.Object) error {
	return func(obj runtime.Object) error {
		if err := c.authorizeNodeObject(obj); err != nil {
			return err
		}
		m, _ := meta.Accessor(obj)
		return c.s.admitDelete(c.r.Context(), c.info.res, obj, m.GetNamespace(), m.GetName(), len(opts.DryRun) > 0)
	}
}

func (c *call) respondDeleted(obj runtime.Object, deleted bool) {
	if !deleted || c.info.res.returnDeletedObject {
		c.respond(http.StatusOK, obj, nil)
		return
	}
	m, _ := meta.Accessor(obj)
	writeJSON(c.w, http.StatusOK, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: m.GetName(), Group: c.info.res.group, Kind: c.info.res.name, UID: m.GetUID()},
	})
}

// deleteOptionsKind is the DeleteOptions kind a JSON body names. Clients send DeleteOptions
// under any group version, not only the resource's: the metadata and dynamic clients (and
// so kube's garbage collector) always write v1, also for apps or custom resources.
// kube-apiserver registers DeleteOptions in every group version it serves and accepts them
// all; so does this server. An unknown group version is reported as a mismatch with
// meta.k8s.io/v1.
func (c *call) deleteOptionsKind(data []byte) schema.GroupVersionKind {
	want := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
	var tm metav1.TypeMeta
	if json.Unmarshal(data, &tm) != nil || tm.APIVersion == "" {
		return want
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return want
	}
	if slices.Contains(c.s.reg.servedVersions(gv.Group), gv.Version) || gv == (schema.GroupVersion{Version: "v1"}) {
		return gv.WithKind("DeleteOptions")
	}
	return want
}

// deleteOne deletes one object of res: with the resource's own deleteFunc if it has one,
// otherwise with deleteObject.
func (s *Server) deleteOne(ctx context.Context, res *resource, namespace, name string, opts *metav1.DeleteOptions,
	authorize func(runtime.Object) error) (runtime.Object, bool, error) {
	if res.deleteFunc != nil {
		return res.deleteFunc(s, ctx, res, namespace, name, opts, authorize)
	}
	return s.deleteObject(ctx, res, namespace, name, opts, authorize)
}

// deleteObject deletes one object the way kube-apiserver does, in one compare-and-swap:
// preconditions; then, when a grace period (see gracefulDeleter) or finalizers
// (including the garbage collector's orphan/foregroundDeletion, added per
// propagationPolicy) must be honoured, it only sets deletionTimestamp; otherwise the key
// is removed. It returns the last state and whether the object is gone.
func (s *Server) deleteObject(ctx context.Context, res *resource, namespace, name string, opts *metav1.DeleteOptions,
	authorize func(runtime.Object) error) (runtime.Object, bool, error) {
	key := res.key(s.cfg.EtcdPrefix, namespace, name)
	var last runtime.Object
	gone := false
	dryRun := len(opts.DryRun) > 0
	_, err := s.storeFor(res).GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		// An attempt may be retried on a newer version (a stale cached copy, a lost race):
		// what it decided must not outlive it.
		last, gone = nil, false
		if authorize != nil {
			if err := authorize(cur); err != nil {
				return nil, err
			}
		}
		m, _ := meta.Accessor(cur)
		if res.checkDelete != nil {
			if err := res.checkDelete(cur); err != nil {
				return nil, apierrors.NewForbidden(res.groupResource(), name, err)
			}
		}
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != m.GetUID() {
				return nil, apierrors.NewConflict(res.groupResource(), name,
					fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
				return nil, apierrors.NewConflict(res.groupResource(), name,
					fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.GetResourceVersion()))
			}
		}
		m.SetFinalizers(gcFinalizers(m.GetFinalizers(), opts))
		grace := gracePeriod(res, cur, opts)
		last = cur
		if len(m.GetFinalizers()) == 0 && (grace == 0 || pendingGraceShorterOrEqual(m, 0)) {
			gone = true
			if dryRun {
				return nil, errDryRun{obj: cur}
			}
			return nil, nil
		}
		now := s.clock.Now()
		if m.GetDeletionTimestamp() == nil || !pendingGraceShorterOrEqual(m, grace) {
			ts := metav1.NewTime(now.Add(time.Duration(grace) * time.Second).Truncate(time.Second))
			m.SetDeletionTimestamp(&ts)
			m.SetDeletionGracePeriodSeconds(&grace)
		}
		if dryRun {
			return nil, errDryRun{obj: cur}
		}
		return cur, nil
	}, store.UpdateOptions{Suggestion: res.cachedCopy(key)})
	var dr errDryRun
	if errors.As(err, &dr) {
		return dr.obj, gone, nil
	}
	if err != nil {
		return nil, false, err
	}
	if gone {
		s.removed(ctx, res, last)
		// Report the object as it was when it was removed.
		m, _ := meta.Accessor(last)
		if m.GetDeletionTimestamp() == nil {
			ts := metav1.NewTime(s.clock.Now().Truncate(time.Second))
			m.SetDeletionTimestamp(&ts)
			zero := int64(0)
			m.SetDeletionGracePeriodSeconds(&zero)
		}
	}
	return last, gone, nil
}

// removed does what follows the removal of obj, an object of res: what it held from a pool
// goes back.
func (s *Server) removed(ctx context.Context, res *resource, obj runtime.Object) {
	if pu, ok := res.strategy.(poolUser); ok {
		pu.release(ctx, nil, obj)
	}
}

// pendingGraceShorterOrEqual reports whether an object already being deleted waits no
// longer than grace seconds (so a new request with grace must not lengthen it).
func pendingGraceShorterOrEqual(m metav1.Object, grace int64) bool {
	g := m.GetDeletionGracePeriodSeconds()
	return m.GetDeletionTimestamp() != nil && g != nil && *g <= grace
}

// gcFinalizers adds or removes the garbage collector's finalizers per the propagation
// policy: Orphan adds "orphan", Foreground adds "foregroundDeletion", Background removes
// both. Without a policy the object's finalizers stay as they are (the default policy of
// every served resource is background deletion).
func gcFinalizers(finalizers []string, opts *metav1.DeleteOptions) []string {
	policy := opts.PropagationPolicy
	if policy == nil && opts.OrphanDependents != nil { //nolint:staticcheck // still part of the API
		p := metav1.DeletePropagationBackground
		if *opts.OrphanDependents { //nolint:staticcheck // still part of the API
			p = metav1.DeletePropagationOrphan
		}
		policy = &p
	}
	if policy == nil {
		return finalizers
	}
	var out []string
	for _, f := range finalizers {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			out = append(out, f)
		}
	}
	switch *policy {
	case metav1.DeletePropagationOrphan:
		out = append(out, metav1.FinalizerOrphanDependents)
	case metav1.DeletePropagationForeground:
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	return out
}

// gracePeriod is how long a deleted object lingers with deletionTimestamp set before it
// may be removed: what its strategy says (gracefulDeleter), or nothing.
func gracePeriod(res *resource, obj runtime.Object, opts *metav1.DeleteOptions) int64 {
	if g, ok := res.strategy.(gracefulDeleter); ok {
		return g.gracePeriod(obj, opts)
	}
	return 0
}

// deleteCollection serves DELETE on a collection: every selected object is deleted with
// the same options.
func (c *call) deleteCollection() {
	opts, err := c.deleteOptions()
	if err != nil {
		c.fail(err)
		return
	}
	p, err := parseListParams(c.r.URL.Query(), c.info.res)
	if err != nil {
		c.fail(err)
		return
	}
	if c.info.res.noDeleteCollection {
		c.fail(methodNotSupported(c.info, "deletecollection"))
		return
	}
	filter := &watchFilter{namespace: c.info.namespace, label: p.label, field: p.field}
	if err := c.info.res.cache.waitFresh(c.r.Context()); err != nil && !errors.Is(err, errTooLargeRV) {
		c.fail(err)
		return
	}
	items, _ := c.info.res.cache.list(filter)
	var deleted []*cachedObject
	for _, it := range items {
		if _, _, err := c.s.deleteOne(c.r.Context(), c.info.res, it.namespace, it.name, opts, c.admitDeleteOf(opts)); err != nil && !errors.Is(err, store.ErrNotFound) {
			c.fail(err)
			return
		}
		deleted = append(deleted, it)
	}
	c.respondList(deleted, c.info.res.cache.currentRV(), "", nil)
}
