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
// when a rollout supersedes thousands a second) against a dictionary of a recent version
// of the same resource, they take a tenth to a half as much, so compact keeps them packed
// and a reader unpacks a copy (docs/watch-cache.md, "Memory").

// protoEncoding is a version's protobuf encoding: whole while the version is current or
// recent, packed once compact has packed it. It is never changed after it is built: compact
// stores a new one, so a reader holding the whole bytes may go on using them.
type protoEncoding struct {
	raw []byte
	// packed is the S2 block of the encoding; set only when raw is nil.
	packed []byte
	// dict is the dictionary packed was made with; nil for none.
	dict *s2.Dict
}

// bytes returns the whole encoding, unpacking a packed one into a new slice.
func (e *protoEncoding) bytes() ([]byte, error) {
	if e.raw != nil || e.packed == nil {
		return e.raw, nil
	}
	var raw []byte
	var err error
	if e.dict != nil {
		raw, err = e.dict.Decode(nil, e.packed)
	} else {
		raw, err = s2.Decode(nil, e.packed)
	}
	if err != nil {
		return nil, fmt.Errorf("watch cache: unpacking an encoding: %w", err)
	}
	return raw, nil
}

// packer packs the superseded versions of one resource. Versions of one kind of object
// share most of their bytes (the pods of a DaemonSet differ in names, node, addresses and
// times; their managed fields, spec and labels are alike), so each is packed against a
// dictionary: the encoding of a version the packer packed recently. A daemon pod's 3.4 KiB
// then take about 300 bytes, against 1.9 KiB packed alone. The dictionary is renewed every
// packDictUses versions, so that it follows what the resource holds now, and every packed
// encoding keeps the one it was made with. A packer is used under its cache's lock.
type packer struct {
	// enc packs: it builds a 32 KiB match table on first use, which the packed
	// encodings do not need, so they keep dec, a second dictionary of the same bytes.
	enc, dec *s2.Dict
	uses     int
}

// packDictUses is how many versions one dictionary packs before the next one packed
// becomes the dictionary.
const packDictUses = 256

// pack returns raw packed, or nil when packing does not make it smaller.
func (p *packer) pack(raw []byte) *protoEncoding {
	if p.enc == nil || p.uses >= packDictUses {
		p.renew(raw)
	}
	scratch := packScratch.Get().(*[]byte)
	defer packScratch.Put(scratch)
	if n := s2.MaxEncodedLen(len(raw)); cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	var packed []byte
	if p.enc != nil {
		packed = p.enc.Encode((*scratch)[:cap(*scratch)], raw)
		p.uses++
	} else {
		packed = s2.Encode((*scratch)[:cap(*scratch)], raw)
	}
	if len(packed) >= len(raw) {
		return nil
	}
	return &protoEncoding{packed: bytes.Clone(packed), dict: p.dec}
}

// renew makes raw the dictionary, unless S2 cannot use it as one (under 16 bytes or over
// 64 KiB): then the old one stays.
func (p *packer) renew(raw []byte) {
	// Room for the 16 bytes S2 reads past a dictionary's end, so that both dictionaries
	// share this copy instead of making their own.
	data := append(make([]byte, 0, len(raw)+16), raw...)
	enc := s2.MakeDictManual(data, 0)
	if enc == nil {
		return
	}
	p.enc, p.dec, p.uses = enc, s2.MakeDictManual(data, 0), 0
}

// packScratch holds worst-case buffers for S2, which needs one a little larger than its
// input; only the packed bytes are kept.
var packScratch = sync.Pool{New: func() any { return new([]byte) }}
