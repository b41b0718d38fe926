package nodeipam

import (
	"errors"
	"testing"
)

func TestCIDRSet(t *testing.T) {
	s, err := newCIDRSet("10.128.0.0/22", 24)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range []string{"a", "b", "c", "d"} {
		b, err := s.allocate(n)
		if err != nil {
			t.Fatalf("allocate %s: %v", n, err)
		}
		got = append(got, b.String())
	}
	want := []string{"10.128.0.0/24", "10.128.1.0/24", "10.128.2.0/24", "10.128.3.0/24"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("blocks %v, want %v", got, want)
		}
	}
	if _, err := s.allocate("e"); !errors.Is(err, ErrCIDRRangeExhausted) {
		t.Fatalf("allocate from a full range: %v, want ErrCIDRRangeExhausted", err)
	}
	// Only the holder frees a block.
	s.release("a", "10.128.2.0/24")
	if _, err := s.allocate("e"); !errors.Is(err, ErrCIDRRangeExhausted) {
		t.Fatalf("a released c's block: %v", err)
	}
	s.release("c", "10.128.2.0/24")
	if b, err := s.allocate("e"); err != nil || b.String() != "10.128.2.0/24" {
		t.Fatalf("allocate after release: %v %v, want 10.128.2.0/24", b, err)
	}
}

func TestCIDRSetOccupy(t *testing.T) {
	cases := []struct {
		cidr string
		ok   bool
	}{
		{"10.128.1.0/24", true},
		{"10.128.1.0/25", false}, // not a block's size
		{"10.128.1.5/24", false}, // not a block's start
		{"10.129.0.0/24", false}, // outside
		{"fd00::/120", false},    // other family
		{"not-a-cidr", false},
	}
	for _, tc := range cases {
		t.Run(tc.cidr, func(t *testing.T) {
			s, err := newCIDRSet("10.128.0.0/23", 24)
			if err != nil {
				t.Fatal(err)
			}
			err = s.occupy("x", tc.cidr)
			if (err == nil) != tc.ok {
				t.Fatalf("occupy(%s) = %v, want ok=%v", tc.cidr, err, tc.ok)
			}
			if tc.ok {
				if b, err := s.allocate("y"); err != nil || b.String() != "10.128.0.0/24" {
					t.Fatalf("allocate next to an occupied block: %v %v", b, err)
				}
				if _, err := s.allocate("z"); !errors.Is(err, ErrCIDRRangeExhausted) {
					t.Fatalf("the occupied block was handed out again: %v", err)
				}
			}
		})
	}
}

func TestNewCIDRSetRejects(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		mask int
	}{{"10.0.0.0/16", 8}, {"10.0.0.0/16", 33}, {"10.0.0.0/8", 33}, {"nope", 24}, {"10.0.0.0/0", 30}} {
		if _, err := newCIDRSet(tc.cidr, tc.mask); err == nil {
			t.Errorf("newCIDRSet(%s, %d) accepted", tc.cidr, tc.mask)
		}
	}
}
