package nodeipam

import (
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
)

// ErrCIDRRangeExhausted is returned by allocate when every block of the cluster CIDR is used.
var ErrCIDRRangeExhausted = errors.New("CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range")

// cidrSet tracks which blocks of a cluster CIDR are used, and by which node, so that a
// block is released only by the node that holds it (two nodes may claim the same block when
// a podCIDR was set by hand).
type cidrSet struct {
	base     *net.IPNet
	maskSize int
	blocks   int

	mu    sync.Mutex
	owner map[int]string
	next  int // where the search for a free block starts: blocks are handed out round-robin
}

// newCIDRSet splits cluster into blocks of maskSize bits. The number of blocks is capped at
// 2^24 (a /8 into /32s would be 16M): the set keeps only used blocks, but the scan for a
// free one is linear.
func newCIDRSet(cluster string, maskSize int) (*cidrSet, error) {
	_, base, err := net.ParseCIDR(cluster)
	if err != nil {
		return nil, fmt.Errorf("cluster CIDR %q: %w", cluster, err)
	}
	ones, bits := base.Mask.Size()
	if maskSize < ones || maskSize > bits {
		return nil, fmt.Errorf("node CIDR mask size %d must be between the cluster CIDR's /%d and /%d", maskSize, ones, bits)
	}
	if maskSize-ones > 24 {
		return nil, fmt.Errorf("node CIDR mask size %d cuts %s into more than 2^24 blocks", maskSize, cluster)
	}
	return &cidrSet{base: base, maskSize: maskSize, blocks: 1 << (maskSize - ones), owner: map[int]string{}}, nil
}

// block returns the i-th block.
func (s *cidrSet) block(i int) *net.IPNet {
	bits := len(s.base.IP) * 8
	ip := new(big.Int).SetBytes(s.base.IP)
	ip.Add(ip, new(big.Int).Lsh(big.NewInt(int64(i)), uint(bits-s.maskSize)))
	b := ip.Bytes()
	out := make(net.IP, len(s.base.IP))
	copy(out[len(out)-len(b):], b)
	return &net.IPNet{IP: out, Mask: net.CIDRMask(s.maskSize, bits)}
}

// index returns the block cidr names, or an error if it is not one of the set's blocks.
func (s *cidrSet) index(cidr string) (int, error) {
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return 0, fmt.Errorf("invalid CIDR %q: %w", cidr, err)
	}
	if ones, _ := n.Mask.Size(); ones != s.maskSize || !ip.Equal(n.IP) || !s.base.Contains(n.IP) ||
		(ip.To4() == nil) != (s.base.IP.To4() == nil) {
		return 0, fmt.Errorf("CIDR %s is not a /%d block of the cluster CIDR %s", cidr, s.maskSize, s.base)
	}
	bits := len(s.base.IP) * 8
	ipv := n.IP
	if len(s.base.IP) == net.IPv4len {
		ipv = ipv.To4()
	}
	off := new(big.Int).Sub(new(big.Int).SetBytes(ipv), new(big.Int).SetBytes(s.base.IP))
	return int(off.Rsh(off, uint(bits-s.maskSize)).Int64()), nil
}

// allocate gives node the next free block.
func (s *cidrSet) allocate(node string) (*net.IPNet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.blocks {
		i := (s.next + k) % s.blocks
		if _, used := s.owner[i]; used {
			continue
		}
		s.owner[i] = node
		s.next = (i + 1) % s.blocks
		return s.block(i), nil
	}
	return nil, ErrCIDRRangeExhausted
}

// occupy records that node holds cidr. It is idempotent; a block another node holds stays
// that node's.
func (s *cidrSet) occupy(node, cidr string) error {
	i, err := s.index(cidr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, used := s.owner[i]; !used {
		s.owner[i] = node
	}
	return nil
}

// release frees cidr if node holds it.
func (s *cidrSet) release(node, cidr string) {
	i, err := s.index(cidr)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner[i] == node {
		delete(s.owner, i)
	}
}

// used returns how many blocks are taken.
func (s *cidrSet) used() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.owner)
}
