package apiserver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestWriteWatchEventProtoMatchesMarshal: the frame written field by field is byte for byte
// what marshalling the runtime.Unknown envelope and then the metav1.WatchEvent gives, for
// objects and names whose lengths need one, two and three varint bytes.
func TestWriteWatchEventProtoMatchesMarshal(t *testing.T) {
	tests := []struct {
		name, typ, apiVersion, kind string
		raw                         []byte
	}{
		{"small pod", "ADDED", "v1", "Pod", []byte{0x0a, 0x03, 'a', 'b', 'c'}},
		{"empty object", "MODIFIED", "apps/v1", "DaemonSet", []byte{}},
		{"no raw", "BOOKMARK", "v1", "Pod", nil},
		{"two-byte lengths", "DELETED", "v1", "Node", bytes.Repeat([]byte{7}, 300)},
		{"three-byte lengths", "MODIFIED", "stable.example.com/v1", strings.Repeat("K", 200), bytes.Repeat([]byte{9}, 70000)},
	}
	for _, tc := range tests {
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

func frameHead(b []byte) []byte { return b[:min(len(b), 64)] }
