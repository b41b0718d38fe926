package apiserver

import (
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// apply serves PATCH with application/apply-patch+yaml: server-side apply. The body is the
// caller's whole intent for the fields it manages; the field manager merges it into the
// stored object (or into a new one), refusing with 409 a change to a field another manager
// owns unless force=true, and dropping fields the caller applied before and no longer
// does when nobody else owns them.
func (c *call) apply() {
	res := c.info.res
	q := c.r.URL.Query()
	manager := q.Get("fieldManager")
	if manager == "" {
		c.fail(badRequest("fieldManager is required for apply requests"))
		return
	}
	if errs := validateFieldManager(manager); len(errs) > 0 {
		c.fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", errs))
		return
	}
	force := false
	if v := q.Get("force"); v != "" {
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			c.fail(badRequest("force: invalid value %q", v))
			return
		}
	}
	body, err := c.readBody()
	if err != nil {
		c.fail(err)
		return
	}
	mode, err := c.fieldValidation()
	if err != nil {
		c.fail(err)
		return
	}
	patch, err := c.appliedObject(mode, body)
	if err != nil {
		c.fail(err)
		return
	}
	fm, err := c.s.fields.get(res, c.info.subresource)
	if err != nil {
		c.fail(err)
		return
	}
	// Under Strict, fields the schema does not declare are refused by the field manager
	// itself (its type converter: ".x: field not declared in schema"), and duplicate
	// fields, which reading YAML into an object loses, by a strict reading of the body
	// once the merge succeeded: kube-apiserver's order and words.
	applyStrict := func(live runtime.Object) (runtime.Object, error) {
		obj, err := fm.Apply(live, patch.DeepCopy(), manager, force)
		if err != nil {
			// The library returns the applied object's schema errors as plain errors,
			// which kube-apiserver 1.37 answers with a 500; they are the client's, so
			// they get a 400 with the same words (kubernetes/kubernetes#139253).
			if _, isStatus := err.(apierrors.APIStatus); !isStatus && strings.HasPrefix(err.Error(), "failed to create typed patch object") {
				return nil, badRequest("%v", err)
			}
			return obj, err
		}
		if mode == validationStrict {
			if err := yaml.UnmarshalStrict(body, &map[string]any{}); err != nil {
				return nil, badRequest("error strict decoding patch: %v", err)
			}
		}
		return obj, nil
	}
	opts := updateOptions{manager: manager, applied: true}
	if c.info.subresource == "" {
		// Applying an object that does not exist creates it.
		opts.create = func() (runtime.Object, createOptions, error) {
			live := res.newFunc()
			live.GetObjectKind().SetGroupVersionKind(res.gvk())
			obj, err := applyStrict(live)
			return obj, createOptions{manager: manager, applied: true}, err
		}
	}
	c.applyUpdate(func(cur runtime.Object) (runtime.Object, error) {
		cur.GetObjectKind().SetGroupVersionKind(res.gvk())
		return applyStrict(cur)
	}, opts)
}

// appliedObject decodes an apply body (YAML or JSON) and checks that it is an object of
// the resource named by the URL; unknown and duplicate fields are judged by mode.
func (c *call) appliedObject(mode fieldValidation, body []byte) (*unstructured.Unstructured, error) {
	res := c.info.res
	data, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, badRequest("error decoding YAML: %v", err)
	}
	// Decode once into the Go type to judge unknown and duplicate fields as any write;
	// under Strict the field manager and a strict reading of the body judge them instead
	// (see apply), so nothing is pruned here.
	decodeMode := mode
	if mode == validationStrict {
		decodeMode = validationIgnore
	}
	typed := res.newFunc()
	found, err := unmarshal(decodeMode, data, typed)
	if err != nil {
		return nil, badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, err)
	}
	if err := c.fieldProblems(decodeMode, found, func(err error) error {
		return badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, err)
	}); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if _, isCustom := typed.(*unstructured.Unstructured); isCustom && mode == validationStrict {
		u = typed.(*unstructured.Unstructured)
	} else if isCustom {
		// A custom resource was decoded into the same shape: prune what its schema lacks.
		u = typed.(*unstructured.Unstructured)
		if err := c.fieldProblems(mode, c.prune(u), func(err error) error {
			return badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, err)
		}); err != nil {
			return nil, err
		}
	} else if err := u.UnmarshalJSON(data); err != nil {
		return nil, badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, err)
	}
	if err := checkTypeMeta(metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}, res.gvk()); err != nil {
		return nil, err
	}
	switch name := u.GetName(); {
	case name == "":
		return nil, apierrors.NewInvalid(res.gvk().GroupKind(), c.info.name,
			field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name is required")})
	case name != c.info.name:
		return nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", name, c.info.name)
	}
	if res.namespaced {
		switch ns := u.GetNamespace(); ns {
		case "":
			u.SetNamespace(c.info.namespace)
		case c.info.namespace:
		default:
			return nil, badRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	}
	return u, nil
}
