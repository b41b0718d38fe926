package apiserver

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
)

// A superseded version in the watch cache's history is read only by a watch that replays
// history or lags far behind, and most of the history's memory is those versions' protobuf
// encodings. Packed with S2 (the Snappy family: a few microseconds a version, which matters
// when a rollout supersedes thousands a second) they take a little over half as much, so compact
// keeps them packed and a reader unpacks a copy (docs/watch-cache.md, "Memory").

// protoEncoding is a version's protobuf encoding: whole while the version is current or
// recent, packed once compact has packed it. It is never changed after it is built: compact
// stores a new one, so a reader holding the whole bytes may go on using them.
type protoEncoding struct {
	raw []byte
	// packed is the S2 block of the encoding; set only when raw is nil.
	packed []byte
}

// bytes returns the whole encoding, unpacking a packed one into a new slice.
func (e *protoEncoding) bytes() ([]byte, error) {
	if e.raw != nil || e.packed == nil {
		return e.raw, nil
	}
	raw, err := s2.Decode(nil, e.packed)
	if err != nil {
		return nil, fmt.Errorf("watch cache: unpacking an encoding: %w", err)
	}
	return raw, nil
}

// packProto returns raw packed, or nil when packing does not make it smaller.
func packProto(raw []byte) *protoEncoding {
	scratch := packScratch.Get().(*[]byte)
	defer packScratch.Put(scratch)
	if n := s2.MaxEncodedLen(len(raw)); cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	packed := s2.Encode((*scratch)[:cap(*scratch)], raw)
	if len(packed) >= len(raw) {
		return nil
	}
	return &protoEncoding{packed: bytes.Clone(packed)}
}

// packScratch holds worst-case buffers for s2.Encode, which needs one a little larger than
// its input; only the packed bytes are kept.
var packScratch = sync.Pool{New: func() any { return new([]byte) }}
