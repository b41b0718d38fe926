package apiserver

import (
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Server-side field validation, as kube-apiserver does it: a body with unknown or
// duplicate fields fails the request (Strict), succeeds with one Warning header per field
// (Warn, the default) or succeeds silently (Ignore). Create and update bodies are checked
// as they are decoded; a patch is checked in its own body (duplicates) and in the object
// it produces (unknown fields), and fails as an invalid patch.

// fieldValidation is the directive for unknown and duplicate fields in a body.
type fieldValidation string

const (
	validationIgnore fieldValidation = "Ignore"
	validationWarn   fieldValidation = "Warn"
	validationStrict fieldValidation = "Strict"
)

func (c *call) fieldValidation() (fieldValidation, error) {
	switch v := c.r.URL.Query().Get("fieldValidation"); v {
	case "":
		return validationWarn, nil // kube-apiserver's default
	case string(validationIgnore), string(validationWarn), string(validationStrict):
		return fieldValidation(v), nil
	default:
		return "", badRequest("fieldValidation: Unsupported value: %q: supported values: \"Ignore\", \"Strict\", \"Warn\"", v)
	}
}

// unmarshal decodes JSON data into v case-sensitively, as kube-apiserver's decoder does,
// and returns the unknown and duplicate fields it met unless mode ignores them.
func unmarshal(mode fieldValidation, data []byte, v any) (strict []error, err error) {
	if mode == validationIgnore {
		return nil, sigsjson.UnmarshalCaseSensitivePreserveInts(data, v)
	}
	return sigsjson.UnmarshalStrict(data, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
}

// yamlDuplicates reports duplicate keys of a YAML body, which its conversion to JSON
// drops, as the strict error kube-apiserver reports for them.
func yamlDuplicates(mode fieldValidation, data []byte) []error {
	if mode == validationIgnore {
		return nil
	}
	if _, err := yaml.YAMLToJSONStrict(data); err != nil {
		return []error{err}
	}
	return nil
}

// fieldProblems applies mode to the unknown and duplicate fields found in a body: under
// Strict it returns them as one strict decoding error for invalid to wrap, under Warn it
// adds a warning for each and returns nil.
func (c *call) fieldProblems(mode fieldValidation, found []error, invalid func(error) error) error {
	if len(found) == 0 || mode == validationIgnore {
		return nil
	}
	if mode == validationStrict {
		return invalid(runtime.NewStrictDecodingError(found))
	}
	// Once per field, also when an update retries on a conflict and finds it again. A
	// header holds no line breaks, which the YAML decoder's messages have: kube-apiserver
	// drops such a warning, miniplane sends it on one line.
	for _, e := range found {
		h, err := utilnet.NewWarningHeader(299, "-", strings.Join(strings.Fields(e.Error()), " "))
		if err == nil && !slices.Contains(c.w.Header().Values("Warning"), h) {
			c.w.Header().Add("Warning", h)
		}
	}
	return nil
}

// undecodable is kube-apiserver's answer to a create or update body it cannot decode as
// the kind want, strict decoding errors included.
func undecodable(want schema.GroupVersionKind, err error) error {
	return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", want.Kind, want.Version, want.Kind, err))
}

// invalidPatch is kube-apiserver's answer to a patch whose result cannot be decoded, or
// has unknown or duplicate fields under Strict: the patch is invalid. patched is the
// patched object as the error shows it.
func invalidPatch(patched string, err error) error {
	return apierrors.NewInvalid(schema.GroupKind{}, "", field.ErrorList{field.Invalid(field.NewPath("patch"), patched, err.Error())})
}

// jsonPatchOp is one operation of a JSON patch, for finding unknown and duplicate fields
// in it.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	From  string `json:"from"`
	Value any    `json:"value"`
}

// patchBodyProblems returns the unknown and duplicate fields of a JSON or merge patch
// body (a strategic merge patch's are found as it is decoded). A body that is no JSON
// fails here unless mode ignores fields, as in kube-apiserver.
func patchBodyProblems(mode fieldValidation, jsonPatch bool, patch []byte) ([]error, error) {
	if mode == validationIgnore {
		return nil, nil
	}
	if jsonPatch {
		var ops []jsonPatchOp
		found, err := sigsjson.UnmarshalStrict(patch, &ops)
		if err != nil {
			return nil, badRequest("error decoding patch: %v", err)
		}
		for i, e := range found {
			found[i] = fmt.Errorf("json patch %w", e)
		}
		return found, nil
	}
	found, err := sigsjson.UnmarshalStrict(patch, &map[string]any{})
	if err != nil {
		return nil, badRequest("error decoding patch: %v", err)
	}
	return found, nil
}
