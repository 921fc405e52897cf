package bytesize

import (
	"errors"
	"math"
	"testing"
)

func TestFromGiB(t *testing.T) {
	for _, tt := range []struct {
		gib  float64
		want int64
		ok   bool
	}{
		{0, 0, true},
		{1, 1 << 30, true},
		{0.5, 1 << 29, true},
		{24, 24 << 30, true},
		{1.0 / (1 << 30), 1, true},
		{(1 << 33) - 1, ((1 << 33) - 1) << 30, true},
		{1 << 33, 0, false}, // 2^63 bytes: one past int64
		{-1, 0, false},
		{math.NaN(), 0, false},
		{math.Inf(1), 0, false},
		{math.Inf(-1), 0, false},
	} {
		got, err := FromGiB(tt.gib)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("FromGiB(%v) = %d, %v; want %d, ok %v", tt.gib, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrNotASize) {
			t.Errorf("FromGiB(%v): %v does not wrap ErrNotASize", tt.gib, err)
		}
	}
}

func TestFigures(t *testing.T) {
	for _, tt := range []struct {
		b       int64
		gib     float64
		rounded float64 // to 3 decimals
		format  string
	}{
		{0, 0, 0, "0.00 GiB"},
		{GiB, 1, 1, "1.00 GiB"},
		{24 * GiB, 24, 24, "24.00 GiB"},
		{3 * GiB / 2, 1.5, 1.5, "1.50 GiB"},
		{GiB + 5*MiB, 1 + 5.0/1024, 1.005, "1.00 GiB"},
		{81559 * MiB, 81559.0 / 1024, 79.647, "79.65 GiB"},
		{-GiB, -1, -1, "-1.00 GiB"},
	} {
		if g := InGiB(tt.b); g != tt.gib {
			t.Errorf("InGiB(%d) = %v, want %v", tt.b, g, tt.gib)
		}
		if r := RoundedGiB(tt.b, 3); r != tt.rounded {
			t.Errorf("RoundedGiB(%d, 3) = %v, want %v", tt.b, r, tt.rounded)
		}
		if f := Format(tt.b); f != tt.format {
			t.Errorf("Format(%d) = %q, want %q", tt.b, f, tt.format)
		}
	}
}

// FromGiB never panics and never returns a negative size, and what it
// accepts converts back to within a byte of the input.
func FuzzFromGiB(f *testing.F) {
	for _, x := range []float64{0, 1, 24.5, 1 << 33, -1, math.NaN(), math.Inf(1), 1e-300, 8589934591.999999} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		b, err := FromGiB(x)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("FromGiB(%v) = %d", x, b)
		}
		if d := math.Abs(float64(b) - x*GiB); d > 1 && d > x*GiB*1e-15 {
			t.Fatalf("FromGiB(%v) = %d bytes, %v off", x, b, d)
		}
	})
}
