package trace

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Projection bounds what speeding up one category by Speedup can change on
// one device.
//
// The model: every op keeps its stream and its place in the stream's order,
// and starts as soon as its stream is free, its launch has happened and the
// work on other streams it waits for is done; the category's ops take
// 1/Speedup of their time, nothing else changes. Then the device's timeline
// ends at the end of a chain of ops, each waiting for the one before it
// (on its stream or across streams), from a launch. Ops in such a chain
// never overlap, in the trace or after the change, so the category's share
// of any chain is at most the union of its intervals over all streams
// (UnionNS), and the timeline gets shorter by at most UnionNS × (1 −
// 1/Speedup) — and longer, for a Speedup below 1, by at most UnionNS ×
// (1/Speedup − 1). That holds whatever the cross-stream waits are, and
// whether the host launches as recorded or is always ahead of the GPU
// (GPU-bound). Ops that run under another category's op count in full:
// that overlap can be on the chain that sets the length (a GEMM stream
// beside a longer NCCL stream).
//
// With the host's launch times as recorded, a chain cannot cross a gap the
// host caused (the GPU idle before the launch call of the next op
// returned): nothing before it can make that op start earlier. Then only
// the category's union after the last such gap counts (TailUnionNS). It
// assumes the trace is what the model would give: every op started as soon
// as its stream, its launch and its waits allowed (the queued part of such
// a gap is launch latency, not a wait on other work).
type Projection struct {
	Device   int     `json:"device"`
	Category string  `json:"category"`
	Speedup  float64 `json:"speedup"`
	// The category on the device's whole timeline (its span): the union of
	// its intervals over all streams, its exclusive part (the category row)
	// and the part it ran under ops of other categories.
	SpanNS       int64 `json:"span_ns"`
	UnionNS      int64 `json:"union_ns"`
	ExclusiveNS  int64 `json:"exclusive_ns"`
	OverlappedNS int64 `json:"overlapped_ns"`
	// SavedNS is the most the device's timeline gets shorter: ⌈UnionNS ×
	// (1 − 1/Speedup)⌉, negative for a slow-down (then |SavedNS| is the
	// most it gets longer). Bound is SavedNS / SpanNS.
	SavedNS int64   `json:"saved_ns"`
	Bound   float64 `json:"bound"`
	// HostAsRecordedSavedNS is the same with the host's launch times as
	// recorded: from TailUnionNS for a speed-up (a slow-down can fill the
	// gaps, so it is SavedNS then).
	TailUnionNS           int64   `json:"tail_union_ns"`
	HostAsRecordedSavedNS int64   `json:"host_as_recorded_saved_ns"`
	HostAsRecordedBound   float64 `json:"host_as_recorded_bound"`
	// The typical step (Steps.Typical; all zero without steps): its length
	// is the longer of its host span and its GPU time. LimitedBy is "host"
	// when the GPU spent more than half of the step's GPU time waiting for
	// the host (HostWaitNS), else "gpu". StepSavedNS is the step's own category
	// union × (1 − 1/Speedup). It is a bound for the step when each step's
	// GPU work waits only on its own ops (as when the step ends in a
	// synchronisation: loss.item(), an optimizer step on the host); when
	// steps' GPU work runs into each other it holds for their mean. A
	// host-bound step gets shorter only if the host gets ahead.
	StepNS      int64   `json:"step_ns"`
	LimitedBy   string  `json:"limited_by,omitempty"`
	StepUnionNS int64   `json:"step_union_ns"`
	StepSavedNS int64   `json:"step_saved_ns"`
	StepBound   float64 `json:"step_bound"`
}

// WhatIf is one --what-if request: a category and its speed-up.
type WhatIf struct {
	Category Category
	Speedup  float64
}

// ParseWhatIf reads "CATEGORY=Sx" (the x is optional), e.g. "attention=1.5x".
func ParseWhatIf(s string) (WhatIf, error) {
	name, factor, ok := strings.Cut(s, "=")
	if !ok {
		return WhatIf{}, fmt.Errorf("what-if %q: want CATEGORY=SPEEDUP, e.g. attention=1.5x", s)
	}
	c, err := ParseCategory(name)
	if err != nil {
		return WhatIf{}, fmt.Errorf("what-if %q: %w", s, err)
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.ToLower(strings.TrimSpace(factor)), "x"), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return WhatIf{}, fmt.Errorf("what-if %q: speed-up %q is not a positive number", s, factor)
	}
	return WhatIf{Category: c, Speedup: f}, nil
}

// saved is u × (1 − 1/speedup) rounded away from zero, so that rounding
// never makes the bound beatable; a product within 10⁻⁶ ns of a whole
// number is that number (1 − 1/1.5 is not exactly ⅓ in float64).
func saved(u int64, speedup float64) int64 {
	x := math.Abs(float64(u) * (1 - 1/speedup))
	n := math.Round(x)
	if math.Abs(x-n) > 1e-6 {
		n = math.Ceil(x)
	}
	if speedup < 1 {
		return -int64(n)
	}
	return int64(n)
}

func fraction(x, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(x) / float64(of)
}

// Project bounds the change on every device of r (see Projection).
func (w WhatIf) Project(r *Report) []Projection {
	var ps []Projection
	name := w.Category.String()
	for _, d := range r.Devices {
		p := Projection{Device: d.Device, Category: name, Speedup: w.Speedup, SpanNS: d.SpanNS}
		for _, c := range d.Categories {
			if c.Name != name {
				continue
			}
			p.ExclusiveNS = c.ExclusiveNS
			if c.UnionNS != nil {
				p.UnionNS = *c.UnionNS
			}
			if c.TailUnionNS != nil {
				p.TailUnionNS = *c.TailUnionNS
			}
		}
		p.OverlappedNS = p.UnionNS - p.ExclusiveNS
		p.SavedNS = saved(p.UnionNS, w.Speedup)
		p.HostAsRecordedSavedNS = p.SavedNS
		if w.Speedup > 1 {
			p.HostAsRecordedSavedNS = saved(p.TailUnionNS, w.Speedup)
		}
		p.Bound = fraction(p.SavedNS, p.SpanNS)
		p.HostAsRecordedBound = fraction(p.HostAsRecordedSavedNS, p.SpanNS)
		if t := d.Steps.Typical; t.Steps > 0 {
			p.StepNS = max(t.SpanNS, t.GPUTimeNS)
			p.LimitedBy = "gpu"
			if 2*t.HostWaitNS > t.GPUTimeNS {
				p.LimitedBy = "host"
			}
			p.StepUnionNS = t.CategoryUnionNS[name]
			p.StepSavedNS = saved(p.StepUnionNS, w.Speedup)
			p.StepBound = fraction(p.StepSavedNS, p.StepNS)
		}
		ps = append(ps, p)
	}
	return ps
}

// PointEstimateWarning goes with every comparison: the digest's rule that
// one run per side cannot show a change.
const PointEstimateWarning = "each side is one run: these deltas are point estimates. Run each side at least 3 times before claiming a change; deltas within ±5% are no systematic change."

// Comparison sets two reports side by side.
type Comparison struct {
	SchemaVersion int    `json:"schema_version"`
	Before        string `json:"before"`
	After         string `json:"after"`
	Warning       string `json:"warning"`
	// Pairing is how devices are paired: "device_id" when both traces have
	// the same device ids, else "position" (the first device of one with
	// the first of the other, and so on, in id order: a run moved to other
	// GPUs, or two ranks of one job). Note says so, and names devices left
	// without a partner.
	Pairing string        `json:"pairing"`
	Note    string        `json:"note,omitempty"`
	Devices []DeviceDelta `json:"devices"`
}

// DeviceDelta compares one device of the first trace with its partner in
// the second.
type DeviceDelta struct {
	Device      int `json:"device"`
	AfterDevice int `json:"after_device"`
	// Basis says what the absolute figures are: "per_step" (means over
	// typical steps, when both traces have steps) or "total".
	Basis       string     `json:"basis"`
	Before      Side       `json:"before"`
	After       Side       `json:"after"`
	BusyDeltaNS int64      `json:"busy_delta_ns"`
	StepDeltaNS int64      `json:"step_delta_ns"`
	Categories  []RowDelta `json:"categories"`
}

// Side is one trace's headline figures in a comparison. On the per_step
// basis they are means over the typical steps, as the category rows are:
// BusyNS is Σ of the rows' per_step_ns, StepNS the mean host span, and
// BusyFraction the mean busy time over the mean GPU time. On the total
// basis they are the device's busy_ns, span_ns and busy_fraction.
type Side struct {
	BusyNS       int64   `json:"busy_ns"`
	StepNS       int64   `json:"step_ns"`
	BusyFraction float64 `json:"busy_fraction"`
}

// RowDelta is one category's change, in absolute time and in share.
type RowDelta struct {
	Name     string `json:"name"`
	BeforeNS int64  `json:"before_ns"`
	AfterNS  int64  `json:"after_ns"`
	DeltaNS  int64  `json:"delta_ns"`
	// DeltaPct is the relative change of the absolute time; null when the
	// category was absent before.
	DeltaPct    *float64 `json:"delta_pct"`
	BeforeShare float64  `json:"before_share"`
	AfterShare  float64  `json:"after_share"`
	// ShareDeltaPP is the share change in percentage points. A share can
	// rise only because everything else got faster, so read it beside
	// DeltaNS.
	ShareDeltaPP float64 `json:"share_delta_pp"`
	// WithinNoise marks |DeltaPct| ≤ 5%.
	WithinNoise bool `json:"within_noise"`
}

// Compare pairs the devices of two reports (see Comparison.Pairing) and
// reports category deltas.
func Compare(before, after *Report) *Comparison {
	c := &Comparison{SchemaVersion: SchemaVersion, Before: before.Source, After: after.Source,
		Warning: PointEstimateWarning, Pairing: "device_id", Devices: []DeviceDelta{}}
	ids := func(r *Report) []int {
		v := make([]int, len(r.Devices))
		for i, d := range r.Devices {
			v[i] = d.Device
		}
		return v
	}
	a, b := ids(before), ids(after)
	if slices.Equal(a, b) {
		for i := range before.Devices {
			c.Devices = append(c.Devices, compareDevice(before.Devices[i], after.Devices[i]))
		}
		return c
	}
	c.Pairing = "position"
	n := min(len(a), len(b))
	c.Note = fmt.Sprintf("the traces are on different GPUs (before: %s; after: %s), so devices are compared by position in id order", idList(a), idList(b))
	if len(a) > n {
		c.Note += fmt.Sprintf("; before's %s have no partner", idList(a[n:]))
	}
	if len(b) > n {
		c.Note += fmt.Sprintf("; after's %s have no partner", idList(b[n:]))
	}
	for i := range n {
		c.Devices = append(c.Devices, compareDevice(before.Devices[i], after.Devices[i]))
	}
	return c
}

func idList(ids []int) string {
	if len(ids) == 0 {
		return "no GPU"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = "GPU " + strconv.Itoa(id)
	}
	return strings.Join(s, ", ")
}

func compareDevice(a, b Device) DeviceDelta {
	perStep := a.Steps.Typical.Steps > 0 && b.Steps.Typical.Steps > 0
	dd := DeviceDelta{Device: a.Device, AfterDevice: b.Device, Basis: "total"}
	side := func(d Device) Side {
		s := Side{BusyNS: d.BusyNS, StepNS: d.SpanNS, BusyFraction: d.BusyFraction}
		if perStep {
			s.BusyNS = 0
			for _, c := range d.Categories {
				s.BusyNS += *c.PerStepNS
			}
			var span, busy, gpu, n int64
			for _, st := range d.Steps.Steps {
				if st.Typical {
					span, busy, gpu, n = span+st.SpanNS, busy+st.BusyNS, gpu+st.GPUTimeNS, n+1
				}
			}
			s.StepNS = span / n
			s.BusyFraction = 0
			if gpu > 0 {
				s.BusyFraction = float64(busy) / float64(gpu)
			}
		}
		return s
	}
	if perStep {
		dd.Basis = "per_step"
	}
	dd.Before, dd.After = side(a), side(b)
	dd.BusyDeltaNS = dd.After.BusyNS - dd.Before.BusyNS
	dd.StepDeltaNS = dd.After.StepNS - dd.Before.StepNS
	abs := func(r Row) int64 {
		if perStep {
			return *r.PerStepNS
		}
		return r.ExclusiveNS
	}
	for i, ra := range a.Categories {
		rb := b.Categories[i]
		rd := RowDelta{Name: ra.Name, BeforeNS: abs(ra), AfterNS: abs(rb), BeforeShare: ra.Share, AfterShare: rb.Share}
		rd.DeltaNS = rd.AfterNS - rd.BeforeNS
		rd.ShareDeltaPP = 100 * (rd.AfterShare - rd.BeforeShare)
		if rd.BeforeNS > 0 {
			p := 100 * float64(rd.DeltaNS) / float64(rd.BeforeNS)
			rd.DeltaPct = &p
			rd.WithinNoise = math.Abs(p) <= 5
		} else {
			rd.WithinNoise = rd.AfterNS == 0
		}
		dd.Categories = append(dd.Categories, rd)
	}
	return dd
}
