package checked

import (
	"math"
	"testing"
)

func TestAddMul(t *testing.T) {
	tests := []struct {
		a, b      uint64
		sum       uint64
		sumOK     bool
		product   uint64
		productOK bool
	}{
		{2, 3, 5, true, 6, true},
		{0, math.MaxUint64, math.MaxUint64, true, 0, true},
		{1, math.MaxUint64, 0, false, math.MaxUint64, true},
		{1 << 32, 1 << 32, 1 << 33, true, 0, false},
		{math.MaxUint64 - 8, 9, 0, false, 0, false},
	}
	for _, tt := range tests {
		s, ok := Add(tt.a, tt.b)
		if ok != tt.sumOK || (ok && s != tt.sum) {
			t.Errorf("Add(%d, %d) = %d, %v; want %d, %v", tt.a, tt.b, s, ok, tt.sum, tt.sumOK)
		}
		p, ok := Mul(tt.a, tt.b)
		if ok != tt.productOK || (ok && p != tt.product) {
			t.Errorf("Mul(%d, %d) = %d, %v; want %d, %v", tt.a, tt.b, p, ok, tt.product, tt.productOK)
		}
	}
}

func TestParameters(t *testing.T) {
	if !Parameters(MaxParameters) || Parameters(MaxParameters+1) || !Parameters(0) {
		t.Errorf("Parameters: the bound is inclusive at %d", uint64(MaxParameters))
	}
	// The bound keeps a byte count an estimate forms from it in int64 even
	// at the widest per-parameter cost (fp32 weights, gradients and two
	// Adam moments: 16 bytes), with room for a hundred such terms.
	if MaxParameters*16*100 > math.MaxInt64 {
		t.Errorf("MaxParameters×16×100 leaves int64")
	}
}
