// Package bytesize holds the project's byte units and their conversions.
// Sizes are bytes (int64) inside the program and GiB (2^30 bytes) on output:
// every *_gb field of the JSON documents and every "GiB" a user reads comes
// from here. It refuses sizes that are not sizes (NaN, infinities, negative
// or beyond int64) and does no I/O.
package bytesize

import (
	"errors"
	"fmt"
	"math"
)

// The binary units. They are untyped constants so that they scale byte
// counts (int64) and GiB figures (float64) alike: 24 * GiB is an int64 size
// in a request, float64(b) / GiB a figure on output.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// InGiB is b bytes in GiB.
func InGiB(b int64) float64 { return float64(b) / GiB }

// RoundedGiB is b bytes in GiB rounded to digits decimals, as the JSON
// documents print their *_gb fields.
func RoundedGiB(b int64, digits int) float64 { return Round(InGiB(b), digits) }

// Round rounds x to digits decimals (half away from zero).
func Round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Format is b bytes as a reader sees it: "21.50 GiB".
func Format(b int64) string { return fmt.Sprintf("%.2f GiB", InGiB(b)) }

// ErrNotASize is wrapped by FromGiB's errors.
var ErrNotASize = errors.New("not a size")

// maxGiB is the largest size in GiB whose bytes an int64 holds: 2^63 bytes
// is 2^33 GiB, and float64(math.MaxInt64) rounds up to 2^63.
const maxGiB = 1 << 33

// FromGiB converts a size in GiB to bytes, truncating below the byte. NaN,
// infinities, negative sizes and sizes beyond int64 are refused: converted
// to int64 they would be whatever the CPU makes of them.
func FromGiB(x float64) (int64, error) {
	if math.IsNaN(x) || x < 0 || x >= maxGiB {
		return 0, fmt.Errorf("%w: %v GiB (want 0 to below %d GiB)", ErrNotASize, x, int64(maxGiB))
	}
	return int64(x * GiB), nil
}
