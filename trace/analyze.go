package trace

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
)

// DefaultBufferBytes is the default Options.BufferBytes.
const DefaultBufferBytes = 4 << 20

// Options change what Report computes and how much memory it may use.
type Options struct {
	// AllSteps keeps the first and last steps in the typical figures.
	AllSteps bool

	// Scratch, when set, bounds Analyze's memory whatever the size of the
	// trace: ops, launches, labels, label points and gaps are sorted in
	// buffers of BufferBytes, and full buffers are spilled to Scratch as
	// sorted runs that are merged when read (an external merge sort). The
	// figures are the same as without it. Without Scratch everything is
	// sorted in memory, about 100 bytes per GPU op at the peak.
	Scratch Scratch
	// BufferBytes bounds one sort buffer, counted in spilled bytes (31 to
	// 56 a record; in memory a record takes up to a third more, for
	// alignment); 0 means DefaultBufferBytes. At most five buffers are live
	// at once (see docs/trace-performance.md).
	BufferBytes int

	// HostOps attributes each GPU op's duration to the host op that
	// launched it (Device.HostOps). Host ops outnumber GPU ops, so this
	// sorts one more record per host op: about 12 bytes each, spilled like
	// the others.
	HostOps bool

	// KernelWaitBelowNS is the idle breakdown's kernel-wait threshold: an
	// interval between two ops on a stream, not host wait, that is shorter
	// counts as kernel wait. 0 means IdleKernelWaitBelowNS (30 ns, what
	// HolisticTraceAnalysis documents); HTA as users run it compares its
	// default 30 with intervals in µs, so 30_000 reproduces that.
	KernelWaitBelowNS int64

	// OnGap, when set, sees every gap of every device, one at a time, in no
	// promised order: a caller that wants more than the summary in
	// Device.Gaps (a histogram of gap lengths and their causes) builds it
	// here without the report holding every gap.
	OnGap func(device int, g Gap)

	// collect, when set (by Ranks), receives every communication kernel.
	collect *rankCollector

	// onGap, when set, sees every gap; tests use it to check each gap's
	// identity without the report holding a slice of all gaps.
	onGap func(device int, g Gap)
}

func (o Options) kernelWaitBelowNS() int64 {
	if o.KernelWaitBelowNS > 0 {
		return o.KernelWaitBelowNS
	}
	return IdleKernelWaitBelowNS
}

func (o Options) bufferBytes() int {
	if o.BufferBytes > 0 {
		return o.BufferBytes
	}
	return DefaultBufferBytes
}

// Analyze parses a trace stream and reports on it. With opts.Scratch set
// its memory is bounded independently of the trace's size.
func Analyze(r io.Reader, opts Options) (*Report, error) {
	t, err := parse(r, newSinks(opts))
	if err != nil {
		return nil, err
	}
	return t.report(opts)
}

// sinks are the sorters the parser files records into when the analysis
// streams (Analyze) instead of keeping slices (Parse).
type sinks struct {
	ops        *sorter[Op]
	launches   *sorter[Launch]
	gpuLabels  *sorter[Label]
	hostLabels *sorter[Label]
	modLabels  *sorter[Label]
	hostOps    *sorter[hostOpRec] // nil without Options.HostOps
	opExts     *sorter[opExt]
}

// smallBuffer is the buffer of the sorts that only some traces or options
// use (module labels, host ops): a quarter of the others, so that the
// memory bound holds with them.
func (o Options) smallBuffer() int { return max(o.bufferBytes()/4, 1) }

func newSinks(opts Options) *sinks {
	b := opts.bufferBytes()
	s := &sinks{
		ops:        newSorter(opCodec, opByCorr, opts.Scratch, b),
		launches:   newSorter(launchCodec, launchByCorr, opts.Scratch, b),
		gpuLabels:  newSorter(labelCodec, labelByTrack, opts.Scratch, b),
		hostLabels: newSorter(labelCodec, labelByTrack, opts.Scratch, b),
		modLabels:  newSorter(labelCodec, labelByTrack, opts.Scratch, opts.smallBuffer()),
	}
	if opts.HostOps {
		s.hostOps = newSorter(hostOpCodec, hostOpByExt, opts.Scratch, opts.smallBuffer())
		s.opExts = newSorter(opExtCodec, opExtByExt, opts.Scratch, opts.smallBuffer())
	}
	return s
}

func (s *sinks) close() error {
	errs := []error{s.ops.close(), s.launches.close(), s.gpuLabels.close(), s.hostLabels.close(), s.modLabels.close()}
	if s.hostOps != nil {
		errs = append(errs, s.hostOps.close(), s.opExts.close())
	}
	return errors.Join(errs...)
}

// Report computes the accounting of a parsed trace, in memory. It sorts
// t.Ops and t.Launches in place (by correlation id).
func (t *Trace) Report(opts Options) *Report {
	if t.sink == nil {
		// In-memory sorters never spill, so nothing below can fail.
		opts.Scratch = nil
		s := newSinks(opts)
		s.ops.adopt(t.Ops)
		s.launches.adopt(t.Launches)
		var gpu, host, mod []Label
		for _, l := range t.Labels {
			switch {
			case l.GPU:
				gpu = append(gpu, l)
			case l.Module:
				mod = append(mod, l)
			default:
				host = append(host, l)
			}
		}
		s.gpuLabels.adopt(gpu)
		s.hostLabels.adopt(host)
		s.modLabels.adopt(mod)
		if opts.HostOps {
			s.hostOps.adopt(slices.Clone(t.hostOpRecs))
			s.opExts.adopt(slices.Clone(t.opExtRecs))
		}
		t.sink = s
	}
	r, err := t.report(opts)
	if err != nil {
		// Only scratch I/O can fail, and a parsed trace is reported without
		// scratch; say so rather than return nothing.
		r = &Report{SchemaVersion: SchemaVersion, Devices: []Device{}, Flags: []Flag{{Code: "internal_error", Detail: err.Error(),
			BlastRadius: "the report is empty"}}}
	}
	return r
}

// report runs the analysis over t's sinks: the join of ops to launches by
// correlation id, then a sweep per device over the ops in time order. Each
// stage reads sorted runs and writes the records the next needs, so that
// what is in memory is bounded by the sort buffers, the ops running at one
// instant, and tables by name, stream and step.
func (t *Trace) report(opts Options) (_ *Report, err error) {
	sk := t.sink
	t.sink = nil
	var open []interface{ close() error }
	defer func() {
		var errs []error
		for _, c := range open {
			errs = append(errs, c.close())
		}
		errs = append(errs, sk.close())
		if cerr := errors.Join(errs...); err == nil && cerr != nil {
			err = fmt.Errorf("release scratch: %w", cerr)
		}
	}()
	r := &Report{
		SchemaVersion:   SchemaVersion,
		DisplayTimeUnit: t.DisplayTimeUnit,
		BaseTimeNS:      t.BaseTimeNS,
		Events:          t.Events,
		Bytes:           t.Bytes,
		Rank:            t.Rank,
		CUDASync:        t.Sync,
		Devices:         []Device{},
		Flags:           []Flag{},
	}
	r.Flags = append(r.Flags, t.traceFlags()...)

	a := &analysis{t: t, opts: opts, steps: t.sortedSteps(), rank: t.nameRanks(),
		cats: make([]Category, len(t.Names)), catSeen: make([]bool, len(t.Names))}
	n := len(a.steps)
	a.typical = make([]bool, n)
	for k := range a.typical {
		a.typical[k] = opts.AllSteps || n < 3 || (k > 0 && k < n-1)
		if a.typical[k] {
			a.nTypical++
		}
	}

	if sk.hostOps != nil {
		if a.hostOps, err = t.joinHostOps(sk.hostOps, sk.opExts); err != nil {
			return nil, fmt.Errorf("join GPU ops to host ops: %w", err)
		}
	}
	ops, err := sk.ops.finish()
	if err != nil {
		return nil, fmt.Errorf("sort ops: %w", err)
	}
	open = append(open, ops)
	launches, err := sk.launches.finish()
	if err != nil {
		return nil, fmt.Errorf("sort launches: %w", err)
	}
	open = append(open, launches)
	byTime := newSorter(jopCodec, jopByTime(a.rank), opts.Scratch, opts.bufferBytes())
	open = append(open, byTime)
	joins := map[int16]*joinStats{}
	if err := a.join(ops, launches, byTime, joins); err != nil {
		return nil, fmt.Errorf("join ops to launches: %w", err)
	}
	if a.orphans > 0 {
		r.Flags = append(r.Flags, Flag{Code: "gpu_ops_missing", Count: a.orphans,
			Detail:      fmt.Sprintf("%d kernel launches have no GPU op with their correlation id: the trace lost those GPU records (a full CUPTI buffer, or the profiler stopped before they ran)", a.orphans),
			BlastRadius: "the lost ops are missing from every figure: busy time, categories, kernels and steps are low, gaps high; if they ran on other GPUs, those GPUs' figures"})
	}
	// The joined records carry what the sweep needs of the launches.
	if err := errors.Join(ops.close(), launches.close()); err != nil {
		return nil, fmt.Errorf("release scratch: %w", err)
	}
	timed, err := byTime.finish()
	if err != nil {
		return nil, fmt.Errorf("sort ops by time: %w", err)
	}
	open = append(open, timed)
	if a.gpuLabels, err = sk.gpuLabels.finish(); err != nil {
		return nil, fmt.Errorf("sort labels: %w", err)
	}
	open = append(open, a.gpuLabels)
	if a.hostLabels, err = sk.hostLabels.finish(); err != nil {
		return nil, fmt.Errorf("sort labels: %w", err)
	}
	open = append(open, a.hostLabels)
	if a.modLabels, err = sk.modLabels.finish(); err != nil {
		return nil, fmt.Errorf("sort labels: %w", err)
	}
	open = append(open, a.modLabels)
	a.hasModules = sk.modLabels.n > 0

	p := newPeeker(timed.iter())
	for p.ok {
		dev := p.cur.Device
		ds := &deviceAnalysis{analysis: a, dev: dev, js: joins[dev], devPos: len(r.Devices)}
		d, err := ds.run(p)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", dev, err)
		}
		r.Devices = append(r.Devices, d)
		r.Flags = append(r.Flags, ds.flags...)
	}
	if p.it.err != nil {
		return nil, fmt.Errorf("read ops by time: %w", p.it.err)
	}
	if len(r.Devices) == 0 {
		r.Flags = append(r.Flags, Flag{Code: "no_gpu_ops", Count: 0,
			Detail:      "the trace has no kernel, memcpy or memset events",
			BlastRadius: "there is no GPU accounting at all; was the profiler run with ProfilerActivity.CUDA?"})
	}
	return r, nil
}

// traceFlags are the flags about reading the trace.
func (t *Trace) traceFlags() []Flag {
	var fs []Flag
	if t.Truncated {
		fs = append(fs, Flag{Code: "truncated", Count: 1,
			Detail:      fmt.Sprintf("the JSON ends at byte %d inside the event list", t.TruncatedAt),
			BlastRadius: "every total is a lower bound; the last step, its gaps and all events after the cut are missing"})
	}
	if t.namesMerged > 0 {
		fs = append(fs, Flag{Code: "names_merged", Count: t.namesMerged,
			Detail: fmt.Sprintf("%d events have kernel or label names beyond the first %d distinct names (%d MiB); they are merged into %q rows",
				t.namesMerged, maxNames, maxNameBytes>>20, OtherNames+" …)"),
			BlastRadius: "kernel and label tables have merged rows (one per category for kernels, so category figures are exact); busy time, categories, steps and gaps are unaffected"})
	}
	if t.hintsDropped > 0 {
		fs = append(fs, Flag{Code: "host_hints_dropped", Count: t.hintsDropped,
			Detail:      fmt.Sprintf("%d optimizer or communication host ops came after the first %d and were not remembered", t.hintsDropped, maxHints),
			BlastRadius: "kernels they launched are categorised by their names alone (optimizer and communication may be low, elementwise high)"})
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

// nameRanks gives each name id its rank in string order, so the time order
// can break ties by name without comparing strings.
func (t *Trace) nameRanks() []int32 {
	ids := make([]int32, len(t.Names))
	for i := range ids {
		ids[i] = int32(i)
	}
	// A kernel name launched under a host op's hint has a second entry
	// (see internHinted): equal names rank by id.
	slices.SortFunc(ids, func(a, b int32) int { return cmp.Or(cmp.Compare(t.Names[a], t.Names[b]), cmp.Compare(a, b)) })
	rank := make([]int32, len(ids))
	for r, id := range ids {
		rank[id] = int32(r)
	}
	return rank
}

// analysis is the state shared by all devices.
type analysis struct {
	t        *Trace
	opts     Options
	steps    []Label
	typical  []bool // per step
	nTypical int    // typical steps
	rank     []int32
	cats     []Category // per name, decided by the first op seen in time order
	catSeen  []bool
	orphans  int64 // launches whose correlation id no GPU op has

	gpuLabels, hostLabels, modLabels *sorted[Label]
	hasModules                       bool
	hostOps                          map[int16]map[int32]*hostOpAcc // by device and host op name; nil without Options.HostOps
}

// joinStats are one device's join and step-tagging counts.
type joinStats struct {
	noCorr, noLaunch, before, beforeLaunch int64
}

// join reads ops and launches, both sorted by correlation id, and writes
// each op with its launch and step to out. Several ops may share a launch;
// of several launches with one id, the earliest is used.
func (a *analysis) join(ops *sorted[Op], launches *sorted[Launch], out *sorter[jop], stats map[int16]*joinStats) error {
	lp := newPeeker(launches.iter())
	oi := ops.iter()
	steps := a.steps
	// A kernel launch whose correlation id no op has is a GPU record the
	// trace lost (CUPTI's buffer full, the profiler stopped early):
	// counted once per id, however many launches share it.
	matched, lastCounted := false, uint32(0)
	skip := func() {
		c := lp.cur.Corr
		if !matched && c != lastCounted && lp.cur.Kernel {
			a.orphans++
			lastCounted = c
		}
		lp.advance()
		if lp.ok && lp.cur.Corr != c {
			matched = false
		}
	}
	var o Op
	for oi.next(&o) {
		st := stats[o.Device]
		if st == nil {
			st = &joinStats{}
			stats[o.Device] = st
		}
		j := jop{Op: o, Step: -1}
		if o.Corr == 0 {
			st.noCorr++
		} else {
			for lp.ok && lp.cur.Corr < o.Corr {
				skip()
			}
			if lp.ok && lp.cur.Corr == o.Corr {
				matched = true
				j.LStart, j.LEnd, j.Thread, j.HasLaunch = lp.cur.Start, lp.cur.End, lp.cur.Thread, true
				if o.Start < j.LStart {
					// The GPU cannot run an op before the host asks for
					// it: one of the two timestamps is corrupt, and the op
					// cannot be placed on the timeline.
					st.beforeLaunch++
					continue
				}
			} else {
				st.noLaunch++
			}
		}
		// The step is the one in which the op was launched: the digest's
		// rule that work belongs to the iteration that submitted it, so
		// per-step bands are right even when a step's kernels run after
		// its host side ends.
		x := j.launchPoint()
		k := sort.Search(len(steps), func(k int) bool { return steps[k].Start > x }) - 1
		if k >= 0 && x < steps[k].End {
			j.Step = int32(k)
		} else if len(steps) > 0 && x < steps[0].Start {
			st.before++
		}
		if err := out.add(j); err != nil {
			return err
		}
	}
	for lp.ok {
		skip()
	}
	return errors.Join(oi.err, lp.it.err)
}

// deviceAnalysis holds the working state for one device.
type deviceAnalysis struct {
	*analysis
	dev    int16
	devPos int // the device's position among the trace's devices
	js     *joinStats
	flags  []Flag

	hostSorted   *sorted[point] // hostPts, sorted once for both host label tables
	delays       *sorter[gapRec]
	delayCount   int
	delaySum     int64
	short        ShortKernels
	kernelSumDur int64
	commComp     int64
	collSeq      uint32

	// The ops running at the current instant of the sweep, in slots, with
	// two heaps over them: by end time, and by who owns the instant.
	slots       []slot
	free        []int32
	ends, owner slotHeap
	seq         int64 // ops read so far, in time order

	byCat       [numCategories]acc
	byName      map[int32]*acc
	stepRows    []Step
	gpuFirst    []int64 // per step
	gpuLast     []int64
	untagged    int64 // busy time of ops in no step
	typicalBusy int64 // busy time of ops in typical steps
	gpuPts      *sorter[point]
	hostPts     *sorter[point]
	hostUnlab   int64 // busy time of ops without a launch, for the host label table
	gapLens     *sorter[gapRec]
	gaps        Gaps
	untaggedGap int64 // gaps ended by ops in no step

	// Category unions: how many ops of each category run at the current
	// instant, device-wide and per step, and the time at least one did.
	activeCat    [numCategories]int32
	catUnion     [numCategories]int64
	tailUnion    [numCategories]int64 // since the last gap the host caused
	activeStep   []stepCat            // (step, category) pairs running now
	stepCatUnion [][numCategories]int64
}

// stepCat counts the running ops of one step and category.
type stepCat struct {
	step int32
	cat  Category
	n    int32
}

// slot is a running op with its exclusive time so far.
type slot struct {
	j              jop
	seq, excl      int64
	prio           uint8
	endPos, ownPos int
}

// acc accumulates one row of a breakdown.
type acc struct {
	ops          int
	sum, ex, typ int64
	dur          welford
}

// welford accumulates count, mean, variance, min and max in one pass
// (Welford's method: no Σx² to overflow or cancel).
type welford struct {
	n        int
	mean, m2 float64
	min, max int64
}

func (w *welford) add(x int64) {
	if w.n == 0 || x < w.min {
		w.min = x
	}
	if w.n == 0 || x > w.max {
		w.max = x
	}
	w.n++
	d := float64(x) - w.mean
	w.mean += d / float64(w.n)
	w.m2 += d * (float64(x) - w.mean)
}

// stats are the figures; the standard deviation is the sample one (n − 1).
func (w *welford) stats() *DurStats {
	if w.n == 0 {
		return nil
	}
	s := &DurStats{Count: w.n, MeanNS: w.mean, MinNS: w.min, MaxNS: w.max}
	if w.n > 1 {
		s.StdNS = math.Sqrt(max(w.m2, 0) / float64(w.n-1))
	}
	return s
}

func (a *deviceAnalysis) flag(code string, count int64, detail, blast string) {
	dev := int(a.dev)
	a.flags = append(a.flags, Flag{Code: code, Device: &dev, Count: count, Detail: detail, BlastRadius: blast})
}

func (a *deviceAnalysis) isTypical(step int32) bool { return step >= 0 && a.typical[step] }

// run analyses the device whose ops p is at, reading them all.
func (a *deviceAnalysis) run(p *peeker[jop]) (Device, error) {
	d := Device{Device: int(a.dev)}
	b := a.opts.bufferBytes()
	a.gpuPts = newSorter(pointCodec, pointByTrack, a.opts.Scratch, b)
	a.hostPts = newSorter(pointCodec, pointByTrack, a.opts.Scratch, b)
	a.gapLens = newSorter(gapCodec, gapByLen, a.opts.Scratch, b)
	a.delays = newSorter(gapCodec, gapByLen, a.opts.Scratch, a.opts.smallBuffer())
	// On success each is finished and its runs already released; this
	// releases them on the error paths.
	defer func() {
		_ = errors.Join(a.gpuPts.close(), a.hostPts.close(), a.gapLens.close(), a.delays.close())
		if a.hostSorted != nil {
			_ = a.hostSorted.close()
		}
	}()
	a.byName = map[int32]*acc{}
	n := len(a.steps)
	a.stepRows = make([]Step, n)
	a.stepCatUnion = make([][numCategories]int64, n)
	a.gpuFirst = make([]int64, n)
	a.gpuLast = make([]int64, n)
	for k, s := range a.steps {
		name := a.t.Names[s.Name]
		a.stepRows[k] = Step{Name: name, Number: stepNumber(name), StartNS: s.Start - a.steps[0].Start,
			SpanNS: s.End - s.Start, Typical: a.typical[k]}
		a.gpuFirst[k], a.gpuLast[k] = -1, -1
	}
	a.joinFlags()
	a.stepFlags()

	st, err := a.sweep(p, &d)
	if err != nil {
		return d, err
	}
	d.OverlapNS = d.SumDurNS - d.BusyNS
	if d.SpanNS > 0 {
		d.BusyFraction = float64(d.BusyNS) / float64(d.SpanNS)
	}
	if d.Gaps, err = a.gapFigures(); err != nil {
		return d, err
	}
	d.Steps = a.stepFigures()
	d.Categories, d.Kernels = a.breakdowns(d.BusyNS)
	if d.LaunchDelay, err = a.delayFigures(); err != nil {
		return d, err
	}
	d.ShortKernels = a.short
	d.ShortKernels.ThresholdNS = ShortKernelNS
	d.ShortKernels.Share = traceShare(int64(a.short.Count), int64(a.short.Kernels))
	d.ShortKernels.DurShare = traceShare(a.short.SumDurNS, a.kernelSumDur)
	d.CommCompOverlapNS = a.commComp
	d.CommCompOverlap = traceShare(a.commComp, a.catUnion[CatCommunication])
	if a.hostOps != nil {
		d.HostOps = hostOpRows(a.t.hostNames, a.hostOps[a.dev], d.SumDurNS)
	}
	kinds := []labelKind{labelGPU, labelHost}
	if a.hasModules {
		kinds = append(kinds, labelModule)
	}
	for _, k := range kinds {
		lt, err := a.labels(k, d.BusyNS)
		if err != nil {
			return d, err
		}
		d.Labels = append(d.Labels, lt)
	}

	if st.neg > 0 {
		a.flag("negative_duration", st.neg, fmt.Sprintf("%d ops have dur < 0", st.neg),
			"they are left out of busy time, Σdur and every breakdown")
	}
	if st.zero > 0 {
		a.flag("zero_duration", st.zero, fmt.Sprintf("%d ops have dur = 0", st.zero),
			"none beyond op counts: they add 0 ns")
	}
	if st.selfOverlaps > 0 {
		a.flag("stream_overlap", st.selfOverlaps, fmt.Sprintf("%d ops start before the previous op on their stream ends", st.selfOverlaps),
			"per-stream Σdur counts that time twice and the timestamps on those streams are suspect; busy time and the exclusive rows count it once")
	}
	if st.outside > 0 {
		a.flag("out_of_window", st.outside, fmt.Sprintf("%d ops lie partly outside the profiler's own trace span", st.outside),
			"their time is counted; span and busy fraction include it")
	}
	return d, nil
}

func (a *deviceAnalysis) joinFlags() {
	const blast = "gap parts for the gaps these ops end are unattributed, their step is taken from their GPU start instead of their launch, and they are unlabelled in the user_annotation table; busy time, categories and kernels are unaffected"
	if a.js.noCorr > 0 {
		a.flag("no_correlation", a.js.noCorr, fmt.Sprintf("%d ops have no correlation id", a.js.noCorr), blast)
	}
	if a.js.noLaunch > 0 {
		a.flag("no_launch", a.js.noLaunch, fmt.Sprintf("%d ops have a correlation id with no cuda_runtime/cuda_driver launch in the trace", a.js.noLaunch), blast)
	}
	if a.js.beforeLaunch > 0 {
		a.flag("starts_before_launch", a.js.beforeLaunch, fmt.Sprintf("%d ops start before their own launch call: a corrupt GPU or host timestamp", a.js.beforeLaunch),
			"they are left out of every figure (ops, busy time, span, breakdowns, steps, gaps) rather than stretch the span")
	}
}

func (a *deviceAnalysis) stepFlags() {
	steps := a.steps
	n := len(steps)
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
	if a.js.before > 0 {
		a.flag("work_before_first_step", a.js.before, fmt.Sprintf("%d ops were launched before the first step began", a.js.before),
			"their time is in the totals but in no step: the first step's start is missing from the trace")
	}
}

// sweepStats are the duration and window checks the sweep counts.
type sweepStats struct {
	neg, zero, outside, selfOverlaps int64
}

// streamAcc accumulates one stream's figures in time order.
type streamAcc struct {
	Stream
	end       int64
	positive  bool // an op with dur > 0 has been seen
	prevEnd   int64
	hasPrev   bool  // an op with dur ≥ 0 has been seen
	waitBelow int64 // Options.KernelWaitBelowNS
}

// idle books the interval before op o (dur ≥ 0) on its stream as
// HolisticTraceAnalysis's idle time breakdown does: the interval from the
// previous op's end in start order (negative where they overlap), host
// wait when o's launch call began after that end, kernel wait when the
// interval is under the threshold (Options.KernelWaitBelowNS), other
// otherwise.
func (s *streamAcc) idle(o *jop) {
	if s.hasPrev {
		iv := o.Start - s.prevEnd
		s.IdleNS += iv
		switch {
		case o.HasLaunch && o.LStart > s.prevEnd:
			s.IdleHostWaitNS += iv
		case iv < s.waitBelow:
			s.IdleKernelWaitNS += iv
		default:
			s.IdleOtherNS += iv
		}
	}
	s.prevEnd, s.hasPrev = o.End(), true
}

// sweep reads the device's ops in start order. It computes the busy union,
// the exclusive time of each op (each overlapped nanosecond goes to the
// highest-priority running op: compute over copies over communication,
// then the earliest started, then the lowest stream), every gap between
// busy intervals with its parts, Σdur, the span and the per-stream
// figures. An op's exclusive time is final when it ends; it is then handed
// to retire, so only the ops running at one instant are held.
func (a *deviceAnalysis) sweep(p *peeker[jop], d *Device) (sweepStats, error) {
	var st sweepStats
	streams := map[int32]*streamAcc{}
	first, last := int64(0), int64(0)
	haveSpan := false
	a.ends = slotHeap{slots: &a.slots, end: true}
	a.owner = slotHeap{slots: &a.slots}
	var t, ivStart, prevEnd int64
	open, havePrev := false, false
	more := func() bool { return p.ok && p.cur.Device == a.dev }
	for {
		if a.ends.len() == 0 {
			if open {
				d.BusyNS += t - ivStart
				prevEnd, havePrev, open = t, true, false
			}
			if !more() {
				break
			}
			t = p.cur.Start
		}
		for more() && p.cur.Start <= t {
			o := p.cur
			p.advance()
			a.seq++
			d.Ops++
			s := streams[o.Stream]
			if s == nil {
				s = &streamAcc{Stream: Stream{Stream: int(o.Stream)}, end: o.Start, waitBelow: a.opts.kernelWaitBelowNS()}
				streams[o.Stream] = s
			}
			s.Ops++
			if o.Dur >= 0 {
				s.idle(&o)
			}
			if !a.catSeen[o.Name] {
				a.catSeen[o.Name] = true
				if c, ok := a.t.forcedCat[o.Name]; ok {
					a.cats[o.Name] = c
				} else {
					a.cats[o.Name] = Categorize(o.Kind, a.t.Names[o.Name])
				}
			}
			if a.opts.collect != nil && o.Kind == KindKernel && o.Dur >= 0 && a.cats[o.Name] == CatCommunication {
				if err := a.opts.collect.add(a.devPos, a.collSeq, o.Dur); err != nil {
					return st, err
				}
				a.collSeq++
			}
			if o.Dur <= 0 {
				if o.Dur < 0 {
					st.neg++
				} else {
					st.zero++
				}
				if err := a.retire(&o, a.seq, 0); err != nil {
					return st, err
				}
				continue
			}
			if a.t.HasProfilerSpan && (o.Start < a.t.ProfilerStart || o.End() > a.t.ProfilerEnd) {
				st.outside++
			}
			d.SumDurNS += o.Dur
			s.SumDurNS += o.Dur
			if s.positive && o.Start < s.end {
				s.SelfOverlaps++
				if o.End() > s.end {
					s.BusyNS += o.End() - s.end
					s.end = o.End()
				}
			} else {
				s.BusyNS += o.Dur
				s.end = o.End()
			}
			s.positive = true
			if !haveSpan || o.Start < first {
				first = o.Start
			}
			if !haveSpan || o.End() > last {
				last = o.End()
			}
			haveSpan = true

			if !open {
				open, ivStart = true, t
				if havePrev {
					if err := a.gap(prevEnd, t, &o); err != nil {
						return st, err
					}
				}
			}
			a.start(o)
		}
		for a.ends.len() > 0 && a.slots[a.ends.top()].j.End() <= t {
			x := a.ends.top()
			a.ends.remove(a.slots[x].endPos)
			a.owner.remove(a.slots[x].ownPos)
			s := &a.slots[x]
			a.running(&s.j, -1)
			if err := a.retire(&s.j, s.seq, s.excl); err != nil {
				return st, err
			}
			a.free = append(a.free, x)
		}
		if a.ends.len() == 0 {
			continue
		}
		next := a.slots[a.ends.top()].j.End()
		if more() && p.cur.Start < next {
			next = p.cur.Start
		}
		a.slots[a.owner.top()].excl += next - t
		a.unions(next - t)
		t = next
	}
	if p.it.err != nil {
		return st, fmt.Errorf("read ops by time: %w", p.it.err)
	}
	for _, s := range streams {
		d.Streams = append(d.Streams, s.Stream)
		st.selfOverlaps += int64(s.SelfOverlaps)
	}
	slices.SortFunc(d.Streams, func(x, y Stream) int { return cmp.Compare(x.Stream, y.Stream) })
	if haveSpan {
		d.SpanNS = last - first
	}
	return st, nil
}

// start puts an op with dur > 0 into a slot and both heaps.
func (a *deviceAnalysis) start(o jop) {
	var x int32
	if n := len(a.free); n > 0 {
		x = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		x = int32(len(a.slots))
		a.slots = append(a.slots, slot{})
	}
	a.slots[x] = slot{j: o, seq: a.seq, prio: a.cats[o.Name].priority()}
	a.ends.push(x)
	a.owner.push(x)
	a.running(&o, 1)
}

// running counts op o in (delta 1) or out (-1) of the ops running now, by
// category and by step and category.
func (a *deviceAnalysis) running(o *jop, delta int32) {
	c := a.cats[o.Name]
	a.activeCat[c] += delta
	if o.Step < 0 {
		return
	}
	for i := range a.activeStep {
		e := &a.activeStep[i]
		if e.step == o.Step && e.cat == c {
			if e.n += delta; e.n == 0 {
				a.activeStep[i] = a.activeStep[len(a.activeStep)-1]
				a.activeStep = a.activeStep[:len(a.activeStep)-1]
			}
			return
		}
	}
	a.activeStep = append(a.activeStep, stepCat{step: o.Step, cat: c, n: delta})
}

// unions adds dt of running time to every category, and every step's
// category, with an op running now. The (step, category) pairs running at
// one instant are few: the ops running at one instant are.
func (a *deviceAnalysis) unions(dt int64) {
	compute := false
	for c, n := range a.activeCat {
		if n > 0 {
			a.catUnion[c] += dt
			a.tailUnion[c] += dt
			compute = compute || (Category(c) != CatCommunication && Category(c) != CatMemory)
		}
	}
	if compute && a.activeCat[CatCommunication] > 0 {
		a.commComp += dt
	}
	for _, e := range a.activeStep {
		a.stepCatUnion[e.step][e.cat] += dt
	}
}

// retire books a finished op's exclusive time into every table.
func (a *deviceAnalysis) retire(o *jop, seq, excl int64) error {
	typical := a.isTypical(o.Step)
	c := a.cats[o.Name]
	n := a.byName[o.Name]
	if n == nil {
		n = &acc{}
		a.byName[o.Name] = n
	}
	if o.Kind == KindKernel && o.Dur >= 0 {
		a.short.Kernels++
		a.kernelSumDur += o.Dur
		if o.Dur < ShortKernelNS {
			a.short.Count++
			a.short.SumDurNS += o.Dur
		}
		if o.HasLaunch {
			a.delayCount++
			a.delaySum += o.Start - o.LStart
			if err := a.delays.add(gapRec{Len: o.Start - o.LStart, Step: -1}); err != nil {
				return err
			}
		}
	}
	for _, x := range [2]*acc{&a.byCat[c], n} {
		x.ops++
		if o.Dur >= 0 {
			x.dur.add(o.Dur)
		}
		if o.Dur > 0 {
			x.sum += o.Dur
		}
		x.ex += excl
		if typical {
			x.typ += excl
		}
	}
	if typical {
		a.typicalBusy += excl
	}
	if k := o.Step; k < 0 {
		a.untagged += excl
	} else {
		s := &a.stepRows[k]
		s.Ops++
		s.BusyNS += excl
		if o.Dur > 0 {
			if a.gpuFirst[k] < 0 || o.Start < a.gpuFirst[k] {
				a.gpuFirst[k] = o.Start
			}
			if a.gpuLast[k] < 0 || o.End() > a.gpuLast[k] {
				a.gpuLast[k] = o.End()
			}
		}
	}
	if excl == 0 {
		return nil
	}
	// Label points: gpu_user_annotation labels match the op's stream at its
	// start, user_annotation labels the launching thread at the launch.
	if err := a.gpuPts.add(point{At: o.Start, Excl: excl, Seq: seq, Track: o.Stream, Typical: typical}); err != nil {
		return err
	}
	if !o.HasLaunch {
		a.hostUnlab += excl
		return nil
	}
	return a.hostPts.add(point{At: o.LStart, Excl: excl, Seq: seq, Track: o.Thread, Typical: typical})
}

// gap splits the idle time [start, end) before op next into its parts.
func (a *deviceAnalysis) gap(start, end int64, next *jop) error {
	g := Gap{Start: start, End: end, Next: next.Op, Step: int(next.Step)}
	if next.HasLaunch {
		clip := func(x int64) int64 { return min(max(x, start), end) }
		ls, le := clip(next.LStart), clip(max(next.LEnd, next.LStart))
		g.HostLate = ls - start
		g.Launch = le - ls
		g.Queued = end - le
		if g.HostLate+g.Launch > 0 {
			// The GPU went idle before the launch call of the op that ends
			// the gap returned: with the host's launch times fixed, nothing
			// before the gap can make that op, or any after it, start
			// earlier, so the tail starts again here (see WhatIf).
			a.tailUnion = [numCategories]int64{}
		}
	} else {
		g.Unattributed = end - start
	}
	a.gaps.Count++
	a.gaps.TotalNS += end - start
	a.gaps.HostLateNS += g.HostLate
	a.gaps.LaunchNS += g.Launch
	a.gaps.QueuedNS += g.Queued
	a.gaps.UnattributedNS += g.Unattributed
	if k := next.Step; k >= 0 {
		a.stepRows[k].GapCount++
		a.stepRows[k].GapNS += end - start
		a.stepRows[k].HostWaitNS += g.HostLate + g.Launch
	} else {
		a.untaggedGap += end - start
	}
	if a.opts.onGap != nil {
		a.opts.onGap(int(a.dev), g)
	}
	if a.opts.OnGap != nil {
		a.opts.OnGap(int(a.dev), g)
	}
	return a.gapLens.add(gapRec{Len: end - start, Step: next.Step})
}

// nearestRank is the 1-based rank of the p-th percentile of n values by the
// nearest-rank method: the smallest value with at least p% of values at or
// below it. It is always an observed gap, which keeps p50 × n meaningful.
func nearestRank(n, p int) int {
	return max((p*n+99)/100, 1)
}

// gapFigures reads the gap lengths in ascending order once for the exact
// percentiles: overall p50, p90 and max, and each step's p50 (a step's
// gaps come in ascending order too, so its median is its r-th).
func (a *deviceAnalysis) gapFigures() (Gaps, error) {
	s := a.gaps
	sorted, err := a.gapLens.finish()
	if err != nil {
		return s, fmt.Errorf("sort gaps: %w", err)
	}
	defer sorted.close()
	if s.Count == 0 {
		return s, nil
	}
	seen := make([]int, len(a.stepRows))
	s.P50NS, s.P90NS, s.MaxNS, err = readLens(sorted, s.Count, "gaps", func(g gapRec) {
		if k := g.Step; k >= 0 {
			seen[k]++
			if seen[k] == nearestRank(a.stepRows[k].GapCount, 50) {
				a.stepRows[k].GapP50NS = g.Len
			}
		}
	})
	if err != nil {
		return s, err
	}
	s.MeanNS = s.TotalNS / int64(s.Count)
	s.P50xNNS = s.P50NS * int64(s.Count)
	return s, nil
}

// delayFigures reads the launch delays in ascending order once for their
// exact nearest-rank percentiles.
func (a *deviceAnalysis) delayFigures() (LaunchDelay, error) {
	d := LaunchDelay{Count: a.delayCount}
	sorted, err := a.delays.finish()
	if err != nil {
		return d, fmt.Errorf("sort launch delays: %w", err)
	}
	defer sorted.close()
	if d.Count == 0 {
		return d, nil
	}
	d.P50NS, d.P90NS, d.MaxNS, err = readLens(sorted, d.Count, "launch delays", nil)
	if err != nil {
		return d, err
	}
	d.MeanNS = a.delaySum / int64(d.Count)
	return d, nil
}

// readLens reads n records back in ascending order of Len for their exact
// nearest-rank p50 and p90 and their max, handing each record to each
// (when not nil) on the way; what names the records in errors.
func readLens(sorted *sorted[gapRec], n int, what string, each func(gapRec)) (p50, p90, hi int64, err error) {
	r50, r90 := nearestRank(n, 50), nearestRank(n, 90)
	it := sorted.iter()
	i := 0
	var g gapRec
	for it.next(&g) {
		i++
		if i == r50 {
			p50 = g.Len
		}
		if i == r90 {
			p90 = g.Len
		}
		hi = g.Len
		if each != nil {
			each(g)
		}
	}
	if it.err != nil {
		return 0, 0, 0, fmt.Errorf("read %s: %w", what, it.err)
	}
	if i != n {
		return 0, 0, 0, fmt.Errorf("read %d %s back, wrote %d", i, what, n)
	}
	return p50, p90, hi, nil
}

// traceShare is a/b, 0 when b is 0.
func traceShare(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// perStep turns a sum over typical steps into a mean per typical step;
// nil without typical steps.
func (a *analysis) perStep(sum int64) *int64 {
	if a.nTypical == 0 {
		return nil
	}
	v := sum / int64(a.nTypical)
	return &v
}

// shareOf is x's share of busy time; 0 when nothing was busy.
func shareOf(x, busy int64) float64 {
	if busy == 0 {
		return 0
	}
	return float64(x) / float64(busy)
}

// breakdowns are the category and kernel-name tables.
func (a *deviceAnalysis) breakdowns(busy int64) (cats, kernels []Row) {
	for c := range numCategories {
		x := a.byCat[c]
		u, tail := a.catUnion[c], a.tailUnion[c]
		cats = append(cats, Row{Name: c.String(), Ops: x.ops, SumDurNS: x.sum, ExclusiveNS: x.ex,
			Share: shareOf(x.ex, busy), PerStepNS: a.perStep(x.typ), UnionNS: &u, TailUnionNS: &tail})
	}
	for name, x := range a.byName {
		kernels = append(kernels, Row{Name: a.t.Names[name], Category: a.cats[name].String(), Ops: x.ops,
			SumDurNS: x.sum, ExclusiveNS: x.ex, Share: shareOf(x.ex, busy), PerStepNS: a.perStep(x.typ), Dur: x.dur.stats()})
	}
	slices.SortFunc(kernels, func(x, y Row) int {
		if c := cmp.Compare(y.ExclusiveNS, x.ExclusiveNS); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	return cats, kernels
}

// stepFigures finishes the per-step table and picks the typical step.
func (a *deviceAnalysis) stepFigures() Steps {
	n := len(a.steps)
	out := Steps{Steps: []Step{}, UntaggedBusyNS: a.untagged, UntaggedGapNS: a.untaggedGap}
	if n == 0 {
		return out
	}
	out.Steps = a.stepRows
	for k := range out.Steps {
		s := &out.Steps[k]
		if a.gpuFirst[k] >= 0 {
			s.GPUSpanNS = a.gpuLast[k] - a.gpuFirst[k]
		}
		s.GPUTimeNS = s.BusyNS + s.GapNS
	}
	if n >= 3 && !a.opts.AllSteps {
		out.Steps[0].Note = "first step: warm-up, excluded from typical figures"
		out.Steps[n-1].Note = "last step: may be cut by the profiler window, excluded from typical figures"
	}
	// The typical step is one step, so that its figures agree with each
	// other: medians taken figure by figure can pair one step's busy time
	// with another's span.
	var typical []int
	for k, s := range out.Steps {
		if s.Typical {
			typical = append(typical, k)
		}
	}
	if len(typical) == 0 {
		return out
	}
	slices.SortStableFunc(typical, func(x, y int) int { return cmp.Compare(out.Steps[x].SpanNS, out.Steps[y].SpanNS) })
	k := typical[(len(typical)-1)/2]
	s := out.Steps[k]
	t := Typical{Steps: len(typical), Step: s.Name, SpanNS: s.SpanNS, GPUTimeNS: s.GPUTimeNS, BusyNS: s.BusyNS, GapNS: s.GapNS,
		HostWaitNS: s.HostWaitNS, CategoryUnionNS: map[string]int64{}}
	if s.GPUTimeNS > 0 {
		t.BusyFraction = float64(s.BusyNS) / float64(s.GPUTimeNS)
	}
	for c, u := range a.stepCatUnion[k] {
		if u > 0 {
			t.CategoryUnionNS[Category(c).String()] = u
		}
	}
	out.Typical = t
	return out
}

// slotHeap is a binary min-heap of slot indices that keeps each slot's
// position up to date, so an op can be removed from the middle when it
// ends. (Lazy deletion would keep ended low-priority ops in the owner heap
// for as long as a higher-priority op runs: unbounded under one long
// kernel.) By end time when end is set, else by owner priority: compute
// over copies over communication, then the earlier op in time order.
type slotHeap struct {
	a     []int32
	slots *[]slot
	end   bool
}

func (h *slotHeap) len() int   { return len(h.a) }
func (h *slotHeap) top() int32 { return h.a[0] }

func (h *slotHeap) less(i, j int) bool {
	s := *h.slots
	x, y := &s[h.a[i]], &s[h.a[j]]
	if h.end {
		return x.j.End() < y.j.End()
	}
	if x.prio != y.prio {
		return x.prio < y.prio
	}
	return x.seq < y.seq
}

func (h *slotHeap) setPos(i int) {
	s := &(*h.slots)[h.a[i]]
	if h.end {
		s.endPos = i
	} else {
		s.ownPos = i
	}
}

func (h *slotHeap) swap(i, j int) {
	h.a[i], h.a[j] = h.a[j], h.a[i]
	h.setPos(i)
	h.setPos(j)
}

func (h *slotHeap) push(x int32) {
	h.a = append(h.a, x)
	i := len(h.a) - 1
	h.setPos(i)
	h.up(i)
}

func (h *slotHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *slotHeap) down(i int) {
	n := len(h.a)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}

// remove takes out the element at position i.
func (h *slotHeap) remove(i int) {
	n := len(h.a) - 1
	if i != n {
		h.swap(i, n)
	}
	h.a = h.a[:n]
	if i < n {
		h.down(i)
		h.up(i)
	}
}
