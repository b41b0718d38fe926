package apiserver_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/miniplane/miniplane/test/testenv"
)

const (
	podsPath = "/api/v1/namespaces/default/pods"
	dsPath   = "/apis/apps/v1/namespaces/default/daemonsets"
	jsonType = "application/json"
)

// validPod is a pod body that would be accepted, for cases that break something else.
const validPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"new"},"spec":{"containers":[{"name":"c","image":"i:1"}]}}`

// onlyReader hides the length of a body so that it is sent chunked.
type onlyReader struct{ io.Reader }

// TestBadInput sends malformed or forbidden requests over plain HTTPS and checks that each
// gets the Kubernetes status code and reason, in a Status body, and that no stored object
// changed.
func TestBadInput(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	c := env.Client
	seeded, err := c.CoreV1().Pods("default").Create(ctx, podOn("default", "p", "n1"), metav1.CreateOptions{})
	check(t, err)
	_, err = c.AppsV1().DaemonSets("default").Create(ctx, daemonSet("default", "ds"), metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().Nodes().Create(ctx, node("n1"), metav1.CreateOptions{})
	check(t, err)
	// Make the pod's first resourceVersion stale.
	seeded.Labels["touched"] = "yes"
	current, err := c.CoreV1().Pods("default").Update(ctx, seeded, metav1.UpdateOptions{})
	check(t, err)

	raw := newRawClient(t, env)
	admin, viewer := env.Token(testenv.AdminUser), env.Token(testenv.ViewerUser)
	big := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"big","annotations":{"x":"` + strings.Repeat("a", 3<<20+1024) +
		`"}},"spec":{"containers":[{"name":"c","image":"i:1"}]}}`
	stalePod := strings.Replace(validPod, `"name":"new"`, `"name":"p","resourceVersion":"`+seeded.ResourceVersion+`"`, 1)
	invalidDS := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"bad"},"spec":{"selector":{"matchLabels":{"app":"a"}},` +
		`"template":{"metadata":{"labels":{"app":"b"}},"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"i:1"}]}}}}`

	pb := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme)
	var nodePB bytes.Buffer
	wrongKind := node("n9")
	wrongKind.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"} // client-go's encoder sets it
	check(t, pb.Encode(wrongKind, &nodePB))
	const protobufType = "application/vnd.kubernetes.protobuf"

	for _, tc := range []struct {
		name string
		req  request
		code int32
		// reason is the Status reason; for 422 the causes must name causeField.
		reason     metav1.StatusReason
		causeField string
		msg        string // a substring of the message, when it matters
	}{
		{"malformed JSON", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(`{"apiVersion":"v1","kind":"Pod","metadata":`)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"JSON that is not an object", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(`["a"]`)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"empty body", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(``)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"wrong kind", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(strings.Replace(validPod, `"kind":"Pod"`, `"kind":"Node"`, 1))}, 400, metav1.StatusReasonBadRequest, "", "kind"},
		{"wrong apiVersion", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(strings.Replace(validPod, `"apiVersion":"v1"`, `"apiVersion":"apps/v1"`, 1))}, 400, metav1.StatusReasonBadRequest, "", "API version"},
		{"a DaemonSet posted as a pod", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(invalidDS)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"wrong type for a field", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"new"},"spec":{"containers":"no"}}`)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"protobuf body of the wrong kind", request{method: "POST", path: podsPath, token: admin, contentType: protobufType,
			body: bytes.NewReader(nodePB.Bytes())}, 400, metav1.StatusReasonBadRequest, "", "kind"},
		{"malformed protobuf", request{method: "POST", path: podsPath, token: admin, contentType: protobufType,
			body: strings.NewReader("k8s\x00garbage")}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"invalid DaemonSet", request{method: "POST", path: dsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(invalidDS)}, 422, metav1.StatusReasonInvalid, "spec.template.metadata.labels", `DaemonSet.apps "bad" is invalid`},
		{"invalid pod", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"new"},"spec":{"containers":[]}}`)}, 422, metav1.StatusReasonInvalid, "spec.containers", ""},
		{"invalid node taint", request{method: "POST", path: "/api/v1/nodes", token: admin, contentType: jsonType,
			body: strings.NewReader(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2"},"spec":{"taints":[{"key":"k","effect":"Sometimes"}]}}`)}, 422, metav1.StatusReasonInvalid, "spec.taints[0].effect", ""},
		{"resourceVersion on create", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(strings.Replace(validPod, `"name":"new"`, `"name":"new","resourceVersion":"5"`, 1))}, 400, metav1.StatusReasonBadRequest, "", "resourceVersion"},
		{"stale resourceVersion", request{method: "PUT", path: podsPath + "/p", token: admin, contentType: jsonType,
			body: strings.NewReader(stalePod)}, 409, metav1.StatusReasonConflict, "", "the object has been modified"},
		{"already exists", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(strings.Replace(validPod, `"name":"new"`, `"name":"p"`, 1))}, 409, metav1.StatusReasonAlreadyExists, "", ""},
		{"forbidden pod spec change", request{method: "PATCH", path: podsPath + "/p", token: admin, contentType: "application/merge-patch+json",
			body: strings.NewReader(`{"spec":{"nodeName":"n2"}}`)}, 422, metav1.StatusReasonInvalid, "spec", ""},
		{"missing token", request{method: "GET", path: podsPath}, 401, metav1.StatusReasonUnauthorized, "", ""},
		{"missing token on a write", request{method: "POST", path: podsPath, contentType: jsonType,
			body: strings.NewReader(validPod)}, 401, metav1.StatusReasonUnauthorized, "", ""},
		{"wrong token", request{method: "GET", path: podsPath, token: "not-a-token"}, 401, metav1.StatusReasonUnauthorized, "", ""},
		{"basic auth", request{method: "GET", path: podsPath, header: map[string]string{"Authorization": "Basic YWRtaW46YWRtaW4="}}, 401, metav1.StatusReasonUnauthorized, "", ""},
		{"missing token on discovery", request{method: "GET", path: "/apis"}, 401, metav1.StatusReasonUnauthorized, "", ""},
		{"viewer creates", request{method: "POST", path: podsPath, token: viewer, contentType: jsonType,
			body: strings.NewReader(validPod)}, 403, metav1.StatusReasonForbidden, "", testenv.ViewerUser},
		{"viewer deletes", request{method: "DELETE", path: podsPath + "/p", token: viewer}, 403, metav1.StatusReasonForbidden, "", ""},
		{"viewer patches", request{method: "PATCH", path: podsPath + "/p", token: viewer, contentType: "application/merge-patch+json",
			body: strings.NewReader(`{"metadata":{"labels":{"x":"y"}}}`)}, 403, metav1.StatusReasonForbidden, "", ""},
		{"viewer updates status", request{method: "PUT", path: "/api/v1/nodes/n1/status", token: viewer, contentType: jsonType,
			body: strings.NewReader(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}`)}, 403, metav1.StatusReasonForbidden, "", ""},
		{"viewer deletes a collection", request{method: "DELETE", path: dsPath, token: viewer}, 403, metav1.StatusReasonForbidden, "", ""},
		{"oversized body", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(big)}, 413, metav1.StatusReasonRequestEntityTooLarge, "", ""},
		{"oversized chunked body", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: onlyReader{strings.NewReader(big)}}, 413, metav1.StatusReasonRequestEntityTooLarge, "", ""},
		{"oversized patch", request{method: "PATCH", path: podsPath + "/p", token: admin, contentType: "application/merge-patch+json",
			body: strings.NewReader(`{"metadata":{"annotations":{"x":"` + strings.Repeat("a", 3<<20+1024) + `"}}}`)}, 413, metav1.StatusReasonRequestEntityTooLarge, "", ""},
		{"unknown resource", request{method: "GET", path: "/api/v1/namespaces/default/widgets", token: admin}, 404, metav1.StatusReasonNotFound, "", ""},
		{"unknown group", request{method: "POST", path: "/apis/example.com/v1/namespaces/default/things", token: admin, contentType: jsonType,
			body: strings.NewReader(`{}`)}, 404, metav1.StatusReasonNotFound, "", ""},
		{"unknown version", request{method: "GET", path: "/api/v2/pods", token: admin}, 404, metav1.StatusReasonNotFound, "", ""},
		{"unknown subresource", request{method: "GET", path: podsPath + "/p/logs", token: admin}, 404, metav1.StatusReasonNotFound, "", ""},
		{"missing object", request{method: "DELETE", path: podsPath + "/nope", token: admin}, 404, metav1.StatusReasonNotFound, "", ""},
		{"unknown field, strict", request{method: "POST", path: podsPath + "?fieldValidation=Strict", token: admin, contentType: jsonType,
			body: strings.NewReader(strings.Replace(validPod, `"spec":{`, `"spec":{"bogus":1,`, 1))}, 400, metav1.StatusReasonBadRequest, "", `unknown field "spec.bogus"`},
		{"duplicate field, strict", request{method: "POST", path: podsPath + "?fieldValidation=Strict", token: admin, contentType: jsonType,
			body: strings.NewReader(strings.Replace(validPod, `"metadata":{"name":"new"}`, `"metadata":{"name":"new","name":"new2"}`, 1))}, 400, metav1.StatusReasonBadRequest, "", "duplicate field"},
		{"unknown field in a patch, strict", request{method: "PATCH", path: podsPath + "/p?fieldValidation=Strict", token: admin,
			contentType: "application/merge-patch+json", body: strings.NewReader(`{"spec":{"bogus":1}}`)}, 422, metav1.StatusReasonInvalid, "", `unknown field "spec.bogus"`},
		{"bad fieldValidation", request{method: "POST", path: podsPath + "?fieldValidation=Loose", token: admin, contentType: jsonType,
			body: strings.NewReader(validPod)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"unsupported patch type", request{method: "PATCH", path: podsPath + "/p", token: admin, contentType: "text/plain",
			body: strings.NewReader(`labels: x`)}, 415, metav1.StatusReasonUnsupportedMediaType, "", ""},
		{"server-side apply in CBOR", request{method: "PATCH", path: podsPath + "/p?fieldManager=test", token: admin, contentType: "application/apply-patch+cbor",
			body: strings.NewReader(validPod)}, 415, metav1.StatusReasonUnsupportedMediaType, "", ""},
		{"server-side apply without a field manager", request{method: "PATCH", path: podsPath + "/new", token: admin, contentType: "application/apply-patch+yaml",
			body: strings.NewReader(validPod)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"server-side apply of another object", request{method: "PATCH", path: podsPath + "/p?fieldManager=test", token: admin, contentType: "application/apply-patch+yaml",
			body: strings.NewReader(validPod)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"unsupported body type", request{method: "POST", path: podsPath, token: admin, contentType: "text/plain",
			body: strings.NewReader(validPod)}, 415, metav1.StatusReasonUnsupportedMediaType, "", ""},
		{"malformed JSON patch", request{method: "PATCH", path: podsPath + "/p", token: admin, contentType: "application/json-patch+json",
			body: strings.NewReader(`{"op":"add"}`)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"failing JSON patch test", request{method: "PATCH", path: podsPath + "/p", token: admin, contentType: "application/json-patch+json",
			body: strings.NewReader(`[{"op":"test","path":"/metadata/name","value":"other"},{"op":"add","path":"/metadata/labels/x","value":"y"}]`)}, 422, metav1.StatusReasonInvalid, "", ""},
		{"malformed merge patch", request{method: "PATCH", path: podsPath + "/p", token: admin, contentType: "application/merge-patch+json",
			body: strings.NewReader(`{"metadata":`)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"patch changing the DaemonSet selector", request{method: "PATCH", path: dsPath + "/ds", token: admin, contentType: "application/strategic-merge-patch+json",
			body: strings.NewReader(`{"spec":{"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}}}}}`)}, 422, metav1.StatusReasonInvalid, "spec.selector", "field is immutable"},
		{"namespace mismatch", request{method: "POST", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(strings.Replace(validPod, `"name":"new"`, `"name":"new","namespace":"kube-system"`, 1))}, 400, metav1.StatusReasonBadRequest, "", "namespace"},
		{"name mismatch", request{method: "PUT", path: podsPath + "/p", token: admin, contentType: jsonType,
			body: strings.NewReader(validPod)}, 400, metav1.StatusReasonBadRequest, "", "name"},
		{"POST to an object", request{method: "POST", path: podsPath + "/p", token: admin, contentType: jsonType,
			body: strings.NewReader(validPod)}, 405, metav1.StatusReasonMethodNotAllowed, "", ""},
		{"PUT to a collection", request{method: "PUT", path: podsPath, token: admin, contentType: jsonType,
			body: strings.NewReader(validPod)}, 405, metav1.StatusReasonMethodNotAllowed, "", ""},
		{"GET of a binding", request{method: "GET", path: podsPath + "/p/binding", token: admin}, 405, metav1.StatusReasonMethodNotAllowed, "", ""},
		{"delete of a status", request{method: "DELETE", path: podsPath + "/p/status", token: admin}, 405, metav1.StatusReasonMethodNotAllowed, "", ""},
		{"bad label selector", request{method: "GET", path: podsPath + "?labelSelector=app+in+(a", token: admin}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"unsupported field selector", request{method: "GET", path: podsPath + "?fieldSelector=spec.image%3Dx", token: admin}, 400, metav1.StatusReasonBadRequest, "", "field label not supported"},
		{"bad resourceVersion", request{method: "GET", path: podsPath + "?watch=true&resourceVersion=abc", token: admin}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"bad limit", request{method: "GET", path: podsPath + "?limit=-1", token: admin}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"bad gracePeriodSeconds", request{method: "DELETE", path: podsPath + "/p?gracePeriodSeconds=soon", token: admin}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"bad propagationPolicy", request{method: "DELETE", path: dsPath + "/ds?propagationPolicy=Sideways", token: admin}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"bad dryRun", request{method: "POST", path: podsPath + "?dryRun=Some", token: admin, contentType: jsonType,
			body: strings.NewReader(validPod)}, 400, metav1.StatusReasonBadRequest, "", ""},
		{"delete precondition", request{method: "DELETE", path: podsPath + "/p", token: admin, contentType: jsonType,
			body: strings.NewReader(`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"` + seeded.ResourceVersion + `"}}`)}, 409, metav1.StatusReasonConflict, "", ""},
		{"unacceptable Accept", request{method: "GET", path: podsPath + "/p", token: admin, header: map[string]string{"Accept": "text/html"}}, 406, metav1.StatusReasonNotAcceptable, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, c)
			resp := raw.do(t, tc.req)
			if int32(resp.code) != tc.code {
				t.Fatalf("HTTP %d, want %d; body %.300s", resp.code, tc.code, resp.body)
			}
			st := resp.status
			if st == nil {
				t.Fatalf("body is not a Status: %.300s", resp.body)
			}
			if st.Code != tc.code || st.Reason != tc.reason || st.Status != metav1.StatusFailure || st.APIVersion != "v1" {
				t.Fatalf("Status code %d reason %q status %q apiVersion %q, want %d %q Failure v1 (message %q)",
					st.Code, st.Reason, st.Status, st.APIVersion, tc.code, tc.reason, st.Message)
			}
			if st.Message == "" {
				t.Fatal("Status without a message")
			}
			if tc.msg != "" && !strings.Contains(st.Message, tc.msg) {
				t.Fatalf("message %q does not mention %q", st.Message, tc.msg)
			}
			if tc.causeField != "" && !hasCause(*st, tc.causeField, "") {
				t.Fatalf("causes %+v lack %s", st.Details, tc.causeField)
			}
			if resp.header.Get("Content-Type") != jsonType {
				t.Fatalf("Content-Type %q", resp.header.Get("Content-Type"))
			}
			if diff := diffSnapshots(before, snapshot(t, c)); diff != "" {
				t.Fatalf("stored objects changed: %s", diff)
			}
		})
	}

	// Nothing above touched the pod.
	got, err := c.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	check(t, err)
	if got.ResourceVersion != current.ResourceVersion {
		t.Fatalf("pod resourceVersion %s, want %s", got.ResourceVersion, current.ResourceVersion)
	}
}

// TestFieldValidation: unknown fields are warned about by default, ignored with Ignore,
// and refused with Strict (covered in TestBadInput and, for every body type,
// TestFieldValidationModes).
func TestFieldValidation(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	raw := newRawClient(t, env)
	admin := env.Token(testenv.AdminUser)
	body := func(name string) io.Reader {
		return strings.NewReader(strings.Replace(strings.Replace(validPod, `"spec":{`, `"spec":{"bogus":1,`, 1), `"name":"new"`, `"name":"`+name+`"`, 1))
	}
	resp := raw.do(t, request{method: "POST", path: podsPath, token: admin, contentType: jsonType, body: body("warned")})
	if resp.code != http.StatusCreated || !strings.Contains(resp.header.Get("Warning"), `unknown field \"spec.bogus\"`) {
		t.Fatalf("default (Warn): HTTP %d Warning %q", resp.code, resp.header.Get("Warning"))
	}
	resp = raw.do(t, request{method: "POST", path: podsPath + "?fieldValidation=Ignore", token: admin, contentType: jsonType, body: body("ignored")})
	if resp.code != http.StatusCreated || resp.header.Get("Warning") != "" {
		t.Fatalf("Ignore: HTTP %d Warning %q", resp.code, resp.header.Get("Warning"))
	}
	// YAML bodies are accepted too.
	yamlPod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: from-yaml\nspec:\n  containers:\n  - name: c\n    image: i:1\n"
	resp = raw.do(t, request{method: "POST", path: podsPath, token: admin, contentType: "application/yaml", body: bytes.NewReader([]byte(yamlPod))})
	if resp.code != http.StatusCreated {
		t.Fatalf("YAML body: HTTP %d %.300s", resp.code, resp.body)
	}
	// The viewer may read.
	resp = raw.do(t, request{method: "GET", path: podsPath + "/from-yaml", token: env.Token(testenv.ViewerUser)})
	if resp.code != http.StatusOK {
		t.Fatalf("viewer GET: HTTP %d %.300s", resp.code, resp.body)
	}
	// Health and version need no token.
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		if resp := raw.do(t, request{method: "GET", path: p}); resp.code != http.StatusOK {
			t.Fatalf("GET %s without a token: HTTP %d", p, resp.code)
		}
	}
}
