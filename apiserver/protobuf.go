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

// appendEnvelopeHead appends what an enveloped message starts with before its raw bytes,
// as kube-apiserver writes it: the magic, then the head of a runtime.Unknown naming
// apiVersion and kind whose raw field holds the message (of rawLen bytes; with hasRaw false
// there is no raw field). envelopeTail follows the raw bytes.
func appendEnvelopeHead(b []byte, apiVersion, kind string, rawLen int, hasRaw bool) []byte {
	b = append(b, protobufMagic...)
	b = appendTag(b, 1, stringFieldSize(apiVersion)+stringFieldSize(kind)) // Unknown.typeMeta
	b = append(appendTag(b, 1, len(apiVersion)), apiVersion...)
	b = append(appendTag(b, 2, len(kind)), kind...)
	if hasRaw {
		b = appendTag(b, 2, rawLen) // Unknown.raw
	}
	return b
}

// envelopeTail ends every enveloped message: Unknown's contentEncoding and contentType,
// written empty as its generated Marshal writes them.
var envelopeTail = []byte{3<<3 | 2, 0, 4<<3 | 2, 0}

// writeEnveloped answers with raw in kube-apiserver's envelope. The body is assembled in
// one buffer, where building a runtime.Unknown copied the object (every item, for a list)
// twice, and written at once: written as head, raw and tail apart, it went out as HTTP/2
// frames of their own, and a rollout took longer (docs/performance.md).
func writeEnveloped(w http.ResponseWriter, code int, apiVersion, kind string, raw []byte) {
	body := make([]byte, 0, 64+len(raw)+len(envelopeTail))
	body = appendEnvelopeHead(body, apiVersion, kind, len(raw), raw != nil)
	body = append(append(body, raw...), envelopeTail...)
	w.Header().Set("Content-Type", protobufMediaType)
	w.WriteHeader(code)
	_, _ = w.Write(body)
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

// writeWatchEventProto writes one frame of a protobuf watch: a raw (unenveloped)
// WatchEvent whose object is the enveloped raw message, preceded by its length as
// client-go's length-delimited framer reads. The bytes are those of marshalling the
// runtime.Unknown and then the metav1.WatchEvent, but written straight to w: every watcher
// of a change sends the same object, and building the nested messages for each of them
// copied it four times (a tenth of the API server's allocations in a rollout).
func writeWatchEventProto(w *bufio.Writer, typ, apiVersion, kind string, raw []byte) error {
	var buf [64]byte
	head := appendEnvelopeHead(buf[:0], apiVersion, kind, len(raw), raw != nil)
	object := len(head) + len(raw) + len(envelopeTail)
	rawExtension := bytesFieldSize(object)
	event := stringFieldSize(typ) + bytesFieldSize(rawExtension)

	var frameLen [4]byte
	binary.BigEndian.PutUint32(frameLen[:], uint32(event))
	_, _ = w.Write(frameLen[:])
	writeStringField(w, 1, typ)  // WatchEvent.type
	writeTag(w, 2, rawExtension) // WatchEvent.object
	writeTag(w, 1, object)       // RawExtension.raw
	_, _ = w.Write(head)
	_, _ = w.Write(raw)
	_, err := w.Write(envelopeTail)
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
