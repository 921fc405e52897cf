package trace

import (
	"math"
	"testing"
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

func TestProject(t *testing.T) {
	per := int64(50)
	r := &Report{Devices: []Device{{Device: 0, BusyFraction: 0.8, SpanNS: 1000,
		Categories: []Row{{Name: "gemm", Share: 0.5, PerStepNS: &per}},
		Steps:      Steps{Typical: Typical{SpanNS: 200}}}}}
	p := WhatIf{CatGEMM, 2}.Project(r)[0]
	// 0.5 × 0.8 × (1 − 1/2) = 0.2 of a 200 ns step.
	if math.Abs(p.Bound-0.2) > 1e-12 || p.SavedNS != 40 || p.StepNS != 200 {
		t.Errorf("projection = %+v, want bound 0.2, saved 40 of 200", p)
	}
	if p := (WhatIf{CatAttention, 2}).Project(r)[0]; p.Bound != 0 {
		t.Errorf("absent category: bound %v, want 0", p.Bound)
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
