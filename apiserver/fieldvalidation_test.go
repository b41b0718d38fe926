package apiserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/test/testenv"
)

// TestFieldValidationModes sends bodies with unknown and duplicate fields under each
// fieldValidation directive: Strict fails the request naming every field, as
// kube-apiserver words it (a bad create or update body is a 400, a bad patch an invalid
// patch, 422); Warn (also the default) succeeds with one Warning header per field and
// stores the object without the unknown fields and with the last of the duplicates;
// Ignore succeeds silently.
func TestFieldValidationModes(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	raw := newRawClient(t, env)
	token := env.Token(testenv.AdminUser)
	const collection = "/apis/apps/v1/namespaces/default/daemonsets"

	dsJSON := func(name string) string {
		return `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"` + name + `"},` +
			`"spec":{"minReadySeconds":1,"minReadySeconds":2,"bogus":true,"selector":{"matchLabels":{"app":"a"}},` +
			`"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"c","image":"i","imagez":"x"}]}}}}`
	}
	dsYAML := func(name string) string {
		return "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: " + name + "\nspec:\n  minReadySeconds: 1\n  minReadySeconds: 2\n" +
			"  bogus: true\n  selector:\n    matchLabels: {app: a}\n  template:\n    metadata:\n      labels: {app: a}\n" +
			"    spec:\n      containers: [{name: c, image: i}]\n"
	}
	clean := func(name string) string {
		return `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"` + name + `"},"spec":{"selector":{"matchLabels":{"app":"a"}},` +
			`"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}`
	}
	getDS := func(t *testing.T, name string) *appsv1.DaemonSet {
		t.Helper()
		ds, err := env.Client.AppsV1().DaemonSets("default").Get(testCtx(t), name, metav1.GetOptions{})
		check(t, err)
		return ds
	}
	type body struct {
		name        string
		method      string
		contentType string
		existing    bool // the object is created clean first
		make        func(name string) string
		// fields are the messages each problem gets, in the order kube-apiserver lists them.
		fields    []string
		code      int // under Strict
		reason    metav1.StatusReason
		prefix    string // the Strict message has it before the fields
		wantMinRS int32  // minReadySeconds stored under Warn and Ignore
	}
	bodies := []body{
		{name: "create-json", method: "POST", contentType: "application/json", make: dsJSON,
			fields: []string{`duplicate field "spec.minReadySeconds"`, `unknown field "spec.bogus"`, `unknown field "spec.template.spec.containers[0].imagez"`},
			code:   400, reason: metav1.StatusReasonBadRequest, prefix: `DaemonSet in version "v1" cannot be handled as a DaemonSet: strict decoding error: `, wantMinRS: 2},
		{name: "create-yaml", method: "POST", contentType: "application/yaml", make: dsYAML,
			fields: []string{"yaml: unmarshal errors:\n  line 7: key \"minReadySeconds\" already set in map", `unknown field "spec.bogus"`},
			code:   400, reason: metav1.StatusReasonBadRequest, prefix: `DaemonSet in version "v1" cannot be handled as a DaemonSet: strict decoding error: `, wantMinRS: 2},
		{name: "update-json", method: "PUT", contentType: "application/json", existing: true, make: dsJSON,
			fields: []string{`duplicate field "spec.minReadySeconds"`, `unknown field "spec.bogus"`, `unknown field "spec.template.spec.containers[0].imagez"`},
			code:   400, reason: metav1.StatusReasonBadRequest, prefix: `DaemonSet in version "v1" cannot be handled as a DaemonSet: strict decoding error: `, wantMinRS: 2},
		{name: "merge-patch", method: "PATCH", contentType: "application/merge-patch+json", existing: true,
			make:   func(string) string { return `{"spec":{"minReadySeconds":3,"minReadySeconds":4,"bogus":1}}` },
			fields: []string{`duplicate field "spec.minReadySeconds"`, `unknown field "spec.bogus"`},
			code:   422, reason: metav1.StatusReasonInvalid, prefix: `patch: Invalid value: `, wantMinRS: 4},
		{name: "strategic-merge-patch", method: "PATCH", contentType: "application/strategic-merge-patch+json", existing: true,
			make: func(string) string {
				return `{"spec":{"minReadySeconds":3,"minReadySeconds":4,"bogus":1,"template":{"spec":{"containers":[{"name":"c","imagez":"x"}]}}}}`
			},
			fields: []string{`duplicate field "spec.minReadySeconds"`, `unknown field "spec.bogus"`, `unknown field "spec.template.spec.containers[0].imagez"`},
			code:   422, reason: metav1.StatusReasonInvalid, prefix: `patch: Invalid value: `, wantMinRS: 4},
		{name: "json-patch", method: "PATCH", contentType: "application/json-patch+json", existing: true,
			make: func(string) string {
				return `[{"op":"replace","path":"/spec/minReadySeconds","value":5,"valu":6},{"op":"add","path":"/spec/bogus","value":1}]`
			},
			fields: []string{`json patch unknown field "[0].valu"`, `unknown field "spec.bogus"`},
			code:   422, reason: metav1.StatusReasonInvalid, prefix: `patch: Invalid value: `, wantMinRS: 5},
	}
	modes := []string{"Strict", "Warn", "", "Ignore"}
	for _, b := range bodies {
		for _, mode := range modes {
			name := fmt.Sprintf("%s-%s", b.name, strings.ToLower(mode))
			if mode == "" {
				name = b.name + "-default"
			}
			t.Run(name, func(t *testing.T) {
				before := ""
				if b.existing {
					r := raw.do(t, request{method: "POST", path: collection, token: token, contentType: "application/json", body: strings.NewReader(clean(name))})
					if r.code != http.StatusCreated {
						t.Fatalf("creating %s: %d %s", name, r.code, r.body)
					}
					before = getDS(t, name).ResourceVersion
				}
				path := collection
				if b.method != "POST" {
					path += "/" + name
				}
				if mode != "" {
					path += "?fieldValidation=" + mode
				}
				r := raw.do(t, request{method: b.method, path: path, token: token, contentType: b.contentType, body: strings.NewReader(b.make(name))})
				warnings := r.header.Values("Warning")
				switch mode {
				case "Strict":
					if r.code != b.code || r.status == nil || r.status.Reason != b.reason {
						t.Fatalf("got %d %s, want %d %s", r.code, r.body, b.code, b.reason)
					}
					msg := r.status.Message
					if !strings.Contains(msg, b.prefix) || !strings.HasSuffix(msg, "strict decoding error: "+strings.Join(b.fields, ", ")) {
						t.Fatalf("message %q, want %q… ending in the fields %q", msg, b.prefix, strings.Join(b.fields, ", "))
					}
					if len(warnings) > 0 {
						t.Fatalf("Strict also warned: %q", warnings)
					}
					if b.existing {
						if rv := getDS(t, name).ResourceVersion; rv != before {
							t.Fatalf("a rejected %s wrote: resourceVersion %s → %s", b.method, before, rv)
						}
					} else if r := raw.do(t, request{method: "GET", path: collection + "/" + name, token: token}); r.code != http.StatusNotFound {
						t.Fatalf("a rejected create stored the object: %d", r.code)
					}
					return
				case "Ignore":
					if len(warnings) > 0 {
						t.Fatalf("Ignore warned: %q", warnings)
					}
				default:
					if len(warnings) != len(b.fields) {
						t.Fatalf("warnings %q, want one per field of %q", warnings, b.fields)
					}
					for i, f := range b.fields {
						// One line per warning, its quotes escaped.
						f = strings.ReplaceAll(strings.Join(strings.Fields(f), " "), `"`, `\"`)
						if !strings.HasPrefix(warnings[i], `299 - "`) || !strings.Contains(warnings[i], f) {
							t.Fatalf("warning %q, want %q", warnings[i], f)
						}
					}
				}
				if r.code >= 300 {
					t.Fatalf("%s under %q: %d %s", b.method, mode, r.code, r.body)
				}
				got := getDS(t, name)
				if got.Spec.MinReadySeconds != b.wantMinRS {
					t.Fatalf("stored minReadySeconds %d, want %d", got.Spec.MinReadySeconds, b.wantMinRS)
				}
				if r := raw.do(t, request{method: "GET", path: collection + "/" + name, token: token}); strings.Contains(string(r.body), "bogus") {
					t.Fatalf("the unknown field was stored: %s", r.body)
				}
			})
		}
	}
	t.Run("an unknown directive", func(t *testing.T) {
		r := raw.do(t, request{method: "POST", path: collection + "?fieldValidation=Loose", token: token, contentType: "application/json",
			body: strings.NewReader(clean("loose"))})
		if r.code != http.StatusBadRequest || r.status == nil || !strings.Contains(r.status.Message, `fieldValidation: Unsupported value: "Loose"`) {
			t.Fatalf("got %d %s", r.code, r.body)
		}
	})
}
