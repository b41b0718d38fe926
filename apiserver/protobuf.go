package apiserver

import (
	"encoding/binary"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Protobuf is what client-go's generated clientsets ask for first. Decoding it costs a
// client several times less CPU than JSON, which is most of what informers spend when
// thousands of pods change, so lists, gets and watches are served in it when asked.
const (
	protobufMediaType       = "application/vnd.kubernetes.protobuf"
	protobufStreamMediaType = "application/vnd.kubernetes.protobuf;stream=watch"
)

// protobufMagic starts every enveloped protobuf object ("k8s\x00").
var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// protoUnmarshaler is what every generated Kubernetes type has to decode its message.
type protoUnmarshaler interface {
	Unmarshal(data []byte) error
}

type protoMarshaler interface {
	Marshal() ([]byte, error)
}

// rawProto is obj's protobuf encoding without the envelope.
func rawProto(obj runtime.Object) ([]byte, error) {
	m, ok := obj.(protoMarshaler)
	if !ok {
		return nil, fmt.Errorf("%T has no protobuf encoding", obj)
	}
	return m.Marshal()
}

// envelope wraps a raw message as kube-apiserver does: the magic, then a runtime.Unknown
// naming apiVersion and kind with the message as its raw bytes.
func envelope(apiVersion, kind string, raw []byte) []byte {
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: raw}
	data, _ := u.Marshal() // Unknown's Marshal cannot fail
	out := make([]byte, 0, len(protobufMagic)+len(data))
	return append(append(out, protobufMagic...), data...)
}

// listProto assembles a list message from already-encoded items. Every Kubernetes list
// type has the same shape: field 1 is its ListMeta, field 2 repeats the items.
func listProto(listMeta metav1.ListMeta, items [][]byte) []byte {
	metaRaw, _ := listMeta.Marshal()
	size := len(metaRaw) + binary.MaxVarintLen64 + 1
	for _, it := range items {
		size += len(it) + binary.MaxVarintLen64 + 1
	}
	out := make([]byte, 0, size)
	out = appendBytesField(out, 1, metaRaw)
	for _, it := range items {
		out = appendBytesField(out, 2, it)
	}
	return out
}

// appendBytesField appends a length-delimited protobuf field.
func appendBytesField(b []byte, field int, data []byte) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// writeProtobuf writes an enveloped protobuf body.
func writeProtobuf(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", protobufMediaType)
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// watchEventProto is one frame of a protobuf watch: a raw (unenveloped) WatchEvent whose
// object is enveloped, preceded by its length as client-go's length-delimited framer reads.
func watchEventProto(typ string, object []byte) []byte {
	ev := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: object}}
	data, _ := ev.Marshal()
	frame := make([]byte, 4, 4+len(data))
	binary.BigEndian.PutUint32(frame, uint32(len(data)))
	return append(frame, data...)
}
