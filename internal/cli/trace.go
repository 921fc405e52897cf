package cli

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/canifinetune/canifinetune/internal/report"
	"github.com/canifinetune/canifinetune/trace"
)

// TraceCmd reports where a training step's GPU time goes, from PyTorch
// profiler (Kineto) traces.
type TraceCmd struct {
	Files     []string `arg:"" optional:"" name:"trace" help:"Kineto Chrome-trace JSON, plain or gzipped; - reads standard input. Two files: compare before and after."`
	Ranks     string   `placeholder:"DIR|GLOB" help:"Compare the ranks of one run: a directory of per-rank traces (files ending .json or .json.gz) or a glob; analysed one file at a time."`
	Straggler float64  `name:"straggler-threshold" default:"0.1" help:"With --ranks: a rank whose typical step exceeds the median rank's by more than this fraction is a straggler."`
	Ops       bool     `help:"Attribute GPU time to the host op (ATen op) that launched it, through the kernels' External ids: self GPU time per op. Sorts one more record per host op."`
	JSON      bool     `help:"Print the report as JSON (schema: docs/trace-json.md)."`
	WhatIf    []string `name:"what-if" placeholder:"CATEGORY=Sx" help:"Bound on how much shorter the GPU timeline gets if CATEGORY gets S times faster, e.g. attention=1.5x. Repeatable."`
	Top       int      `default:"10" help:"Kernel names to list in the table (all are in --json)."`
	AllSteps  bool     `help:"Keep the first (warm-up) and last (truncated) steps in the typical figures."`
	// HolisticTraceAnalysis documents consecutive_kernel_delay=30 as ns but
	// compares it with intervals in µs (docs/trace-vs-hta.md).
	KernelWait time.Duration `name:"kernel-wait-below" default:"30ns" placeholder:"DURATION" help:"Idle split: a gap between two ops on a stream whose launch came in time is kernel wait when shorter than this (default 30ns), other wait otherwise. 30us gives the split HolisticTraceAnalysis prints by default."`
}

// options are the analysis options the flags ask for.
func (c *TraceCmd) options() trace.Options {
	return trace.Options{AllSteps: c.AllSteps, HostOps: c.Ops, KernelWaitBelowNS: c.KernelWait.Nanoseconds()}
}

// traceMemoryLimit is the soft heap limit while a trace is analysed. The
// live heap peaks near 13 MiB (sort buffers, merge readers, the scanner);
// 32 MiB keeps peak RSS near 40 MiB at any trace size for a few percent
// more GC time (docs/trace-performance.md).
const traceMemoryLimit = 32 << 20

// traceJSON is the --json document for one trace.
type traceJSON struct {
	*trace.Report
	WhatIf []trace.Projection `json:"what_if,omitempty"`
}

// Run analyses one trace, or compares two.
func (c *TraceCmd) Run(env *Env) error {
	if c.KernelWait <= 0 {
		return usageErrorf("canifinetune trace --kernel-wait-below 30us FILE", "--kernel-wait-below must be > 0, got %s", c.KernelWait)
	}
	if c.Ranks != "" {
		return c.runRanks(env)
	}
	if len(c.Files) == 0 {
		return usageErrorf("canifinetune trace FILE", "trace takes one file, two to compare, or --ranks DIR")
	}
	if len(c.Files) > 2 {
		return usageErrorf("canifinetune trace BEFORE.json.gz AFTER.json.gz", "trace takes one file, or two to compare; got %d", len(c.Files))
	}
	if len(c.Files) == 2 && c.Files[0] == "-" && c.Files[1] == "-" {
		return usageErrorf("canifinetune trace - AFTER.json.gz < BEFORE.json.gz", "standard input can be only one of the two traces")
	}
	if c.Top < 0 {
		return usageErrorf("canifinetune trace --top 10 FILE", "--top must be ≥ 0, got %d", c.Top)
	}
	var whatIfs []trace.WhatIf
	for _, s := range c.WhatIf {
		w, err := trace.ParseWhatIf(s)
		if err != nil {
			return usageErrorf("canifinetune trace FILE --what-if attention=1.5x", "%v", err)
		}
		whatIfs = append(whatIfs, w)
	}
	if len(c.Files) == 2 && len(whatIfs) > 0 {
		return usageErrorf("canifinetune trace FILE --what-if attention=1.5x", "--what-if takes one trace, not a comparison")
	}
	if env.Getenv == nil || env.Getenv("GOMEMLIMIT") == "" {
		// The analysis holds its sort buffers (a few MiB each, see
		// trace.Options) whatever the trace's size. Left alone, the GC lets
		// the heap reach twice the live set before collecting; a soft limit
		// keeps the peak RSS well under 64 MiB. It is soft: nothing fails
		// above it, the GC only works harder. GOMEMLIMIT overrides it.
		defer setTraceMemoryLimit()()
	}
	// Ctrl-C or SIGTERM stops the analysis at its next read or scratch
	// write, so that the scratch directory is removed on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reports := make([]*trace.Report, len(c.Files))
	for i, f := range c.Files {
		r, err := analyzeTraceFile(ctx, f, env.Stdin, c.options(), "")
		if err != nil {
			return err
		}
		reports[i] = r
		for _, fl := range r.Flags {
			if fl.Code == "truncated" {
				// Said on stderr too, so a script reading --json cannot miss it.
				fmt.Fprintf(&controlEscaper{w: env.Stderr}, "canifinetune: warning: %s: %s; %s\n", f, fl.Detail, fl.BlastRadius)
			}
		}
	}
	if len(reports) == 2 {
		cmp := trace.Compare(reports[0], reports[1])
		if c.JSON {
			return writeJSON(env.Stdout, cmp)
		}
		writeTraceComparison(&controlEscaper{w: env.Stdout}, cmp)
		return nil
	}
	r := reports[0]
	var ps []trace.Projection
	for _, w := range whatIfs {
		ps = append(ps, w.Project(r)...)
	}
	if c.JSON {
		return writeJSON(env.Stdout, traceJSON{Report: r, WhatIf: ps})
	}
	// Kernel, label and step names come from the trace: a name holding a
	// terminal escape sequence must not reach the terminal as one. --json
	// keeps them, escaped by the JSON encoder.
	out := &controlEscaper{w: env.Stdout}
	writeTraceReport(out, r, c.Top)
	writeTraceWhatIf(out, ps)
	return nil
}

// setTraceMemoryLimit sets the soft heap limit for an analysis and returns
// the function that restores the previous one.
func setTraceMemoryLimit() func() {
	prev := debug.SetMemoryLimit(traceMemoryLimit)
	return func() { debug.SetMemoryLimit(prev) }
}

// stdinName is the name "-" stands for in messages and in the report.
const stdinName = "stdin"

// analyzeTraceFile opens a trace ("-" is stdin), gunzipping it when it
// starts with the gzip magic (whatever its name), and analyses it with its
// sorted runs spilled to a private directory under tmpRoot ("" is the
// system's temporary directory). The directory is made only when a run
// first spills, so a trace that fits in memory needs no writable temporary
// directory, and it is removed before analyzeTraceFile returns, whatever
// happens.
func analyzeTraceFile(ctx context.Context, name string, stdin io.Reader, opts trace.Options, tmpRoot string) (*trace.Report, error) {
	var in io.Reader
	if name == "-" {
		if stdin == nil {
			return nil, errors.New("open trace: no standard input")
		}
		in, name = stdin, stdinName
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("open trace: %w", err)
		}
		defer f.Close()
		in = f
	}
	return analyzeTraceStream(ctx, name, in, opts, tmpRoot)
}

// analyzeTraceStream is analyzeTraceFile on a stream already open, named
// name in messages and in the report: the file, standard input, or a
// trace uploaded to serve's page.
func analyzeTraceStream(ctx context.Context, name string, in io.Reader, opts trace.Options, tmpRoot string) (_ *trace.Report, err error) {
	br := bufio.NewReaderSize(ctxReader{ctx, in}, 64<<10)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("read trace %s: gzip header: %w", name, trace.ErrTruncated)
			}
			return nil, fmt.Errorf("read trace %s: gzip header: %w", name, err)
		}
		defer zr.Close()
		r = gzipChecked{zr}
	}
	scratch := &traceScratch{ctx: ctx, root: tmpRoot}
	defer func() {
		if rerr := scratch.remove(); rerr != nil && err == nil {
			err = fmt.Errorf("remove trace scratch directory: %w", rerr)
		}
	}()
	opts.Scratch = scratch
	rep, err := trace.Analyze(r, opts)
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", name, err)
	}
	if _, ok := r.(gzipChecked); ok {
		// The analysis stops at the JSON's closing bracket; gzip checks the
		// member's CRC-32 and length only at its end, so read on to it. A
		// stream cut short there was already flagged truncated, or lost
		// nothing but its trailer.
		if _, err := io.Copy(io.Discard, r); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("read trace %s: %w", name, err)
		}
	}
	rep.Source = name
	return rep, nil
}

// gzipChecked marks a damaged gzip stream (a trailer that does not match the
// content, a bad member header) with trace.ErrCorrupt.
type gzipChecked struct{ r io.Reader }

func (g gzipChecked) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
		err = fmt.Errorf("%w: %w", trace.ErrCorrupt, err)
	}
	return n, err
}

// errInterrupted reports an analysis stopped by Ctrl-C or SIGTERM.
var errInterrupted = errors.New("interrupted")

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, errInterrupted
	}
	return c.r.Read(p)
}

// traceScratch keeps the analysis's sorted runs as files in a directory
// under root, made by the first Create. Each file is removed when the
// analysis closes it; the directory by remove.
type traceScratch struct {
	ctx  context.Context
	root string
	dir  string
}

func (s *traceScratch) Create() (trace.ScratchFile, error) {
	if s.ctx.Err() != nil {
		return nil, errInterrupted
	}
	if s.dir == "" {
		// MkdirTemp makes the directory 0700: the runs hold the trace's
		// timings and are nobody else's business.
		dir, err := os.MkdirTemp(s.root, "canifinetune-trace-")
		if err != nil {
			return nil, fmt.Errorf("trace scratch directory (the trace is too large to sort in memory; set TMPDIR to a writable directory): %w", err)
		}
		s.dir = dir
	}
	f, err := os.CreateTemp(s.dir, "run-")
	if err != nil {
		return nil, err
	}
	return &scratchFile{ctx: s.ctx, File: f}, nil
}

// remove removes the directory, if Create made one.
func (s *traceScratch) remove() error {
	if s.dir == "" {
		return nil
	}
	return os.RemoveAll(s.dir)
}

type scratchFile struct {
	ctx context.Context
	*os.File
}

// Write stops once ctx is done, so an interrupt during the report stage
// ends it within one buffer's write.
func (f *scratchFile) Write(p []byte) (int, error) {
	if f.ctx.Err() != nil {
		return 0, errInterrupted
	}
	return f.File.Write(p)
}

// Close closes and removes the file.
func (f *scratchFile) Close() error {
	return errors.Join(f.File.Close(), os.Remove(f.Name()))
}

// fmtNS formats nanoseconds for people, as the trace page does.
func fmtNS(ns int64) string { return report.Duration(ns) }

func tracePct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func tracePerStep(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmtNS(*p)
}

// shortKernel keeps a kernel's name readable in a table: C++ signatures make
// them hundreds of characters long. The argument list goes; a name still
// longer than n runes loses its middle, not its end, since the end is what
// tells cutlass::Kernel<…_nn_align4> from cutlass::Kernel<…_tn_align4>.
func shortKernel(s string, n int) string {
	return cutMiddle(stripSignature(s), n)
}

// stripSignature drops "void " and the parameter list.
func stripSignature(s string) string {
	s = strings.TrimPrefix(s, "void ")
	if i := strings.LastIndex(s, ">("); i > 0 {
		s = s[:i+1]
	} else if i := strings.IndexByte(s, '('); i > 0 {
		s = s[:i]
	}
	return s
}

// cutMiddle shortens s to n runes, keeping its head and tail around "…".
func cutMiddle(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 3 {
		return s
	}
	head := (n - 1) / 2
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// shortRowNames is shortNames of a table's row names at the 48 runes every
// trace table allows.
func shortRowNames[T any](rows []T, name func(T) string) []string {
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = name(r)
	}
	return shortNames(names, 48)
}

// shortNames shortens the names of one table's rows with shortKernel, then
// widens those that came out equal although the names differ (by 16 runes
// at a time, then with the parameter list kept) until they differ: two
// rows of a table never look like the same kernel.
func shortNames(names []string, n int) []string {
	out := make([]string, len(names))
	width := make([]int, len(names))
	full := make([]bool, len(names))
	for i, name := range names {
		out[i], width[i] = shortKernel(name, n), n
	}
	for {
		byShort := map[string][]int{}
		for i, s := range out {
			byShort[s] = append(byShort[s], i)
		}
		changed := false
		for _, rows := range byShort {
			distinct := false
			for _, i := range rows[1:] {
				distinct = distinct || names[i] != names[rows[0]]
			}
			if !distinct {
				continue
			}
			for _, i := range rows {
				switch {
				case !full[i] && width[i] < utf8.RuneCountInString(stripSignature(names[i])):
					width[i] += 16
					out[i] = shortKernel(names[i], width[i])
				case !full[i]:
					full[i] = true
					out[i] = cutMiddle(names[i], width[i])
				case width[i] < utf8.RuneCountInString(names[i]):
					width[i] += 16
					out[i] = cutMiddle(names[i], width[i])
				default:
					continue
				}
				changed = true
			}
		}
		if !changed {
			return out
		}
	}
}

func writeTraceReport(out io.Writer, r *trace.Report, top int) {
	fmt.Fprintf(out, "trace %s: %d events, %.1f MB of JSON\n", r.Source, r.Events, float64(r.Bytes)/1e6)
	for _, d := range r.Devices {
		fmt.Fprintf(out, "\nGPU %d: %d ops on %d streams\n", d.Device, d.Ops, len(d.Streams))
		fmt.Fprintf(out, "  busy %s of %s span (%s busy); Σdur %s, overlap %s (%s of busy)\n",
			fmtNS(d.BusyNS), fmtNS(d.SpanNS), tracePct(d.BusyFraction), fmtNS(d.SumDurNS), fmtNS(d.OverlapNS), tracePct(traceRatio(d.OverlapNS, d.BusyNS)))
		tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  stream\tops\tbusy\tΣdur\tself-overlaps\tidle: host wait\tkernel wait\tother")
		for _, s := range d.Streams {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Stream, s.Ops, fmtNS(s.BusyNS), fmtNS(s.SumDurNS), s.SelfOverlaps,
				fmtNS(s.IdleHostWaitNS), fmtNS(s.IdleKernelWaitNS), fmtNS(s.IdleOtherNS))
		}
		tw.Flush()

		fmt.Fprintln(out, "\n  category (exclusive: rows sum to busy)")
		tw = tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  category\tops\texclusive\tshare\tper step\tΣdur")
		for _, c := range d.Categories {
			if c.Ops == 0 {
				continue
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", c.Name, c.Ops, fmtNS(c.ExclusiveNS), tracePct(c.Share), tracePerStep(c.PerStepNS), fmtNS(c.SumDurNS))
		}
		tw.Flush()

		if d.CommCompOverlapNS > 0 || traceCommUnion(d) > 0 {
			fmt.Fprintf(out, "  communication beside computation: %s of the communication union (%s)\n", tracePct(d.CommCompOverlap), fmtNS(d.CommCompOverlapNS))
		}

		fmt.Fprintf(out, "\n  top kernels (%d names)\n", len(d.Kernels))
		tw = tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  kernel\tcategory\tops\texclusive\tshare\tper step\tmean\tstd\tmin\tmax")
		shown := d.Kernels[:min(top, len(d.Kernels))]
		short := shortRowNames(shown, func(k trace.Row) string { return k.Name })
		for i, k := range shown {
			mean, std, lo, hi := "-", "-", "-", "-"
			if k.Dur != nil {
				mean, std, lo, hi = fmtNS(int64(k.Dur.MeanNS+0.5)), fmtNS(int64(k.Dur.StdNS+0.5)), fmtNS(k.Dur.MinNS), fmtNS(k.Dur.MaxNS)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", short[i], k.Category, k.Ops, fmtNS(k.ExclusiveNS), tracePct(k.Share), tracePerStep(k.PerStepNS),
				mean, std, lo, hi)
		}
		tw.Flush()
		sk, ld := d.ShortKernels, d.LaunchDelay
		fmt.Fprintf(out, "  kernels under %s: %d of %d (%s), %s of kernel Σdur (%s)\n", fmtNS(sk.ThresholdNS), sk.Count, sk.Kernels, tracePct(sk.Share), fmtNS(sk.SumDurNS), tracePct(sk.DurShare))
		if ld.Count > 0 {
			fmt.Fprintf(out, "  launch to start (%d kernels): p50 %s, p90 %s, mean %s, max %s\n", ld.Count, fmtNS(ld.P50NS), fmtNS(ld.P90NS), fmtNS(ld.MeanNS), fmtNS(ld.MaxNS))
		}
		writeTraceHostOps(out, d, top)

		for _, lt := range d.Labels {
			writeTraceLabels(out, lt)
		}
		writeTraceSteps(out, d.Steps)
		g := d.Gaps
		fmt.Fprintf(out, "\n  idle gaps: %d, total %s; p50 %s, p90 %s, max %s; p50×n %s vs mean×n %s\n",
			g.Count, fmtNS(g.TotalNS), fmtNS(g.P50NS), fmtNS(g.P90NS), fmtNS(g.MaxNS), fmtNS(g.P50xNNS), fmtNS(g.TotalNS))
		fmt.Fprintf(out, "    host launched late %s (%s), in launch call %s (%s), already queued %s (%s), unattributed %s (%s)\n",
			fmtNS(g.HostLateNS), tracePct(traceRatio(g.HostLateNS, g.TotalNS)), fmtNS(g.LaunchNS), tracePct(traceRatio(g.LaunchNS, g.TotalNS)),
			fmtNS(g.QueuedNS), tracePct(traceRatio(g.QueuedNS, g.TotalNS)), fmtNS(g.UnattributedNS), tracePct(traceRatio(g.UnattributedNS, g.TotalNS)))
	}
	if r.CUDASync.Count > 0 {
		fmt.Fprintf(out, "\ncuda_sync: %d synchronisations, %s in all, longest %s\n", r.CUDASync.Count, fmtNS(r.CUDASync.TotalNS), fmtNS(r.CUDASync.MaxNS))
	}
	if len(r.Flags) == 0 {
		fmt.Fprintln(out, "\nreliability: no flags")
		return
	}
	fmt.Fprintln(out, "\nreliability flags:")
	for _, f := range r.Flags {
		where := ""
		if f.Device != nil {
			where = fmt.Sprintf(" (GPU %d)", *f.Device)
		}
		fmt.Fprintf(out, "  %s%s: %s\n    affects: %s\n", f.Code, where, f.Detail, f.BlastRadius)
	}
}

// traceCommUnion is the device's communication union.
func traceCommUnion(d trace.Device) int64 {
	for _, c := range d.Categories {
		if c.Name == "communication" && c.UnionNS != nil {
			return *c.UnionNS
		}
	}
	return 0
}

func writeTraceHostOps(out io.Writer, d trace.Device, top int) {
	if len(d.HostOps) == 0 {
		return
	}
	fmt.Fprintf(out, "\n  host ops by self GPU time (Σdur of the GPU ops each launched; %d names)\n", len(d.HostOps))
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  host op\tGPU ops\tself GPU\tshare of Σdur")
	shown := d.HostOps[:min(top, len(d.HostOps))]
	short := shortRowNames(shown, func(h trace.HostOpRow) string { return h.Name })
	for i, h := range shown {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", short[i], h.GPUOps, fmtNS(h.SelfGPUNS), tracePct(h.Share))
	}
	tw.Flush()
}

func traceRatio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func writeTraceLabels(out io.Writer, lt trace.LabelTable) {
	if len(lt.Rows) <= 1 && len(lt.Aggregates) == 0 && len(lt.NoGPUTime) == 0 {
		return
	}
	fmt.Fprintf(out, "\n  %s labels (innermost label; rows sum to busy)\n", lt.Kind)
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  label\tn\texclusive\tshare\tper step\tinclusive")
	short := shortRowNames(lt.Rows, func(l trace.LabelRow) string { return l.Name })
	for i, l := range lt.Rows {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", short[i], l.Instances, fmtNS(l.ExclusiveNS), tracePct(l.Share), tracePerStep(l.PerStepNS), fmtNS(l.InclusiveNS))
	}
	tw.Flush()
	for _, a := range lt.Aggregates {
		fmt.Fprintf(out, "    aggregate (all its GPU time is in nested labels): %s, inclusive %s\n", a.Name, fmtNS(a.InclusiveNS))
	}
	for _, names := range lt.Duplicates {
		fmt.Fprintf(out, "    identical GPU time, same work: %s\n", strings.Join(names, " = "))
	}
	if n := len(lt.NoGPUTime); n > 0 {
		names := make([]string, 0, 3)
		for i, l := range lt.NoGPUTime {
			if i == 3 {
				names = append(names, "…")
				break
			}
			names = append(names, l.Name)
		}
		fmt.Fprintf(out, "    %d label(s) with host time but no GPU time (launch nothing, or leak to another label): %s\n", n, strings.Join(names, ", "))
	}
	if lt.DoubleCounted {
		fmt.Fprintf(out, "    Σ inclusive %s > busy: adding inclusive times double counts\n", fmtNS(lt.InclusiveSumNS))
	}
}

func writeTraceSteps(out io.Writer, s trace.Steps) {
	if len(s.Steps) == 0 {
		return
	}
	fmt.Fprintln(out, "\n  steps (ops belong to the step that launched them)")
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  step\tspan\tbusy\tgaps\tgap p50\tnote")
	for _, st := range s.Steps {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d / %s\t%s\t%s\n", st.Name, fmtNS(st.SpanNS), fmtNS(st.BusyNS), st.GapCount, fmtNS(st.GapNS), fmtNS(st.GapP50NS), st.Note)
	}
	tw.Flush()
	t := s.Typical
	fmt.Fprintf(out, "  typical: %s (median span of %d steps): span %s; GPU time %s = busy %s (%s) + gaps %s\n",
		t.Step, t.Steps, fmtNS(t.SpanNS), fmtNS(t.GPUTimeNS), fmtNS(t.BusyNS), tracePct(t.BusyFraction), fmtNS(t.GapNS))
}

// shorterOrLonger says a signed saving as people read it: a slow-down
// makes things longer, not "-9.7% shorter".
func shorterOrLonger(saved int64, frac float64) (string, string, string) {
	if saved < 0 {
		return tracePct(-frac), fmtNS(-saved), "longer"
	}
	return tracePct(frac), fmtNS(saved), "shorter"
}

func writeTraceWhatIf(out io.Writer, ps []trace.Projection) {
	for _, p := range ps {
		pct, ns, dir := shorterOrLonger(p.SavedNS, p.Bound)
		fmt.Fprintf(out, "\nwhat if %s ran %gx as fast on GPU %d: its timeline at most %s %s (%s of %s)\n",
			p.Category, p.Speedup, p.Device, pct, dir, ns, fmtNS(p.SpanNS))
		fmt.Fprintf(out, "  bound = |1 − 1/%g| × %s's union over streams %s (exclusive %s + %s under other ops): ops keep their streams, order and waits\n",
			p.Speedup, p.Category, fmtNS(p.UnionNS), fmtNS(p.ExclusiveNS), fmtNS(p.OverlappedNS))
		pct, ns, dir = shorterOrLonger(p.HostAsRecordedSavedNS, p.HostAsRecordedBound)
		fmt.Fprintf(out, "  with the host launching as recorded: at most %s %s (%s)\n", pct, dir, ns)
		if p.StepNS > 0 {
			pct, ns, dir = shorterOrLonger(p.StepSavedNS, p.StepBound)
			why := "GPU-bound: the GPU waited for the host less than half of it"
			if p.LimitedBy == "host" {
				why = "host-bound: the GPU waited for the host most of it, and a faster GPU shortens it only if the host gets ahead"
			}
			fmt.Fprintf(out, "  typical step (%s): at most %s %s (%s of %s)\n", why, pct, dir, ns, fmtNS(p.StepNS))
		}
	}
}

func writeTraceComparison(out io.Writer, c *trace.Comparison) {
	fmt.Fprintf(out, "before %s\nafter  %s\n", c.Before, c.After)
	if c.Note != "" {
		fmt.Fprintf(out, "note: %s\n", c.Note)
	}
	for _, d := range c.Devices {
		gpu := fmt.Sprintf("GPU %d", d.Device)
		if d.AfterDevice != d.Device {
			gpu = fmt.Sprintf("GPU %d → GPU %d", d.Device, d.AfterDevice)
		}
		fmt.Fprintf(out, "\n%s (%s): busy %s → %s (%s), step %s → %s (%s), busy fraction %s → %s\n", gpu, strings.ReplaceAll(d.Basis, "_", " "),
			fmtNS(d.Before.BusyNS), fmtNS(d.After.BusyNS), fmtNS(d.BusyDeltaNS), fmtNS(d.Before.StepNS), fmtNS(d.After.StepNS), fmtNS(d.StepDeltaNS),
			tracePct(d.Before.BusyFraction), tracePct(d.After.BusyFraction))
		tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  category\tbefore\tafter\tΔ\tΔ%\tshare before\tshare after\tΔshare")
		for _, r := range d.Categories {
			if r.BeforeNS == 0 && r.AfterNS == 0 {
				continue
			}
			dp := "new"
			if r.DeltaPct != nil {
				dp = fmt.Sprintf("%+.1f%%", *r.DeltaPct)
			}
			if r.WithinNoise {
				dp += " (±5%)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%+.1f pp\n", r.Name, fmtNS(r.BeforeNS), fmtNS(r.AfterNS), fmtNS(r.DeltaNS), dp,
				tracePct(r.BeforeShare), tracePct(r.AfterShare), r.ShareDeltaPP)
		}
		tw.Flush()
	}
	fmt.Fprintf(out, "\nwarning: %s\n", c.Warning)
}
