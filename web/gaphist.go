package web

import (
	"fmt"
	"strconv"

	"github.com/canifinetune/canifinetune/trace"
)

// gapEdgesNS are the lower edges of the idle-gap histogram's bins, two per
// decade from 1 µs: a launch-bound loop shows as many gaps of a few µs, a
// data loader or a host sync as few of many ms, and the two read apart.
var gapEdgesNS = [...]int64{0, 1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8, 3e8, 1e9}

// gapHist is one device's gaps by length: the count and the idle time of
// each bin, split into the causes trace.Gap carries.
type gapHist struct {
	Bins [len(gapEdgesNS)]gapBin
}

type gapBin struct {
	Count                                  int64
	TotalNS                                int64
	HostLate, Launch, Queued, Unattributed int64
}

func (h *gapHist) add(g trace.Gap) {
	n := g.End - g.Start
	i := len(gapEdgesNS) - 1
	for i > 0 && n < gapEdgesNS[i] {
		i--
	}
	b := &h.Bins[i]
	b.Count++
	b.TotalNS += n
	b.HostLate += g.HostLate
	b.Launch += g.Launch
	b.Queued += g.Queued
	b.Unattributed += g.Unattributed
}

// gapHists collects the histograms of every device of one analysis
// (trace.Options.OnGap is called one gap at a time).
type gapHists map[int]*gapHist

func (hs gapHists) onGap(device int, g trace.Gap) {
	h := hs[device]
	if h == nil {
		h = &gapHist{}
		hs[device] = h
	}
	h.add(g)
}

// histChart is the SVG of a gapHist: one column per bin from the first to
// the last non-empty one, its height the bin's idle time, stacked by cause
// in the colours of the idle-time bar, the gap count above it.
type histChart struct {
	Width, Height, Base float64
	Cols                []histCol
}

type histCol struct {
	X, W, LabelX     float64
	Label, CountText string
	CountY           float64
	Parts            []histPart
	Title            string
}

type histPart struct {
	Y, H  float64
	Class string
}

const (
	histW     = 1000.0
	histPlotH = 160.0
	histTop   = 18.0 // room for the count above the tallest column
)

func binLabel(i int) string {
	switch i {
	case 0:
		n, u := edge(gapEdgesNS[1])
		return "< " + n + " " + u
	case len(gapEdgesNS) - 1:
		n, u := edge(gapEdgesNS[i])
		return "≥ " + n + " " + u
	}
	lo, lu := edge(gapEdgesNS[i])
	hi, hu := edge(gapEdgesNS[i+1])
	if lu == hu {
		return lo + "–" + hi + " " + hu
	}
	return lo + " " + lu + "–" + hi + " " + hu
}

// edge is a bin edge in the largest unit it is a whole number of.
func edge(ns int64) (string, string) {
	switch {
	case ns >= 1e9:
		return strconv.FormatInt(ns/1e9, 10), "s"
	case ns >= 1e6:
		return strconv.FormatInt(ns/1e6, 10), "ms"
	default:
		return strconv.FormatInt(ns/1e3, 10), "µs"
	}
}

// minColH is the least height of a non-empty column, so that a bin of
// many short gaps stays visible beside one long gap (its count and title
// carry the figures).
const minColH = 2.0

func newHistChart(h *gapHist) *histChart {
	if h == nil {
		return nil
	}
	first, last := -1, -1
	var maxNS int64
	for i, b := range h.Bins {
		if b.Count > 0 {
			if first < 0 {
				first = i
			}
			last = i
			maxNS = max(maxNS, b.TotalNS)
		}
	}
	if first < 0 {
		return nil
	}
	c := &histChart{Width: histW, Height: histTop + histPlotH + 22, Base: histTop + histPlotH}
	n := last - first + 1
	slot := histW / float64(n)
	for i := first; i <= last; i++ {
		b := h.Bins[i]
		x := slot * float64(i-first)
		col := histCol{X: x + slot*0.1, W: slot * 0.8, LabelX: x + slot/2, Label: binLabel(i),
			CountText: fmt.Sprintf("%d", b.Count)}
		y := c.Base
		scale := histPlotH / float64(max(maxNS, 1))
		if b.TotalNS > 0 && float64(b.TotalNS)*scale < minColH {
			scale = minColH / float64(b.TotalNS)
		}
		for _, p := range []struct {
			ns    int64
			class string
		}{{b.HostLate, "g-host"}, {b.Launch, "g-launch"}, {b.Queued, "g-queued"}, {b.Unattributed, "g-other"}} {
			if p.ns <= 0 {
				continue
			}
			ph := float64(p.ns) * scale
			y -= ph
			col.Parts = append(col.Parts, histPart{Y: y, H: ph, Class: p.class})
		}
		col.CountY = y - 4
		col.Title = fmt.Sprintf("gaps of %s: %d, idle %s — host late %s, in the launch call %s, queued %s, unattributed %s",
			col.Label, b.Count, fmtNS(b.TotalNS), fmtNS(b.HostLate), fmtNS(b.Launch), fmtNS(b.Queued), fmtNS(b.Unattributed))
		c.Cols = append(c.Cols, col)
	}
	return c
}
