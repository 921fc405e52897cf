package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseWhatIf(t *testing.T) {
	tests := []struct {
		in   string
		want WhatIf
		ok   bool
	}{
		{"attention=1.5x", WhatIf{CatAttention, 1.5}, true},
		{"GEMM=2", WhatIf{CatGEMM, 2}, true},
		{"comm=0.5X", WhatIf{CatCommunication, 0.5}, true},
		{"attention", WhatIf{}, false},
		{"attention=0x", WhatIf{}, false},
		{"attention=-2x", WhatIf{}, false},
		{"attention=fast", WhatIf{}, false},
		{"attention=Infx", WhatIf{}, false},
		{"warp=2x", WhatIf{}, false},
	}
	for _, tt := range tests {
		got, err := ParseWhatIf(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseWhatIf(%q) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// simOp is one GPU op of a replayed program: its stream, kernel name,
// duration (µs), launch call, and the earlier ops on other streams it
// waits for (cross-stream event waits).
type simOp struct {
	stream                 int
	name                   string
	dur                    float64
	launchStart, launchDur float64
	waits                  []int
}

// replay is the test's oracle: it runs ops in launch order, each on its
// stream after the previous op there, after its launch call returned
// (hostAhead: after the first op's launch, the host having launched all
// work up front) and after the ops it waits for; ops whose kernel falls in
// cat take 1/speedup of their time. It returns every op's start and the
// span from the first start to the last end.
func replay(ops []simOp, cat Category, speedup float64, hostAhead bool) (starts []float64, span float64) {
	free := map[int]float64{}
	ends := make([]float64, len(ops))
	starts = make([]float64, len(ops))
	first, last := math.Inf(1), math.Inf(-1)
	for i, o := range ops {
		t := o.launchStart + o.launchDur
		if hostAhead {
			t = ops[0].launchStart + ops[0].launchDur
		}
		t = max(t, free[o.stream])
		for _, w := range o.waits {
			t = max(t, ends[w])
		}
		d := o.dur
		if Categorize(KindKernel, o.name) == cat {
			d /= speedup
		}
		starts[i], ends[i] = t, t+d
		free[o.stream] = ends[i]
		first, last = min(first, t), max(last, ends[i])
	}
	return starts, last - first
}

// simTrace is the trace the program gives as recorded: the replay with
// nothing changed, the host launching as it did.
func simTrace(ops []simOp) string {
	starts, _ := replay(ops, CatOther, 1, false)
	var ev []string
	for i, o := range ops {
		ev = append(ev, kernel(o.name, o.stream, fmt.Sprint(starts[i]), fmt.Sprint(o.dur), i+1),
			launch(fmt.Sprint(o.launchStart), fmt.Sprint(o.launchDur), i+1))
	}
	return traceJSON(ev...)
}

var simNames = []string{"sm80_gemm", "ncclKernel_AllReduce", "vectorized_elementwise", "flash_fwd"}

// randomProgram draws a program of a few ops on up to four streams, with
// host pauses (host-bound stretches) and cross-stream waits.
func randomProgram(rng *rand.Rand) []simOp {
	n := 1 + rng.IntN(14)
	streams := 1 + rng.IntN(4)
	host := 100.0
	var ops []simOp
	for i := range n {
		host += float64(rng.IntN(4))
		if rng.IntN(4) == 0 {
			host += float64(rng.IntN(40)) // the host falls behind
		}
		o := simOp{stream: 7 + rng.IntN(streams), name: simNames[rng.IntN(len(simNames))],
			dur: float64(1 + rng.IntN(20)), launchStart: host, launchDur: float64(1 + rng.IntN(3))}
		host += o.launchDur
		for range rng.IntN(3) {
			if w := rng.IntN(max(i, 1)); i > 0 && ops[w].stream != o.stream {
				o.waits = append(o.waits, w)
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// TestProjectionIsBound replays random programs with one category sped up
// (or slowed down) and checks that the projection is never beaten: with the
// host's launch times as recorded, and with a host that is always ahead.
func TestProjectionIsBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 2))
	speedups := []float64{0.5, 0.9, 1.25, 2, 4, 1e9}
	tight := 0
	for iter := range 3000 {
		ops := randomProgram(rng)
		r := analyzeString(t, simTrace(ops), Options{})
		_, recorded := replay(ops, CatOther, 1, false)
		_, ahead := replay(ops, CatOther, 1, true)
		if got := float64(r.Devices[0].SpanNS); got != 1000*recorded {
			t.Fatalf("iter %d: span %v, replay gives %v µs", iter, got, recorded)
		}
		for _, name := range simNames {
			cat := Categorize(KindKernel, name)
			for _, s := range speedups {
				p := WhatIf{cat, s}.Project(r)[0]
				_, rs := replay(ops, cat, s, false)
				_, as := replay(ops, cat, s, true)
				gotRecorded, gotAhead := 1000*(recorded-rs), 1000*(ahead-as)
				const eps = 1e-6
				if s > 1 {
					if gotRecorded > float64(p.HostAsRecordedSavedNS)+eps || gotAhead > float64(p.SavedNS)+eps ||
						p.HostAsRecordedSavedNS > p.SavedNS || gotRecorded < -eps || gotAhead < -eps {
						t.Fatalf("iter %d: %s %gx: saved %.0f ns (host as recorded) and %.0f ns (host ahead); bounds %d and %d\nops %+v",
							iter, cat, s, gotRecorded, gotAhead, p.HostAsRecordedSavedNS, p.SavedNS, ops)
					}
					if gotAhead > float64(p.SavedNS)-1 && p.SavedNS > 0 {
						tight++
					}
				} else if gotRecorded < float64(p.SavedNS)-eps || gotAhead < float64(p.SavedNS)-eps || p.HostAsRecordedSavedNS != p.SavedNS {
					t.Fatalf("iter %d: %s %gx: longer by %.0f ns (host as recorded) and %.0f ns (host ahead); bound %d\nops %+v",
						iter, cat, s, -gotRecorded, -gotAhead, -p.SavedNS, ops)
				}
				if p.Bound != float64(p.SavedNS)/float64(p.SpanNS) || p.OverlappedNS != p.UnionNS-p.ExclusiveNS || p.OverlappedNS < 0 {
					t.Fatalf("iter %d: inconsistent projection %+v", iter, p)
				}
			}
		}
	}
	// The bound is reached, not only never beaten: a chain made only of the
	// category's ops gets all of it.
	if tight < 1000 {
		t.Errorf("the bound was reached in only %d cases", tight)
	}
}

// TestProjectionOverlap is the case the Amdahl formula on exclusive shares
// got wrong: a GEMM stream beside a longer NCCL stream. Halving NCCL halves
// the step, though GEMM owns half of NCCL's time in the exclusive table.
func TestProjectionOverlap(t *testing.T) {
	ops := []simOp{
		{stream: 7, name: "sm80_gemm", dur: 10, launchStart: 100, launchDur: 1},
		{stream: 8, name: "ncclKernel_AllReduce", dur: 20, launchStart: 100, launchDur: 1},
	}
	r := analyzeString(t, simTrace(ops), Options{})
	p := WhatIf{CatCommunication, 2}.Project(r)[0]
	_, before := replay(ops, CatCommunication, 1, false)
	_, after := replay(ops, CatCommunication, 2, false)
	want := Projection{Device: 0, Category: "communication", Speedup: 2, SpanNS: 20000, UnionNS: 20000, ExclusiveNS: 10000,
		OverlappedNS: 10000, SavedNS: 10000, Bound: 0.5, TailUnionNS: 20000, HostAsRecordedSavedNS: 10000, HostAsRecordedBound: 0.5}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("projection (-want +got):\n%s", diff)
	}
	if got := 1 - after/before; got != p.Bound {
		t.Errorf("replay saves %v, bound %v", got, p.Bound)
	}
	// A slow-down is a lengthening, bounded the same way.
	if p := (WhatIf{CatCommunication, 0.5}).Project(r)[0]; p.SavedNS != -20000 || p.Bound != -1 {
		t.Errorf("slow-down: saved %d, bound %v; want -20000, -1", p.SavedNS, p.Bound)
	}
	if p := (WhatIf{CatAttention, 2}).Project(r)[0]; p.Bound != 0 || p.SavedNS != 0 {
		t.Errorf("absent category: %+v", p)
	}
}

// TestProjectionHostBound: the host launches each op after the previous one
// has finished, so with its launch times as recorded only the last op can
// gain; if the host kept ahead, every GEMM could.
func TestProjectionHostBound(t *testing.T) {
	ops := []simOp{
		{stream: 7, name: "sm80_gemm", dur: 10, launchStart: 100, launchDur: 1},
		{stream: 7, name: "sm80_gemm", dur: 10, launchStart: 120, launchDur: 1},
		{stream: 7, name: "sm80_gemm", dur: 4, launchStart: 140, launchDur: 1},
	}
	r := analyzeString(t, simTrace(ops), Options{})
	p := WhatIf{CatGEMM, 2}.Project(r)[0]
	if p.UnionNS != 24000 || p.SavedNS != 12000 || p.TailUnionNS != 4000 || p.HostAsRecordedSavedNS != 2000 {
		t.Errorf("union %d saved %d, tail %d saved %d; want 24000 12000, 4000 2000", p.UnionNS, p.SavedNS, p.TailUnionNS, p.HostAsRecordedSavedNS)
	}
}

// TestProjectionStep: a GPU-bound step (10 ms on the host, 15 ms of GPU
// work) is 15 ms long, not 10.
func TestProjectionStep(t *testing.T) {
	step := profilerStep
	// Three steps, 10 ms apart on the host; each launches a 15 ms GEMM, so
	// the GPU falls behind.
	in := traceJSON(step(1, "1000", "10000"), step(2, "11000", "10000"), step(3, "21000", "10000"),
		launch("1001", "1", 1), kernel("sm80_gemm", 7, "1002", "15000", 1),
		launch("11001", "1", 2), kernel("sm80_gemm", 7, "16002", "15000", 2),
		launch("21001", "1", 3), kernel("sm80_gemm", 7, "31002", "15000", 3))
	r := analyzeString(t, in, Options{AllSteps: true})
	p := WhatIf{CatGEMM, 1.5}.Project(r)[0]
	if p.StepNS != 15_000_000 || p.LimitedBy != "gpu" || p.StepSavedNS != 5_000_000 || math.Abs(p.StepBound-1.0/3) > 1e-12 {
		t.Errorf("step %d limited by %s, saved %d (%v); want 15 ms gpu, 5 ms (1/3)", p.StepNS, p.LimitedBy, p.StepSavedNS, p.StepBound)
	}
}

func TestCompare(t *testing.T) {
	a := openTrace(t, "hta_ns_resolution_rank0_5steps.json.gz").Report(Options{})
	b := openTrace(t, "hta_ns_resolution_rank0_5steps.json.gz").Report(Options{AllSteps: true})
	same := Compare(a, a)
	if same.Warning != PointEstimateWarning || len(same.Devices) != 1 || same.Devices[0].Basis != "per_step" {
		t.Fatalf("comparison = %+v", same)
	}
	for _, r := range same.Devices[0].Categories {
		if r.DeltaNS != 0 || r.ShareDeltaPP != 0 || !r.WithinNoise {
			t.Errorf("self-comparison row %+v is not zero", r)
		}
	}
	c := Compare(a, b).Devices[0]
	var sumBefore, sumAfter int64
	for _, r := range c.Categories {
		sumBefore += r.BeforeNS
		sumAfter += r.AfterNS
		if r.DeltaNS != r.AfterNS-r.BeforeNS {
			t.Errorf("%s: delta %d != %d − %d", r.Name, r.DeltaNS, r.AfterNS, r.BeforeNS)
		}
	}
	if sumBefore != c.Before.BusyNS || sumAfter != c.After.BusyNS {
		t.Errorf("category rows sum to %d/%d, busy per step %d/%d", sumBefore, sumAfter, c.Before.BusyNS, c.After.BusyNS)
	}
	// Including the short warm-up step lowers the mean busy time per step.
	if c.BusyDeltaNS >= 0 {
		t.Errorf("busy delta %d, want < 0 once the warm-up step is included", c.BusyDeltaNS)
	}
}

// TestCompareByRole: the same work on GPU 0 before and GPU 1 after is
// compared, with a note, instead of yielding no devices at all.
func TestCompareByRole(t *testing.T) {
	on := func(dev int) *Report {
		k := func(name, ts string, corr int) string {
			return fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": %q, "pid": %d, "tid": 7, "ts": %s, "dur": 10, "args": {"device": %d, "stream": 7, "correlation": %d}}`,
				name, dev, ts, dev, corr)
		}
		return analyzeString(t, traceJSON(k("sm80_gemm", "100", 1), k("flash_fwd", "120", 2)), Options{})
	}
	c := Compare(on(0), on(1))
	if c.Pairing != "position" || !strings.Contains(c.Note, "before: GPU 0; after: GPU 1") {
		t.Errorf("pairing %q, note %q", c.Pairing, c.Note)
	}
	if len(c.Devices) != 1 || c.Devices[0].Device != 0 || c.Devices[0].AfterDevice != 1 || c.Devices[0].BusyDeltaNS != 0 {
		t.Fatalf("devices = %+v", c.Devices)
	}
	if same := Compare(on(1), on(1)); same.Pairing != "device_id" || same.Note != "" || len(same.Devices) != 1 {
		t.Errorf("same ids: pairing %q, note %q, %d devices", same.Pairing, same.Note, len(same.Devices))
	}
}
