package apiserver

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// daemonPodEncoding is the protobuf encoding of a daemon pod as a rollout leaves it: three
// managers' managedFields, a container, conditions and a container status.
func daemonPodEncoding(tb testing.TB, i int) []byte {
	tb.Helper()
	fields := metav1.NewFieldsV1(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:controller-revision-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"7d7f\"}":{}}},"f:spec":{"f:affinity":{".":{},"f:nodeAffinity":{}},"f:containers":{"k:{\"name\":\"agent\"}":{".":{},"f:image":{},"f:name":{}}},"f:tolerations":{}}}`)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("agent-%05d", i), Namespace: "default", UID: "0c5e3f7a-9b1d-4e2f-8a6b-3c4d5e6f7a8b",
			ResourceVersion: fmt.Sprint(100000 + i), Labels: map[string]string{"app": "agent", "controller-revision-hash": "6d4b9f"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: fields},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", Subresource: "status", FieldsV1: fields},
			},
		},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("stub-node-%d", i),
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}},
			PodIP:      fmt.Sprintf("10.128.%d.%d", i/254, i%254+1),
		},
	}
	data, err := p.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func TestPackProtoRoundTrips(t *testing.T) {
	raw := daemonPodEncoding(t, 7)
	e := packProto(raw)
	if e == nil || e.raw != nil || len(e.packed) >= len(raw) {
		t.Fatalf("packProto of %d bytes = %+v, want fewer bytes packed", len(raw), e)
	}
	// Readers unpack the shared encoding concurrently.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := e.bytes()
				if err != nil || !bytes.Equal(got, raw) {
					t.Errorf("unpacked %d bytes (%v), want the %d packed", len(got), err, len(raw))
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d bytes, %d packed", len(raw), len(e.packed))

	if e := packProto([]byte{1, 2, 3}); e != nil {
		t.Errorf("packProto of 3 bytes = %+v; packing makes it larger, want nil", e)
	}
	if _, err := (&protoEncoding{packed: e.packed[:len(e.packed)/2]}).bytes(); err == nil {
		t.Error("unpacking half a packed encoding did not fail")
	}
}

func BenchmarkPackProto(b *testing.B) {
	raw := daemonPodEncoding(b, 7)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		packProto(raw)
	}
}

func BenchmarkUnpackProto(b *testing.B) {
	raw := daemonPodEncoding(b, 7)
	e := packProto(raw)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := e.bytes(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompactedObjectDecode: what a reader that needs the object (a JSON list, a get,
// an update's base) pays for a current pod the cache has compacted whole.
func BenchmarkCompactedObjectDecode(b *testing.B) {
	var p corev1.Pod
	if err := p.Unmarshal(daemonPodEncoding(b, 7)); err != nil {
		b.Fatal(err)
	}
	co := newCachedObjectOf(builtinRegistry(b).lookup("", "v1", "pods"), &p)
	co.compact(false)
	if co.decoded.Load() != nil {
		b.Fatal("not compacted")
	}
	for b.Loop() {
		if got := co.object().(*corev1.Pod); got.Name != p.Name {
			b.Fatalf("decoded %q, want %q", got.Name, p.Name)
		}
	}
}
