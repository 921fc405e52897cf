package trace

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func analyzeString(t *testing.T, in string, opts Options) *Report {
	t.Helper()
	r, err := Analyze(strings.NewReader(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func flagCodes(r *Report) []string {
	var cs []string
	for _, f := range r.Flags {
		cs = append(cs, f.Code)
	}
	return cs
}

func catExcl(d Device) map[string]int64 {
	m := map[string]int64{}
	for _, c := range d.Categories {
		if c.ExclusiveNS != 0 {
			m[c.Name] = c.ExclusiveNS
		}
	}
	return m
}

// TestReportCrafted checks a trace small enough to do by hand:
//
//	stream 7:  A gemm [0,10)      B add [12,15)        D memcpy [25,26)
//	stream 8:       C nccl [5,20)
//
// union [0,20) ∪ [25,26) = 21 µs; Σdur 10+3+15+1 = 29 µs; overlap 8 µs.
// Compute keeps overlapped time, so C gets only [10,12) and [15,20) = 7 µs.
// One gap [20,25); D's launch runs [21,23): host late 1, launch 2, queued 2.
func TestReportCrafted(t *testing.T) {
	in := traceJSON(
		`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 11, "ts": 95, "dur": 13}`,
		`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 10, "tid": 11, "ts": 108, "dur": 22}`,
		launch("99", "0.5", 1), launch("103", "1", 3), launch("109", "1", 2), launch("121", "2", 4),
		kernel("sm80_gemm", 7, "100", "10", 1),
		kernel("vectorized_add", 7, "112", "3", 2),
		kernel("ncclKernel_AllReduce", 8, "105", "15", 3),
		`{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "pid": 0, "tid": 7, "ts": 125, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 4}}`,
		`{"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 100, "dur": 16}`,
		`{"ph": "X", "cat": "gpu_user_annotation", "name": "mm", "pid": 0, "tid": 7, "ts": 100, "dur": 11}`,
	)
	var gaps []Gap
	r := analyzeString(t, in, Options{onGap: func(_ int, g Gap) { gaps = append(gaps, g) }})
	if len(r.Devices) != 1 {
		t.Fatalf("devices = %d", len(r.Devices))
	}
	tr, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	if d.BusyNS != 21000 || d.SumDurNS != 29000 || d.OverlapNS != 8000 || d.SpanNS != 26000 {
		t.Errorf("busy %d Σdur %d overlap %d span %d; want 21000 29000 8000 26000", d.BusyNS, d.SumDurNS, d.OverlapNS, d.SpanNS)
	}
	wantCats := map[string]int64{"gemm": 10000, "elementwise": 3000, "communication": 7000, "memcpy_memset": 1000}
	if diff := cmp.Diff(wantCats, catExcl(d)); diff != "" {
		t.Errorf("category exclusive (-want +got):\n%s", diff)
	}
	// HTA's idle split on stream 7: B starts 2 µs after A ends and was
	// launched (109) before A ended (110): other; D starts 10 µs after B
	// ends and was launched (121) after it (115): host wait.
	wantStreams := []Stream{{Stream: 7, Ops: 3, BusyNS: 14000, SumDurNS: 14000, IdleNS: 12000, IdleHostWaitNS: 10000, IdleOtherNS: 2000},
		{Stream: 8, Ops: 1, BusyNS: 15000, SumDurNS: 15000}}
	if diff := cmp.Diff(wantStreams, d.Streams); diff != "" {
		t.Errorf("streams (-want +got):\n%s", diff)
	}
	// C (nccl, [105,120)) runs beside A [100,110) and B [112,115): 5 + 3 µs
	// of its 15 µs union.
	if d.CommCompOverlapNS != 8000 || d.CommCompOverlap != 8.0/15 {
		t.Errorf("comm/comp overlap %d ns, %v; want 8000, 8/15", d.CommCompOverlapNS, d.CommCompOverlap)
	}
	// Kernels A 10 µs, B 3 µs, C 15 µs: only B is under 10 µs. Their
	// launch delays are 100−99, 112−109, 105−103 µs (D is a memcpy).
	wantShort := ShortKernels{ThresholdNS: 10000, Count: 1, Kernels: 3, Share: 1.0 / 3, SumDurNS: 3000, DurShare: 3.0 / 28}
	if diff := cmp.Diff(wantShort, d.ShortKernels); diff != "" {
		t.Errorf("short kernels (-want +got):\n%s", diff)
	}
	wantDelay := LaunchDelay{Count: 3, MeanNS: 2000, P50NS: 2000, P90NS: 3000, MaxNS: 3000}
	if diff := cmp.Diff(wantDelay, d.LaunchDelay); diff != "" {
		t.Errorf("launch delay (-want +got):\n%s", diff)
	}
	// Parse interns names in the order Analyze does, so tr gives D's name id.
	wantGaps := []Gap{{Start: 120000, End: 125000, HostLate: 1000, Launch: 2000, Queued: 2000, Step: 1,
		Next: Op{Start: 125000, Dur: 1000, Corr: 4, Name: tr.names["Memcpy DtoD"], Stream: 7, Kind: KindMemcpy}}}
	if diff := cmp.Diff(wantGaps, gaps); diff != "" {
		t.Errorf("gaps (-want +got):\n%s", diff)
	}
	g := d.Gaps
	if g.Count != 1 || g.TotalNS != 5000 || g.P50NS != 5000 || g.HostLateNS != 1000 || g.QueuedNS != 2000 {
		t.Errorf("gap summary = %+v", g)
	}
	// Steps by launch time: A (launched -1) and C (3) in step 1, B (9) and D (21) in step 2.
	var busy []int64
	for _, s := range d.Steps.Steps {
		busy = append(busy, s.BusyNS)
	}
	if diff := cmp.Diff([]int64{17000, 4000}, busy); diff != "" {
		t.Errorf("step busy (-want +got):\n%s", diff)
	}
	// GPU labels: A's innermost label is mm, B's is fwd; C and D are unlabelled.
	gl := d.Labels[0]
	rows := map[string][2]int64{}
	for _, l := range gl.Rows {
		rows[l.Name] = [2]int64{l.ExclusiveNS, l.InclusiveNS}
	}
	wantRows := map[string][2]int64{"mm": {10000, 10000}, "fwd": {3000, 13000}, Unlabelled: {8000, 8000}}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("gpu label rows [exclusive inclusive] (-want +got):\n%s", diff)
	}
	if !gl.DoubleCounted || gl.InclusiveSumNS != 23000 {
		t.Errorf("double counted = %v, inclusive sum %d; want true, 23000", gl.DoubleCounted, gl.InclusiveSumNS)
	}
	wantFlags := []string{"few_steps", "label_double_count"}
	if diff := cmp.Diff(wantFlags, flagCodes(r)); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
}

// TestLabelAggregatesAndDuplicates: "step" contains only "fwd"'s work, so it
// is an aggregate; "fwd" and "alias" cover identical time; "idle" launches
// nothing.
func TestLabelAggregatesAndDuplicates(t *testing.T) {
	label := func(name, ts, dur string) string {
		return fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": %q, "pid": 10, "tid": 11, "ts": %s, "dur": %s}`, name, ts, dur)
	}
	in := traceJSON(
		label("step", "0", "100"), label("fwd", "1", "10"), label("alias", "1", "10"), label("idle", "50", "5"),
		launch("2", "1", 1), launch("4", "1", 2),
		kernel("k1", 7, "10", "5", 1), kernel("k2", 7, "20", "5", 2),
	)
	r := analyzeString(t, in, Options{})
	ul := r.Devices[0].Labels[1]
	names := func(rows []LabelRow) []string {
		var s []string
		for _, r := range rows {
			s = append(s, r.Name)
		}
		return s
	}
	// Equal intervals: the tie goes to the lower name id, "fwd" (seen first).
	if diff := cmp.Diff([]string{"fwd", Unlabelled}, names(ul.Rows)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"step", "alias"}, names(ul.Aggregates)); diff != "" {
		t.Errorf("aggregates (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"alias", "fwd", "step"}}, ul.Duplicates); diff != "" {
		t.Errorf("duplicates (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"idle"}, names(ul.NoGPUTime)); diff != "" {
		t.Errorf("no GPU time (-want +got):\n%s", diff)
	}
}

func TestReportReliabilityFlags(t *testing.T) {
	in := traceJSON(
		`{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 100}`,
		kernel("a", 7, "1", "10", 1),
		kernel("b", 7, "5", "10", 2),  // overlaps a on the same stream
		kernel("c", 7, "30", "-1", 3), // negative
		kernel("d", 7, "40", "0", 0),  // zero, no correlation
		kernel("e", 7, "95", "10", 5), // past the profiler span
	)
	r := analyzeString(t, in, Options{})
	want := []string{"no_correlation", "no_launch", "no_steps", "negative_duration", "zero_duration", "stream_overlap", "out_of_window"}
	if diff := cmp.Diff(want, flagCodes(r)); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	for _, f := range r.Flags {
		if f.BlastRadius == "" || f.Detail == "" {
			t.Errorf("flag %s lacks detail or blast radius", f.Code)
		}
	}
	if d := r.Devices[0]; d.BusyNS != 24000 || d.Streams[0].SelfOverlaps != 1 || d.Streams[0].BusyNS != 24000 {
		t.Errorf("busy %d, self overlaps %d, stream busy %d", d.BusyNS, d.Streams[0].SelfOverlaps, d.Streams[0].BusyNS)
	}
}

// TestReportMatchesBruteForce compares the sweep with a per-microsecond grid
// on random traces. The grid is the definition: a microsecond is busy when
// any op covers it, and it belongs to the covering op that is compute before
// copies before communication, then first in start order.
func TestReportMatchesBruteForce(t *testing.T) {
	names := []string{"sm80_gemm", "vectorized_elementwise", "ncclKernel_AllReduce", "Memcpy DtoD", "flash_fwd"}
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 1000 {
		n := 1 + rng.IntN(12)
		type op struct {
			start, end, stream int
			name               string
		}
		var ops []op
		var events []string
		for i := range n {
			o := op{start: rng.IntN(60), stream: 7 + rng.IntN(3), name: names[rng.IntN(len(names))]}
			o.end = o.start + rng.IntN(15)
			ops = append(ops, o)
			// 100 µs on in the trace: timestamps ≤ 0 are corrupt.
			events = append(events, kernel(o.name, o.stream, fmt.Sprint(100+o.start), fmt.Sprint(o.end-o.start), i+1))
			events = append(events, launch(fmt.Sprint(100+o.start-rng.IntN(8)), fmt.Sprint(rng.IntN(4)), i+1))
		}
		var gaps []Gap
		r := analyzeString(t, traceJSON(events...), Options{onGap: func(_ int, g Gap) { gaps = append(gaps, g) }})
		if len(r.Devices) != 1 {
			t.Fatalf("iter %d: %d devices", iter, len(r.Devices))
		}
		d := r.Devices[0]
		// The same events in another order give the same report.
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		if diff := cmp.Diff(r, analyzeString(t, traceJSON(events...), Options{})); diff != "" {
			t.Fatalf("iter %d: report depends on event order (-sorted +shuffled):\n%s", iter, diff)
		}

		// The grid.
		slices.SortStableFunc(ops, func(a, b op) int {
			if a.start != b.start {
				return a.start - b.start
			}
			if a.stream != b.stream {
				return a.stream - b.stream
			}
			if a.end != b.end {
				return a.end - b.end
			}
			return strings.Compare(a.name, b.name)
		})
		wantCat := map[string]int64{}
		var busy, sumDur int64
		var gapLens []int64
		lastBusy := -1
		for us := 0; us < 80; us++ {
			owner := -1
			for i, o := range ops {
				if o.start <= us && us < o.end {
					if owner < 0 || Categorize(KindKernel, o.name).priority() < Categorize(KindKernel, ops[owner].name).priority() {
						owner = i
					}
				}
			}
			if owner < 0 {
				continue
			}
			busy += 1000
			wantCat[Categorize(KindKernel, ops[owner].name).String()] += 1000
			if lastBusy >= 0 && us > lastBusy+1 {
				gapLens = append(gapLens, int64(us-lastBusy-1)*1000)
			}
			lastBusy = us
		}
		for _, o := range ops {
			sumDur += int64(o.end-o.start) * 1000
		}
		if d.BusyNS != busy || d.SumDurNS != sumDur {
			t.Fatalf("iter %d: busy %d Σdur %d, want %d %d", iter, d.BusyNS, d.SumDurNS, busy, sumDur)
		}
		if diff := cmp.Diff(wantCat, catExcl(d)); diff != "" {
			t.Fatalf("iter %d: category exclusive (-want +got):\n%s", iter, diff)
		}
		var total int64
		for _, l := range gapLens {
			total += l
		}
		slices.Sort(gapLens)
		wantP50 := int64(0)
		if len(gapLens) > 0 {
			// Nearest rank: the smallest gap with at least half at or below it.
			wantP50 = gapLens[(len(gapLens)+1)/2-1]
		}
		if d.Gaps.Count != len(gapLens) || d.Gaps.TotalNS != total || d.Gaps.P50NS != wantP50 {
			t.Fatalf("iter %d: gaps n=%d total=%d p50=%d, want %d %d %d", iter, d.Gaps.Count, d.Gaps.TotalNS, d.Gaps.P50NS, len(gapLens), total, wantP50)
		}
		checkGaps(t, gaps)
	}
}

// checkGaps is the per-gap identity test: the parts are non-negative and add
// up to the gap exactly, and the host-late part is what the launch time says.
func checkGaps(t *testing.T, gaps []Gap) {
	t.Helper()
	for _, g := range gaps {
		parts := []int64{g.HostLate, g.Launch, g.Queued, g.Unattributed}
		var sum int64
		for _, p := range parts {
			if p < 0 {
				t.Fatalf("gap %+v has a negative part", g)
			}
			sum += p
		}
		if sum != g.End-g.Start || g.End <= g.Start {
			t.Fatalf("gap [%d,%d): parts %v sum to %d, want %d", g.Start, g.End, parts, sum, g.End-g.Start)
		}
	}
}

// realTraces are the HTA traces with figures computed independently by a
// Python script that reads ts and dur with decimal.Decimal (so nothing is
// lost to float64), sorts the kernel/memcpy/memset intervals and merges them.
var realTraces = []struct {
	file                     string
	ops                      int
	busy, sumDur, span, gaps int64
	nGaps                    int
	maxGap                   int64
	steps                    int
}{
	{"hta_nccl_data_2streams_3steps.json.gz", 3774, 157500014, 165185838, 660551005, 503050991, 3480, 15718606, 3},
	// float64 parsing gives a span of 480029250 ns here: 71 ns off.
	{"hta_ns_resolution_rank0_5steps.json.gz", 6095, 472454441, 472454441, 480029179, 7574738, 6094, 385886, 5},
	{"hta_sampled_rank0_4streams_2steps.json.gz", 1204, 547656000, 607844000, 1222847000, 675191000, 930, 58862000, 2},
}

// gunzipTestdata is the JSON of a gzipped trace under testdata.
func gunzipTestdata(t testing.TB, name string) []byte {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openTrace(t testing.TB, name string) *Trace {
	t.Helper()
	tr, err := Parse(bytes.NewReader(gunzipTestdata(t, name)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tr
}

func TestRealTraces(t *testing.T) {
	for _, rt := range realTraces {
		t.Run(rt.file, func(t *testing.T) {
			var gaps []Gap
			r := openTrace(t, rt.file).Report(Options{onGap: func(_ int, g Gap) { gaps = append(gaps, g) }})
			if len(r.Devices) != 1 {
				t.Fatalf("devices = %d", len(r.Devices))
			}
			d := r.Devices[0]
			got := []int64{int64(d.Ops), d.BusyNS, d.SumDurNS, d.SpanNS, d.Gaps.TotalNS, int64(d.Gaps.Count), d.Gaps.MaxNS, int64(len(d.Steps.Steps))}
			want := []int64{int64(rt.ops), rt.busy, rt.sumDur, rt.span, rt.gaps, int64(rt.nGaps), rt.maxGap, int64(rt.steps)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[ops busy Σdur span gaps nGaps maxGap steps] (-want +got):\n%s", diff)
			}
			checkInvariants(t, d)
			if len(gaps) != d.Gaps.Count {
				t.Errorf("onGap saw %d gaps, summary says %d", len(gaps), d.Gaps.Count)
			}
			checkGaps(t, gaps)
			for _, f := range r.Flags {
				if f.Code == "dropped" || f.Code == "truncated" || f.Code == "no_launch" {
					t.Errorf("unexpected flag %+v", f)
				}
			}
		})
	}
}

// checkInvariants holds on any device: every exclusive table sums to the
// union, gaps fill the span, gap parts fill the gaps.
func checkInvariants(t *testing.T, d Device) {
	t.Helper()
	sum := func(name string, xs []int64) {
		var s int64
		for _, x := range xs {
			s += x
		}
		if s != d.BusyNS {
			t.Errorf("%s sums to %d, busy is %d (off by %d)", name, s, d.BusyNS, s-d.BusyNS)
		}
	}
	var cats, kernels, steps []int64
	for _, c := range d.Categories {
		cats = append(cats, c.ExclusiveNS)
		if c.ExclusiveNS > c.SumDurNS {
			t.Errorf("category %s: exclusive %d > Σdur %d", c.Name, c.ExclusiveNS, c.SumDurNS)
		}
	}
	for _, k := range d.Kernels {
		kernels = append(kernels, k.ExclusiveNS)
	}
	for _, s := range d.Steps.Steps {
		steps = append(steps, s.BusyNS)
	}
	steps = append(steps, d.Steps.UntaggedBusyNS)
	sum("categories", cats)
	sum("kernels", kernels)
	sum("steps + untagged", steps)
	for _, lt := range d.Labels {
		var rows []int64
		for _, r := range lt.Rows {
			rows = append(rows, r.ExclusiveNS)
		}
		sum(lt.Kind+" labels", rows)
	}
	if d.BusyNS+d.Gaps.TotalNS != d.SpanNS {
		t.Errorf("busy %d + gaps %d != span %d", d.BusyNS, d.Gaps.TotalNS, d.SpanNS)
	}
	// Per step as at device level: busy + gaps = the step's GPU time, and
	// the steps' GPU times with the untagged parts fill the span.
	parts := d.Steps.UntaggedBusyNS + d.Steps.UntaggedGapNS
	for _, s := range d.Steps.Steps {
		if s.BusyNS+s.GapNS != s.GPUTimeNS {
			t.Errorf("%s: busy %d + gaps %d != GPU time %d", s.Name, s.BusyNS, s.GapNS, s.GPUTimeNS)
		}
		parts += s.GPUTimeNS
	}
	if parts != d.SpanNS {
		t.Errorf("steps' GPU time and untagged busy and gaps sum to %d, span is %d", parts, d.SpanNS)
	}
	ty := d.Steps.Typical
	if ty.BusyNS+ty.GapNS != ty.GPUTimeNS || ty.BusyNS > ty.GPUTimeNS {
		t.Errorf("typical step: busy %d + gaps %d vs GPU time %d", ty.BusyNS, ty.GapNS, ty.GPUTimeNS)
	}
	for _, f := range []float64{d.BusyFraction, ty.BusyFraction} {
		if f < 0 || f > 1 {
			t.Errorf("busy fraction %v outside [0, 1]", f)
		}
	}
	for _, c := range d.Categories {
		u := *c.UnionNS
		if u < c.ExclusiveNS || u > c.SumDurNS || u > d.BusyNS || *c.TailUnionNS > u {
			t.Errorf("category %s: union %d, tail %d, exclusive %d, Σdur %d, busy %d", c.Name, u, *c.TailUnionNS, c.ExclusiveNS, c.SumDurNS, d.BusyNS)
		}
		if ty.CategoryUnionNS[c.Name] > u {
			t.Errorf("category %s: typical step's union %d > device's %d", c.Name, ty.CategoryUnionNS[c.Name], u)
		}
	}
	g := d.Gaps
	if g.HostLateNS+g.LaunchNS+g.QueuedNS+g.UnattributedNS != g.TotalNS {
		t.Errorf("gap parts %d+%d+%d+%d != total %d", g.HostLateNS, g.LaunchNS, g.QueuedNS, g.UnattributedNS, g.TotalNS)
	}
	if d.OverlapNS != d.SumDurNS-d.BusyNS || d.OverlapNS < 0 {
		t.Errorf("overlap %d, Σdur − busy = %d", d.OverlapNS, d.SumDurNS-d.BusyNS)
	}
	if !(g.P50NS <= g.P90NS && g.P90NS <= g.MaxNS) {
		t.Errorf("p50 %d, p90 %d, max %d out of order", g.P50NS, g.P90NS, g.MaxNS)
	}
}

func TestRealTraceSteps(t *testing.T) {
	r := openTrace(t, "hta_ns_resolution_rank0_5steps.json.gz").Report(Options{})
	st := r.Devices[0].Steps
	var typical []bool
	for _, s := range st.Steps {
		typical = append(typical, s.Typical)
	}
	if diff := cmp.Diff([]bool{false, true, true, true, false}, typical); diff != "" {
		t.Errorf("typical steps (-want +got):\n%s", diff)
	}
	// SOURCES.md: the first step of this trace is the short warm-up one.
	if st.Steps[0].SpanNS >= st.Typical.SpanNS {
		t.Errorf("first step %d ns is not shorter than the typical %d ns", st.Steps[0].SpanNS, st.Typical.SpanNS)
	}
	all := openTrace(t, "hta_ns_resolution_rank0_5steps.json.gz").Report(Options{AllSteps: true})
	if n := all.Devices[0].Steps.Typical.Steps; n != 5 {
		t.Errorf("AllSteps: typical steps = %d, want 5", n)
	}
}

func TestTruncatedRealTrace(t *testing.T) {
	full := gunzipTestdata(t, "hta_sampled_rank0_4streams_2steps.json.gz")
	// Cut at 2/3: inside the event list, after many complete events.
	cut := full[:len(full)*2/3]
	r, err := Analyze(bytes.NewReader(cut), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if codes := flagCodes(r); codes[0] != "truncated" {
		t.Errorf("flags = %v, want truncated first", codes)
	}
	checkInvariants(t, r.Devices[0])
}

func TestStepFlags(t *testing.T) {
	step := func(n int, ts string) string { return profilerStep(n, ts, "10") }
	in := traceJSON(
		step(1, "100"), step(2, "110"), step(5, "120"), step(6, "130"), step(6, "130"), // #6 twice: one step
		launch("95", "1", 1), kernel("early", 7, "101", "2", 1),
		launch("112", "1", 2), kernel("k", 7, "113", "2", 2),
	)
	r := analyzeString(t, in, Options{})
	var got []string
	for _, f := range r.Flags {
		got = append(got, fmt.Sprintf("%s:%d", f.Code, f.Count))
	}
	// Steps 3 and 4 are missing; one op was launched before step 1 began.
	if diff := cmp.Diff([]string{"step_missing:2", "work_before_first_step:1"}, got); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if n := len(r.Devices[0].Steps.Steps); n != 4 {
		t.Errorf("steps = %d, want 4", n)
	}
	if u := r.Devices[0].Steps.UntaggedBusyNS; u != 2000 {
		t.Errorf("untagged busy = %d, want 2000 (the early op)", u)
	}
}

// TestTypicalIsOneStep: the typical figures are the median step's (by host
// span), not medians taken figure by figure, which paired one step's busy
// time with another's span and gave busy fractions above 1.
func TestTypicalIsOneStep(t *testing.T) {
	step := profilerStep
	// Host spans 10, 20 and 30 µs; step 2 launches 30 µs of GPU work, the
	// others 1 and 2 µs.
	in := traceJSON(step(1, "100", "10"), step(2, "110", "20"), step(3, "130", "30"),
		launch("101", "1", 1), kernel("k1", 7, "102", "1", 1),
		launch("111", "1", 2), kernel("k2", 7, "112", "30", 2),
		launch("131", "1", 3), kernel("k3", 7, "150", "2", 3))
	r := analyzeString(t, in, Options{AllSteps: true})
	d := r.Devices[0]
	checkInvariants(t, d)
	// Step 2's GPU time: its 30 µs of work and the 9 µs gap before it.
	want := Typical{Steps: 3, Step: "ProfilerStep#2", SpanNS: 20000, GPUTimeNS: 39000, BusyNS: 30000, GapNS: 9000,
		HostWaitNS: 9000, BusyFraction: 30.0 / 39, CategoryUnionNS: map[string]int64{Categorize(KindKernel, "k2").String(): 30000}}
	if diff := cmp.Diff(want, d.Steps.Typical); diff != "" {
		t.Errorf("typical step (-want +got):\n%s", diff)
	}
	if got := []int64{d.Steps.Steps[0].GPUTimeNS, d.Steps.Steps[2].GPUTimeNS}; got[0] != 1000 || got[1] != 10000 {
		t.Errorf("GPU time of steps 1 and 3 = %v, want [1000 10000]", got)
	}
}

// TestCorruptRecordsAreFlagged: lost GPU records, timestamps at or before
// zero and ops that start before their own launch are counted and flagged,
// and none of them stretches a span; ROCm's string streams are read.
func TestCorruptRecordsAreFlagged(t *testing.T) {
	const epoch = 1712195495519689 // µs, as Kineto writes them
	at := func(us int) string { return fmt.Sprint(epoch + us) }
	ev := []string{
		launch(at(0), "1", 1), kernel("sm80_gemm", 7, at(2), "10", 1),
		launch(at(20), "1", 2), kernel("sm80_gemm", 7, at(22), "10", 2),
		// Corrupt timestamps: at zero, before zero, and an op 1.6e9 s before its launch.
		kernel("zero_ts", 7, "0", "10", 0), kernel("negative_ts", 7, "-3", "10", 0),
		`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#9", "pid": 10, "tid": 11, "ts": 0, "dur": 1}`,
		launch(at(40), "1", 3), kernel("early", 7, "5", "10", 3),
		// A memset the trace has no record of is not a lost record.
		`{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemsetAsync", "pid": 10, "tid": 11, "ts": ` + at(50) + `, "dur": 1, "args": {"correlation": 4}}`,
		// ROCm writes the stream as a string.
		`{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 10, "tid": 11, "ts": ` + at(60) + `, "dur": 1, "args": {"correlation": 5, "stream": "0x0"}}`,
		`{"ph": "X", "cat": "kernel", "name": "Cijk_Ailk_Bljk", "pid": 0, "tid": 7, "ts": ` + at(62) + `, "dur": 10, "args": {"device": 0, "stream": "0x7", "correlation": 5}}`,
	}
	// 500 kernel launches whose kernels the trace lost.
	for i := range 500 {
		ev = append(ev, launch(at(100+i), "0.5", 1000+i))
	}
	r := analyzeString(t, traceJSON(ev...), Options{})
	got := map[string]int64{}
	for _, f := range r.Flags {
		switch f.Code {
		case "gpu_ops_missing", "dropped", "starts_before_launch", "no_launch":
			got[f.Code] = f.Count
		}
		if f.Code == "dropped" && !strings.Contains(f.Detail, "zero or negative timestamp") {
			t.Errorf("dropped flag %q", f.Detail)
		}
	}
	// The ROCm launch joins its kernel: no no_launch flag.
	want := map[string]int64{"gpu_ops_missing": 500, "dropped": 3, "starts_before_launch": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flags [code: count] (-want +got):\n%s", diff)
	}
	d := r.Devices[0]
	checkInvariants(t, d)
	// Three good ops, the ROCm one included, from 2 to 72 µs.
	if d.Ops != 3 || d.SpanNS != 70000 || d.BusyNS != 30000 || d.Gaps.UnattributedNS != 0 {
		t.Errorf("ops %d, span %d, busy %d, unattributed gaps %d; want 3, 70000, 30000, 0", d.Ops, d.SpanNS, d.BusyNS, d.Gaps.UnattributedNS)
	}
	if len(d.Streams) != 1 || d.Streams[0].Stream != 7 {
		t.Errorf("streams %+v, want only stream 7", d.Streams)
	}
}
