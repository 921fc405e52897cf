package evidence

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// devRequests looks a development row up by id and builds its request.
func devRequests(t *testing.T) func(id string) (Case, estimate.Request) {
	t.Helper()
	byID := map[string]Case{}
	for _, c := range readDev(t) {
		byID[c.ID] = c
	}
	return func(id string) (Case, estimate.Request) {
		t.Helper()
		c, ok := byID[id]
		if !ok {
			t.Fatalf("%s not in the cohort", id)
		}
		r, _, why := RequestFor(c)
		if why != "" {
			t.Fatalf("%s: %s", id, why)
		}
		return c, r
	}
}

// Rows whose notes state their dataset's length statistics are estimated
// over that distribution; rows that state none keep only the bound.
func TestStatedLengths(t *testing.T) {
	dev := devRequests(t)
	for id, want := range map[string]bool{"swift-001": true, "swift-049": true, "litgpt-hub-001": false, "torchtune-docs-001": true, "torchtune-flags-001": true, "torchtune-flags-002": false} {
		c, r := dev(id)
		if got := r.Lengths != nil; got != want {
			t.Errorf("%s: length distribution %v, want %v", id, got, want)
			continue
		}
		if want && (r.Lengths.Longest() > int64(*c.SeqLen) || r.Lengths.Median() >= int64(*c.SeqLen)) {
			t.Errorf("%s: longest %d, median %d (seq_len %d): want the longest at most seq_len, the median below", id, r.Lengths.Longest(), r.Lengths.Median(), *c.SeqLen)
		}
	}
}

// Rows whose notes say their script put the longest sample first are
// estimated so (the lit-gpt resource-table rows), others not; a case's
// own longest_first wins over its notes.
func TestStatedLongestFirst(t *testing.T) {
	dev := devRequests(t)
	for id, want := range map[string]bool{"litgpt-rt-002": true, "litgpt-rt-011": true, "litgpt-hub-001": false, "swift-001": false} {
		c, r := dev(id)
		if r.LongestFirst != want {
			t.Errorf("%s: LongestFirst %v, want %v", id, r.LongestFirst, want)
		}
		off := !want
		c.LongestFirst = &off
		if r, _, _ := RequestFor(c); r.LongestFirst != off {
			t.Errorf("%s: longest_first %v in the case, LongestFirst %v", id, off, r.LongestFirst)
		}
	}
	for i, s := range statedLengths {
		if n := b2i(s.Dist != nil) + b2i(s.LongestFirst) + b2i(s.StepPeaks); n != 1 || len(s.NotesContain) == 0 {
			t.Errorf("lengths.json entry %d states %d of a distribution, longest_first and step_peaks (want one), or names no notes", i, n)
		}
		if s.Source == "" && (s.Dist == nil || s.Dist.Source == "") {
			t.Errorf("lengths.json entry %d says nowhere where its claim comes from (source, or seq_len_dist.source)", i)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A figure that is one logged step's peak (torchtune resets the peak
// statistics each time it logs them) is scored at a typical batch of the
// length distribution, not at its longest: torchtune-flags-001's unpacked
// Alpaca batches of two at the median of their longer sample, about the
// distribution's 71st percentile. A reserved figure, which only grows, is
// still the run's; a case's own step_peaks wins over its notes; a packed
// row, with no distribution, keeps its length.
func TestStepPeaksTypicalBatch(t *testing.T) {
	dev := devRequests(t)
	c, r := dev("torchtune-flags-001")
	if r.Lengths == nil {
		t.Fatal("torchtune-flags-001: no length distribution from its notes")
	}
	if want := r.Lengths.Quantile(0.7071); r.SeqLen != want || want < 200 || want > 400 {
		t.Errorf("torchtune-flags-001: SeqLen %d, want the batch-of-two median %d (between 200 and 400 on the cleaned Alpaca histogram)", r.SeqLen, want)
	}
	if _, assumed, _ := RequestFor(c); !slices.ContainsFunc(assumed, func(a string) bool { return strings.Contains(a, "one logged step's peak") }) {
		t.Errorf("torchtune-flags-001: assumptions %q do not say the figure is scored at a typical batch", assumed)
	}
	off := false
	c.StepPeaks = &off
	if r, _, _ := RequestFor(c); r.SeqLen != 4096 || r.Lengths.Longest() != 1584 {
		t.Errorf("torchtune-flags-001 with step_peaks false: SeqLen %d, longest sample %d; want the bound, 4096, over lengths up to 1584 (the estimate peaks at the longest)", r.SeqLen, r.Lengths.Longest())
	}
	c.StepPeaks = nil
	for _, kind := range []string{KindReserved, KindProcess} {
		c.Measured.Kind = kind
		if r, _, _ := RequestFor(c); r.SeqLen != 4096 {
			t.Errorf("torchtune-flags-001 read as a %s figure: SeqLen %d, want the bound, 4096 (the run's level, not one step's)", kind, r.SeqLen)
		}
	}
	// A step of four accumulated micro-batches of two peaks at the longest
	// of eight samples.
	c.Measured.Kind = KindActive
	four := 4
	c.GradAccum = &four
	if r, _, _ := RequestFor(c); r.SeqLen != r.Lengths.Quantile(math.Pow(0.5, 1.0/8)) {
		t.Errorf("torchtune-flags-001 with grad_accum 4: SeqLen %d, want the median of the longest of 8 samples, %d", r.SeqLen, r.Lengths.Quantile(math.Pow(0.5, 1.0/8)))
	}
	if c, r := dev("torchtune-flags-002"); r.SeqLen != int64(*c.SeqLen) {
		t.Errorf("torchtune-flags-002 (packed): SeqLen %d, want %d", r.SeqLen, *c.SeqLen)
	}
	if got := r.Lengths.LongestOf(1); got != r.Lengths.Median() {
		t.Errorf("typical batch of one: %d, want the median %d", got, r.Lengths.Median())
	}
}

func TestSeqLenDistValidated(t *testing.T) {
	line := `{"id":"x-1","source":"s","trust":"high","model":"Qwen/Qwen2.5-0.5B","arch":"qwen2","method":"full","precision":"bf16-true","quant":null,"lora":null,"seq_len":1024,"seq_len_kind":"max","batch":1,"grad_accum":1,"grad_ckpt":"none","optimizer":"adamw_torch","optimizer_state_dtype":null,"attn":"sdpa","fused_ce":"none","other_kernels":[],"framework":"hf-trainer","gpu":{"name":null,"count":1,"vram_gib":24},"sharding":{"strategy":"none","cpu_offload":"none"},"measured":{"kind":"reserved","gib":6,"oom":false,"original":"6 GiB"},"notes":"","seq_len_dist":DIST}`
	good := strings.Replace(line, "DIST", `{"p50":300,"over_max":"truncate"}`, 1)
	cases, err := ReadCases(strings.NewReader(good), "good.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	r, _, why := RequestFor(cases[0])
	if why != "" || r.Lengths == nil || r.Lengths.Median() < 280 || r.Lengths.Median() > 320 {
		t.Fatalf("p50 300: why %q, lengths %v", why, r.Lengths)
	}
	for _, dist := range []string{`{"p50":300,"over_max":"cut"}`, `{"over_max":"drop"}`, `{"p50":5000}`,
		`{"histogram":"no-such-dataset","over_max":"truncate"}`, `{"histogram":"../lengths/alpaca-cleaned","over_max":"truncate"}`,
		`{"histogram":"alpaca-cleaned"}`, `{"histogram":"alpaca-cleaned","over_max":"truncate","max":100}`,
		`{"mean":2500,"std":100,"min":2000,"max":3000,"over_max":"drop"}`} {
		_, err := ReadCases(strings.NewReader(strings.Replace(line, "DIST", dist, 1)), "bad.jsonl")
		if !errors.Is(err, ErrInvalidCase) || !strings.Contains(err.Error(), "seq_len_dist") {
			t.Errorf("seq_len_dist %s: err = %v, want an invalid case naming seq_len_dist", dist, err)
		}
	}
}

// A kept histogram is read as its counts say and cut at seq_len: the
// cleaned Alpaca set's median is near 185 LLaMA tokens and 4–5 % of its
// samples are longer than 512, so truncated at 512 the longest batch is
// 512 while the median stays; unbounded by seq_len, the longest sample is
// the figure's 1,584. Every kept file says where its counts come from.
func TestKeptHistograms(t *testing.T) {
	names := Histograms()
	if !slices.Contains(names, "alpaca-cleaned") {
		t.Fatalf("kept histograms %v, want alpaca-cleaned among them", names)
	}
	for _, name := range names {
		data, err := histogramFiles.ReadFile("lengths/" + name + ".txt")
		if err != nil || !strings.Contains(string(data), "# Source:") {
			t.Errorf("%s: err %v, or no '# Source:' line in its header", name, err)
		}
		if HistogramSummary(name) == "" {
			t.Errorf("%s: no '# Summary:' line, which --seq-len-dataset's help lists", name)
		}
	}
	cut := SeqLenDist{Histogram: "alpaca-cleaned", OverMax: "truncate"}
	seq := 512
	d, err := cut.Lengths(&seq)
	if err != nil {
		t.Fatal(err)
	}
	if d.Longest() != 512 || d.Median() < 170 || d.Median() > 200 {
		t.Errorf("alpaca-cleaned cut at 512: longest %d, median %d; want 512 and about 185", d.Longest(), d.Median())
	}
	if u := d.Quantile(0.9); u < 430 || u > 470 {
		t.Errorf("alpaca-cleaned 90th percentile %d, want about 446 (the bin where the counts pass 90 %%)", u)
	}
	seq = 4096
	if d, err := cut.Lengths(&seq); err != nil || d.Longest() != 1584 {
		t.Errorf("alpaca-cleaned under a 4096 bound: longest %d (err %v), want the dataset's own 1584", d.Longest(), err)
	}
	// The curated Unsloth notebook rows on the same dataset take it from their notes.
	var found bool
	for _, c := range readCasesFile(t, "curated.jsonl") {
		if !strings.Contains(c.Notes, "dataset unsloth/alpaca-cleaned. packing = False") {
			continue
		}
		found = true
		if st := statedLengthsOf(c); st.Dist == nil || st.Dist.Histogram != "alpaca-cleaned" {
			t.Errorf("%s: stated lengths %+v, want the alpaca-cleaned histogram", c.ID, statedLengthsOf(c).Dist)
		}
	}
	if !found {
		t.Error("no curated row on unsloth/alpaca-cleaned without packing")
	}
	// Every distribution lengths.json states is one Lengths reads.
	for i, s := range statedLengths {
		if s.Dist == nil {
			continue
		}
		if _, err := s.Dist.Lengths(nil); err != nil {
			t.Errorf("lengths.json entry %d (%v): %v", i, s.NotesContain, err)
		}
	}
}

// BenchmarkHistogramLengths is one case's lengths from a kept histogram,
// as validate and the web API read them for every request.
func BenchmarkHistogramLengths(b *testing.B) {
	d := SeqLenDist{Histogram: "alpaca-cleaned", OverMax: "truncate"}
	seq := 512
	for b.Loop() {
		if _, err := d.Lengths(&seq); err != nil {
			b.Fatal(err)
		}
	}
}

// A run that drew few of its dataset's samples (samples_seen) is scored at
// the longest of those, read off the histogram's tail, and says so; a
// samples_seen below one batch is refused by name.
func TestSamplesSeen(t *testing.T) {
	line := `{"id":"x-1","source":"s","trust":"medium","model":"Qwen/Qwen2.5-0.5B","arch":"qwen2","method":"full","precision":"bf16-true","quant":null,"lora":null,"seq_len":2048,"seq_len_kind":"max","batch":2,"grad_accum":4,"grad_ckpt":"none","optimizer":"adamw_torch","optimizer_state_dtype":null,"attn":"sdpa","fused_ce":"none","other_kernels":[],"framework":"hf-trainer","gpu":{"name":null,"count":1,"vram_gib":24},"sharding":{"strategy":"none","cpu_offload":"none"},"measured":{"kind":"reserved","gib":6,"oom":false,"original":"6 GiB"},"notes":"","seq_len_dist":{"histogram":"alpaca-cleaned","over_max":"truncate"}SEEN}`
	read := func(seen string) Case {
		t.Helper()
		cases, err := ReadCases(strings.NewReader(strings.Replace(line, "SEEN", seen, 1)), "seen.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		return cases[0]
	}
	r, _, why := RequestFor(read(""))
	if why != "" || r.SeqLen != 2048 || r.Lengths.Longest() != 1584 {
		t.Fatalf("without samples_seen: why %q, SeqLen %d over lengths up to %d; want the bound, 2048, over the histogram (whose longest sample, 1584, the estimate then peaks at)", why, r.SeqLen, r.Lengths.Longest())
	}
	r, assumed, why := RequestFor(read(`,"samples_seen":480`))
	// The histogram's visible bins end at 723 tokens, with one sample of
	// 1,584 beyond: 480 draws typically stay under 723.
	if why != "" || r.SeqLen < 650 || r.SeqLen > 723 || r.SeqLen != r.Lengths.LongestOf(480) {
		t.Errorf("samples_seen 480: why %q, SeqLen %d; want the median of the longest of 480 samples, about 700", why, r.SeqLen)
	}
	if !slices.ContainsFunc(assumed, func(a string) bool { return strings.Contains(a, "drew 480 samples") }) {
		t.Errorf("samples_seen 480: assumptions %q do not say the run's length", assumed)
	}
	// A draw of the whole dataset and more reaches the longest sample: never
	// past the bound the case states.
	if r, _, _ := RequestFor(read(`,"samples_seen":100000000`)); r.SeqLen != 1584 {
		t.Errorf("samples_seen 1e8: SeqLen %d, want the longest sample, 1584", r.SeqLen)
	}
	// A per-GPU figure is one rank's: four ranks that drew 1,920 samples
	// drew 480 each.
	four := strings.Replace(line, `"count":1`, `"count":4`, 1)
	cases, err := ReadCases(strings.NewReader(strings.Replace(four, "SEEN", `,"samples_seen":1920`, 1)), "four.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if r4, assumed, _ := RequestFor(cases[0]); r4.SeqLen != r.SeqLen || !slices.ContainsFunc(assumed, func(a string) bool { return strings.Contains(a, "480 a rank") }) {
		t.Errorf("four GPUs, samples_seen 1920: SeqLen %d (want a rank's 480 draws' %d), assumptions %q", r4.SeqLen, r.SeqLen, assumed)
	}
	fixed := strings.Replace(line, `"seq_len_kind":"max"`, `"seq_len_kind":"fixed"`, 1)
	fixed = strings.Replace(fixed, `,"seq_len_dist":{"histogram":"alpaca-cleaned","over_max":"truncate"}`, "", 1)
	if _, err := ReadCases(strings.NewReader(strings.Replace(fixed, "SEEN", `,"samples_seen":480`, 1)), "fixed.jsonl"); !errors.Is(err, ErrInvalidCase) || !strings.Contains(err.Error(), "samples_seen") {
		t.Errorf("samples_seen on fixed-length batches: err = %v, want an invalid case naming samples_seen", err)
	}
	for _, bad := range []string{`,"samples_seen":0`, `,"samples_seen":1`, `,"samples_seen":-5`} {
		_, err := ReadCases(strings.NewReader(strings.Replace(line, "SEEN", bad, 1)), "bad.jsonl")
		if !errors.Is(err, ErrInvalidCase) || !strings.Contains(err.Error(), "samples_seen") {
			t.Errorf("%s: err = %v, want an invalid case naming samples_seen", bad, err)
		}
	}
}
