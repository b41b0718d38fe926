package apiserver

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/klauspost/compress/s2"
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
	var p packer
	var raws [][]byte
	var packed []*protoEncoding
	var first, rest int // packed bytes of the first pod and the mean of the rest
	for i := range 2*packDictUses + 10 {
		raw := daemonPodEncoding(t, i)
		e := p.pack(raw)
		if e == nil || e.raw != nil || len(e.packed) >= len(raw) {
			t.Fatalf("pack of pod %d, %d bytes = %+v, want fewer bytes packed", i, len(raw), e)
		}
		if i == 0 {
			first = len(e.packed)
		} else {
			rest += len(e.packed)
		}
		raws, packed = append(raws, raw), append(packed, e)
	}
	rest /= len(raws) - 1
	// Every pod packs against one of its siblings, the first against itself: far smaller
	// than alone (compare BenchmarkPackProto's packed-bytes).
	if alone := len(s2.Encode(nil, raws[1])); rest*3 > alone || first*3 > alone {
		t.Errorf("pods packed to %d bytes each (the first to %d), want under a third of the %d they take alone", rest, first, alone)
	}
	if packed[0].dict == packed[len(packed)-1].dict {
		t.Error("the dictionary was never renewed")
	}
	// Readers unpack the shared encodings concurrently.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i, e := range packed {
				got, err := e.bytes()
				if err != nil || !bytes.Equal(got, raws[i]) {
					t.Errorf("unpacked pod %d: %d bytes (%v), want the %d packed", i, len(got), err, len(raws[i]))
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d bytes, the first packed to %d, the rest to %d on average", len(raws[1]), first, rest)

	if e := (&packer{}).pack([]byte{1, 2, 3}); e != nil {
		t.Errorf("pack of 3 bytes = %+v; packing makes it larger, want nil", e)
	}
	// An object larger than a dictionary can be, packed when the dictionary is due to be
	// renewed, is packed against the one before, which stays.
	big := bytes.Repeat(daemonPodEncoding(t, 1), 70<<10/len(raws[0])+1)
	p.uses = packDictUses
	if e := p.pack(big); e == nil || e.dict != packed[len(packed)-1].dict {
		t.Errorf("pack of %d bytes = %+v, want it packed with the last dictionary", len(big), e)
	} else if got, err := e.bytes(); err != nil || !bytes.Equal(got, big) {
		t.Errorf("unpacked %d bytes (%v), want the %d packed", len(got), err, len(big))
	}
	e := packed[3]
	if _, err := (&protoEncoding{packed: e.packed[:len(e.packed)/2], dict: e.dict}).bytes(); err == nil {
		t.Error("unpacking half a packed encoding did not fail")
	}
}

// BenchmarkPackProto packs pods one after another, as a rollout supersedes them.
func BenchmarkPackProto(b *testing.B) {
	raws := make([][]byte, 64)
	for i := range raws {
		raws[i] = daemonPodEncoding(b, i)
	}
	var p packer
	var n, size int
	b.SetBytes(int64(len(raws[0])))
	for b.Loop() {
		e := p.pack(raws[n%len(raws)])
		n, size = n+1, size+len(e.packed)
	}
	b.ReportMetric(float64(size)/float64(n), "packed-bytes")
}

func BenchmarkUnpackProto(b *testing.B) {
	var p packer
	p.pack(daemonPodEncoding(b, 0))
	raw := daemonPodEncoding(b, 7)
	e := p.pack(raw)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := e.bytes(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompactedObjectDecode: what a reader that needs the object (a JSON list, a get,
// an update's base) pays for a current pod the cache has compacted and packed.
func BenchmarkCompactedObjectDecode(b *testing.B) {
	var p corev1.Pod
	if err := p.Unmarshal(daemonPodEncoding(b, 7)); err != nil {
		b.Fatal(err)
	}
	co := newCachedObjectOf(builtinRegistry(b).lookup("", "v1", "pods"), &p)
	var pk packer
	pk.pack(daemonPodEncoding(b, 0)) // a sibling as the dictionary, as in a rollout
	co.compact(&pk)
	if co.decoded.Load() != nil || co.proto.Load().raw != nil {
		b.Fatal("not compacted and packed")
	}
	for b.Loop() {
		if got := co.object().(*corev1.Pod); got.Name != p.Name {
			b.Fatalf("decoded %q, want %q", got.Name, p.Name)
		}
	}
}
