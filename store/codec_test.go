package store_test

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/miniplane/miniplane/store"
)

// TestCodec round-trips a typed object (stored in protobuf) and a custom resource without
// Go types (stored in JSON), and checks each comes back as it went in.
func TestCodec(t *testing.T) {
	codec := store.NewProtobufCodec(clientscheme.Scheme)
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns"},
		"spec":     map[string]any{"size": int64(3), "tags": []any{"a", "b"}},
	}}
	for _, tc := range []struct {
		name      string
		obj       runtime.Object
		protobuf  bool
		checkBack func(runtime.Object) bool
	}{
		{"typed object", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "v"}}, true,
			func(o runtime.Object) bool { cm, ok := o.(*corev1.ConfigMap); return ok && cm.Data["k"] == "v" }},
		{"custom resource", cr, false,
			func(o runtime.Object) bool {
				u, ok := o.(*unstructured.Unstructured)
				size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
				return ok && u.GetKind() == "Widget" && u.GetAPIVersion() == "example.com/v1" && size == 3
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := codec.Encode(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.HasPrefix(data, []byte("k8s\x00")); got != tc.protobuf {
				t.Fatalf("stored in protobuf: %v, want %v (%q…)", got, tc.protobuf, data[:min(len(data), 20)])
			}
			back, err := codec.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.checkBack(back) {
				t.Errorf("decoded %#v", back)
			}
		})
	}
	if _, err := codec.Decode([]byte("not json")); err == nil {
		t.Error("garbage decoded without an error")
	}
}
