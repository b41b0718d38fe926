package store

import (
	"bytes"
	"testing"
)

// TestOwnedBuffer covers both ways a write can reach the codec's buffer: the buffer it
// handed out comes back and is kept without a copy, or other bytes arrive and are appended.
func TestOwnedBuffer(t *testing.T) {
	tests := []struct {
		name    string
		write   func(b *ownedBuffer)
		want    string
		keptOwn bool
	}{
		{"its own buffer, whole", func(b *ownedBuffer) {
			p := b.Allocate(8)
			copy(p, "abcdefgh")
			_, _ = b.Write(p[:6])
		}, "abcdef", true},
		{"its own buffer, then more", func(b *ownedBuffer) {
			p := b.Allocate(8)
			copy(p, "abc")
			_, _ = b.Write(p[:3])
			_, _ = b.Write([]byte("xyz"))
		}, "abcxyz", true},
		{"bytes of another buffer", func(b *ownedBuffer) {
			b.Allocate(8)
			_, _ = b.Write([]byte("k8s"))
			_, _ = b.Write([]byte("\x00rest"))
		}, "k8s\x00rest", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b ownedBuffer
			tt.write(&b)
			if !bytes.Equal(b.data, []byte(tt.want)) {
				t.Errorf("data = %q, want %q", b.data, tt.want)
			}
			if kept := len(b.data) > 0 && &b.data[0] == &b.given[0]; kept != tt.keptOwn {
				t.Errorf("kept the allocated buffer: %v, want %v", kept, tt.keptOwn)
			}
		})
	}
}
