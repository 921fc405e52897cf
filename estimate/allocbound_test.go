package estimate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// No fitted coefficient may push the reserved level past what the caching
// allocator model holds for the run's batch shapes: with an absurd fitted
// reserved_dynamic (10× the transient), the cached share stays within the
// allocator replay's fraction of the step's forward phase.
func TestFittedCoefficientCannotPassAllocatorBound(t *testing.T) {
	narrow, err := LengthsMedianMax(1900, 2048)
	if err != nil {
		t.Fatal(err)
	}
	broad, err := LengthsMeanStd(300, 250, 20, 4000)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		model   string
		method  Method
		ckpt    Checkpointing
		batch   int64
		lengths *LengthDist
	}{
		{"7B lora, no checkpointing", "meta-llama/Llama-2-7b-hf", LoRA, CkptNone, 2, nil},
		{"7B lora, checkpointing", "Qwen/Qwen2.5-7B", LoRA, "full", 1, nil},
		{"0.5B full, narrow lengths", "Qwen/Qwen2.5-0.5B", Full, CkptNone, 4, &narrow},
		{"7B qlora, broad lengths", "meta-llama/Llama-2-7b-hf", QLoRA, "full", 8, &broad},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{Model: catalogModel(t, tc.model), Method: tc.method, Precision: BF16Mixed, SeqLen: 2048,
				Batch: tc.batch, GradCkpt: tc.ckpt, DynamicShapes: true, Lengths: tc.lengths, Stack: "hf-trainer"}
			k := DefaultCoefficients
			k.ReservedDynamic = 10
			e, err := PhasePeak{Coef: k}.Estimate(r)
			if err != nil {
				t.Fatal(err)
			}
			rn, err := r.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			tr, _, err := PhasePeak{Coef: k}.terms(rn)
			if err != nil {
				t.Fatal(err)
			}
			bound := dynamicCacheBound(tr, rn)
			if bound <= 0 || bound >= 10 {
				t.Fatalf("allocator bound %.3g: want a fraction in (0, 10)", bound)
			}
			cached := e.Levels.Reserved - (e.PlanningProxy - int64(k.ContextGiB*GiB))
			if limit := int64(bound*float64(e.Phases.Forward)) + 1; cached > limit {
				t.Errorf("reserved_dynamic 10 keeps %d bytes cached, past the allocator bound %.3g × forward %d = %d",
					cached, bound, e.Phases.Forward, limit)
			}
			if e.Levels.Reserved >= 2*e.Levels.Allocated {
				t.Errorf("reserved %d is at least twice allocated %d", e.Levels.Reserved, e.Levels.Allocated)
			}
		})
	}
}

// A fixed-shape run cannot keep more cached than its step's transient,
// whatever reserved_largest is fitted to.
func TestFixedShapesCacheAtMostTheTransient(t *testing.T) {
	r := Request{Model: catalogModel(t, "meta-llama/Llama-2-7b-hf"), Method: LoRA, Precision: BF16Mixed, SeqLen: 1024, Batch: 1, Stack: "hf-trainer"}
	k := DefaultCoefficients
	k.ReservedLargest = 50
	e, err := PhasePeak{Coef: k}.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	cached := e.Levels.Reserved - (e.PlanningProxy - int64(k.ContextGiB*GiB))
	if cached <= 0 || cached > e.Phases.Forward {
		t.Errorf("reserved_largest 50 keeps %d bytes cached; want 0 < cached ≤ the forward phase %d", cached, e.Phases.Forward)
	}
}

// The replay follows the distribution: lengths bunched at the longest leave
// less cached than lengths spread evenly up to it.
func TestCacheFollowsTheLengthSpread(t *testing.T) {
	s := allocStep{Layers: 24, Kept: 300 << 20, Logits: 2048 * 32000, Chain: genericChain, Longest: 2048, Batch: 1}
	s.Lengths = uniformLengths(1, 2048)
	spread := cachedFraction(s)
	bunched, err := LengthsMedianMax(2000, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s.Lengths = bunched
	if b := cachedFraction(s); !(b < spread) {
		t.Errorf("cached fraction %.3g for lengths bunched at the longest, %.3g for lengths spread evenly: want less", b, spread)
	}
	s.Lengths = uniformLengths(2048, 2048)
	if f := cachedFraction(s); f > 0.05 {
		t.Errorf("one fixed length keeps %.3g of the transient cached: want almost none", f)
	}
}

func TestLengthDistributions(t *testing.T) {
	d, err := LengthsFromSamples([]int64{10, 20, 30, 40, 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int64{d.Q[0], d.Median(), d.Longest()}; !cmp.Equal(got, []int64{10, 30, 50}) {
		t.Errorf("samples 10..50: min, median, longest = %v", got)
	}
	h, err := LengthsFromSamples([]int64{100, 1000}, []float64{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	if h.Median() != 100 || h.Longest() != 1000 {
		t.Errorf("histogram 3×100, 1×1000: median %d, longest %d", h.Median(), h.Longest())
	}
	m, err := LengthsMedianMax(500, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if m.Median() < 490 || m.Median() > 510 || m.Longest() != 4096 {
		t.Errorf("median 500, longest 4096: got median %d, longest %d", m.Median(), m.Longest())
	}
	ms, err := LengthsMeanStd(3234, 2547, 91, 19548)
	if err != nil {
		t.Fatal(err)
	}
	// log-normal with that mean and deviation: median = mean / sqrt(1 + cv²) ≈ 2543.
	if ms.Median() < 2450 || ms.Median() > 2650 {
		t.Errorf("mean 3234 ± 2547: median %d, want about 2543", ms.Median())
	}
	drop := ms.Truncate(2048, true)
	clip := ms.Truncate(2048, false)
	if drop.Longest() != 2048 || clip.Longest() != 2048 || drop.Median() >= clip.Median() {
		t.Errorf("cut at 2048: dropped median %d, clipped median %d (want dropped < clipped, both longest 2048)", drop.Median(), clip.Median())
	}
	for _, bad := range []func() error{
		func() error { _, err := LengthsFromSamples(nil, nil); return err },
		func() error { _, err := LengthsFromSamples([]int64{0}, nil); return err },
		func() error { _, err := LengthsFromSamples([]int64{5}, []float64{0}); return err },
		func() error { _, err := LengthsMedianMax(600, 500); return err },
		func() error { _, err := LengthsMeanStd(-1, 1, 1, 10); return err },
	} {
		if bad() == nil {
			t.Error("invalid lengths accepted")
		}
	}
}

// A distribution whose longest sample is shorter than SeqLen lowers the
// longest batch to it: the peak is estimated at the longest batch.
func TestLengthsSetTheLongestBatch(t *testing.T) {
	d, err := LengthsFromSamples([]int64{100, 300, 700}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Request{Model: catalogModel(t, "Qwen/Qwen2.5-0.5B"), SeqLen: 2048, Batch: 1, Lengths: &d}
	n, err := r.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if n.SeqLen != 700 || !n.DynamicShapes {
		t.Errorf("SeqLen %d, DynamicShapes %v: want 700, true", n.SeqLen, n.DynamicShapes)
	}
	at700 := Request{Model: r.Model, SeqLen: 700, Batch: 1, DynamicShapes: true}
	a, b := est(t, r), est(t, at700)
	if a.Levels.Allocated != b.Levels.Allocated {
		t.Errorf("allocated %d with lengths up to 700, %d at seq-len 700", a.Levels.Allocated, b.Levels.Allocated)
	}
}

func TestParseLengths(t *testing.T) {
	d, err := ParseLengths(strings.NewReader("# lengths\n100\n\n300 2\n700\n"), "l.txt")
	if err != nil {
		t.Fatal(err)
	}
	if d.Q[0] != 100 || d.Median() != 300 || d.Longest() != 700 {
		t.Errorf("min %d, median %d, longest %d: want 100, 300, 700", d.Q[0], d.Median(), d.Longest())
	}
	for in, want := range map[string]string{
		"":            "l.txt: ",
		"12 3 4\n":    "l.txt:1: ",
		"# x\nabc\n":  "l.txt:2: length \"abc\"",
		"0\n":         "l.txt:1: length \"0\"",
		"10 -1\n":     "l.txt:1: count \"-1\"",
		"10 NaN\n":    "l.txt:1: count \"NaN\"",
		"10 0\n20 0":  "every count is zero",
		"99999999999": "l.txt:1: length",
	} {
		_, err := ParseLengths(strings.NewReader(in), "l.txt")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLengths(%q): err = %v, want it to contain %q", in, err, want)
		}
	}
}

func FuzzParseLengths(f *testing.F) {
	f.Add("100\n200 3\n# c\n")
	f.Add("1 0\n2 1e300\n")
	f.Fuzz(func(t *testing.T, in string) {
		d, err := ParseLengths(strings.NewReader(in), "f")
		if err != nil {
			return
		}
		for i := 1; i < len(d.Q); i++ {
			if d.Q[i] < d.Q[i-1] || d.Q[i] < 1 {
				t.Fatalf("quantiles not increasing lengths ≥ 1: %v", d.Q)
			}
		}
		if d.Longest() > MaxSeqLen {
			t.Fatalf("longest %d past MaxSeqLen", d.Longest())
		}
		// The upper tail lies between Q's last interval's ends, rising.
		prev := d.Q[len(d.Q)-2]
		for _, q := range d.T {
			if q < prev || q > d.Longest() {
				t.Fatalf("tail %v outside [%d, %d] or falling", d.T, d.Q[len(d.Q)-2], d.Longest())
			}
			prev = q
		}
		for _, n := range []int64{1, 480, 1 << 30} {
			if l := d.LongestOf(n); l < d.Q[0] || l > d.Longest() {
				t.Fatalf("LongestOf(%d) = %d outside [%d, %d]", n, l, d.Q[0], d.Longest())
			}
		}
	})
}
