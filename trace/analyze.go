package trace

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
)

// Options change what Report computes.
type Options struct {
	// AllSteps keeps the first and last steps in the typical figures.
	AllSteps bool

	// onGap, when set, sees every gap; tests use it to check each gap's
	// identity without the report holding a slice of all gaps.
	onGap func(device int, g Gap)
}

// Analyze parses a trace stream and reports on it.
func Analyze(r io.Reader, opts Options) (*Report, error) {
	t, err := Parse(r)
	if err != nil {
		return nil, err
	}
	return t.Report(opts), nil
}

// Report computes the accounting. It sorts t.Ops and t.Launches in place.
func (t *Trace) Report(opts Options) *Report {
	r := &Report{
		SchemaVersion:   SchemaVersion,
		DisplayTimeUnit: t.DisplayTimeUnit,
		BaseTimeNS:      t.BaseTimeNS,
		Events:          t.Events,
		Bytes:           t.Bytes,
		Devices:         []Device{},
		Flags:           []Flag{},
	}
	r.Flags = append(r.Flags, t.traceFlags()...)

	slices.SortFunc(t.Launches, func(a, b Launch) int { return cmp.Compare(a.Corr, b.Corr) })
	slices.SortFunc(t.Ops, func(a, b Op) int {
		if c := cmp.Compare(a.Device, b.Device); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		if c := cmp.Compare(a.End(), b.End()); c != 0 {
			return c
		}
		// Full tie-breaks make the exclusive attribution independent of the
		// order events happen to have in the file.
		if c := cmp.Compare(t.Names[a.Name], t.Names[b.Name]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return cmp.Compare(a.Corr, b.Corr)
	})
	steps := t.sortedSteps()
	cats := make([]Category, len(t.Names))
	for i := range cats {
		cats[i] = CatOther
	}
	seenName := make([]bool, len(t.Names))
	for _, o := range t.Ops {
		if !seenName[o.Name] {
			seenName[o.Name] = true
			cats[o.Name] = Categorize(o.Kind, t.Names[o.Name])
		}
	}
	for lo := 0; lo < len(t.Ops); {
		hi := lo
		for hi < len(t.Ops) && t.Ops[hi].Device == t.Ops[lo].Device {
			hi++
		}
		a := &deviceAnalysis{t: t, ops: t.Ops[lo:hi], cats: cats, steps: steps, opts: opts}
		d, flags := a.run()
		r.Devices = append(r.Devices, d)
		r.Flags = append(r.Flags, flags...)
		lo = hi
	}
	if len(t.Ops) == 0 {
		r.Flags = append(r.Flags, Flag{Code: "no_gpu_ops", Count: 0,
			Detail:      "the trace has no kernel, memcpy or memset events",
			BlastRadius: "there is no GPU accounting at all; was the profiler run with ProfilerActivity.CUDA?"})
	}
	return r
}

// traceFlags are the flags about reading the trace.
func (t *Trace) traceFlags() []Flag {
	var fs []Flag
	if t.Truncated {
		fs = append(fs, Flag{Code: "truncated", Count: 1,
			Detail:      fmt.Sprintf("the JSON ends at byte %d inside the event list", t.TruncatedAt),
			BlastRadius: "every total is a lower bound; the last step, its gaps and all events after the cut are missing"})
	}
	reasons := make([]string, 0, len(t.Dropped))
	for k := range t.Dropped {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fs = append(fs, Flag{Code: "dropped", Count: t.Dropped[k],
			Detail:      fmt.Sprintf("%d events dropped: %s", t.Dropped[k], k),
			BlastRadius: "dropped GPU ops are missing from every figure; dropped launches or labels only from gap parts and label tables"})
	}
	return fs
}

// sortedSteps are the host-side ProfilerStep annotations in time order.
func (t *Trace) sortedSteps() []Label {
	st := slices.Clone(t.Steps)
	slices.SortFunc(st, func(a, b Label) int {
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.End, b.End)
	})
	// A step recorded twice (as a cpu_op and a user_annotation, say) is one step.
	return slices.CompactFunc(st, func(a, b Label) bool { return a.Start == b.Start && a.End == b.End && a.Name == b.Name })
}

// deviceAnalysis holds the working state for one device.
type deviceAnalysis struct {
	t     *Trace
	ops   []Op // this device's ops, sorted by start
	cats  []Category
	steps []Label
	opts  Options

	excl    []int64 // exclusive ns per op
	launch  []int32 // index into t.Launches per op, -1 if none
	step    []int32 // step per op, -1 if none
	typical []bool  // per step
	flags   []Flag
}

func (a *deviceAnalysis) flag(code string, count int64, detail, blast string) {
	dev := int(a.ops[0].Device)
	a.flags = append(a.flags, Flag{Code: code, Device: &dev, Count: count, Detail: detail, BlastRadius: blast})
}

func (a *deviceAnalysis) run() (Device, []Flag) {
	ops := a.ops
	d := Device{Device: int(ops[0].Device), Ops: len(ops)}
	a.joinLaunches()
	a.tagSteps()

	// Σdur, span, per-stream figures and the duration and window checks.
	var neg, zero, outside int64
	first, last := int64(0), int64(0)
	haveSpan := false
	type streamAcc struct {
		Stream
		end      int64
		positive bool // an op with dur > 0 has been seen
	}
	streams := map[int32]*streamAcc{}
	for _, o := range ops {
		st := streams[o.Stream]
		if st == nil {
			st = &streamAcc{Stream: Stream{Stream: int(o.Stream)}, end: o.Start}
			streams[o.Stream] = st
		}
		st.Ops++
		if o.Dur < 0 {
			neg++
			continue
		}
		if o.Dur == 0 {
			zero++
			continue
		}
		if a.t.HasProfilerSpan && (o.Start < a.t.ProfilerStart || o.End() > a.t.ProfilerEnd) {
			outside++
		}
		d.SumDurNS += o.Dur
		st.SumDurNS += o.Dur
		if st.positive && o.Start < st.end {
			st.SelfOverlaps++
			if o.End() > st.end {
				st.BusyNS += o.End() - st.end
				st.end = o.End()
			}
		} else {
			st.BusyNS += o.Dur
			st.end = o.End()
		}
		st.positive = true
		if !haveSpan || o.Start < first {
			first = o.Start
		}
		if !haveSpan || o.End() > last {
			last = o.End()
		}
		haveSpan = true
	}
	var selfOverlaps int64
	for _, st := range streams {
		d.Streams = append(d.Streams, st.Stream)
		selfOverlaps += int64(st.SelfOverlaps)
	}
	slices.SortFunc(d.Streams, func(x, y Stream) int { return cmp.Compare(x.Stream, y.Stream) })
	if haveSpan {
		d.SpanNS = last - first
	}

	gaps := a.sweep(&d)
	d.OverlapNS = d.SumDurNS - d.BusyNS
	if d.SpanNS > 0 {
		d.BusyFraction = float64(d.BusyNS) / float64(d.SpanNS)
	}
	d.Steps = a.stepFigures(gaps)
	d.Gaps = gaps.summary()
	// Gaps are done before labels so that the per-gap buffers are dead
	// (gaps is not used below) when labels allocate their per-op ones.
	d.Categories, d.Kernels = a.breakdowns(d.BusyNS)
	d.Labels = []LabelTable{a.labels(true, d.BusyNS), a.labels(false, d.BusyNS)}

	if neg > 0 {
		a.flag("negative_duration", neg, fmt.Sprintf("%d ops have dur < 0", neg),
			"they are left out of busy time, Σdur and every breakdown")
	}
	if zero > 0 {
		a.flag("zero_duration", zero, fmt.Sprintf("%d ops have dur = 0", zero),
			"none beyond op counts: they add 0 ns")
	}
	if selfOverlaps > 0 {
		a.flag("stream_overlap", selfOverlaps, fmt.Sprintf("%d ops start before the previous op on their stream ends", selfOverlaps),
			"per-stream Σdur counts that time twice and the timestamps on those streams are suspect; busy time and the exclusive rows count it once")
	}
	if outside > 0 {
		a.flag("out_of_window", outside, fmt.Sprintf("%d ops lie partly outside the profiler's own trace span", outside),
			"their time is counted; span and busy fraction include it")
	}
	return d, a.flags
}

// joinLaunches finds each op's launch by correlation id.
func (a *deviceAnalysis) joinLaunches() {
	ls := a.t.Launches
	a.launch = make([]int32, len(a.ops))
	var noCorr, noLaunch int64
	for i, o := range a.ops {
		a.launch[i] = -1
		if o.Corr == 0 {
			noCorr++
			continue
		}
		j, ok := slices.BinarySearchFunc(ls, o.Corr, func(l Launch, c uint32) int { return cmp.Compare(l.Corr, c) })
		if !ok {
			noLaunch++
			continue
		}
		a.launch[i] = int32(j)
	}
	const blast = "gap parts for the gaps these ops end are unattributed, their step is taken from their GPU start instead of their launch, and they are unlabelled in the user_annotation table; busy time, categories and kernels are unaffected"
	if noCorr > 0 {
		a.flag("no_correlation", noCorr, fmt.Sprintf("%d ops have no correlation id", noCorr), blast)
	}
	if noLaunch > 0 {
		a.flag("no_launch", noLaunch, fmt.Sprintf("%d ops have a correlation id with no cuda_runtime/cuda_driver launch in the trace", noLaunch), blast)
	}
}

// launchPoint is when the host launched op i, or its GPU start without a launch.
func (a *deviceAnalysis) launchPoint(i int) int64 {
	if j := a.launch[i]; j >= 0 {
		return a.t.Launches[j].Start
	}
	return a.ops[i].Start
}

// tagSteps assigns each op to the step in which it was launched: the digest's
// rule that work belongs to the iteration that submitted it, so per-step
// bands are right even when a step's kernels run after its host side ends.
func (a *deviceAnalysis) tagSteps() {
	a.step = make([]int32, len(a.ops))
	steps := a.steps
	var before int64
	for i := range a.ops {
		a.step[i] = -1
		x := a.launchPoint(i)
		k := sort.Search(len(steps), func(k int) bool { return steps[k].Start > x }) - 1
		if k >= 0 && x < steps[k].End {
			a.step[i] = int32(k)
		} else if len(steps) > 0 && x < steps[0].Start {
			before++
		}
	}
	n := len(steps)
	a.typical = make([]bool, n)
	for k := range a.typical {
		a.typical[k] = a.opts.AllSteps || n < 3 || (k > 0 && k < n-1)
	}
	if n == 0 {
		a.flag("no_steps", 0, "no ProfilerStep#N annotations: the trace was not recorded with profiler.step()",
			"no per-step figures; every per_step_ns is null")
		return
	}
	if n < 3 && !a.opts.AllSteps {
		a.flag("few_steps", int64(n), fmt.Sprintf("only %d steps: the first and last cannot be set aside", n),
			"typical figures include the warm-up and the possibly truncated step")
	}
	for k := 1; k < n; k++ {
		p, q := stepNumber(a.t.Names[steps[k-1].Name]), stepNumber(a.t.Names[steps[k].Name])
		// Only forward jumps: steps recorded on two threads interleave and
		// would otherwise read as negative gaps.
		if p >= 0 && q > p+1 {
			a.flag("step_missing", q-p-1, fmt.Sprintf("steps jump from #%d to #%d", p, q),
				"the missing steps are in no figure; typical figures use the steps present")
		}
	}
	if before > 0 {
		a.flag("work_before_first_step", before, fmt.Sprintf("%d ops were launched before the first step began", before),
			"their time is in the totals but in no step: the first step's start is missing from the trace")
	}
}

// gapSet collects gap lengths for the statistics and sums their parts.
type gapSet struct {
	lens  []int64
	steps []int32
	sum   Gaps
}

func (g *gapSet) summary() Gaps {
	s := g.sum
	s.Count = len(g.lens)
	if s.Count == 0 {
		return s
	}
	// Sorted in place: a clone would double the largest per-gap buffer.
	sorted := g.lens
	slices.Sort(sorted)
	s.MeanNS = s.TotalNS / int64(s.Count)
	s.P50NS = nearestRank(sorted, 50)
	s.P90NS = nearestRank(sorted, 90)
	s.MaxNS = sorted[len(sorted)-1]
	s.P50xNNS = s.P50NS * int64(s.Count)
	return s
}

// nearestRank is the p-th percentile of sorted values by the nearest-rank
// method: the smallest value with at least p% of values at or below it. It
// is always an observed gap, which keeps p50 × n meaningful.
func nearestRank(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	k := (p*len(sorted) + 99) / 100
	return sorted[max(k, 1)-1]
}

// sweep walks the ops in start order. It computes the busy union, the
// exclusive time of each op (each overlapped nanosecond goes to the
// highest-priority running op: compute over copies over communication,
// then the earliest started, then the lowest stream) and every gap between
// busy intervals with its parts.
func (a *deviceAnalysis) sweep(d *Device) *gapSet {
	ops := a.ops
	a.excl = make([]int64, len(ops))
	prio := func(i int32) uint8 { return a.cats[ops[i].Name].priority() }
	ends := idxHeap{less: func(x, y int32) bool { return ops[x].End() < ops[y].End() }}
	owners := idxHeap{less: func(x, y int32) bool {
		if px, py := prio(x), prio(y); px != py {
			return px < py
		}
		return x < y // ops are sorted by start, then stream
	}}
	gs := &gapSet{}
	var t, ivStart, prevEnd int64
	open, havePrev := false, false
	i := 0
	for {
		if ends.len() == 0 {
			if open {
				d.BusyNS += t - ivStart
				prevEnd, havePrev, open = t, true, false
			}
			if i == len(ops) {
				break
			}
			t = ops[i].Start
		}
		for i < len(ops) && ops[i].Start <= t {
			if ops[i].Dur > 0 {
				if !open {
					open, ivStart = true, t
					if havePrev {
						a.gap(gs, prevEnd, t, i)
					}
				}
				ends.push(int32(i))
				owners.push(int32(i))
			}
			i++
		}
		for ends.len() > 0 && ops[ends.top()].End() <= t {
			ends.pop()
		}
		if ends.len() == 0 {
			continue
		}
		next := ops[ends.top()].End()
		if i < len(ops) && ops[i].Start < next {
			next = ops[i].Start
		}
		for ops[owners.top()].End() <= t {
			owners.pop()
		}
		a.excl[owners.top()] += next - t
		t = next
	}
	return gs
}

// gap splits the idle time [start, end) before op next into its parts.
func (a *deviceAnalysis) gap(gs *gapSet, start, end int64, next int) {
	g := Gap{Start: start, End: end, Next: a.ops[next], Step: int(a.step[next])}
	if j := a.launch[next]; j >= 0 {
		l := a.t.Launches[j]
		clip := func(x int64) int64 { return min(max(x, start), end) }
		ls, le := clip(l.Start), clip(max(l.End, l.Start))
		g.HostLate = ls - start
		g.Launch = le - ls
		g.Queued = end - le
	} else {
		g.Unattributed = end - start
	}
	gs.lens = append(gs.lens, end-start)
	gs.steps = append(gs.steps, int32(g.Step))
	gs.sum.TotalNS += end - start
	gs.sum.HostLateNS += g.HostLate
	gs.sum.LaunchNS += g.Launch
	gs.sum.QueuedNS += g.Queued
	gs.sum.UnattributedNS += g.Unattributed
	if a.opts.onGap != nil {
		a.opts.onGap(int(a.ops[0].Device), g)
	}
}

// typicalSteps is the number of typical steps.
func (a *deviceAnalysis) typicalSteps() int {
	n := 0
	for _, ok := range a.typical {
		if ok {
			n++
		}
	}
	return n
}

// perStep turns a sum over typical steps into a mean per typical step.
func (a *deviceAnalysis) perStep(sum int64, n int) *int64 {
	if n == 0 {
		return nil
	}
	v := sum / int64(n)
	return &v
}

func (a *deviceAnalysis) isTypical(i int) bool {
	k := a.step[i]
	return k >= 0 && a.typical[k]
}

// breakdowns are the category and kernel-name tables.
func (a *deviceAnalysis) breakdowns(busy int64) (cats, kernels []Row) {
	nTyp := a.typicalSteps()
	type acc struct {
		ops          int
		sum, ex, typ int64
	}
	var byCat [numCategories]acc
	byName := map[int32]*acc{}
	for i, o := range a.ops {
		c := a.cats[o.Name]
		n := byName[o.Name]
		if n == nil {
			n = &acc{}
			byName[o.Name] = n
		}
		for _, x := range []*acc{&byCat[c], n} {
			x.ops++
			if o.Dur > 0 {
				x.sum += o.Dur
			}
			x.ex += a.excl[i]
			if a.isTypical(i) {
				x.typ += a.excl[i]
			}
		}
	}
	share := func(x int64) float64 {
		if busy == 0 {
			return 0
		}
		return float64(x) / float64(busy)
	}
	for c := range numCategories {
		x := byCat[c]
		cats = append(cats, Row{Name: c.String(), Ops: x.ops, SumDurNS: x.sum, ExclusiveNS: x.ex,
			Share: share(x.ex), PerStepNS: a.perStep(x.typ, nTyp)})
	}
	for name, x := range byName {
		kernels = append(kernels, Row{Name: a.t.Names[name], Category: a.cats[name].String(), Ops: x.ops,
			SumDurNS: x.sum, ExclusiveNS: x.ex, Share: share(x.ex), PerStepNS: a.perStep(x.typ, nTyp)})
	}
	slices.SortFunc(kernels, func(x, y Row) int {
		if c := cmp.Compare(y.ExclusiveNS, x.ExclusiveNS); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	return cats, kernels
}

// stepFigures builds the per-step table and the typical medians.
func (a *deviceAnalysis) stepFigures(gs *gapSet) Steps {
	n := len(a.steps)
	out := Steps{Steps: []Step{}}
	if n == 0 {
		for i := range a.ops {
			out.UntaggedBusyNS += a.excl[i]
		}
		return out
	}
	out.Steps = make([]Step, n)
	gpuFirst := make([]int64, n)
	gpuLast := make([]int64, n)
	for k, s := range a.steps {
		name := a.t.Names[s.Name]
		out.Steps[k] = Step{Name: name, Number: stepNumber(name), StartNS: s.Start - a.steps[0].Start,
			SpanNS: s.End - s.Start, Typical: a.typical[k]}
		gpuFirst[k], gpuLast[k] = -1, -1
	}
	for i, o := range a.ops {
		k := a.step[i]
		if k < 0 {
			out.UntaggedBusyNS += a.excl[i]
			continue
		}
		st := &out.Steps[k]
		st.Ops++
		st.BusyNS += a.excl[i]
		if o.Dur > 0 {
			if gpuFirst[k] < 0 || o.Start < gpuFirst[k] {
				gpuFirst[k] = o.Start
			}
			if gpuLast[k] < 0 || o.End() > gpuLast[k] {
				gpuLast[k] = o.End()
			}
		}
	}
	// Sort the gaps by (step, length) in place so each step's gaps are a
	// sorted run: per-step medians without a copy per step.
	sort.Sort(byStepLen{gs})
	for lo := 0; lo < len(gs.lens); {
		hi := lo
		for hi < len(gs.lens) && gs.steps[hi] == gs.steps[lo] {
			hi++
		}
		if k := gs.steps[lo]; k >= 0 {
			st := &out.Steps[k]
			st.GapCount = hi - lo
			for _, l := range gs.lens[lo:hi] {
				st.GapNS += l
			}
			st.GapP50NS = nearestRank(gs.lens[lo:hi], 50)
		}
		lo = hi
	}
	for k := range out.Steps {
		if gpuFirst[k] >= 0 {
			out.Steps[k].GPUSpanNS = gpuLast[k] - gpuFirst[k]
		}
	}
	if n >= 3 && !a.opts.AllSteps {
		out.Steps[0].Note = "first step: warm-up, excluded from typical figures"
		out.Steps[n-1].Note = "last step: may be cut by the profiler window, excluded from typical figures"
	}
	var spans, busy, gaps []int64
	var fracs []float64
	for _, s := range out.Steps {
		if !s.Typical {
			continue
		}
		spans = append(spans, s.SpanNS)
		busy = append(busy, s.BusyNS)
		gaps = append(gaps, s.GapNS)
		if s.SpanNS > 0 {
			fracs = append(fracs, float64(s.BusyNS)/float64(s.SpanNS))
		}
	}
	out.Typical = Typical{Steps: len(spans), SpanNS: median(spans), BusyNS: median(busy), GapNS: median(gaps)}
	if len(fracs) > 0 {
		slices.Sort(fracs)
		out.Typical.BusyFraction = fracs[(len(fracs)-1)/2]
	}
	return out
}

// median is the lower median: an observed value, never an average of two.
func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// byStepLen sorts a gapSet's parallel slices by step, then length.
type byStepLen struct{ g *gapSet }

func (b byStepLen) Len() int { return len(b.g.lens) }
func (b byStepLen) Less(i, j int) bool {
	if b.g.steps[i] != b.g.steps[j] {
		return b.g.steps[i] < b.g.steps[j]
	}
	return b.g.lens[i] < b.g.lens[j]
}
func (b byStepLen) Swap(i, j int) {
	b.g.lens[i], b.g.lens[j] = b.g.lens[j], b.g.lens[i]
	b.g.steps[i], b.g.steps[j] = b.g.steps[j], b.g.steps[i]
}

// idxHeap is a binary min-heap of op indices under less.
type idxHeap struct {
	a    []int32
	less func(x, y int32) bool
}

func (h *idxHeap) len() int   { return len(h.a) }
func (h *idxHeap) top() int32 { return h.a[0] }
func (h *idxHeap) push(x int32) {
	h.a = append(h.a, x)
	for i := len(h.a) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(h.a[i], h.a[p]) {
			break
		}
		h.a[i], h.a[p] = h.a[p], h.a[i]
		i = p
	}
}

func (h *idxHeap) pop() {
	n := len(h.a) - 1
	h.a[0] = h.a[n]
	h.a = h.a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(h.a[l], h.a[m]) {
			m = l
		}
		if r < n && h.less(h.a[r], h.a[m]) {
			m = r
		}
		if m == i {
			return
		}
		h.a[i], h.a[m] = h.a[m], h.a[i]
		i = m
	}
}
