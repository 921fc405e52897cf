package evidence

import (
	"errors"
	"math"
)

// nnls solves min ‖A·x − b‖² subject to x ≥ 0 for a handful of unknowns by
// trying every active set and keeping the best feasible solution: exact, and
// cheap for the ≤ 8 coefficients the default estimator has.
func nnls(A [][]float64, b []float64) ([]float64, error) {
	if len(A) == 0 {
		return nil, errors.New("nnls: no rows")
	}
	n := len(A[0])
	if n > 12 {
		return nil, errors.New("nnls: too many unknowns for the exhaustive method")
	}
	best := make([]float64, n)
	bestRes := residual(A, b, best)
	for mask := 1; mask < 1<<n; mask++ {
		var cols []int
		for j := range n {
			if mask&(1<<j) != 0 {
				cols = append(cols, j)
			}
		}
		xs, ok := leastSquares(A, b, cols)
		if !ok {
			continue
		}
		x := make([]float64, n)
		feasible := true
		for k, j := range cols {
			if xs[k] < 0 {
				feasible = false
				break
			}
			x[j] = xs[k]
		}
		if !feasible {
			continue
		}
		if r := residual(A, b, x); r < bestRes-1e-12*math.Max(1, bestRes) {
			best, bestRes = x, r
		}
	}
	return best, nil
}

func residual(A [][]float64, b, x []float64) float64 {
	var s float64
	for i, row := range A {
		d := -b[i]
		for j, a := range row {
			d += a * x[j]
		}
		s += d * d
	}
	return s
}

// leastSquares solves the normal equations on the chosen columns by Gaussian
// elimination with partial pivoting; ok is false when they are singular.
func leastSquares(A [][]float64, b []float64, cols []int) ([]float64, bool) {
	k := len(cols)
	M := make([][]float64, k)
	for p := range k {
		M[p] = make([]float64, k+1)
		for q := range k {
			for i := range A {
				M[p][q] += A[i][cols[p]] * A[i][cols[q]]
			}
		}
		for i := range A {
			M[p][k] += A[i][cols[p]] * b[i]
		}
	}
	for c := range k {
		piv := c
		for r := c + 1; r < k; r++ {
			if math.Abs(M[r][c]) > math.Abs(M[piv][c]) {
				piv = r
			}
		}
		if math.Abs(M[piv][c]) < 1e-12 {
			return nil, false
		}
		M[c], M[piv] = M[piv], M[c]
		for r := range k {
			if r == c {
				continue
			}
			f := M[r][c] / M[c][c]
			for q := c; q <= k; q++ {
				M[r][q] -= f * M[c][q]
			}
		}
	}
	x := make([]float64, k)
	for c := range k {
		x[c] = M[c][k] / M[c][c]
	}
	return x, true
}
