package apiserver

import (
	"bufio"
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
	return append(appendTag(b, field, len(data)), data...)
}

// appendTag appends the key and length of a length-delimited field of n bytes.
func appendTag(b []byte, field, n int) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(b, uint64(field)<<3|2), uint64(n))
}

// writeProtobuf writes an enveloped protobuf body.
func writeProtobuf(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", protobufMediaType)
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writeWatchEventProto writes one frame of a protobuf watch: a raw (unenveloped)
// WatchEvent whose object is the enveloped raw message, preceded by its length as
// client-go's length-delimited framer reads. The bytes are those of marshalling the
// runtime.Unknown and then the metav1.WatchEvent, but written straight to w: every watcher
// of a change sends the same object, and building the nested messages for each of them
// copied it four times (a tenth of the API server's allocations in a rollout).
func writeWatchEventProto(w *bufio.Writer, typ, apiVersion, kind string, raw []byte) error {
	// Sizes from the inside out. Unknown's contentEncoding and contentType are written
	// empty, as its generated Marshal does; its raw only when set.
	typeMeta := stringFieldSize(apiVersion) + stringFieldSize(kind)
	unknown := bytesFieldSize(typeMeta) + 2*stringFieldSize("")
	if raw != nil {
		unknown += bytesFieldSize(len(raw))
	}
	object := len(protobufMagic) + unknown
	rawExtension := bytesFieldSize(object)
	event := stringFieldSize(typ) + bytesFieldSize(rawExtension)

	var frameLen [4]byte
	binary.BigEndian.PutUint32(frameLen[:], uint32(event))
	_, _ = w.Write(frameLen[:])
	writeStringField(w, 1, typ)   // WatchEvent.type
	writeTag(w, 2, rawExtension)  // WatchEvent.object
	writeTag(w, 1, object)        // RawExtension.raw
	_, _ = w.Write(protobufMagic) // the envelope
	writeTag(w, 1, typeMeta)      // Unknown.typeMeta
	writeStringField(w, 1, apiVersion)
	writeStringField(w, 2, kind)
	if raw != nil {
		writeTag(w, 2, len(raw)) // Unknown.raw
		_, _ = w.Write(raw)
	}
	writeStringField(w, 3, "")             // Unknown.contentEncoding
	_, err := w.Write([]byte{4<<3 | 2, 0}) // Unknown.contentType, empty
	// A bufio.Writer keeps its first error and returns it from every later write.
	return err
}

// bytesFieldSize is the encoded size of a length-delimited field (field numbers below 16)
// holding n bytes.
func bytesFieldSize(n int) int {
	var b [binary.MaxVarintLen64]byte
	return 1 + len(binary.AppendUvarint(b[:0], uint64(n))) + n
}

func stringFieldSize(s string) int { return bytesFieldSize(len(s)) }

// writeTag writes the key and length of a length-delimited field of n bytes.
func writeTag(w *bufio.Writer, field, n int) {
	var b [2 * binary.MaxVarintLen64]byte
	_, _ = w.Write(appendTag(b[:0], field, n))
}

func writeStringField(w *bufio.Writer, field int, s string) {
	writeTag(w, field, len(s))
	_, _ = w.WriteString(s)
}
