package apiserver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// envelopeCases are objects and names whose lengths need one, two and three varint bytes.
var envelopeCases = []struct {
	name, typ, apiVersion, kind string
	raw                         []byte
}{
	{"small pod", "ADDED", "v1", "Pod", []byte{0x0a, 0x03, 'a', 'b', 'c'}},
	{"empty object", "MODIFIED", "apps/v1", "DaemonSet", []byte{}},
	{"no raw", "BOOKMARK", "v1", "Pod", nil},
	{"two-byte lengths", "DELETED", "v1", "Node", bytes.Repeat([]byte{7}, 300)},
	{"three-byte lengths", "MODIFIED", "stable.example.com/v1", strings.Repeat("K", 200), bytes.Repeat([]byte{9}, 70000)},
}

// TestWriteWatchEventProtoMatchesMarshal: the frame written field by field is byte for byte
// what marshalling the runtime.Unknown envelope and then the metav1.WatchEvent gives, for
// objects and names whose lengths need one, two and three varint bytes.
func TestWriteWatchEventProtoMatchesMarshal(t *testing.T) {
	for _, tc := range envelopeCases {
		t.Run(tc.name, func(t *testing.T) {
			unknown := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: tc.apiVersion, Kind: tc.kind}, Raw: tc.raw}
			u, err := unknown.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			ev := metav1.WatchEvent{Type: tc.typ, Object: runtime.RawExtension{Raw: append(append([]byte{}, protobufMagic...), u...)}}
			data, err := ev.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			want := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
			want = append(want, data...)

			var got bytes.Buffer
			w := bufio.NewWriter(&got)
			if err := writeWatchEventProto(w, tc.typ, tc.apiVersion, tc.kind, tc.raw); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("frame differs from the marshalled one:\n got %x\nwant %x", frameHead(got.Bytes()), frameHead(want))
			}
		})
	}
}

// TestWriteEnvelopedMatchesMarshal: a response assembled around the raw message is byte for
// byte the magic and the marshalled runtime.Unknown.
func TestWriteEnvelopedMatchesMarshal(t *testing.T) {
	for _, tc := range envelopeCases {
		t.Run(tc.name, func(t *testing.T) {
			u, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: tc.apiVersion, Kind: tc.kind}, Raw: tc.raw}).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			want := append(append([]byte{}, protobufMagic...), u...)
			rec := httptest.NewRecorder()
			writeEnveloped(rec, http.StatusCreated, tc.apiVersion, tc.kind, tc.raw)
			if rec.Code != http.StatusCreated || rec.Header().Get("Content-Type") != protobufMediaType {
				t.Errorf("answered %d %q", rec.Code, rec.Header().Get("Content-Type"))
			}
			if !bytes.Equal(rec.Body.Bytes(), want) {
				t.Fatalf("body differs from the marshalled envelope:\n got %x\nwant %x", frameHead(rec.Body.Bytes()), frameHead(want))
			}
		})
	}
}

func frameHead(b []byte) []byte { return b[:min(len(b), 64)] }
