package web

import "testing"

// TestBarLabels: a segment's label is drawn only where it fits (the name
// and share, else the share, else nothing: the hover title stays), and the
// thresholds' labels, close together on the budget, never overlap.
func TestBarLabels(t *testing.T) {
	for _, tc := range []struct {
		name string
		pct  float64
		w    float64
		want string
	}{
		{"weights", 18.3, 300, "weights 18 %"},
		{"weights", 18.3, 60, "18 %"},
		{"quant_overhead", 0.2, 3, ""},
		{"activations", 55, 2*labelPad + textW("activations 55 %"), "activations 55 %"},
		{"activations", 55, 2*labelPad + textW("activations 55 %") - 0.5, "55 %"},
	} {
		if got := segmentLabel(tc.name, tc.pct, tc.w); got != tc.want {
			t.Errorf("segmentLabel(%q, %.1f, %.1f) = %q, want %q", tc.name, tc.pct, tc.w, got, tc.want)
		}
	}
	// Two bars: the budget far right of the total (the thresholds' labels
	// crowd at the right end) and the total past the budget (the marks sit
	// inside the bar).
	for _, gpu := range []string{"h100", "rtx-4090"} {
		out, pr := Estimate(Params{"model": "Qwen/Qwen2.5-7B", "method": "qlora", "gpu": gpu})
		if pr != nil {
			t.Fatal(pr)
		}
		checkBar(t, gpu, newBar(out))
	}
}

func checkBar(t *testing.T, gpu string, b *bar) {
	labelled := 0
	for _, s := range b.Segments {
		if s.Label != "" {
			labelled++
			if w := textW(s.Label) + 2*labelPad; w > s.W {
				t.Errorf("%s: %s: label %q (%.0f wide) in a segment %.0f wide", gpu, s.Name, s.Label, w, s.W)
			}
		}
	}
	if labelled == 0 || labelled == len(b.Segments) {
		t.Errorf("%s: %d of %d segments labelled: want the wide ones only (this bar has slivers)", gpu, labelled, len(b.Segments))
	}
	if len(b.Marks) != 3 {
		t.Fatalf("%s: marks %+v", gpu, b.Marks)
	}
	for i, m := range b.Marks {
		for _, n := range b.Marks[i+1:] {
			// Labels end at their mark and extend left.
			if m.Y == n.Y && m.X-textW(m.Label) < n.X && n.X-textW(n.Label) < m.X {
				t.Errorf("%s: mark labels %q and %q overlap on one row", gpu, m.Label, n.Label)
			}
		}
		if m.Y > b.ViewHeight {
			t.Errorf("%s: mark %q at y %.0f below the picture (%.0f)", gpu, m.Label, m.Y, b.ViewHeight)
		}
	}
	if b.Marks[1].Y == b.Marks[2].Y {
		t.Errorf("%s: marginal and budget labels share a row on a bar where they are %.0f apart", gpu, b.Marks[2].X-b.Marks[1].X)
	}
	// A mark's line runs from the bar down to its label: it must not cross
	// a label of an upper row.
	for _, m := range b.Marks {
		for _, n := range b.Marks {
			if n.Y < m.Y && m.X >= n.X-textW(n.Label)-markGap && m.X <= n.X {
				t.Errorf("%s: the line of %q crosses the label %q", gpu, m.Label, n.Label)
			}
		}
	}
}
