package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/client-go/util/jsonpath"
)

// Custom resources are served like built-in kinds, from one registry entry per served
// version of their CustomResourceDefinition, made here from the definition. They have no Go
// type: they are *unstructured.Unstructured throughout, stored as JSON. Their rules come
// from the version's schema, through k8s.io/apiextensions-apiserver's own code: structural
// defaulting and pruning, OpenAPI schema validation, list-type checks, embedded ObjectMeta,
// and the CEL rules of x-kubernetes-validations.

// customResourceVersion is what one served version of a definition needs.
type customResourceVersion struct {
	crd        *apiextensionsv1.CustomResourceDefinition
	version    apiextensionsv1.CustomResourceDefinitionVersion
	structural *structuralschema.Structural // nil when the version has no schema
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator // nil without CEL rules
	columns    []apiextensionsv1.CustomResourceColumnDefinition
	status     bool
	preserve   bool // spec.preserveUnknownFields (v1 forbids true; kept for completeness)
	// conv converts between the definition's versions; nil when it has only one.
	conv *customResourceConverter
}

// defaultOnRead applies the schema's defaults to a custom resource read from etcd, as
// kube-apiserver does when it decodes one: a default added to the definition after an
// object was stored shows in every read of it, not only after its next write. obj must
// not be shared (it is a fresh decode).
func (cv *customResourceVersion) defaultOnRead(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok && cv.structural != nil {
		structuraldefaulting.Default(u.Object, cv.structural)
	}
}

// newCustomResourceVersion prepares version v of crd: its structural schema and validators.
func newCustomResourceVersion(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) (*customResourceVersion, error) {
	cv := &customResourceVersion{crd: crd, version: v, columns: v.AdditionalPrinterColumns, preserve: crd.Spec.PreserveUnknownFields}
	if v.Subresources != nil && v.Subresources.Status != nil {
		cv.status = true
	}
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return cv, nil
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := crdScheme.Convert(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
		return nil, fmt.Errorf("schema of %s %s: %w", crd.Name, v.Name, err)
	}
	s, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, fmt.Errorf("schema of %s %s is not structural: %w", crd.Name, v.Name, err)
	}
	cv.structural = s
	if cv.validator, _, err = apiservervalidation.NewSchemaValidator(internal); err != nil {
		return nil, fmt.Errorf("schema of %s %s: %w", crd.Name, v.Name, err)
	}
	cv.cel = cel.NewValidator(s, true, celconfig.PerCallLimit)
	return cv, nil
}

// customResource is the registry entry of one served version of a definition.
func customResource(cv *customResourceVersion) *resource {
	crd, v := cv.crd, cv.version
	names := crd.Status.AcceptedNames
	if names.Plural == "" {
		names = crd.Spec.Names
	}
	singular := names.Singular
	if singular == "" {
		singular = strings.ToLower(names.Kind)
	}
	gvk := apiextensionsv1.SchemeGroupVersion.WithKind(names.Kind)
	gvk.Group, gvk.Version = crd.Spec.Group, v.Name
	listGVK := gvk.GroupVersion().WithKind(names.ListKind)
	if names.ListKind == "" {
		listGVK.Kind = names.Kind + "List"
	}
	r := &resource{
		group: crd.Spec.Group, version: v.Name, name: names.Plural, kind: names.Kind, singular: singular,
		shortNames: names.ShortNames, categories: names.Categories,
		namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		newFunc: func() runtime.Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			return u
		},
		newListFunc: func() runtime.Object {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listGVK)
			return l
		},
		strategy:         &customResourceStrategy{cv: cv},
		tracksGeneration: true,
		custom:           cv,
	}
	if cv.status {
		r.subresources = append(r.subresources, statusSubresource)
	}
	if sc := v.Subresources; sc != nil && sc.Scale != nil {
		r.subresources = append(r.subresources, customScaleSubresource(sc.Scale))
	}
	if len(v.SelectableFields) > 0 {
		r.fields = map[string]fieldFunc{}
		for _, sf := range v.SelectableFields {
			path := strings.Split(strings.TrimPrefix(sf.JSONPath, "."), ".")
			r.fields[strings.TrimPrefix(sf.JSONPath, ".")] = func(obj runtime.Object) string {
				val, found, _ := unstructured.NestedFieldNoCopy(obj.(*unstructured.Unstructured).Object, path...)
				if !found || val == nil {
					return ""
				}
				return fmt.Sprint(val)
			}
		}
	}
	return r
}

// customScaleSubresource serves /scale of a custom resource from the paths its definition
// names.
func customScaleSubresource(sc *apiextensionsv1.CustomResourceSubresourceScale) subresource {
	path := func(p string) []string { return strings.Split(strings.TrimPrefix(p, "."), ".") }
	spec, status := path(sc.SpecReplicasPath), path(sc.StatusReplicasPath)
	var selector []string
	if sc.LabelSelectorPath != nil {
		selector = path(*sc.LabelSelectorPath)
	}
	return scaleSubresource(func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
		u := obj.(*unstructured.Unstructured).Object
		want, _, _ := unstructured.NestedInt64(u, spec...)
		have, _, _ := unstructured.NestedInt64(u, status...)
		var sel *metav1.LabelSelector
		if selector != nil {
			if s, ok, _ := unstructured.NestedString(u, selector...); ok {
				if parsed, err := metav1.ParseToLabelSelector(s); err == nil {
					sel = parsed
				}
			}
		}
		return int32(want), int32(have), sel
	}, func(obj runtime.Object, n int32) {
		_ = unstructured.SetNestedField(obj.(*unstructured.Unstructured).Object, int64(n), spec...)
	})
}

// customResourceStrategy applies a version's schema to custom resources.
type customResourceStrategy struct {
	cv *customResourceVersion
}

var _ strategy = (*customResourceStrategy)(nil)

// prune drops the fields the schema does not declare and returns their paths, so the
// handlers report them as fieldValidation says.
func (s *customResourceStrategy) prune(obj runtime.Object) []string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || s.cv.structural == nil {
		return nil
	}
	var unknown []string
	if !s.cv.preserve {
		unknown = structuralpruning.PruneWithOptions(u.Object, s.cv.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	}
	if err, dropped := objectmeta.CoerceWithOptions(nil, u.Object, s.cv.structural, true, objectmeta.CoerceOptions{ReturnUnknownFieldPaths: true}); err == nil {
		unknown = append(unknown, dropped...)
	}
	return unknown
}

// settle prunes obj and applies the schema's defaults: what every write stores.
func (s *customResourceStrategy) settle(u *unstructured.Unstructured) {
	s.prune(u)
	if s.cv.structural != nil {
		structuraldefaulting.Default(u.Object, s.cv.structural)
	}
}

func (s *customResourceStrategy) prepareForCreate(obj runtime.Object, _ time.Time) {
	u := obj.(*unstructured.Unstructured)
	if s.cv.status {
		delete(u.Object, "status")
	}
	s.settle(u)
}

func (s *customResourceStrategy) prepareForUpdate(obj, old runtime.Object, _ time.Time) {
	u := obj.(*unstructured.Unstructured)
	if s.cv.status {
		if st, ok := old.(*unstructured.Unstructured).Object["status"]; ok {
			u.Object["status"] = runtime.DeepCopyJSONValue(st)
		} else {
			delete(u.Object, "status")
		}
	}
	s.settle(u)
}

func (s *customResourceStrategy) prepareForStatusUpdate(obj, old runtime.Object, _ time.Time) {
	u, o := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	status, hasStatus := u.Object["status"]
	next := runtime.DeepCopyJSON(o.Object)
	next["metadata"] = u.Object["metadata"]
	if hasStatus {
		next["status"] = status
	} else {
		delete(next, "status")
	}
	u.Object = next
	s.settle(u)
}

func (s *customResourceStrategy) validate(obj runtime.Object) field.ErrorList {
	return s.check(obj, nil)
}

func (s *customResourceStrategy) validateUpdate(obj, old runtime.Object) field.ErrorList {
	return s.check(obj, old)
}

func (s *customResourceStrategy) validateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	return s.check(obj, old)
}

// check validates a custom resource against the schema of its version (old is the stored
// state on an update, for ratcheting and CEL transition rules).
func (s *customResourceStrategy) check(obj, old runtime.Object) field.ErrorList {
	u := obj.(*unstructured.Unstructured)
	var errs field.ErrorList
	if s.cv.structural == nil {
		return nil
	}
	ctx := context.Background()
	errs = append(errs, objectmeta.Validate(ctx, nil, u.Object, s.cv.structural, true)...)
	var oldObj map[string]any
	if old != nil {
		oldObj = old.(*unstructured.Unstructured).Object
		errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, u.UnstructuredContent(), oldObj, s.cv.validator)...)
	} else {
		errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), s.cv.validator)...)
	}
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.cv.structural, u.Object)...)
	if s.cv.cel != nil {
		var oldVal any
		if oldObj != nil {
			oldVal = oldObj
		}
		celErrs, _ := s.cv.cel.Validate(ctx, nil, s.cv.structural, u.Object, oldVal, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

// generationChanged: with a status subresource only spec changes count, as upstream; without
// one, anything but metadata does.
func (s *customResourceStrategy) generationChanged(obj, old runtime.Object) bool {
	a, b := obj.(*unstructured.Unstructured).Object, old.(*unstructured.Unstructured).Object
	for k := range merged(a, b) {
		if k == "metadata" || (s.cv.status && k == "status") {
			continue
		}
		if !apiequality.Semantic.DeepEqual(a[k], b[k]) {
			return true
		}
	}
	return false
}

func merged(a, b map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func (s *customResourceStrategy) tableColumns() []metav1.TableColumnDefinition {
	cols := []metav1.TableColumnDefinition{nameColumn()}
	if len(s.cv.columns) == 0 {
		return append(cols, ageColumn())
	}
	for _, c := range s.cv.columns {
		cols = append(cols, metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description, Priority: c.Priority})
	}
	return cols
}

func (s *customResourceStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	u := obj.(*unstructured.Unstructured)
	row := []any{u.GetName()}
	if len(s.cv.columns) == 0 {
		return append(row, age(u.GetCreationTimestamp(), now))
	}
	for _, c := range s.cv.columns {
		row = append(row, printerCell(c, u, now))
	}
	return row
}

// printerCell evaluates one additionalPrinterColumn on u, as kube-apiserver prints them.
func printerCell(c apiextensionsv1.CustomResourceColumnDefinition, u *unstructured.Unstructured, now time.Time) any {
	jp := jsonpath.New(c.Name).AllowMissingKeys(true)
	if err := jp.Parse(fmt.Sprintf("{%s}", c.JSONPath)); err != nil {
		return nil
	}
	results, err := jp.FindResults(u.Object)
	if err != nil || len(results) == 0 || len(results[0]) == 0 {
		return nil
	}
	v := results[0][0].Interface()
	switch c.Type {
	case "date":
		if s, ok := v.(string); ok {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				return age(metav1.NewTime(t), now)
			}
		}
	case "integer", "number", "boolean":
		return v
	}
	if s, ok := v.(string); ok {
		return s
	}
	var buf bytes.Buffer
	if err := jp.PrintResults(&buf, results[0]); err != nil {
		return nil
	}
	return buf.String()
}
