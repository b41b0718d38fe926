package apiserver

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/miniplane/miniplane/store"
)

// customResourceConverter converts the objects of one definition between its versions,
// with apiextensions-apiserver's converter: the None strategy only rewrites apiVersion, the
// Webhook strategy calls the definition's conversion webhook (by url; see
// serviceNotCalled). docs/server-side-apply-and-crds.md ("Versions and conversion") says
// where it sits.
type customResourceConverter struct {
	convertor runtime.ObjectConvertor // the library's safe converter: it copies its input
	group     string
	storage   string // the storage version's name
}

// newCustomResourceConverter returns crd's converter, or nil when crd has a single version
// and nothing is ever converted.
func newCustomResourceConverter(factory *conversion.CRConverterFactory, crd *apiextensionsv1.CustomResourceDefinition) (*customResourceConverter, error) {
	if len(crd.Spec.Versions) < 2 {
		return nil, nil
	}
	if crd.Spec.Conversion == nil {
		crd = crd.DeepCopy()
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	}
	safe, _, err := factory.NewConverter(crd)
	if err != nil {
		return nil, err
	}
	c := &customResourceConverter{convertor: safe, group: crd.Spec.Group}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			c.storage = v.Name
		}
	}
	return c, nil
}

// to converts obj, a custom resource in any version of the definition, to version. An
// object already in that version is returned as it is. A failure is the 500 kube-apiserver
// answers when a conversion webhook fails.
func (c *customResourceConverter) to(obj runtime.Object, version string) (runtime.Object, error) {
	if obj == nil || obj.GetObjectKind().GroupVersionKind().Version == version {
		return obj, nil
	}
	out, err := c.convertor.ConvertToVersion(obj, schema.GroupVersion{Group: c.group, Version: version})
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// allTo converts objs to version with one call of the converter (one webhook request for
// all those not yet in version), in place.
func (c *customResourceConverter) allTo(objs []runtime.Object, version string) error {
	list := &unstructured.UnstructuredList{}
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("custom resource conversion: %T is not unstructured", obj)
		}
		if u.GroupVersionKind().Version != version {
			list.Items = append(list.Items, *u)
		}
	}
	if len(list.Items) == 0 {
		return nil
	}
	list.SetGroupVersionKind(list.Items[0].GroupVersionKind())
	out, err := c.convertor.ConvertToVersion(list, schema.GroupVersion{Group: c.group, Version: version})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	converted := out.(*unstructured.UnstructuredList).Items
	if len(converted) != len(list.Items) {
		return apierrors.NewInternalError(fmt.Errorf("conversion of %d objects returned %d", len(list.Items), len(converted)))
	}
	// The converted items come in the order they were sent; the ones already in version
	// were not sent.
	next := 0
	for i, obj := range objs {
		if obj.GetObjectKind().GroupVersionKind().Version != version {
			objs[i] = &converted[next]
			next++
		}
	}
	return nil
}

// convertedVersion reports whether r is a version of a definition other than its storage
// version: its objects are the storage version's, converted.
func (r *resource) convertedVersion() bool {
	return r.custom != nil && r.custom.conv != nil && r.version != r.custom.conv.storage
}

// convertingStore is the store of one served version of a definition with several: every
// object is converted to the storage version on its way in and to the served version on
// its way out, as kube-apiserver stores custom resources. Objects stored in any version (an
// older storage version) are converted from the version they were stored in.
type convertingStore struct {
	store.Store
	conv    *customResourceConverter
	version string // the served version
}

var _ store.Store = convertingStore{}

func (s convertingStore) out(obj runtime.Object, err error) (runtime.Object, error) {
	if err != nil {
		return nil, err
	}
	return s.conv.to(obj, s.version)
}

func (s convertingStore) Create(ctx context.Context, key string, obj runtime.Object, ttl time.Duration) (runtime.Object, error) {
	stored, err := s.conv.to(obj, s.conv.storage)
	if err != nil {
		return nil, err
	}
	return s.out(s.Store.Create(ctx, key, stored, ttl))
}

func (s convertingStore) Get(ctx context.Context, key string) (runtime.Object, error) {
	return s.out(s.Store.Get(ctx, key))
}

func (s convertingStore) List(ctx context.Context, prefix string, opts store.ListOptions) (*store.ListResult, error) {
	var convErr error
	if keep := opts.Predicate; keep != nil {
		// The predicate judges the served version's form, which a selectable field may need.
		opts.Predicate = func(obj runtime.Object) bool {
			served, err := s.conv.to(obj, s.version)
			if err != nil {
				convErr = err
				return false
			}
			return keep(served)
		}
	}
	result, err := s.Store.List(ctx, prefix, opts)
	if err != nil {
		return nil, err
	}
	if convErr != nil {
		return nil, convErr
	}
	if err := s.conv.allTo(result.Items, s.version); err != nil {
		return nil, err
	}
	return result, nil
}

func (s convertingStore) GuaranteedUpdate(ctx context.Context, key string, tryUpdate store.UpdateFunc, opts store.UpdateOptions) (runtime.Object, error) {
	return s.out(s.Store.GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		served, err := s.conv.to(cur, s.version)
		if err != nil {
			return nil, err
		}
		next, err := tryUpdate(served)
		if next == nil || err != nil {
			return next, err
		}
		return s.conv.to(next, s.conv.storage)
	}, opts))
}

func (s convertingStore) Delete(ctx context.Context, key string, preconditions *store.Preconditions, validate func(cur runtime.Object) error) (runtime.Object, error) {
	check := validate
	if validate != nil {
		check = func(cur runtime.Object) error {
			served, err := s.conv.to(cur, s.version)
			if err != nil {
				return err
			}
			return validate(served)
		}
	}
	return s.out(s.Store.Delete(ctx, key, preconditions, check))
}

// Watch converts the object of every event. An object that cannot be converted ends the
// watch with an error event, as any failed watch does: the watch cache of this version
// lists again (and fails while the conversion webhook does), and its watchers resume.
func (s convertingStore) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan store.Event, error) {
	// The etcd watch ends with this one, also when a failed conversion ends it first.
	ctx, cancel := context.WithCancel(ctx)
	in, err := s.Store.Watch(ctx, prefix, fromRevision)
	if err != nil {
		cancel()
		return nil, err
	}
	out := make(chan store.Event)
	go func() {
		defer close(out)
		defer func() {
			// The store closes in once ctx ends; drain it so its sender is not left blocked.
			cancel()
			for range in {
			}
		}()
		for ev := range in {
			if ev.Object != nil {
				served, err := s.conv.to(ev.Object, s.version)
				if err != nil {
					ev = store.Event{Type: store.ErrorEvent, Key: ev.Key, Revision: ev.Revision,
						Err: fmt.Errorf("watch %s: %w", prefix, err)}
				} else {
					ev.Object = served
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Type == store.ErrorEvent {
				return
			}
		}
	}()
	return out, nil
}

// serviceNotCalled is the conversion webhooks' service resolver: a webhook that names a
// Service is not called, since stub pods run no server, and every conversion it would make
// fails, as it does in a cluster whose webhook is down. Writes of such a definition warn
// (unreachableConversionWebhook).
type serviceNotCalled struct{}

func (serviceNotCalled) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return nil, fmt.Errorf("miniplane calls conversion webhooks reached by url only, not service %s/%s", namespace, name)
}

// unreachableConversionWebhook is the warning a write of a definition answers with when
// its conversion webhook names a Service and a version other than the storage version is
// served; "" otherwise.
func unreachableConversionWebhook(obj runtime.Object) string {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok || crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy != apiextensionsv1.WebhookConverter ||
		crd.Spec.Conversion.Webhook == nil || crd.Spec.Conversion.Webhook.ClientConfig == nil ||
		crd.Spec.Conversion.Webhook.ClientConfig.Service == nil {
		return ""
	}
	var versions []string
	for _, v := range crd.Spec.Versions {
		if v.Served && !v.Storage {
			versions = append(versions, v.Name)
		}
	}
	if len(versions) == 0 {
		// Only the storage version is served: nothing is converted, the webhook is moot.
		return ""
	}
	return fmt.Sprintf("miniplane calls conversion webhooks reached by url only: the conversion webhook of %s names a Service, "+
		"whose pods run no server here, so reads and writes that need a conversion fail (versions %s)",
		crd.Name, strings.Join(versions, ", "))
}
