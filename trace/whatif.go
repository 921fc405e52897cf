package trace

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Projection is the Amdahl bound for speeding up one category.
type Projection struct {
	Device       int     `json:"device"`
	Category     string  `json:"category"`
	Speedup      float64 `json:"speedup"`
	Share        float64 `json:"share"`         // of busy time
	BusyFraction float64 `json:"busy_fraction"` // busy / span
	// Bound is share × busy fraction × (1 − 1/S): the largest fraction of
	// wall-clock the speed-up can save. It is reached only when every saved
	// GPU nanosecond is on the critical path; host-bound traces gain less.
	Bound float64 `json:"bound"`
	// StepNS is the typical step span (or the device span without steps)
	// and SavedNS the bound applied to it.
	StepNS  int64 `json:"step_ns"`
	SavedNS int64 `json:"saved_ns"`
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

// Project applies the Amdahl bound to every device of r.
func (w WhatIf) Project(r *Report) []Projection {
	var ps []Projection
	for _, d := range r.Devices {
		p := Projection{Device: d.Device, Category: w.Category.String(), Speedup: w.Speedup, BusyFraction: d.BusyFraction}
		for _, c := range d.Categories {
			if c.Name == p.Category {
				p.Share = c.Share
			}
		}
		p.Bound = p.Share * p.BusyFraction * (1 - 1/w.Speedup)
		p.StepNS = d.Steps.Typical.SpanNS
		if p.StepNS == 0 {
			p.StepNS = d.SpanNS
		}
		p.SavedNS = int64(math.Round(p.Bound * float64(p.StepNS)))
		ps = append(ps, p)
	}
	return ps
}

// PointEstimateWarning goes with every comparison: the digest's rule that
// one run per side cannot show a change.
const PointEstimateWarning = "each side is one run: these deltas are point estimates. Run each side at least 3 times before claiming a change; deltas within ±5% are no systematic change."

// Comparison sets two reports side by side.
type Comparison struct {
	SchemaVersion int           `json:"schema_version"`
	Before        string        `json:"before"`
	After         string        `json:"after"`
	Warning       string        `json:"warning"`
	Devices       []DeviceDelta `json:"devices"`
}

// DeviceDelta compares one device present in both traces.
type DeviceDelta struct {
	Device int `json:"device"`
	// Basis says what the absolute figures are: "per_step" (means over
	// typical steps, when both traces have steps) or "total".
	Basis       string     `json:"basis"`
	Before      Side       `json:"before"`
	After       Side       `json:"after"`
	BusyDeltaNS int64      `json:"busy_delta_ns"`
	StepDeltaNS int64      `json:"step_delta_ns"`
	Categories  []RowDelta `json:"categories"`
}

// Side is one trace's headline figures in a comparison.
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

// Compare matches devices by id and reports category deltas.
func Compare(before, after *Report) *Comparison {
	c := &Comparison{SchemaVersion: SchemaVersion, Before: before.Source, After: after.Source,
		Warning: PointEstimateWarning, Devices: []DeviceDelta{}}
	for _, a := range before.Devices {
		for _, b := range after.Devices {
			if a.Device == b.Device {
				c.Devices = append(c.Devices, compareDevice(a, b))
			}
		}
	}
	return c
}

func compareDevice(a, b Device) DeviceDelta {
	perStep := a.Steps.Typical.Steps > 0 && b.Steps.Typical.Steps > 0
	dd := DeviceDelta{Device: a.Device, Basis: "total"}
	side := func(d Device) Side {
		s := Side{BusyNS: d.BusyNS, StepNS: d.SpanNS, BusyFraction: d.BusyFraction}
		if perStep {
			s.StepNS = d.Steps.Typical.SpanNS
			s.BusyNS = 0
			for _, c := range d.Categories {
				s.BusyNS += *c.PerStepNS
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
