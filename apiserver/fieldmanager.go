package apiserver

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode"

	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// Every write records who set which field in metadata.managedFields, and server-side
// apply merges an applied configuration by those records, with apimachinery's field
// manager (k8s.io/apimachinery/pkg/util/managedfields): the same code kube-apiserver runs.
// Its type converter reads the structure of each kind (which lists are maps keyed by
// which field, which maps are atomic) from the OpenAPI schemas the server publishes, so
// merging needs no code of its own.

// maxFieldManagerLength is the longest field manager name kube-apiserver accepts.
const maxFieldManagerLength = 128

// serverFieldManager names the API server itself in managedFields, for the objects it
// writes through the handlers (default ServiceAccounts, the kubernetes Service, events).
const serverFieldManager = "miniplane-apiserver"

// fieldManagers makes and keeps the field manager of every served kind and subresource.
// They are rebuilt when the registry changes, since a new kind brings a new schema.
type fieldManagers struct {
	docs *openAPIDocs
	reg  *registry

	mu        sync.Mutex
	revision  uint64
	built     bool
	converter *trustingConverter
	managers  map[fieldManagerKey]*managedfields.FieldManager
}

type fieldManagerKey struct {
	gvk         schema.GroupVersionKind
	subresource string
}

func newFieldManagers(reg *registry, docs *openAPIDocs) *fieldManagers {
	return &fieldManagers{reg: reg, docs: docs}
}

// get returns the field manager of res (subresource "" or "status").
func (f *fieldManagers) get(res *resource, subresource string) (*managedfields.FieldManager, error) {
	m, _, err := f.getWithConverter(res, subresource)
	return m, err
}

// getWithConverter is get, also returning the type converter the field manager uses.
func (f *fieldManagers) getWithConverter(res *resource, subresource string) (*managedfields.FieldManager, *trustingConverter, error) {
	rev := f.reg.currentRevision()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.built || f.revision != rev {
		_, _, lazy, err := f.docs.current()
		if err != nil {
			return nil, nil, err
		}
		schemas, _, err := lazy.Get()
		if err != nil {
			return nil, nil, err
		}
		conv, err := managedfields.NewTypeConverter(schemas, false)
		if err != nil {
			return nil, nil, fmt.Errorf("apiserver: type converter for managed fields: %w", err)
		}
		f.converter = &trustingConverter{TypeConverter: conv}
		f.managers, f.revision, f.built = map[fieldManagerKey]*managedfields.FieldManager{}, rev, true
	}
	key := fieldManagerKey{gvk: res.gvk(), subresource: subresource}
	if m, ok := f.managers[key]; ok {
		return m, f.converter, nil
	}
	// The hub is the served version itself: miniplane has no internal versions.
	var m *managedfields.FieldManager
	var err error
	if res.custom != nil {
		// Custom resources are unstructured and their defaults come from the schema. A
		// definition with one version has nothing to convert but apiVersion; one with
		// several converts as its strategy says (managers of another version are compared
		// in theirs).
		var versions runtime.ObjectConvertor = unstructuredVersions{}
		if res.custom.conv != nil {
			versions = res.custom.conv.convertor
		}
		m, err = managedfields.NewDefaultCRDFieldManager(f.converter, versions, unstructuredDefaulter{res},
			unstructuredCreater{}, res.gvk(), res.gvk().GroupVersion(), subresource, resetFields(res, subresource))
	} else {
		m, err = managedfields.NewDefaultFieldManager(f.converter, inPlaceConverter{Scheme}, Scheme, Scheme,
			res.gvk(), res.gvk().GroupVersion(), subresource, resetFields(res, subresource))
	}
	if err != nil {
		return nil, nil, err
	}
	f.managers[key] = m
	return m, f.converter, nil
}

// An update's field manager turns both the stored object and the new one into typed values
// of the schema, and its type converter validates each against the schema on the way: two
// full walks of every object before the walk that compares them, 15% of the API server's
// CPU in a 5,000-node rollout. Neither walk can find anything for a built-in kind:
//   - The stored object was validated when it was written. That needs the object to reach
//     the converter as itself: the field manager passes it through its object converter
//     first, which deep-copies it even when it is already of the version asked for.
//   - Any object of a built-in kind is a Go struct, and the schema is generated from the same
//     structs, so its types cannot differ from the schema's. What is left to find is a
//     duplicate key in a keyed list, and the field manager converts the objects of an update
//     (and the live object of an apply) allowing duplicates. An item without its key would
//     fail the comparison that follows just as it fails validation.
// So those are converted without validation; an applied configuration and every custom
// resource (unstructured, whatever the client sent) are still validated.

// inPlaceConverter is the Scheme, except that a typed object already of the version asked
// for is returned as it is rather than deep-copied. The field manager only reads what it
// converts to the version it works in, or converts a new object it made itself.
type inPlaceConverter struct{ *runtime.Scheme }

func (c inPlaceConverter) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	if _, ok := in.(runtime.Unstructured); !ok {
		gvk := in.GetObjectKind().GroupVersionKind()
		if to, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{gvk}); ok && to == gvk && !gvk.Empty() {
			return in, nil
		}
	}
	return c.Scheme.ConvertToVersion(in, target)
}

// trustingConverter converts the stored objects of the updates in progress (see
// trustStored), and built-in objects converted allowing duplicates, to typed values without
// validating them, and everything else as the wrapped converter does.
type trustingConverter struct {
	managedfields.TypeConverter
	stored sync.Map // runtime.Object → struct{}
	types  sync.Map // schema.GroupVersionKind → typeOfKind
}

// typeOfKind is where a kind's type is in the schema.
type typeOfKind struct {
	schema  *smdschema.Schema
	typeRef smdschema.TypeRef
}

// trustStored marks obj, an object read from storage, as valid until the returned func is
// called.
func (c *trustingConverter) trustStored(obj runtime.Object) (done func()) {
	c.stored.Store(obj, struct{}{})
	return func() { c.stored.Delete(obj) }
}

func (c *trustingConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if c.trusted(obj, opts) {
		if t, ok := c.typeOf(obj.GetObjectKind().GroupVersionKind()); ok {
			if v, err := value.NewValueReflect(obj); err == nil {
				// Deprecated for values that were never validated; validating this one
				// could find nothing (see trusted), and each walk cost nearly a third of
				// the bookkeeping.
				return typed.AsTypedUnvalidated(v, t.schema, t.typeRef), nil //nolint:staticcheck // see above
			}
		}
	}
	return c.TypeConverter.ObjectToTyped(obj, opts...)
}

// trusted reports whether validating obj could find nothing (see above).
func (c *trustingConverter) trusted(obj runtime.Object, opts []typed.ValidationOptions) bool {
	if _, ok := c.stored.Load(obj); ok {
		return true
	}
	_, unstructured := obj.(runtime.Unstructured)
	return !unstructured && slices.Contains(opts, typed.AllowDuplicates)
}

// typeOf finds a kind's type by converting an empty object of the kind once.
func (c *trustingConverter) typeOf(gvk schema.GroupVersionKind) (typeOfKind, bool) {
	if t, ok := c.types.Load(gvk); ok {
		return t.(typeOfKind), true
	}
	empty, err := Scheme.New(gvk)
	if err != nil {
		return typeOfKind{}, false
	}
	empty.GetObjectKind().SetGroupVersionKind(gvk)
	tv, err := c.TypeConverter.ObjectToTyped(empty)
	if err != nil {
		return typeOfKind{}, false
	}
	t := typeOfKind{schema: tv.Schema(), typeRef: tv.TypeRef()}
	c.types.Store(gvk, t)
	return t, true
}

// unstructuredVersions converts custom resources between versions the way the None
// conversion strategy does: by their apiVersion alone.
type unstructuredVersions struct{}

func (unstructuredVersions) Convert(in, out, _ any) error {
	u, ok := in.(*unstructured.Unstructured)
	o, ok2 := out.(*unstructured.Unstructured)
	if !ok || !ok2 {
		return fmt.Errorf("apiserver: cannot convert %T to %T", in, out)
	}
	o.Object = runtime.DeepCopyJSON(u.Object)
	return nil
}

func (unstructuredVersions) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("apiserver: cannot convert %T", in)
	}
	kind, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()})
	if !ok {
		return nil, fmt.Errorf("apiserver: %s has no version in %v", u.GroupVersionKind(), gv)
	}
	out := u.DeepCopy()
	out.SetGroupVersionKind(kind)
	return out, nil
}

func (unstructuredVersions) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// unstructuredDefaulter applies a custom resource's schema defaults.
type unstructuredDefaulter struct{ res *resource }

func (d unstructuredDefaulter) Default(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok && d.res.custom.structural != nil {
		structuraldefaulting.Default(u.Object, d.res.custom.structural)
	}
}

// unstructuredCreater makes empty custom resources.
type unstructuredCreater struct{}

func (unstructuredCreater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}

// resetFields are the fields a write to the main resource (or to status) cannot change,
// so that no manager is recorded as owning them: status for the main resource of a kind
// with a status subresource, spec for the status subresource, everything but
// spec.ephemeralContainers for pods/ephemeralcontainers.
func resetFields(res *resource, subresource string) map[fieldpath.APIVersion]fieldpath.Filter {
	if subresource == podEphemeralContainersSubresource.name {
		return map[fieldpath.APIVersion]fieldpath.Filter{
			fieldpath.APIVersion(res.apiVersion()): fieldpath.NewIncludeMatcherFilter(fieldpath.MakePrefixMatcherOrDie("spec", "ephemeralContainers")),
		}
	}
	if res.subresource("status") == nil {
		return nil
	}
	reset := "status"
	if subresource == "status" {
		reset = "spec"
	}
	return map[fieldpath.APIVersion]fieldpath.Filter{
		fieldpath.APIVersion(res.apiVersion()): fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie(reset))),
	}
}

// trackWrite records manager as the writer of obj (new state) over live (old state; a
// new object of the kind on create) in obj's managedFields. A failure to compute them
// keeps the stored ones, as kube-apiserver does; the write itself goes ahead.
func (s *Server) trackWrite(res *resource, subresource string, live, obj runtime.Object, manager string) runtime.Object {
	fm, conv, err := s.fields.getWithConverter(res, subresource)
	if err != nil {
		s.log.Warn("managed fields not tracked", "resource", res.name, "err", err)
		return obj
	}
	live.GetObjectKind().SetGroupVersionKind(res.gvk())
	obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	if liveShown, objShown, ok := withoutResetField(res, subresource, live, obj); ok {
		defer conv.trustStored(liveShown)()
		out := fm.UpdateNoErrors(liveShown, objShown, manager)
		if om, err := meta.Accessor(out); err == nil {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(om.GetManagedFields())
				return obj
			}
		}
	}
	defer conv.trustStored(live)()
	return fm.UpdateNoErrors(live, obj, manager)
}

// The field manager compares the whole of the old and new object, also the half a write
// cannot change: the spec under a status write, the status under a write to the object
// itself. For a pod status write (the API server's most frequent write in a rollout) the
// spec is most of the walk. What the comparison finds there cannot reach managedFields:
// the reset filter (resetFields) drops those paths from the writer's set and from the
// comparison other managers' sets are checked against, and the writer's own entry is
// built from its changes alone (the library records an update as a "current-operation"
// first), so a write that changed only the hidden half records nothing either way. Hence
// the bookkeeping can be given shallow copies of both objects with that field left out.
// Managers recorded in another API version are compared with a conversion the filter does
// not cover; objects that have them keep the full walk.

// withoutResetField returns shallow copies of live and obj with the top-level field the
// write cannot change (Spec for a status write, Status otherwise) zeroed, or ok false when
// that does not apply: custom resources, kinds without a status subresource, and objects
// with managedFields of another API version.
func withoutResetField(res *resource, subresource string, live, obj runtime.Object) (liveShown, objShown runtime.Object, ok bool) {
	if res.custom != nil || res.subresource("status") == nil {
		return nil, nil, false
	}
	field := "Status"
	switch subresource {
	case "status":
		field = "Spec"
	case "":
	default:
		return nil, nil, false
	}
	for _, o := range []runtime.Object{live, obj} {
		m, err := meta.Accessor(o)
		if err != nil {
			return nil, nil, false
		}
		for _, e := range m.GetManagedFields() {
			if e.APIVersion != res.apiVersion() {
				return nil, nil, false
			}
		}
	}
	liveShown, ok = shallowCopyWithout(live, field)
	if !ok {
		return nil, nil, false
	}
	objShown, ok = shallowCopyWithout(obj, field)
	return liveShown, objShown, ok
}

// shallowCopyWithout copies the struct obj points to, with its field name zeroed; ok is
// false when obj is not a pointer to a struct with that field.
func shallowCopyWithout(obj runtime.Object, name string) (runtime.Object, bool) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	f := cp.Elem().FieldByName(name)
	if !f.IsValid() {
		return nil, false
	}
	f.SetZero()
	out, ok := cp.Interface().(runtime.Object)
	return out, ok
}

// fieldManager is the manager a request writes as: its fieldManager parameter, or the
// first part of its User-Agent (kubectl/v1.32 … is "kubectl"), as kube-apiserver names it.
func (c *call) fieldManager(optionsKind string) (string, error) {
	manager := c.r.URL.Query().Get("fieldManager")
	if manager != "" {
		if errs := validateFieldManager(manager); len(errs) > 0 {
			return "", apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: optionsKind}, "", errs)
		}
		return manager, nil
	}
	ua := c.r.UserAgent()
	if i := strings.Index(ua, "/"); i >= 0 {
		ua = ua[:i]
	}
	if len(ua) > maxFieldManagerLength {
		ua = ua[:maxFieldManagerLength]
	}
	if ua == "" {
		ua = "unknown"
	}
	return ua, nil
}

// validateFieldManager is kube-apiserver's rule for fieldManager.
func validateFieldManager(manager string) field.ErrorList {
	p := field.NewPath("fieldManager")
	if len(manager) > maxFieldManagerLength {
		return field.ErrorList{field.TooLong(p, manager, maxFieldManagerLength)}
	}
	for _, r := range manager {
		if !unicode.IsPrint(r) {
			return field.ErrorList{field.Invalid(p, manager, "invalid characters")}
		}
	}
	return nil
}
