// Package checked is the one rule for byte and parameter counts built from
// outside input (config.json, safetensors headers, indexes): a sum or a
// product that would wrap is refused, never wrapped, and a parameter count
// past MaxParameters is refused as out of range. It provides the arithmetic
// and the bound; callers name the input in their errors.
//
// It is pure: no I/O, only math/bits, so the parsers (hfconfig,
// internal/safetensors) and the edges can all share it.
package checked

import "math/bits"

// MaxParameters bounds every parameter count that enters an estimate: a
// thousand times the largest published model (about 10^12 parameters).
// Beyond it an input is corrupt or hostile, and the products an estimate
// forms from the count (16 bytes a parameter for fp32 weights, gradients and
// two Adam moments) could leave the range of an int64. It is an untyped
// constant so it compares with int64, uint64 and float64 counts alike.
const MaxParameters = 1_000_000_000_000_000

// Add returns a+b and whether the sum fits in 64 bits.
func Add(a, b uint64) (uint64, bool) {
	s, carry := bits.Add64(a, b, 0)
	return s, carry == 0
}

// Mul returns a×b and whether the product fits in 64 bits.
func Mul(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

// Parameters reports whether n is a parameter count an estimate may use:
// at most MaxParameters.
func Parameters(n uint64) bool { return n <= MaxParameters }
