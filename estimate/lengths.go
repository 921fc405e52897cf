package estimate

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// lengthQuantiles is how many quantiles a LengthDist keeps: enough to place
// every batch of the allocator replay, few enough to be a map key.
const lengthQuantiles = 33

// LengthDist is the distribution of sample lengths (tokens) a run draws its
// batches from when each batch is padded to its longest sample: Request.SeqLen
// is then only the bound. It is kept as quantiles (Q[i] is the length at
// quantile i/32; Q[32] the longest), so it is comparable and cheap to sample.
type LengthDist struct {
	Q [lengthQuantiles]int64
	// T is the upper tail, finer than Q's last interval: T[k] is the length
	// at quantile 1 − 2^−(k+6) (98.4 % … 99.9999 %), so that the longest of
	// many samples (LongestOf) is not read off a straight line from Q[31]
	// to the single longest sample. All zero: not known (Quantile's line).
	T [lengthTail]int64
}

// lengthTail is how many upper-tail quantiles a LengthDist keeps.
const lengthTail = 15

// tailQuantile is the quantile T[k] holds.
func tailQuantile(k int) float64 { return 1 - math.Ldexp(1, -(k+6)) }

// Longest is the longest sample length.
func (d LengthDist) Longest() int64 { return d.Q[lengthQuantiles-1] }

// Median is the 50th-percentile length.
func (d LengthDist) Median() int64 { return d.Q[(lengthQuantiles-1)/2] }

// Quantile is the length at quantile u in [0, 1], interpolated.
func (d LengthDist) Quantile(u float64) int64 {
	x := math.Max(0, math.Min(1, u)) * float64(lengthQuantiles-1)
	i := int(x)
	if i >= lengthQuantiles-1 {
		return d.Longest()
	}
	f := x - float64(i)
	return int64(math.Round(float64(d.Q[i]) + f*float64(d.Q[i+1]-d.Q[i])))
}

// LongestOf is the longest of a typical draw of n samples: the median of the
// longest of n, the distribution's 0.5^(1/n) quantile, read off the upper
// tail where the distribution keeps one.
func (d LengthDist) LongestOf(n int64) int64 {
	return d.quantileFine(math.Pow(0.5, 1/float64(max(1, n))))
}

// hasTail: the distribution keeps its upper tail T (one built from Q alone
// does not, and reads Quantile's line instead).
func (d LengthDist) hasTail() bool { return d.T[0] > 0 && d.T[lengthTail-1] > 0 }

// tailKnot is the k-th point of the upper tail as quantileFine and
// tailFraction interpolate it, in x = −log2(1 − u): Q[31] at x = 5 (k = −1),
// then T[k] at x = k + 6.
func (d LengthDist) tailKnot(k int) (x float64, l int64) {
	if k < 0 {
		return 5, d.Q[lengthQuantiles-2]
	}
	return float64(k + 6), d.T[k]
}

// quantileFine is Quantile, read off the upper tail T above Q[31] where the
// distribution keeps one: linear in −log2(1 − u) between the tail's knots,
// and past the last (a dataset of millions) on along the last interval's
// slope, up to the longest sample.
func (d LengthDist) quantileFine(u float64) int64 {
	if u <= float64(lengthQuantiles-2)/float64(lengthQuantiles-1) || !d.hasTail() {
		return d.Quantile(u)
	}
	if u >= 1 {
		return d.Longest()
	}
	x := -math.Log2(1 - u)
	for k := range lengthTail {
		x0, l0 := d.tailKnot(k - 1)
		if x1, l1 := d.tailKnot(k); x <= x1 {
			return int64(math.Round(float64(l0) + (x-x0)*float64(l1-l0)))
		}
	}
	x0, l0 := d.tailKnot(lengthTail - 2)
	x1, l1 := d.tailKnot(lengthTail - 1)
	return min(d.Longest(), l1+int64(math.Round((x-x1)*float64(l1-l0)/(x1-x0))))
}

// tailFraction is the share of samples no longer than l, for l at or above
// Q[31] in a distribution that keeps a tail: quantileFine's inverse.
func (d LengthDist) tailFraction(l int64) float64 {
	for k := range lengthTail {
		x0, l0 := d.tailKnot(k - 1)
		if x1, l1 := d.tailKnot(k); l < l1 {
			return 1 - math.Exp2(-(x0 + (x1-x0)*float64(l-l0)/float64(l1-l0)))
		}
	}
	x0, l0 := d.tailKnot(lengthTail - 2)
	x, l1 := d.tailKnot(lengthTail - 1)
	if l1 > l0 {
		x += (x - x0) * float64(l-l1) / float64(l1-l0)
	}
	return 1 - math.Exp2(-x)
}

// Truncate drops the samples longer than max (a trainer that deletes or
// filters over-long samples), or clips them to max (truncation), and
// returns the distribution of what trains.
func (d LengthDist) Truncate(max int64, drop bool) LengthDist {
	if d.Longest() <= max {
		return d
	}
	if !drop {
		var out LengthDist
		for i, q := range d.Q {
			out.Q[i] = min(q, max)
		}
		for k, q := range d.T {
			out.T[k] = min(q, max)
		}
		return out
	}
	// Keep the quantiles below max and spread them over [0, 1] again.
	keep := sort.Search(lengthQuantiles, func(i int) bool { return d.Q[i] > max })
	if keep == 0 {
		return uniformLengths(max, max)
	}
	frac := float64(keep-1) / float64(lengthQuantiles-1)
	switch {
	case d.hasTail() && max >= d.Q[lengthQuantiles-2]:
		// The cut falls in the top 1/32: where, the finer tail says.
		frac = d.tailFraction(max)
	case keep < lengthQuantiles:
		// Where inside the last kept interval max falls.
		lo, hi := d.Q[keep-1], d.Q[keep]
		if hi > lo {
			frac += float64(max-lo) / float64(hi-lo) / float64(lengthQuantiles-1)
		}
	}
	var out LengthDist
	for i := range out.Q {
		out.Q[i] = min(max, d.quantileFine(frac*float64(i)/float64(lengthQuantiles-1)))
	}
	out.Q[lengthQuantiles-1] = max
	if d.hasTail() {
		// What is kept of the tail: the kept fraction's own top quantiles,
		// read off the finer tail where they fall in it.
		for k := range out.T {
			out.T[k] = min(max, d.quantileFine(frac*tailQuantile(k)))
		}
	}
	return out
}

// LengthsFromSamples is the distribution of the given sample lengths (each
// weighted by count; nil counts: one each).
func LengthsFromSamples(lengths []int64, counts []float64) (LengthDist, error) {
	if len(lengths) == 0 {
		return LengthDist{}, fmt.Errorf("%w: no lengths", ErrInvalidRequest)
	}
	if counts != nil && len(counts) != len(lengths) {
		return LengthDist{}, fmt.Errorf("%w: %d lengths but %d counts", ErrInvalidRequest, len(lengths), len(counts))
	}
	type lw struct {
		l int64
		w float64
	}
	xs := make([]lw, len(lengths))
	var total float64
	for i, l := range lengths {
		w := 1.0
		if counts != nil {
			w = counts[i]
		}
		if l < 1 || w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return LengthDist{}, fmt.Errorf("%w: length %d with count %v (want length ≥ 1, count ≥ 0)", ErrInvalidRequest, l, w)
		}
		xs[i] = lw{l, w}
		total += w
	}
	if total <= 0 {
		return LengthDist{}, fmt.Errorf("%w: every count is zero", ErrInvalidRequest)
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].l < xs[j].l })
	// The first sample whose cumulative weight reaches u of the total: the
	// targets come in rising order, so one walk serves Q and then T.
	var cum float64
	j := 0
	at := func(u float64) int64 {
		for j < len(xs)-1 && cum+xs[j].w < total*u {
			cum += xs[j].w
			j++
		}
		return xs[j].l
	}
	var d LengthDist
	for i := range lengthQuantiles - 1 {
		d.Q[i] = at(float64(i) / float64(lengthQuantiles-1))
	}
	for k := range d.T {
		d.T[k] = at(tailQuantile(k))
	}
	d.Q[0] = xs[0].l
	d.Q[lengthQuantiles-1] = xs[len(xs)-1].l
	return d, nil
}

// LengthsMedianMax is the distribution known only by its median and its
// longest sample: a log-normal with that median whose 99th percentile is the
// longest (sample lengths of instruction and chat data are right-skewed),
// clipped at the longest.
func LengthsMedianMax(p50, longest int64) (LengthDist, error) {
	if p50 < 1 || longest < p50 {
		return LengthDist{}, fmt.Errorf("%w: median length %d with longest %d (want 1 ≤ median ≤ longest)", ErrInvalidRequest, p50, longest)
	}
	sigma := math.Log(float64(longest)/float64(p50)) / 2.326 // z(0.99)
	return logNormalLengths(math.Log(float64(p50)), sigma, 1, longest), nil
}

// LengthsMeanStd is the distribution known by its mean, standard deviation
// and range (as dataset cards state it): the log-normal with that mean and
// deviation, restricted to [min, max].
func LengthsMeanStd(mean, std float64, lo, hi int64) (LengthDist, error) {
	if mean <= 0 || std < 0 || lo < 1 || hi < lo || math.IsNaN(mean) || math.IsNaN(std) {
		return LengthDist{}, fmt.Errorf("%w: length mean %v std %v range [%d, %d]", ErrInvalidRequest, mean, std, lo, hi)
	}
	s2 := math.Log(1 + std*std/(mean*mean))
	return logNormalLengths(math.Log(mean)-s2/2, math.Sqrt(s2), lo, hi), nil
}

// logNormalLengths is a log-normal(mu, sigma) conditioned on [lo, hi].
func logNormalLengths(mu, sigma float64, lo, hi int64) LengthDist {
	cdf := func(x float64) float64 {
		if sigma == 0 {
			if math.Log(x) < mu {
				return 0
			}
			return 1
		}
		return 0.5 * math.Erfc(-(math.Log(x)-mu)/(sigma*math.Sqrt2))
	}
	a, b := cdf(float64(lo)), cdf(float64(hi))
	at := func(u float64) int64 {
		p := a + (b-a)*u
		var l float64
		switch {
		case sigma == 0 || b-a < 1e-12:
			l = math.Exp(mu)
		default:
			l = math.Exp(mu + sigma*math.Sqrt2*math.Erfinv(2*p-1))
		}
		if math.IsNaN(l) || math.IsInf(l, 0) {
			l = float64(hi)
		}
		return max(lo, min(hi, int64(math.Round(l))))
	}
	var d LengthDist
	for i := range d.Q {
		d.Q[i] = at(float64(i) / float64(lengthQuantiles-1))
	}
	for k := range d.T {
		d.T[k] = at(tailQuantile(k))
	}
	d.Q[0], d.Q[lengthQuantiles-1] = max(lo, d.Q[0]), hi
	return d
}

// uniformLengths spreads lengths evenly over [lo, hi].
func uniformLengths(lo, hi int64) LengthDist {
	var d LengthDist
	for i := range d.Q {
		d.Q[i] = lo + (hi-lo)*int64(i)/int64(lengthQuantiles-1)
	}
	for k := range d.T {
		d.T[k] = lo + int64(math.Round(float64(hi-lo)*tailQuantile(k)))
	}
	return d
}

// normalizeLengths makes a request with a length distribution one with
// dynamic shapes whose SeqLen is the longest batch: samples longer than
// SeqLen are truncated to it, and a distribution whose longest sample is
// shorter than SeqLen lowers the longest batch to it.
func normalizeLengths(r *Request) {
	if r.Lengths == nil {
		return
	}
	r.DynamicShapes = true
	d := *r.Lengths
	if r.SeqLen > 0 {
		d = d.Truncate(r.SeqLen, false)
		r.SeqLen = min(r.SeqLen, d.Longest())
	}
	r.Lengths = &d
}

// maxLengthLines bounds a lengths file: a precomputed length per sample of a
// large dataset fits; a runaway file does not exhaust memory.
const maxLengthLines = 10_000_000

// ParseLengths reads a file of sample token lengths (docs/memory-model.md,
// "Length distributions"): one entry a line, either a length ("512") or a
// histogram bin "LENGTH COUNT" (COUNT samples of at most LENGTH tokens);
// blank lines and lines starting with # are skipped. name is the file's
// name for errors, which give its line and value.
func ParseLengths(r io.Reader, name string) (LengthDist, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	var lengths []int64
	var counts []float64
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if len(lengths) >= maxLengthLines {
			return LengthDist{}, fmt.Errorf("%s: more than %d entries", name, maxLengthLines)
		}
		fields := strings.Fields(text)
		if len(fields) > 2 {
			return LengthDist{}, fmt.Errorf("%s:%d: %q: want LENGTH or LENGTH COUNT", name, line, text)
		}
		l, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || l < 1 || l > MaxSeqLen {
			return LengthDist{}, fmt.Errorf("%s:%d: length %q: want an integer in 1..%d", name, line, fields[0], MaxSeqLen)
		}
		c := 1.0
		if len(fields) == 2 {
			c, err = strconv.ParseFloat(fields[1], 64)
			if err != nil || c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
				return LengthDist{}, fmt.Errorf("%s:%d: count %q: want a number ≥ 0", name, line, fields[1])
			}
		}
		lengths = append(lengths, l)
		counts = append(counts, c)
	}
	if err := sc.Err(); err != nil {
		return LengthDist{}, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	d, err := LengthsFromSamples(lengths, counts)
	if err != nil {
		return LengthDist{}, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}
