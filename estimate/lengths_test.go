package estimate

import (
	"math"
	"testing"
)

// outlierLengths are 10,000 samples of 100…700 tokens, evenly, and one of
// 1,584: a body that ends at 700 and a lone longest sample.
func outlierLengths(t *testing.T) LengthDist {
	t.Helper()
	var lengths []int64
	for i := range 10000 {
		lengths = append(lengths, 100+int64(i)*600/9999)
	}
	lengths = append(lengths, 1584)
	d, err := LengthsFromSamples(lengths, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A run that draws n samples meets, typically, the 0.5^(1/n) quantile as its
// longest. Where the top 1/32 of a distribution is a sparse tail ending in
// one outlier, a straight line from the 31/32 quantile to that outlier puts
// the longest of a few hundred samples near the outlier; the kept tail does
// not.
func TestLongestOfReadsTheTail(t *testing.T) {
	d := outlierLengths(t)
	if d.Longest() != 1584 {
		t.Fatalf("longest %d, want 1584", d.Longest())
	}
	if got := d.LongestOf(1); got != d.Median() {
		t.Errorf("LongestOf(1) = %d, want the median %d", got, d.Median())
	}
	// The 0.5^(1/480) quantile of the body is 100 + 600·0.99856 ≈ 699.
	if got := d.LongestOf(480); got < 690 || got > 702 {
		t.Errorf("LongestOf(480) = %d, want about 699 (the body's top, not the outlier)", got)
	}
	if lin := d.Quantile(math.Pow(0.5, 1.0/480)); lin < 1400 {
		t.Errorf("the coarse quantiles' line gives %d; the test no longer shows what the tail is for", lin)
	}
	// Monotone in n, and the whole dataset's draw reaches its longest.
	prev := int64(0)
	for _, n := range []int64{1, 2, 8, 31, 32, 33, 64, 100, 480, 5000, 1 << 22} {
		got := d.LongestOf(n)
		if got < prev {
			t.Errorf("LongestOf(%d) = %d falls below LongestOf of fewer samples, %d", n, got, prev)
		}
		prev = got
	}
	if prev != 1584 {
		t.Errorf("LongestOf(2^22) = %d, want the longest, 1584", prev)
	}
	// Below the tail LongestOf is Quantile.
	for _, n := range []int64{1, 2, 8, 20} {
		if got, want := d.LongestOf(n), d.Quantile(math.Pow(0.5, 1/float64(n))); got != want {
			t.Errorf("LongestOf(%d) = %d, want Quantile's %d below the tail", n, got, want)
		}
	}
	// Without a tail (a distribution built from Q alone) it falls back to
	// Quantile.
	bare := LengthDist{Q: d.Q}
	if got, want := bare.LongestOf(480), bare.Quantile(math.Pow(0.5, 1.0/480)); got != want {
		t.Errorf("no tail: LongestOf(480) = %d, want Quantile's %d", got, want)
	}
}

// The log-normal's kept tail follows its quantile function, and truncating
// a distribution keeps a tail that stays under the cut.
func TestLengthTailSurvivesTruncation(t *testing.T) {
	d, err := LengthsMeanStd(600, 300, 20, 20000)
	if err != nil {
		t.Fatal(err)
	}
	s2 := math.Log(1 + 0.25)
	mu, sigma := math.Log(600)-s2/2, math.Sqrt(s2)
	for _, n := range []int64{100, 1000, 10000} {
		u := math.Pow(0.5, 1/float64(n))
		want := math.Exp(mu + sigma*math.Sqrt2*math.Erfinv(2*u-1))
		if got := float64(d.LongestOf(n)); math.Abs(got-want) > 0.03*want {
			t.Errorf("log-normal LongestOf(%d) = %.0f, want about %.0f (its 0.5^(1/n) quantile)", n, got, want)
		}
	}
	for _, drop := range []bool{false, true} {
		c := d.Truncate(1000, drop)
		prev := int64(0)
		for _, n := range []int64{1, 50, 500, 5000} {
			got := c.LongestOf(n)
			if got > 1000 || got < prev {
				t.Errorf("truncated at 1000 (drop %v): LongestOf(%d) = %d (want ≤ 1000, not below %d)", drop, n, got, prev)
			}
			prev = got
		}
		if c.T[lengthTail-1] == 0 {
			t.Errorf("truncated (drop %v): the tail was lost", drop)
		}
	}
}

// The allocator replay draws its batches off the same tail: a dataset whose
// longest sample is a lone outlier does not put it, or lengths near it, in
// a tenth of the replayed batches (the coarse quantiles' line would give
// the top 1/32 of draws lengths up to the outlier).
func TestReplayDrawsOffTheTail(t *testing.T) {
	d := outlierLengths(t)
	got := batchLengths(allocStep{Longest: 1584, Batch: 8, Lengths: d})
	over := 0
	for _, l := range got[:len(got)-1] {
		if l > 710 {
			over++
		}
	}
	if over > 1 || got[len(got)-1] != 1584 {
		t.Errorf("replayed batches: %d of %d past 710 tokens (want at most one), last %d (want the longest, 1584): %v", over, len(got)-1, got[len(got)-1], got)
	}
}

// Truncation keeps the tail's values, not only its shape: clipping above the
// longest of 480 draws leaves that length as it was, dropping the one
// outlier moves it by a token or two, and a cut inside the body puts it just
// under the cut. Past the tail's last quantile the longest grows on along
// its slope rather than leaping to the longest sample.
func TestLengthTailValues(t *testing.T) {
	d := outlierLengths(t)
	want := d.LongestOf(480)
	if got := d.Truncate(1000, false).LongestOf(480); got != want {
		t.Errorf("clipped at 1000: LongestOf(480) = %d, want it unchanged, %d", got, want)
	}
	if got := d.Truncate(1000, true).LongestOf(480); got < want-3 || got > want+3 {
		t.Errorf("outlier dropped at 1000: LongestOf(480) = %d, want within 3 of %d (one sample in 10,001 went)", got, want)
	}
	if got := d.Truncate(650, true).LongestOf(480); got < 640 || got > 650 {
		t.Errorf("dropped at 650: LongestOf(480) = %d, want just under the cut (640…650)", got)
	}
	u := uniformLengths(1, 1001)
	for k, q := range u.T {
		if want := 1 + int64(math.Round(1000*tailQuantile(k))); q != want {
			t.Errorf("uniform tail T[%d] = %d, want %d", k, q, want)
		}
	}
	partial := LengthDist{Q: d.Q}
	partial.T[lengthTail-1] = 1584
	if got, want := partial.LongestOf(480), partial.Quantile(math.Pow(0.5, 1.0/480)); got != want {
		t.Errorf("a partial tail: LongestOf(480) = %d, want Quantile's %d (no tail is better than half of one)", got, want)
	}
	ln, err := LengthsMeanStd(600, 300, 20, 20000)
	if err != nil {
		t.Fatal(err)
	}
	a, b := ln.LongestOf(700_000), ln.LongestOf(800_000)
	if b < a || float64(b) > 1.1*float64(a) {
		t.Errorf("LongestOf(700k) = %d, LongestOf(800k) = %d: want a smooth rise past the tail's last quantile", a, b)
	}
}
