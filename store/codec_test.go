package store_test

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
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

// TestCodecEncodesAsTheSerializer checks that the codec's encoding, which keeps the buffer
// the serializer marshals into instead of copying it, is byte for byte the serializer's own.
func TestCodecEncodesAsTheSerializer(t *testing.T) {
	codec := store.NewProtobufCodec(clientscheme.Scheme)
	reference := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme)
	for _, obj := range []runtime.Object{
		benchPod(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "empty"}},
		&corev1.Namespace{},
	} {
		got, err := codec.Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := reference.Encode(obj, &want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%T: encoded %d bytes %q, the serializer %d bytes %q", obj, len(got), got, want.Len(), want.Bytes())
		}
		back, err := codec.Decode(got)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(back, obj) {
			t.Errorf("%T came back as %#v", obj, back)
		}
	}
}

// benchPod is a daemon pod as the controller creates it and a kubelet reports it.
func benchPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "node-agent-x7k2p", Namespace: "default", UID: "2f0c5b9e-6a55-4a8e-9d1b-3f5c8d9e7a10",
			ResourceVersion: "123456", Labels: map[string]string{"app": "node-agent", "controller-revision-hash": "6d8f7c9b5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "node-agent", UID: "9a1b2c3d"}},
		},
		Spec: corev1.PodSpec{
			NodeName:   "stub-node-17",
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/node-agent:1.1", Args: []string{"--interval=10s"}}},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      "10.128.17.4",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "agent", Ready: true, Image: "registry.example/node-agent:1.1",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}},
		},
	}
}

func BenchmarkCodecEncodePod(b *testing.B) {
	codec := store.NewProtobufCodec(clientscheme.Scheme)
	pod := benchPod()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := codec.Encode(pod); err != nil {
			b.Fatal(err)
		}
	}
}
