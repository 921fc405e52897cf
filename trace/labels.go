package trace

import (
	"cmp"
	"fmt"
	"slices"
)

// Unlabelled is the row name for busy time under no label.
const Unlabelled = "(unlabelled)"

// labels attributes each op's exclusive time to the innermost label that
// contains it: for gpu_user_annotation the label on the op's stream that
// contains the op's start, for user_annotation the label on the launching
// thread that contains the launch. Innermost is the latest-starting
// containing label (then the shortest). Because each op's exclusive time
// goes to one label or to the unlabelled row, the rows sum to the busy union
// exactly, which is the digest's condition for a per-label breakdown to be
// valid. Inclusive time (an op counted under every distinct label name
// containing it) is kept beside it to find aggregates and duplicates.
func (a *deviceAnalysis) labels(gpu bool, busy int64) LabelTable {
	kind := "user_annotation"
	if gpu {
		kind = "gpu_user_annotation"
	}
	dev := a.ops[0].Device
	var ls []Label
	for _, l := range a.t.Labels {
		if l.GPU == gpu && (!gpu || l.Device == dev) {
			ls = append(ls, l)
		}
	}
	slices.SortFunc(ls, func(x, y Label) int {
		if c := cmp.Compare(x.Track, y.Track); c != 0 {
			return c
		}
		return cmp.Compare(x.Start, y.Start)
	})
	// Points are op indices sorted by (track, attribution time): 4 bytes an
	// op instead of a struct, since this runs over every op of the trace.
	track := func(i int32) int32 {
		if gpu {
			return a.ops[i].Stream
		}
		return a.t.Launches[a.launch[i]].Thread
	}
	at := func(i int32) int64 {
		if gpu {
			return a.ops[i].Start
		}
		return a.t.Launches[a.launch[i]].Start
	}
	var pts []int32
	var unlabelled int64
	for i := range a.ops {
		switch {
		case a.excl[i] == 0:
		case gpu || a.launch[i] >= 0:
			pts = append(pts, int32(i))
		default:
			unlabelled += a.excl[i]
		}
	}
	slices.SortFunc(pts, func(x, y int32) int {
		if c := cmp.Compare(track(x), track(y)); c != 0 {
			return c
		}
		return cmp.Compare(at(x), at(y))
	})

	type acc struct {
		instances          int
		host, ex, inc, typ int64
	}
	byName := map[int32]*acc{}
	get := func(n int32) *acc {
		x := byName[n]
		if x == nil {
			x = &acc{}
			byName[n] = x
		}
		return x
	}
	for _, l := range ls {
		x := get(l.Name)
		x.instances++
		x.host += l.End - l.Start
	}
	stamp := make(map[int32]int32)
	var active []Label
	j := 0
	cur := int32(0)
	for pi, i := range pts {
		tr, x := track(i), at(i)
		if pi == 0 || tr != cur {
			cur, active = tr, active[:0]
			for j < len(ls) && ls[j].Track < cur {
				j++
			}
		}
		for j < len(ls) && ls[j].Track == cur && ls[j].Start <= x {
			active = append(active, ls[j])
			j++
		}
		active = slices.DeleteFunc(active, func(l Label) bool { return l.End <= x })
		ex := a.excl[i]
		if len(active) == 0 {
			unlabelled += ex
			continue
		}
		inner := active[0]
		for _, l := range active[1:] {
			if l.Start > inner.Start || (l.Start == inner.Start && (l.End < inner.End || (l.End == inner.End && l.Name < inner.Name))) {
				inner = l
			}
		}
		in := get(inner.Name)
		in.ex += ex
		if a.isTypical(int(i)) {
			in.typ += ex
		}
		for _, l := range active {
			if s, ok := stamp[l.Name]; ok && s == i+1 {
				continue
			}
			stamp[l.Name] = i + 1
			get(l.Name).inc += ex
		}
	}

	nTyp := a.typicalSteps()
	share := func(x int64) float64 {
		if busy == 0 {
			return 0
		}
		return float64(x) / float64(busy)
	}
	tab := LabelTable{Kind: kind, Rows: []LabelRow{}, UnlabelledNS: unlabelled, Aggregates: []LabelRow{},
		Duplicates: [][]string{}, NoGPUTime: []LabelRow{}}
	var unTyp int64
	for i := range a.ops {
		if a.isTypical(i) {
			unTyp += a.excl[i]
		}
	}
	byInclusive := map[int64][]string{}
	for name, x := range byName {
		row := LabelRow{Name: a.t.Names[name], Instances: x.instances, HostNS: x.host, ExclusiveNS: x.ex,
			InclusiveNS: x.inc, Share: share(x.ex), PerStepNS: a.perStep(x.typ, nTyp)}
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
		Share: share(unlabelled), PerStepNS: a.perStep(unTyp, nTyp)})
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
	if len(ls) > 0 && tab.InclusiveSumNS > busy {
		tab.DoubleCounted = true
		a.flag("label_double_count", tab.InclusiveSumNS-busy,
			fmt.Sprintf("%s: Σ inclusive label time %d ns exceeds busy time %d ns", kind, tab.InclusiveSumNS, busy),
			"adding per-label inclusive times counts nested or overlapping labels twice; use the exclusive column")
	}
	return tab
}
