package apiserver

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/miniplane/miniplane/store"
)

// storageView serves one resource from the objects of another, as kube-apiserver serves
// events.k8s.io/v1 Events from the core/v1 Events' storage: one object, two shapes. The
// view's objects are written under the storage resource's keys in its form, and converted
// on the way in and out, so a write through either resource is read through both.
// docs/kinds-and-admission.md ("Events in two groups") says what this means for clients.
type storageView struct {
	// storage is the resource whose objects these are.
	storage *resource
	// toStorage and fromStorage convert an object between the two forms. Both directions
	// must lose nothing, so that an update that changes nothing writes nothing.
	toStorage   func(runtime.Object) runtime.Object
	fromStorage func(runtime.Object) runtime.Object
	// fieldLabels maps each field a selector may name on the view to the storage
	// resource's selectable field it reads, as kube-apiserver's field label conversion
	// maps a version's names to its internal form's.
	fieldLabels map[string]string
}

// fields are the selectable fields of the view (fieldLabels), read from the storage form
// by the storage resource's getters.
func (v *storageView) fields() map[string]fieldFunc {
	out := make(map[string]fieldFunc, len(v.fieldLabels))
	for label, stored := range v.fieldLabels {
		get := v.storage.fields[stored]
		out[label] = func(obj runtime.Object) string { return get(v.toStorage(obj)) }
	}
	return out
}

// storeFor is the store res reads and writes: the server's, or for a view or a version of a
// definition with several a store that converts every object on its way.
func (s *Server) storeFor(res *resource) store.Store {
	if res.custom != nil && res.custom.conv != nil {
		return convertingStore{Store: s.store, conv: res.custom.conv, version: res.version}
	}
	if res.view == nil {
		return s.store
	}
	return viewStore{Store: s.store, view: res.view}
}

// viewStore is a store.Store over a view: callers see the view's objects, etcd holds the
// storage resource's. Suggestions passed to GuaranteedUpdate are in the storage form
// (see resource.cachedCopy): they come from the storage resource's watch cache, which
// every view shares, not from the view's own.
type viewStore struct {
	store.Store
	view *storageView
}

var _ store.Store = viewStore{}

func (v viewStore) Create(ctx context.Context, key string, obj runtime.Object, ttl time.Duration) (runtime.Object, error) {
	out, err := v.Store.Create(ctx, key, v.view.toStorage(obj), ttl)
	if err != nil {
		return nil, err
	}
	return v.view.fromStorage(out), nil
}

func (v viewStore) Get(ctx context.Context, key string) (runtime.Object, error) {
	out, err := v.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return v.view.fromStorage(out), nil
}

func (v viewStore) List(ctx context.Context, prefix string, opts store.ListOptions) (*store.ListResult, error) {
	if keep := opts.Predicate; keep != nil {
		// The predicate judges the view's form.
		opts.Predicate = func(obj runtime.Object) bool { return keep(v.view.fromStorage(obj)) }
	}
	result, err := v.Store.List(ctx, prefix, opts)
	if err != nil {
		return nil, err
	}
	for i, obj := range result.Items {
		result.Items[i] = v.view.fromStorage(obj)
	}
	return result, nil
}

func (v viewStore) GuaranteedUpdate(ctx context.Context, key string, tryUpdate store.UpdateFunc, opts store.UpdateOptions) (runtime.Object, error) {
	out, err := v.Store.GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		next, err := tryUpdate(v.view.fromStorage(cur))
		if next == nil || err != nil {
			return next, err
		}
		return v.view.toStorage(next), nil
	}, opts)
	if out == nil || err != nil {
		return out, err
	}
	return v.view.fromStorage(out), nil
}

func (v viewStore) Delete(ctx context.Context, key string, preconditions *store.Preconditions, validate func(cur runtime.Object) error) (runtime.Object, error) {
	check := validate
	if validate != nil {
		check = func(cur runtime.Object) error { return validate(v.view.fromStorage(cur)) }
	}
	out, err := v.Store.Delete(ctx, key, preconditions, check)
	if err != nil {
		return nil, err
	}
	return v.view.fromStorage(out), nil
}

// Watch converts the object of every event; the events themselves pass unchanged, in
// order.
func (v viewStore) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan store.Event, error) {
	in, err := v.Store.Watch(ctx, prefix, fromRevision)
	if err != nil {
		return nil, err
	}
	out := make(chan store.Event)
	go func() {
		defer close(out)
		for ev := range in {
			if ev.Object != nil {
				ev.Object = v.view.fromStorage(ev.Object)
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				// The store closes in once ctx ends; drain it so its sender is not left
				// blocked.
				for range in {
				}
				return
			}
		}
	}()
	return out, nil
}
