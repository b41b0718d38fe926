package apiserver

import "testing"

func TestStaticBand(t *testing.T) {
	tests := []struct {
		name                     string
		size, lo, hi, step, want int
	}{
		{"default node ports 30000-32767", 2768, 16, 128, 32, 86},
		{"small port range", 100, 16, 128, 32, 16},
		{"tiny port range has none", 16, 16, 128, 32, 0},
		{"wide port range is capped", 20000, 16, 128, 32, 128},
		{"default service CIDR /12", 1 << 20, 16, 256, 16, 256},
		{"/24", 256, 16, 256, 16, 16},
		{"/28 has none", 16, 16, 256, 16, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := staticBand(tt.size, tt.lo, tt.hi, tt.step); got != tt.want {
				t.Errorf("staticBand(%d) = %d, want %d", tt.size, got, tt.want)
			}
		})
	}
}

// Random picks stay above the static band until it is all that is left.
func TestPickPrefersTheDynamicBand(t *testing.T) {
	a := newRangeAllocator(nil, "", "", 64, 16)
	bits := make([]byte, 8)
	for i := 0; i < 48; i++ {
		o, ok := a.pick(bits)
		if !ok || o < 16 {
			t.Fatalf("pick %d = %d, %v; want a free offset in [16, 64)", i, o, ok)
		}
		if bits[o/8]&(1<<(o%8)) != 0 {
			t.Fatalf("pick %d = %d, which is taken", i, o)
		}
		bits[o/8] |= 1 << (o % 8)
	}
	for i := 0; i < 16; i++ {
		o, ok := a.pick(bits)
		if !ok || o >= 16 || bits[o/8]&(1<<(o%8)) != 0 {
			t.Fatalf("with the dynamic band full, pick %d = %d, %v; want a free offset in [0, 16)", i, o, ok)
		}
		bits[o/8] |= 1 << (o % 8)
	}
	if o, ok := a.pick(bits); ok {
		t.Fatalf("a full range picked %d", o)
	}
}
