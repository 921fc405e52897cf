package trace

import (
	"errors"
	"math"
)

// errNumber is malformed number text; errRange a number outside int64.
var (
	errNumber = errors.New("malformed number")
	errRange  = errors.New("number out of range")
)

// maxExp clamps a decimal exponent; any larger exponent overflows int64 or
// rounds to zero anyway, and the clamp keeps the digit loop short.
const maxExp = 400

// parseScaled converts JSON number text to the integer value × 10^shift,
// rounded half away from zero, without going through float64. Trace
// timestamps are decimal microseconds; with shift 3 they become integer
// nanoseconds exactly. A float64 has 53 bits, so an absolute epoch
// timestamp such as 1712195495519689.047 µs would lose its nanoseconds.
// exact reports whether no non-zero digit was rounded away.
func parseScaled(b []byte, shift int) (v int64, exact bool, err error) {
	if v, exact, ok := parseScaledShort(b, shift); ok {
		return v, exact, nil
	}
	return parseScaledLong(b, shift)
}

// parseScaledShort is parseScaled for what traces hold: a plain decimal
// without exponent whose scaled integer part has at most 19 digits, so it
// fits a uint64 (an absolute timestamp in ns has 19). It reads the digits once, where parseScaledLong indexes
// them through a closure; ok is false for any other text, which
// parseScaledLong then handles (FuzzParseScaled checks that both agree).
func parseScaledShort(b []byte, shift int) (v int64, exact, ok bool) {
	i := 0
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		i++
	}
	start := i
	var u uint64
	for i < len(b) && b[i]-'0' <= 9 {
		u = u*10 + uint64(b[i]-'0')
		i++
	}
	if i == start || i-start+shift > 19 || shift < 0 {
		return 0, false, false
	}
	exact, round := true, false
	k := 0 // fraction digits read
	if i < len(b) && b[i] == '.' {
		i++
		fracStart := i
		for ; k < shift && i < len(b) && b[i]-'0' <= 9; i, k = i+1, k+1 {
			u = u*10 + uint64(b[i]-'0')
		}
		if i < len(b) && b[i]-'0' <= 9 {
			round = b[i] >= '5'
		}
		// The digits from the rounding one on decide exactness.
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			exact = exact && b[i] == '0'
		}
		if i == fracStart {
			return 0, false, false
		}
	}
	if i != len(b) {
		return 0, false, false
	}
	for ; k < shift; k++ {
		u *= 10
	}
	// 19 digits fit in a uint64 but not all in an int64: the general path
	// reports the overflow.
	if u > math.MaxInt64 || round && u == math.MaxInt64 {
		return 0, false, false
	}
	if round {
		u++
	}
	v = int64(u)
	if neg {
		v = -v
	}
	return v, exact, true
}

// parseScaledLong is parseScaled for any number text.
func parseScaledLong(b []byte, shift int) (v int64, exact bool, err error) {
	i := 0
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	intEnd := i
	if intEnd == intStart {
		return 0, false, errNumber
	}
	fracStart, fracEnd := i, i
	if i < len(b) && b[i] == '.' {
		i++
		fracStart = i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		fracEnd = i
		if fracEnd == fracStart {
			return 0, false, errNumber
		}
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if exp < maxExp {
				exp = exp*10 + int(b[i]-'0')
			}
			i++
		}
		if i == start {
			return 0, false, errNumber
		}
		exp = min(exp, maxExp)
		if eneg {
			exp = -exp
		}
	}
	if i != len(b) {
		return 0, false, errNumber
	}
	nInt := intEnd - intStart
	n := nInt + (fracEnd - fracStart)
	digit := func(k int) uint64 {
		switch {
		case k < 0 || k >= n:
			return 0
		case k < nInt:
			return uint64(b[intStart+k] - '0')
		default:
			return uint64(b[fracStart+k-nInt] - '0')
		}
	}
	// p is the number of digits in front of the scaled decimal point.
	p := nInt + exp + shift
	var u uint64
	for k := 0; k < p; k++ {
		d := digit(k)
		if u > (math.MaxInt64-d)/10 {
			return 0, false, errRange
		}
		u = u*10 + d
	}
	exact = true
	for k := max(p, 0); k < n; k++ {
		if digit(k) != 0 {
			exact = false
			break
		}
	}
	if digit(p) >= 5 && p >= 0 {
		if u == math.MaxInt64 {
			return 0, false, errRange
		}
		u++
	}
	v = int64(u)
	if neg {
		v = -v
	}
	return v, exact, nil
}

// parseInt converts number text that must hold an integer (a correlation
// id, a stream, "7.0" included) to int64.
func parseInt(b []byte) (int64, error) {
	v, exact, err := parseScaled(b, 0)
	if err != nil {
		return 0, err
	}
	if !exact {
		return 0, errNumber
	}
	return v, nil
}
