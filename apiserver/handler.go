package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/warning"
	"sigs.k8s.io/yaml"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// call is one resource request on its way through a handler.
type call struct {
	s    *Server
	w    http.ResponseWriter
	r    *http.Request
	info *requestInfo
	user *auth.User
	out  output
	// nodeCheck: the caller is a node and may act only on objects of its own node.
	nodeCheck bool
}

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request) {
	info, err := s.parseRequest(r)
	if err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	defer s.labels.end(s.labels.set(r.Context(), info))
	st := stateFrom(r.Context())
	st.verb, st.resource, st.subresource = info.verb, info.res.name, info.subresource
	st.info = info
	c := &call{s: s, w: w, r: r, info: info, user: st.user}
	decision, reason := s.authorize(c.user, c.attributes())
	st.decision, st.reason = decisionAnnotation(decision), reason
	switch decision {
	case auth.Allow:
	case auth.NodeObjectCheck:
		c.nodeCheck = true
	default:
		c.fail(c.forbidden(reason))
		return
	}
	if r.Method != http.MethodGet {
		// Admission plugins and webhook responses add warnings through the context.
		c.r = r.WithContext(warning.WithWarningRecorder(r.Context(), &headerWarnings{h: w.Header()}))
	}
	if c.out, err = negotiate(r); err != nil {
		c.fail(err)
		return
	}
	if info.res.custom != nil {
		// Custom resources have no protobuf form; kube-apiserver answers them in JSON.
		c.out.protobuf = false
	}
	if info.sub != nil && info.sub.serve != nil {
		info.sub.serve(c)
		return
	}
	switch info.verb {
	case "get", "list", "watch", "deletecollection":
		if err := s.ensureCache(r.Context(), info.res); err != nil {
			c.fail(err)
			return
		}
	}
	switch info.verb {
	case "get":
		c.get()
	case "list":
		c.list()
	case "watch":
		c.watch()
	case "create":
		c.create()
	case "update":
		c.update()
	case "patch":
		c.patch()
	case "delete":
		c.delete()
	case "deletecollection":
		c.deleteCollection()
	}
}

// attributes are what the call asks to do, for the authorizer.
func (c *call) attributes() auth.Attributes {
	return auth.Attributes{Verb: c.info.verb, Group: c.info.res.group, Resource: c.info.res.name,
		Subresource: c.info.subresource, Namespace: c.info.namespace, Name: c.info.name}
}

// forbidden is the call's 403, with the authorizer's reason.
func (c *call) forbidden(reason string) error {
	return forbiddenError(c.user, c.attributes(), reason)
}

// authorizeNodeObject finishes node authorization once the object is known.
func (c *call) authorizeNodeObject(obj runtime.Object) error {
	if !c.nodeCheck {
		return nil
	}
	node := ""
	if c.info.res.nodeNameOf != nil {
		node = c.info.res.nodeNameOf(obj)
	}
	if d, reason := auth.AuthorizeNodeObject(c.user, node); d != auth.Allow {
		return c.forbidden(reason)
	}
	return nil
}

func (c *call) gr() schema.GroupResource { return c.info.res.groupResource() }

func (c *call) fail(err error) { writeError(c.w, c.r, err, c.gr(), c.info.name) }

func (c *call) key(namespace, name string) string {
	return c.info.res.key(c.s.cfg.EtcdPrefix, namespace, name)
}

// writeWarning is what a write answers with for a kind that is stored but not acted on:
// webhook configurations with webhooks that are not called, and kinds no controller of
// miniplane runs (the latter for writes of the object itself, not of its status or scale).
func (c *call) writeWarning(obj runtime.Object) string {
	if c.r.Method == http.MethodGet || c.r.Method == http.MethodDelete {
		return ""
	}
	if inert := c.info.res.inertNote; inert != nil {
		return inert(obj)
	}
	if c.info.subresource != "" {
		return ""
	}
	return c.info.res.noControllerNote()
}

// respond writes one object in the negotiated shape. co, when given, is obj as the watch
// cache holds it, with its encodings made once.
func (c *call) respond(code int, obj runtime.Object, co *cachedObject) {
	if note := c.writeWarning(obj); note != "" {
		if h, err := utilnet.NewWarningHeader(299, "-", note); err == nil {
			c.w.Header().Add("Warning", h)
		}
	}
	switch c.out.kind {
	case outputTable:
		writeOutput(c.w, c.out, code, c.s.toTable(c.info.res, []runtime.Object{obj}, c.out, c.r.URL.Query().Get("includeObject"), metav1.ListMeta{}))
		return
	case outputMetadata:
		writeOutput(c.w, c.out, code, partialMetadata(obj))
		return
	}
	if c.out.protobuf {
		var raw []byte
		var err error
		if co != nil {
			raw, err = co.protobuf()
		} else {
			raw, err = rawProto(obj)
		}
		if err != nil {
			c.fail(err)
			return
		}
		writeEnveloped(c.w, code, c.info.res.apiVersion(), c.info.res.kind, raw)
		return
	}
	if co != nil {
		data, err := co.json()
		if err != nil {
			c.fail(err)
			return
		}
		writeBytes(c.w, code, data, c.out.yaml)
		return
	}
	obj.GetObjectKind().SetGroupVersionKind(c.info.res.gvk())
	writeOutput(c.w, c.out, code, obj)
}

func partialMetadata(obj runtime.Object) *metav1.PartialObjectMetadata {
	pom := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}}
	// Every served type embeds ObjectMeta, whose GetObjectMeta returns the *ObjectMeta itself.
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if om, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			pom.ObjectMeta = *om
		}
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// Custom resources keep their metadata as a map.
		if om, _, err := objectmeta.GetObjectMeta(u.Object, true); err == nil && om != nil {
			pom.ObjectMeta = *om
		}
	}
	return pom
}

func (c *call) dryRun() (bool, error) {
	values := c.r.URL.Query()["dryRun"]
	for _, v := range values {
		if v != "All" {
			return false, apierrors.NewBadRequest(fmt.Sprintf("dryRun: Unsupported value: %q: supported values: \"All\"", v))
		}
	}
	return len(values) > 0, nil
}

// unsizedBodyBuffer is what readBody sets aside first for a body of unknown length: most
// objects fit.
const unsizedBodyBuffer = 4 << 10

// readBody reads the request body, enforcing the size limit with 413.
//
// The buffer is sized from Content-Length before the first read, so that a body which has
// arrived whole is taken in one read rather than in the growing steps of io.ReadAll. Over
// HTTP/2 every read that returns data is handed to the connection's serving goroutine (for
// flow control) and waits until that goroutine takes it; on a connection that carries many
// requests, each hand-off waits its turn (docs/performance.md, "Eighteenth round").
func (c *call) readBody() ([]byte, error) {
	limit := c.s.cfg.MaxRequestBodyBytes
	if c.r.ContentLength > limit {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))
	}
	var buf bytes.Buffer
	if c.r.ContentLength >= 0 {
		// bytes.MinRead beyond the length: the read that finds the end needs no growth.
		buf.Grow(int(c.r.ContentLength) + bytes.MinRead)
	} else {
		buf.Grow(unsizedBodyBuffer)
	}
	if _, err := buf.ReadFrom(io.LimitReader(c.r.Body, limit+1)); err != nil {
		return nil, badRequest("reading request body: %v", err)
	}
	if int64(buf.Len()) > limit {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))
	}
	return buf.Bytes(), nil
}

// decodeObject decodes a body into a new object of the resource's kind, applying the
// fieldValidation directive, and checks apiVersion and kind when the body names them.
// Warnings for unknown fields go into the Warning header.
func (c *call) decodeObject(data []byte, want schema.GroupVersionKind, into runtime.Object) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("the request body is empty")
	}
	ct := c.r.Header.Get("Content-Type")
	if ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			return unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (%v)", err))
		}
		switch mt {
		case "application/json", "*/*":
		case "application/yaml":
			mode, err := c.fieldValidation()
			if err != nil {
				return err
			}
			duplicates := yamlDuplicates(mode, data)
			if data, err = yaml.YAMLToJSON(data); err != nil {
				return badRequest("invalid YAML: %v", err)
			}
			return c.decodeJSON(data, want, into, duplicates...)
		case protobufMediaType:
			return c.decodeProtobuf(data, want, into)
		case "application/cbor":
			return unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got %s)", mt))
		default:
			return unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got %s)", mt))
		}
	}
	return c.decodeJSON(data, want, into)
}

// protobufSerializer decodes protobuf bodies of the types client-go knows.
var protobufSerializer = protobuf.NewSerializer(Scheme, Scheme)

// isProtobuf reports whether the request body is protobuf.
func (c *call) isProtobuf() bool {
	mt, _, err := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	return err == nil && mt == protobufMediaType
}

// decodeProtobuf decodes a protobuf body into into, which must be of the kind want. The
// envelope names its apiVersion and kind, checked as decodeJSON checks them; an empty
// want.Version accepts any group version (DeleteOptions come under any of them).
func (c *call) decodeProtobuf(data []byte, want schema.GroupVersionKind, into runtime.Object) error {
	obj, gvk, err := protobufSerializer.Decode(data, nil, nil)
	if err != nil {
		if gvk != nil && gvk.Kind != "" && gvk.Kind != want.Kind {
			return badRequest("the kind in the data (%s) does not match the expected kind (%s)", gvk.Kind, want.Kind)
		}
		return badRequest("the body of the request could not be decoded as %s: %v", want.Kind, err)
	}
	if want.Version != "" && gvk.GroupVersion() != want.GroupVersion() {
		return badRequest("the API version in the data (%s) does not match the expected API version (%s)", gvk.GroupVersion().String(), want.GroupVersion().String())
	}
	if gvk.Kind != want.Kind || reflect.TypeOf(obj) != reflect.TypeOf(into) {
		return badRequest("the kind in the data (%s) does not match the expected kind (%s)", gvk.Kind, want.Kind)
	}
	reflect.ValueOf(into).Elem().Set(reflect.ValueOf(obj).Elem())
	if want.Version != "" {
		into.GetObjectKind().SetGroupVersionKind(want)
	}
	return nil
}

// decodeJSON decodes a JSON body into into, which must be of the kind want, applying the
// fieldValidation directive to its unknown and duplicate fields and to found, those a
// YAML body had before it became JSON.
func (c *call) decodeJSON(data []byte, want schema.GroupVersionKind, into runtime.Object, found ...error) error {
	mode, err := c.fieldValidation()
	if err != nil {
		return err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		return badRequest("the body of the request is not valid JSON: %v", err)
	}
	if err := checkTypeMeta(tm, want); err != nil {
		return err
	}
	strict, err := unmarshal(mode, data, into)
	if err != nil {
		return undecodable(want, err)
	}
	strict = append(strict, c.prune(into)...)
	if err := c.fieldProblems(mode, append(found, strict...), func(err error) error { return undecodable(want, err) }); err != nil {
		return err
	}
	into.GetObjectKind().SetGroupVersionKind(want)
	return nil
}

// pruner is implemented by the strategies of kinds whose objects may carry fields their
// schema does not declare (custom resources): prune drops them, and returns their paths.
type pruner interface {
	prune(obj runtime.Object) []string
}

// prune drops the undeclared fields of obj, an object of the request's resource, and
// returns them as fieldValidation reports unknown fields.
func (c *call) prune(obj runtime.Object) []error {
	p, ok := c.info.res.strategy.(pruner)
	if !ok || reflect.TypeOf(obj) != reflect.TypeOf(c.info.res.newFunc()) {
		return nil
	}
	var out []error
	for _, path := range p.prune(obj) {
		out = append(out, fmt.Errorf("unknown field %q", path))
	}
	return out
}

// checkTypeMeta accepts the apiVersion and kind a body names if they are want's or empty.
func checkTypeMeta(tm metav1.TypeMeta, want schema.GroupVersionKind) error {
	if tm.APIVersion != "" && tm.APIVersion != want.GroupVersion().String() {
		return badRequest("the API version in the data (%s) does not match the expected API version (%s)", tm.APIVersion, want.GroupVersion().String())
	}
	if tm.Kind != "" && tm.Kind != want.Kind {
		return badRequest("the kind in the data (%s) does not match the expected kind (%s)", tm.Kind, want.Kind)
	}
	return nil
}

// now is the server clock's time at second precision, as object timestamps are stored.
func (c *call) now() metav1.Time {
	return metav1.NewTime(c.s.clock.Now().Truncate(time.Second))
}
