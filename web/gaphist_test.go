package web

import (
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/trace"
)

// TestGapHist: each gap lands in the bin whose lower edge it reaches, its
// parts add to the bin's causes, and the chart spans the non-empty bins.
func TestGapHist(t *testing.T) {
	var h gapHist
	for _, g := range []trace.Gap{
		{Start: 0, End: 999, HostLate: 999},
		{Start: 0, End: 1000, Launch: 400, Queued: 600},
		{Start: 10, End: 10 + 2999, Unattributed: 2999},
		{Start: 0, End: 2e9, HostLate: 2e9},
	} {
		h.add(g)
	}
	for _, tc := range []struct {
		bin          int
		count, total int64
	}{{0, 1, 999}, {1, 2, 3999}, {2, 0, 0}, {len(gapEdgesNS) - 1, 1, 2e9}} {
		if b := h.Bins[tc.bin]; b.Count != tc.count || b.TotalNS != tc.total || b.HostLate+b.Launch+b.Queued+b.Unattributed != b.TotalNS {
			t.Errorf("bin %d (%s): %+v, want count %d total %d", tc.bin, binLabel(tc.bin), b, tc.count, tc.total)
		}
	}
	c := newHistChart(&h)
	if c == nil || len(c.Cols) != len(gapEdgesNS) || c.Cols[0].Label != "< 1 µs" || c.Cols[1].Label != "1–3 µs" || c.Cols[len(c.Cols)-1].Label != "≥ 1 s" {
		t.Fatalf("chart %+v", c)
	}
	if top := c.Cols[len(c.Cols)-1].Parts[0]; top.H != histPlotH || !strings.HasPrefix(c.Cols[len(c.Cols)-1].Title, "gaps of ≥ 1 s: 1,") {
		t.Errorf("the largest bin: %+v %q", top, c.Cols[len(c.Cols)-1].Title)
	}
	if newHistChart(&gapHist{}) != nil || newHistChart(nil) != nil {
		t.Error("a chart without gaps")
	}
}
