package evidence

import (
	"math"
	"testing"
)

func TestNNLS(t *testing.T) {
	// b = 2·x0 + 3·x1 exactly: recovered.
	A := [][]float64{{1, 0}, {0, 1}, {1, 1}, {2, 1}}
	b := []float64{2, 3, 5, 7}
	x, err := nnls(A, b)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(x[0]-2) > 1e-9 || math.Abs(x[1]-3) > 1e-9 {
		t.Errorf("x = %v, want [2 3]", x)
	}
	// The unconstrained optimum has x1 < 0: NNLS pins it at 0 and refits x0.
	A = [][]float64{{1, 1}, {1, 2}, {1, 3}}
	b = []float64{3, 2, 1} // b = 4 − x: slope −1
	x, err = nnls(A, b)
	if err != nil {
		t.Fatal(err)
	}
	if x[1] != 0 || math.Abs(x[0]-2) > 1e-9 {
		t.Errorf("x = %v, want [2 0] (mean of b with the negative slope removed)", x)
	}
}
