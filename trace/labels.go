package trace

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Unlabelled is the row name for busy time under no label.
const Unlabelled = "(unlabelled)"

// labelKind is a label table's kind, as the report names it.
type labelKind string

const (
	labelGPU  labelKind = "gpu_user_annotation"
	labelHost labelKind = "user_annotation"
	// labelModule is python_function "nn.Module: …" calls on the host
	// thread: each op's time goes to the innermost module call containing
	// its launch, so the inclusive column is the time per module subtree.
	labelModule labelKind = "module"
)

// labels attributes each op's exclusive time to the innermost label that
// contains it: for gpu_user_annotation the label on the op's stream that
// contains the op's start, for user_annotation the label on the launching
// thread that contains the launch. Innermost is the latest-starting
// containing label (then the shortest). Because each op's exclusive time
// goes to one label or to the unlabelled row, the rows sum to the busy union
// exactly, which is the digest's condition for a per-label breakdown to be
// valid. Inclusive time (an op counted under every distinct label name
// containing it) is kept beside it to find aggregates and duplicates.
func (a *deviceAnalysis) labels(k labelKind, busy int64) (LabelTable, error) {
	gpu := k == labelGPU
	kind := string(k)
	src, unlabelled := a.hostLabels, a.hostUnlab
	switch k {
	case labelGPU:
		src, unlabelled = a.gpuLabels, 0
	case labelModule:
		src = a.modLabels
	}
	// Points are the ops' exclusive times sorted by (track, attribution
	// time); labels are sorted by (device, track, start). One merge of the
	// two attributes every point; only the labels containing the current
	// point are held. The host tables share one sort of their points.
	var sortedPts *sorted[point]
	var err error
	if gpu {
		if sortedPts, err = a.gpuPts.finish(); err != nil {
			return LabelTable{}, fmt.Errorf("sort %s points: %w", kind, err)
		}
		defer sortedPts.close()
	} else {
		if a.hostSorted == nil {
			if a.hostSorted, err = a.hostPts.finish(); err != nil {
				return LabelTable{}, fmt.Errorf("sort %s points: %w", kind, err)
			}
		}
		sortedPts = a.hostSorted
	}

	byName := map[int32]*labelAcc{}
	get := func(n int32) *labelAcc {
		x := byName[n]
		if x == nil {
			x = &labelAcc{}
			byName[n] = x
		}
		return x
	}
	lp := newPeeker(src.iter())
	if gpu {
		for lp.ok && lp.cur.Device < a.dev {
			lp.advance()
		}
	}
	has := func() bool { return lp.ok && (!gpu || lp.cur.Device == a.dev) }
	nLabels := 0
	consume := func() Label {
		l := lp.cur
		x := get(l.Name)
		x.instances++
		x.host += l.End - l.Start
		nLabels++
		lp.advance()
		return l
	}
	stamp := make(map[int32]int64)
	var active []Label
	cur := int32(0)
	firstPt := true
	it := sortedPts.iter()
	var p point
	for it.next(&p) {
		if firstPt || p.Track != cur {
			cur, active, firstPt = p.Track, active[:0], false
			for has() && lp.cur.Track < cur {
				consume()
			}
		}
		for has() && lp.cur.Track == cur && lp.cur.Start <= p.At {
			active = append(active, consume())
		}
		active = slices.DeleteFunc(active, func(l Label) bool { return l.End <= p.At })
		if len(active) == 0 {
			unlabelled += p.Excl
			continue
		}
		inner := active[0]
		for _, l := range active[1:] {
			if l.Start > inner.Start || (l.Start == inner.Start && (l.End < inner.End || (l.End == inner.End && l.Name < inner.Name))) {
				inner = l
			}
		}
		in := get(inner.Name)
		in.ex += p.Excl
		if p.Typical {
			in.typ += p.Excl
		}
		for _, l := range active {
			if s, ok := stamp[l.Name]; ok && s == p.Seq {
				continue
			}
			stamp[l.Name] = p.Seq
			get(l.Name).inc += p.Excl
		}
	}
	for has() {
		consume()
	}
	if err := errors.Join(it.err, lp.it.err); err != nil {
		return LabelTable{}, fmt.Errorf("read %s labels: %w", kind, err)
	}

	tab := LabelTable{Kind: kind, Rows: []LabelRow{}, UnlabelledNS: unlabelled, Aggregates: []LabelRow{},
		Duplicates: [][]string{}, NoGPUTime: []LabelRow{}}
	unTyp := a.typicalBusy
	byInclusive := map[int64][]string{}
	for name, x := range byName {
		row := LabelRow{Name: a.t.Names[name], Instances: x.instances, HostNS: x.host, ExclusiveNS: x.ex,
			InclusiveNS: x.inc, Share: shareOf(x.ex, busy), PerStepNS: a.perStep(x.typ)}
		tab.InclusiveSumNS += x.inc
		unTyp -= x.typ
		switch {
		case x.ex > 0:
			tab.Rows = append(tab.Rows, row)
		case x.inc > 0:
			tab.Aggregates = append(tab.Aggregates, row)
		case x.host > 0:
			tab.NoGPUTime = append(tab.NoGPUTime, row)
		}
		if x.inc > 0 {
			byInclusive[x.inc] = append(byInclusive[x.inc], row.Name)
		}
	}
	tab.Rows = append(tab.Rows, LabelRow{Name: Unlabelled, ExclusiveNS: unlabelled, InclusiveNS: unlabelled,
		Share: shareOf(unlabelled, busy), PerStepNS: a.perStep(unTyp)})
	byTime := func(x, y LabelRow) int {
		if c := cmp.Compare(y.ExclusiveNS, x.ExclusiveNS); c != 0 {
			return c
		}
		if c := cmp.Compare(y.InclusiveNS, x.InclusiveNS); c != 0 {
			return c
		}
		if c := cmp.Compare(y.HostNS, x.HostNS); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	}
	slices.SortFunc(tab.Rows, byTime)
	slices.SortFunc(tab.Aggregates, byTime)
	slices.SortFunc(tab.NoGPUTime, byTime)
	for _, names := range byInclusive {
		if len(names) > 1 {
			slices.Sort(names)
			tab.Duplicates = append(tab.Duplicates, names)
		}
	}
	slices.SortFunc(tab.Duplicates, func(x, y []string) int { return cmp.Compare(x[0], y[0]) })
	if nLabels > 0 && tab.InclusiveSumNS > busy {
		tab.DoubleCounted = true
		a.flag("label_double_count", tab.InclusiveSumNS-busy,
			fmt.Sprintf("%s: Σ inclusive label time %d ns exceeds busy time %d ns", kind, tab.InclusiveSumNS, busy),
			"adding per-label inclusive times counts nested or overlapping labels twice; use the exclusive column")
	}
	return tab, nil
}

// labelAcc accumulates one label name's row.
type labelAcc struct {
	instances          int
	host, ex, inc, typ int64
}
