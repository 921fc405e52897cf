package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/trace"
)

// htaOut is what trace/hta/crosscheck.py prints.
type htaOut struct {
	HTAVersion    string `json:"hta_version"`
	PandasVersion string `json:"pandas_version"`
	Traces        []struct {
		File    string  `json:"file"`
		SameOps htaMode `json:"same_ops"`
		Default htaMode `json:"default"`
	} `json:"traces"`
}

type htaMode struct {
	FirstTSUS float64          `json:"first_ts_us"`
	TSInteger bool             `json:"ts_integer"`
	GPUEvents map[string]int64 `json:"gpu_events"`
	Temporal  struct {
		KernelTimeNS     int64 `json:"kernel_time_ns"`
		IdleTimeNS       int64 `json:"idle_time_ns"`
		ComputeTimeNS    int64 `json:"compute_time_ns"`
		NonComputeTimeNS int64 `json:"non_compute_time_ns"`
	} `json:"temporal"`
	KernelTypes map[string]int64 `json:"kernel_types"`
	Kernels     []struct {
		Name       string   `json:"name"`
		KernelType string   `json:"kernel_type"`
		SumNS      int64    `json:"sum_ns"`
		MaxNS      int64    `json:"max_ns"`
		MinNS      int64    `json:"min_ns"`
		MeanNS     float64  `json:"mean_ns"`
		StdNS      *float64 `json:"std_ns"`
	} `json:"kernels"`
	Idle     map[string]map[string]int64 `json:"idle"`
	Idle30us map[string]map[string]int64 `json:"idle_30us"`
}

// htaType is HolisticTraceAnalysis 0.5.0's kernel type of a GPU op name
// (hta/utils/utils.py get_kernel_type: communication, then memory, then
// computation unless the name matches its NCCL_COMPUTE_KERNEL_RE; Python's
// re.match anchors at the start only, hence the leading ^ on each branch).
func htaType(name string) string {
	switch {
	case regexp.MustCompile(`^nccl.*Kernel`).MatchString(name):
		return "COMMUNICATION"
	case regexp.MustCompile(`^(Memcpy|Memset|dma)`).MatchString(name):
		return "MEMORY"
	case regexp.MustCompile(`^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)`).MatchString(name):
		return "OTHER"
	}
	return "COMPUTATION"
}

// ourType is the HTA kernel type our category stands for: our computation
// (every category but communication and memcpy_memset, as in
// comm_comp_overlap) is HTA's COMPUTATION.
func ourType(category string) string {
	switch category {
	case "communication":
		return "COMMUNICATION"
	case "memcpy_memset":
		return "MEMORY"
	}
	return "COMPUTATION"
}

// TestTraceMatchesHTA runs HolisticTraceAnalysis's temporal, kernel and idle
// time breakdowns (trace/hta/crosscheck.py, in the environment of
// trace/hta/requirements.lock) and `trace --json` on the test traces and
// compares them. On the same ops ("same_ops": HTA's parser and analyses, fed
// the kernel/memcpy/memset events in integer ns; see crosscheck.py) every
// figure whose definition is ours too must be equal to the nanosecond, except
// where the trace's timestamps are absolute-epoch µs that float64 cannot hold
// to the ns (then within a bound derived below). Where definitions differ
// (docs/trace-vs-hta.md), the test checks the bound the difference obeys.
// Skipped unless CANIFINETUNE_HTA_PYTHON is set (.ci/run sets it and fails
// when this test is skipped).
func TestTraceMatchesHTA(t *testing.T) {
	py := os.Getenv("CANIFINETUNE_HTA_PYTHON")
	if py == "" {
		t.Skip("CANIFINETUNE_HTA_PYTHON is not set (.ci/run sets it to the HTA environment's python)")
	}
	files, err := filepath.Glob("../../trace/testdata/*.json.gz")
	if err != nil || len(files) < 3 {
		t.Fatalf("test traces: %v %v", files, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(py, append([]string{"../../trace/hta/crosscheck.py"}, files...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crosscheck.py: %v\n%s", err, tail(stderr.String(), 3000))
	}
	var hta htaOut
	if err := json.Unmarshal(stdout.Bytes(), &hta); err != nil {
		t.Fatalf("crosscheck.py output: %v", err)
	}
	if len(hta.Traces) != len(files) {
		t.Fatalf("crosscheck.py reported %d traces for %d files", len(hta.Traces), len(files))
	}
	t.Logf("HolisticTraceAnalysis %s, pandas %s", hta.HTAVersion, hta.PandasVersion)
	for i, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, errOut, code := runMain(t, "trace", f, "--json")
			if code != 0 {
				t.Fatalf("trace exit %d: %s", code, errOut)
			}
			var rep trace.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Devices) != 1 {
				t.Fatalf("%d devices; HTA treats a file as one rank, so the comparison needs one", len(rep.Devices))
			}
			compareHTA(t, &rep.Devices[0], &hta.Traces[i].SameOps, hta.Traces[i].Default)

			// HTA as users run it compares consecutive_kernel_delay=30
			// with intervals in µs: 30 µs. On the same ops, our split with
			// that threshold is HTA's, so the default mode's kernel wait
			// differs from ours by the threshold and by its op filter and
			// rounding (docs/trace-vs-hta.md), nothing else.
			out, errOut, code = runMain(t, "trace", f, "--json", "--kernel-wait-below", "30us")
			if code != 0 {
				t.Fatalf("trace --kernel-wait-below 30us: exit %d: %s", code, errOut)
			}
			var rep30 trace.Report
			if err := json.Unmarshal([]byte(out), &rep30); err != nil {
				t.Fatal(err)
			}
			compareIdle(t, "30 µs", &rep30.Devices[0], hta.Traces[i].SameOps.Idle30us, htaTolerance(&hta.Traces[i].SameOps, &rep30.Devices[0]))
			for j, s := range rep30.Devices[0].Streams {
				s0 := rep.Devices[0].Streams[j]
				if s.IdleHostWaitNS != s0.IdleHostWaitNS || s.IdleKernelWaitNS+s.IdleOtherNS != s0.IdleKernelWaitNS+s0.IdleOtherNS {
					t.Errorf("stream %d: the threshold moved time out of host wait or out of kernel+other wait: 30 ns %d/%d/%d, 30 µs %d/%d/%d",
						s.Stream, s0.IdleHostWaitNS, s0.IdleKernelWaitNS, s0.IdleOtherNS, s.IdleHostWaitNS, s.IdleKernelWaitNS, s.IdleOtherNS)
				}
				hd := hta.Traces[i].Default.Idle[fmt.Sprint(s.Stream)]
				t.Logf("  stream %3d idle host/kernel/other at 30 µs: ours %d/%d/%d  HTA same ops %v  HTA default %d/%d/%d", s.Stream,
					s.IdleHostWaitNS, s.IdleKernelWaitNS, s.IdleOtherNS, hta.Traces[i].SameOps.Idle30us[fmt.Sprint(s.Stream)],
					hd["host_wait_ns"], hd["kernel_wait_ns"], hd["other_ns"])
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func compareHTA(t *testing.T, d *trace.Device, h *htaMode, def htaMode) {
	// The ops: HTA's GPU events are ours.
	var htaOps int64
	for _, n := range h.GPUEvents {
		htaOps += n
	}
	if htaOps != int64(d.Ops) {
		t.Errorf("ops: ours %d, HTA %d (%v)", d.Ops, htaOps, h.GPUEvents)
	}

	// Timestamps that float64 cannot hold to the ns: the trace's absolute
	// start times in µs, ≥ 2^33 µs, lose up to half an ulp each when HTA's
	// json.load reads them (durations are small and exact). Shifting one
	// interval by e moves the union, span or an idle interval by ≤ 2e, so a
	// figure built from n intervals is within 2·n·e. tol is that bound; 0
	// when HTA read whole-µs integers (exact) or float64 holds the times to
	// well under a ns, so round(µs × 1000) is exact.
	tol := htaTolerance(h, d)
	near := func(what string, ours, theirs, tol int64) {
		t.Helper()
		if diff := ours - theirs; diff > tol || -diff > tol {
			t.Errorf("%s: ours %d ns, HTA %d ns (difference %d, tolerance %d)", what, ours, theirs, diff, tol)
		}
	}

	// The HTA kernel type of each name, from its name; and whether our
	// categories put every name on the same side.
	type agg struct {
		count         int
		sum, min, max int64
		mean, m2      float64
		typ, ourTyp   string
		mixed         bool
	}
	names := map[string]*agg{}
	var disagree int64 // Σdur of ops whose name HTA types otherwise
	ourTypeExcl := map[string]int64{}
	for _, k := range d.Kernels {
		ot := ourType(k.Category)
		ourTypeExcl[ot] += k.ExclusiveNS
		a := names[k.Name]
		if a == nil {
			a = &agg{typ: htaType(k.Name), ourTyp: ot, min: math.MaxInt64, max: math.MinInt64}
			names[k.Name] = a
		} else if a.ourTyp != ot {
			a.mixed = true
		}
		if ot != a.typ {
			disagree += k.SumDurNS
		}
		a.sum += k.SumDurNS
		if k.Dur == nil || k.Dur.Count == 0 {
			continue
		}
		// Chan et al.'s pairwise merge of (count, mean, M2).
		n, m, m2 := float64(k.Dur.Count), k.Dur.MeanNS, k.Dur.StdNS*k.Dur.StdNS*float64(k.Dur.Count-1)
		if a.count == 0 {
			a.mean, a.m2 = m, m2
		} else {
			na := float64(a.count)
			delta := m - a.mean
			a.mean += delta * n / (na + n)
			a.m2 += m2 + delta*delta*na*n/(na+n)
		}
		a.count += k.Dur.Count
		a.min, a.max = min(a.min, k.Dur.MinNS), max(a.max, k.Dur.MaxNS)
	}
	if strings.HasPrefix(d.Kernels[len(d.Kernels)-1].Name, "(other names") {
		t.Fatal("kernel names were merged; the per-kernel comparison needs every name")
	}

	// Temporal breakdown. kernel_time is our span and idle_time our
	// span − busy by definition; compute_time is the union of the
	// computation ops, which is the Σ exclusive of our computation rows
	// (computation has the first claim on an overlapped ns).
	tr := h.Temporal
	near("temporal kernel_time vs span_ns", d.SpanNS, tr.KernelTimeNS, tol(2))
	near("temporal idle_time vs span_ns − busy_ns", d.SpanNS-d.BusyNS, tr.IdleTimeNS, tol(2*int64(d.Ops)))
	near("temporal compute_time + non_compute_time vs busy_ns", d.BusyNS, tr.ComputeTimeNS+tr.NonComputeTimeNS, tol(2*int64(d.Ops)))
	// Names HTA types otherwise (a kernel with Sync or Memcpy in its name,
	// one our host-op hints recategorised) move their time between
	// computation and the rest: at most their Σdur.
	near("temporal compute_time vs Σ exclusive of computation rows", ourTypeExcl["COMPUTATION"], tr.ComputeTimeNS, tol(2*int64(d.Ops))+disagree)

	// Kernel type breakdown: HTA splits the union of its typed ops into
	// regions by the set of types running. With computation first, then
	// copies, then communication, our exclusive times are: computation =
	// every region with COMPUTATION; memcpy_memset = regions with MEMORY but
	// not COMPUTATION; communication = the COMMUNICATION-only region.
	var reg = map[string]int64{}
	for k, v := range h.KernelTypes {
		switch {
		case strings.Contains(k, "COMPUTATION"):
			reg["COMPUTATION"] += v
		case strings.Contains(k, "MEMORY"):
			reg["MEMORY"] += v
		case k == "COMMUNICATION":
			reg["COMMUNICATION"] += v
		default:
			t.Errorf("kernel type region %q", k)
		}
	}
	for _, typ := range []string{"COMPUTATION", "MEMORY", "COMMUNICATION"} {
		near("kernel type "+typ+" vs Σ exclusive of its rows", ourTypeExcl[typ], reg[typ], tol(2*int64(d.Ops))+disagree)
	}

	// Per kernel: sum, min, max exactly (durations are exact in both);
	// mean and std to 1e-9 relative (float sums in a different order).
	seen := map[string]bool{}
	for _, k := range h.Kernels {
		a := names[k.Name]
		if a == nil {
			t.Errorf("HTA kernel %q: not in our kernels", k.Name)
			continue
		}
		seen[k.Name] = true
		if k.KernelType != a.typ {
			t.Errorf("kernel %q: HTA type %s, htaType says %s", k.Name, k.KernelType, a.typ)
		}
		if k.SumNS != a.sum || k.MinNS != a.min || k.MaxNS != a.max {
			t.Errorf("kernel %q: sum/min/max ours %d/%d/%d, HTA %d/%d/%d", k.Name, a.sum, a.min, a.max, k.SumNS, k.MinNS, k.MaxNS)
		}
		std := 0.0
		if a.count > 1 {
			std = math.Sqrt(a.m2 / float64(a.count-1))
		}
		htaStd := 0.0
		if k.StdNS != nil {
			htaStd = *k.StdNS
		}
		if !closeRel(a.mean, k.MeanNS, 1e-9) || !closeRel(std, htaStd, 1e-9) {
			t.Errorf("kernel %q: mean/std ours %.3f/%.3f, HTA %.3f/%.3f", k.Name, a.mean, std, k.MeanNS, htaStd)
		}
	}
	for name, a := range names {
		if !seen[name] && a.typ != "OTHER" {
			t.Errorf("our kernel %q (HTA type %s): not in HTA's kernel breakdown", name, a.typ)
		}
	}

	// Idle time breakdown per stream, with a 30 ns consecutive_kernel_delay
	// on both sides. Each interval's category depends on the launch time,
	// exact on both sides, and the previous end: a float error can move an
	// interval across the host-wait line only where the two are within it,
	// so with a tolerance each category gets the whole stream's bound.
	compareIdle(t, "30 ns", d, h.Idle, tol)

	// HTA as a user runs it (last step dropped, times rounded inwards to
	// whole µs): a subset of the ops, each no longer than ours, so its
	// span and union cannot exceed ours.
	if def.Temporal.KernelTimeNS > d.SpanNS || def.Temporal.KernelTimeNS-def.Temporal.IdleTimeNS > d.BusyNS {
		t.Errorf("HTA default: kernel_time %d, union %d exceed our span %d, busy %d",
			def.Temporal.KernelTimeNS, def.Temporal.KernelTimeNS-def.Temporal.IdleTimeNS, d.SpanNS, d.BusyNS)
	}
	t.Logf("ours: span %d busy %d computation %d | HTA same ops: kernel_time %d idle %d compute %d non_compute %d | HTA default: kernel_time %d idle %d compute %d non_compute %d ops %v | %d names, Σdur of differently typed ops %d, ts tolerance per interval %d ns",
		d.SpanNS, d.BusyNS, ourTypeExcl["COMPUTATION"],
		tr.KernelTimeNS, tr.IdleTimeNS, tr.ComputeTimeNS, tr.NonComputeTimeNS,
		def.Temporal.KernelTimeNS, def.Temporal.IdleTimeNS, def.Temporal.ComputeTimeNS, def.Temporal.NonComputeTimeNS, def.GPUEvents,
		len(names), disagree, tol(1))
	keys := make([]string, 0, len(h.KernelTypes))
	for k := range h.KernelTypes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("  kernel type %-55s same ops %12d  default %12d", k, h.KernelTypes[k], def.KernelTypes[k])
	}
	for _, s := range d.Streams {
		hd := def.Idle[fmt.Sprint(s.Stream)]
		t.Logf("  stream %3d idle host/kernel/other: ours %d/%d/%d  HTA default %d/%d/%d", s.Stream,
			s.IdleHostWaitNS, s.IdleKernelWaitNS, s.IdleOtherNS, hd["host_wait_ns"], hd["kernel_wait_ns"], hd["other_ns"])
	}
}

// compareIdle compares each stream's idle split with HTA's, at the
// threshold named by what. Each interval's category depends on the launch
// time, exact on both sides, and the previous end: a float error can move
// an interval across the host-wait line only where the two are within it,
// so with a tolerance each category gets the whole stream's bound.
func compareIdle(t *testing.T, what string, d *trace.Device, idle map[string]map[string]int64, tol func(int64) int64) {
	t.Helper()
	for _, s := range d.Streams {
		hs := idle[fmt.Sprint(s.Stream)]
		if hs == nil {
			t.Errorf("%s: stream %d: not in HTA's idle time breakdown", what, s.Stream)
			continue
		}
		st := tol(2 * int64(s.Ops))
		for _, c := range []struct {
			name       string
			ours, htas int64
		}{
			{"host_wait", s.IdleHostWaitNS, hs["host_wait_ns"]},
			{"kernel_wait", s.IdleKernelWaitNS, hs["kernel_wait_ns"]},
			{"other", s.IdleOtherNS, hs["other_ns"]},
		} {
			if d := c.ours - c.htas; d > st || -d > st {
				t.Errorf("%s: stream %d idle %s: ours %d, HTA %d (tolerance %d ns)", what, s.Stream, c.name, c.ours, c.htas, st)
			}
		}
	}
	if len(idle) != len(d.Streams) {
		t.Errorf("%s: streams: ours %d, HTA %d", what, len(d.Streams), len(idle))
	}
}

func closeRel(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// htaTolerance is tsTolerance for HTA's same-ops reading of a trace: none
// when HTA read whole-µs integers.
func htaTolerance(h *htaMode, d *trace.Device) func(int64) int64 {
	if h.TSInteger {
		return func(int64) int64 { return 0 }
	}
	return tsTolerance(h.FirstTSUS, d.SpanNS)
}

// tsTolerance returns the bound, in ns, on a figure built from n intervals
// when HTA read the trace's timestamps as float64 µs: each start time is off
// by at most one ulp at the trace's largest timestamp (half an ulp for the
// time, half for the earliest time HTA subtracts), and a figure moves by at
// most 2 × that per interval, so the caller passes 2n. Zero when an ulp there
// is under a quarter ns, so round(µs × 1000) recovers the exact ns.
func tsTolerance(firstUS float64, spanNS int64) func(n int64) int64 {
	x := firstUS + float64(spanNS)/1000
	ulpNS := (math.Nextafter(x, math.Inf(1)) - x) * 1000
	if ulpNS < 0.25 {
		return func(int64) int64 { return 0 }
	}
	e := int64(math.Ceil(ulpNS))
	return func(n int64) int64 { return n * e }
}
