package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/store"
)

// errDryRun ends a dry-run update after the new state was computed, so nothing is written.
type errDryRun struct{ obj runtime.Object }

func (errDryRun) Error() string { return "dry run" }

// rewrite is the read-modify-write of the server's own writers: the status loops and the
// eviction's charge to a budget. mutate returns errDryRun when the stored object needs no
// write. That, and an object deleted meanwhile, end it without an error: a deleted status
// owner needs no status, and a deleted budget no longer limits evictions.
func (s *Server) rewrite(ctx context.Context, key string, mutate store.UpdateFunc) error {
	_, err := s.store.GuaranteedUpdate(ctx, key, mutate, store.UpdateOptions{})
	var dr errDryRun
	if errors.As(err, &dr) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// update serves PUT of an object or its status.
func (c *call) update() {
	obj, err := c.readObject()
	if err != nil {
		c.fail(err)
		return
	}
	m, _ := meta.Accessor(obj)
	if m.GetName() == "" {
		m.SetName(c.info.name)
	}
	if m.GetName() != c.info.name {
		c.fail(badRequest("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), c.info.name))
		return
	}
	if err := c.checkBodyNamespace(m); err != nil {
		c.fail(err)
		return
	}
	manager, err := c.fieldManager("UpdateOptions")
	if err != nil {
		c.fail(err)
		return
	}
	opts := updateOptions{manager: manager}
	if c.info.res.allowCreateOnUpdate && c.info.subresource == "" {
		opts.create = func() (runtime.Object, createOptions, error) { return obj, createOptions{manager: manager}, nil }
	}
	c.applyUpdate(func(runtime.Object) (runtime.Object, error) { return obj.DeepCopyObject(), nil }, opts)
}

// updateOptions say how applyUpdate writes.
type updateOptions struct {
	// manager is recorded in managedFields as the writer.
	manager string
	// applied: newState returns the result of a server-side apply, managedFields included.
	applied bool
	// create, when set, gives the object to create when there is none to update (PUT of
	// a lease or an event, server-side apply).
	create func() (runtime.Object, createOptions, error)
}

// patch serves PATCH with a JSON patch, a JSON merge patch or a strategic merge patch.
func (c *call) patch() {
	mt, _, _ := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	switch types.PatchType(mt) {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType:
	case types.ApplyYAMLPatchType:
		c.apply()
		return
	case types.ApplyCBORPatchType:
		c.fail(unsupportedMediaType("CBOR apply patches are not supported; send " + string(types.ApplyYAMLPatchType)))
		return
	default:
		c.fail(unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s", types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType)))
		return
	}
	patchBytes, err := c.readBody()
	if err != nil {
		c.fail(err)
		return
	}
	mode, err := c.fieldValidation()
	if err != nil {
		c.fail(err)
		return
	}
	patchType := types.PatchType(mt)
	if patchType == types.StrategicMergePatchType && c.info.res.custom != nil {
		c.fail(unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s",
			types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType)))
		return
	}
	var bodyProblems []error
	if patchType != types.StrategicMergePatchType {
		if bodyProblems, err = patchBodyProblems(mode, patchType == types.JSONPatchType, patchBytes); err != nil {
			c.fail(err)
			return
		}
	}
	if c.r.URL.Query().Has("force") {
		c.fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "",
			field.ErrorList{field.Forbidden(field.NewPath("force"), "may not be specified for non-apply patch")}))
		return
	}
	manager, err := c.fieldManager("PatchOptions")
	if err != nil {
		c.fail(err)
		return
	}
	res := c.info.res
	c.applyUpdate(func(cur runtime.Object) (runtime.Object, error) {
		if patchType == types.StrategicMergePatchType {
			return c.strategicMergePatch(mode, cur, patchBytes)
		}
		cur.GetObjectKind().SetGroupVersionKind(res.gvk())
		curJSON, err := json.Marshal(cur)
		if err != nil {
			return nil, err
		}
		var patched []byte
		if patchType == types.JSONPatchType {
			p, err := jsonpatch.DecodePatch(patchBytes)
			if err != nil {
				return nil, badRequest("the json patch could not be decoded: %v", err)
			}
			if patched, err = p.Apply(curJSON); err != nil {
				return nil, statusError(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("the json patch could not be applied: %v", err))
			}
		} else if patched, err = jsonpatch.MergePatch(curJSON, patchBytes); err != nil {
			return nil, badRequest("the merge patch could not be applied: %v", err)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(patched, &tm); err != nil {
			return nil, invalidPatch(string(patched), err)
		}
		if err := checkTypeMeta(tm, res.gvk()); err != nil {
			return nil, err
		}
		next := res.newFunc()
		found, err := unmarshal(mode, patched, next)
		if err != nil {
			return nil, invalidPatch(string(patched), err)
		}
		found = append(found, c.prune(next)...)
		if err := c.fieldProblems(mode, append(slices.Clone(bodyProblems), found...), func(err error) error { return invalidPatch(string(patched), err) }); err != nil {
			return nil, err
		}
		next.GetObjectKind().SetGroupVersionKind(res.gvk())
		return next, nil
	}, updateOptions{manager: manager})
}

// strategicMergePatch applies a strategic merge patch to cur as kube-apiserver does: on
// maps, the patch's duplicate fields and the result's unknown ones judged by mode.
func (c *call) strategicMergePatch(mode fieldValidation, cur runtime.Object, patch []byte) (runtime.Object, error) {
	res := c.info.res
	cur.GetObjectKind().SetGroupVersionKind(res.gvk())
	curMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cur)
	if err != nil {
		return nil, err
	}
	patchMap := map[string]any{}
	found, err := unmarshal(mode, patch, &patchMap)
	if err != nil {
		return nil, badRequest("the strategic merge patch could not be decoded: %v", err)
	}
	patchedMap, err := strategicpatch.StrategicMergeMapPatch(curMap, patchMap, res.newFunc())
	if err != nil {
		return nil, badRequest("the strategic merge patch could not be applied: %v", err)
	}
	apiVersion, _ := patchedMap["apiVersion"].(string)
	kind, _ := patchedMap["kind"].(string)
	if err := checkTypeMeta(metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, res.gvk()); err != nil {
		return nil, err
	}
	next := res.newFunc()
	shown := func() string { return fmt.Sprintf("%+v", patchMap) }
	err = runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(patchedMap, next, mode != validationIgnore)
	if strictErr, ok := runtime.AsStrictDecodingError(err); ok {
		found = append(found, strictErr.Errors()...)
	} else if err != nil {
		return nil, invalidPatch(shown(), err)
	}
	if err := c.fieldProblems(mode, found, func(err error) error { return invalidPatch(shown(), err) }); err != nil {
		return nil, err
	}
	next.GetObjectKind().SetGroupVersionKind(res.gvk())
	return next, nil
}

// applyUpdate runs an update (or patch): compute the new state from the current one, apply
// the resource's rules, and compare-and-swap it into etcd. newState may be a PUT body
// (then body is that object, for create-on-update) or a patch applied to the current state.
func (c *call) applyUpdate(newState func(cur runtime.Object) (runtime.Object, error), opts updateOptions) {
	res := c.info.res
	dryRun, err := c.dryRun()
	if err != nil {
		c.fail(err)
		return
	}
	status := c.info.subresource == "status"
	key := c.key(c.info.namespace, c.info.name)
	suggestion := res.cachedCopy(key)
	var last, before runtime.Object
	removed := false
	pool, _ := res.strategy.(poolUser)
	undo := func() {}
	ctx := c.r.Context()
	out, err := c.s.storeFor(res).GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		undo() // what an attempt that lost the compare-and-swap claimed
		undo = func() {}
		if err := c.authorizeNodeObject(cur); err != nil {
			return nil, err
		}
		before = cur.DeepCopyObject()
		next, err := newState(cur)
		if err != nil {
			return nil, err
		}
		if err := c.s.prepareUpdate(res, next, cur, c.info.sub, c.info.name, c.s.clock.Now()); err != nil {
			return nil, err
		}
		if !opts.applied && opts.manager != "" {
			next = c.s.trackWrite(res, c.info.subresource, before, next, opts.manager)
		}
		a := &admission{op: opUpdate, res: res, obj: next, old: cur, subresource: c.info.subresource,
			namespace: c.info.namespace, name: c.info.name, dryRun: dryRun}
		if ran, err := c.s.admitMutating(ctx, a); err != nil {
			return nil, err
		} else if ran {
			// What a policy or webhook changed is prepared and validated as the client's change is.
			if err := c.s.prepareUpdate(res, next, cur, c.info.sub, c.info.name, c.s.clock.Now()); err != nil {
				return nil, err
			}
		}
		if err := c.s.admit(ctx, a, validating); err != nil {
			return nil, err
		}
		last = next
		if deletionComplete(res, next) && !dryRun {
			removed = true
			return nil, nil // the last finalizer is gone: the object goes
		}
		if pool != nil && !status {
			if undo, err = pool.allocate(ctx, next, before, dryRun); err != nil {
				undo = func() {}
				return nil, err
			}
		}
		if dryRun {
			return nil, errDryRun{obj: next}
		}
		return next, nil
	}, store.UpdateOptions{TTL: res.ttl, Suggestion: suggestion})
	switch {
	case err != nil:
		undo()
	case removed:
		c.s.removed(ctx, res, before)
	case pool != nil:
		pool.release(ctx, last, before)
	}
	var dr errDryRun
	switch {
	case errors.As(err, &dr):
		c.respond(http.StatusOK, dr.obj, nil)
	case errors.Is(err, store.ErrNotFound) && opts.create != nil:
		obj, copts, err := opts.create()
		if err != nil {
			c.fail(err)
			return
		}
		copts.dryRun = dryRun
		created, err := c.createObject(obj, copts)
		if err != nil {
			c.fail(err)
			return
		}
		c.respond(http.StatusCreated, created, nil)
	case err != nil:
		c.fail(err)
	case out == nil:
		c.respond(http.StatusOK, last, nil)
	default:
		c.respond(http.StatusOK, out, nil)
	}
}

// cachedCopy returns the watch cache's copy of the object at key, to be passed to the
// store as an update's suggestion (saving a read from etcd), or nil when the cache has none.
// The copy is shared: it must only be read. A view's copy is its storage resource's, in
// the storage form its store expects (see viewStore).
func (r *resource) cachedCopy(key string) runtime.Object {
	if r.view != nil {
		return r.view.storage.cachedCopy(key)
	}
	if r.convertedVersion() {
		// The cache holds this version's form, not the stored one the store compares the
		// update with: an update that changes nothing would be written.
		return nil
	}
	if co, ok := r.cache.get(key); ok {
		return co.object()
	}
	return nil
}

// deletionComplete reports whether an object marked for deletion has no finalizers left
// (its kind's own included, see deletionHolder) and no grace period to wait for: it is
// removed instead of updated.
func deletionComplete(res *resource, obj runtime.Object) bool {
	m, _ := meta.Accessor(obj)
	if m.GetDeletionTimestamp() == nil || len(m.GetFinalizers()) > 0 {
		return false
	}
	if h, ok := res.strategy.(deletionHolder); ok && h.holdsDeletion(obj) {
		return false
	}
	g := m.GetDeletionGracePeriodSeconds()
	return g == nil || *g == 0
}

// prepareUpdate applies the update rules to next given the stored cur: preconditions,
// server-owned metadata, the rules of the main resource, of status or of another
// subresource (sub, nil for the main resource), generation, validation.
func (s *Server) prepareUpdate(res *resource, next, cur runtime.Object, sub *subresource, name string, now time.Time) error {
	status := sub != nil && sub.rules == nil
	nm, _ := meta.Accessor(next)
	om, _ := meta.Accessor(cur)
	if rv := nm.GetResourceVersion(); rv != "" && rv != om.GetResourceVersion() {
		return conflictError(res.groupResource(), name)
	}
	if uid := nm.GetUID(); uid != "" && uid != om.GetUID() {
		return apierrors.NewConflict(res.groupResource(), name,
			fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", uid, om.GetUID()))
	}
	nm.SetResourceVersion(om.GetResourceVersion())
	nm.SetUID(om.GetUID())
	nm.SetCreationTimestamp(om.GetCreationTimestamp())
	nm.SetDeletionTimestamp(om.GetDeletionTimestamp())
	nm.SetDeletionGracePeriodSeconds(om.GetDeletionGracePeriodSeconds())
	nm.SetGeneration(om.GetGeneration())
	nm.SetSelfLink("")
	if status {
		// A status write may change the metadata a client may edit (labels, annotations,
		// finalizers, owners), as kube-apiserver's status strategies let it; the few
		// exceptions (a pod's owners, a Deployment's labels) are the kinds' own rules.
		res.strategy.prepareForStatusUpdate(next, cur, now)
	} else if sub != nil {
		sub.rules.prepare(next, cur)
	} else {
		res.strategy.prepareForUpdate(next, cur, now)
		if res.tracksGeneration && generationChanged(res, next, cur) {
			nm.SetGeneration(om.GetGeneration() + 1)
		}
	}
	var errs field.ErrorList
	if metaUpdateMayBeInvalid(nm, om) {
		errs = apivalidation.ValidateObjectMetaAccessorUpdate(nm, om, field.NewPath("metadata"))
	}
	if om.GetDeletionTimestamp() != nil {
		errs = append(errs, noNewFinalizers(nm.GetFinalizers(), om.GetFinalizers())...)
	}
	switch {
	case status:
		errs = append(errs, res.strategy.validateStatusUpdate(next, cur)...)
	case sub != nil:
		errs = append(errs, sub.rules.validate(next, cur)...)
	default:
		errs = append(errs, apivalidation.ValidateObjectMetaAccessor(nm, res.namespaced, res.nameValidator(), field.NewPath("metadata"))...)
		errs = append(errs, res.strategy.validateUpdate(next, cur)...)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(res.gvk().GroupKind(), name, errs)
	}
	return nil
}

// metaUpdateMayBeInvalid reports whether apimachinery's ValidateObjectMetaAccessorUpdate
// could find anything wrong with next's metadata against cur's. That function compares each
// immutable field with a reflective deep equality (tens of microseconds an update, 3% of the
// API server's CPU while a fleet renews its leases), and prepareUpdate has just copied most
// of them from cur. So the same comparisons are made here on the typed fields, as
// apiequality.Semantic makes them (times by their UTC value), and the library runs whenever
// one of its checks could fail.
func metaUpdateMayBeInvalid(nm, om metav1.Object) bool {
	return nm.GetName() != om.GetName() || nm.GetNamespace() != om.GetNamespace() || nm.GetUID() != om.GetUID() ||
		nm.GetCreationTimestamp().UTC() != om.GetCreationTimestamp().UTC() ||
		!semanticTimeEqual(nm.GetDeletionTimestamp(), om.GetDeletionTimestamp()) ||
		!int64PtrEqual(nm.GetDeletionGracePeriodSeconds(), om.GetDeletionGracePeriodSeconds()) ||
		om.GetDeletionTimestamp() != nil || // then no finalizer may be added
		nm.GetResourceVersion() == "" || nm.GetGeneration() < om.GetGeneration()
}

// semanticTimeEqual is apiequality.Semantic.DeepEqual for two *metav1.Time.
func semanticTimeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.UTC() == b.UTC()
}

func int64PtrEqual(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// generationChanger is implemented by the strategies of kinds that say themselves which
// changes count for metadata.generation (custom resources, which have no Spec field).
type generationChanger interface {
	generationChanged(obj, old runtime.Object) bool
}

// generationChanged reports whether next differs from cur in what metadata.generation
// counts: the spec, unless the kind's strategy says otherwise.
func generationChanged(res *resource, next, cur runtime.Object) bool {
	if g, ok := res.strategy.(generationChanger); ok {
		return g.generationChanged(next, cur)
	}
	return !apiequality.Semantic.DeepEqual(specOf(next), specOf(cur))
}

// specOf returns the Spec field of a typed object, or nil when it has none.
func specOf(obj runtime.Object) any {
	v := reflect.ValueOf(obj)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	f := v.FieldByName("Spec")
	if !f.IsValid() {
		return nil
	}
	return f.Interface()
}

func noNewFinalizers(next, old []string) field.ErrorList {
	have := map[string]bool{}
	for _, f := range old {
		have[f] = true
	}
	for _, f := range next {
		if !have[f] {
			return field.ErrorList{field.Forbidden(field.NewPath("metadata", "finalizers"),
				fmt.Sprintf("no new finalizers can be added if the object is being deleted, found new finalizers %q", f))}
		}
	}
	return nil
}
