package trace

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
	"strings"
)

// ErrTruncated reports a trace that ends before its event list is complete
// and before any GPU op could be read. A trace cut off later is still
// analysed; Report.Flags then carries the "truncated" flag instead.
var ErrTruncated = errors.New("trace is truncated")

// ErrCorrupt reports a trace whose container is damaged: a gzip stream whose
// trailer (CRC-32 and length) does not match its content, or a bad gzip header.
// The reader (the caller's, Analyze reads decompressed JSON) wraps it.
var ErrCorrupt = errors.New("trace is corrupt")

// ErrNotTrace reports input that is not a Chrome trace (a JSON object with a
// traceEvents array, or a bare JSON array of events).
var ErrNotTrace = errors.New("not a Chrome trace JSON")

// OpKind is what a GPU op does.
type OpKind uint8

// GPU op kinds, from the event category.
const (
	KindKernel OpKind = iota
	KindMemcpy
	KindMemset
)

// Op is one GPU operation: a kernel, memcpy or memset on one stream. It is
// kept to 32 bytes (31 when spilled) because a trace holds millions and
// they are most of what the analysis sorts.
type Op struct {
	Start int64 // ns, on the trace's own time base
	Dur   int64 // ns
	// Corr is the correlation id joining the op to its launch; 0 when
	// absent. CUPTI's correlation ids are 32-bit; a larger one is treated
	// as absent and shows in the no_correlation flag.
	Corr   uint32
	Name   int32 // index into Trace.Names
	Stream int32
	Device int16
	Kind   OpKind
}

// End is the op's end time in ns.
func (o Op) End() int64 { return o.Start + o.Dur }

// Launch is the host-side runtime or driver call that enqueued a GPU op.
type Launch struct {
	Start  int64 // ns
	End    int64 // ns
	Corr   uint32
	Thread int32 // index into the thread table
	// Kernel marks a kernel launch (cudaLaunchKernel, cudaGraphLaunch, …),
	// which always has GPU ops; memcpy and memset calls may have none in
	// the trace (CUPTI records memsets only when asked).
	Kernel bool
}

// Label is one annotation interval: a user_annotation on a host thread or a
// gpu_user_annotation on a GPU stream.
type Label struct {
	Start, End int64
	Name       int32 // index into Trace.Names
	Track      int32 // host thread index, or stream for GPU labels
	Device     int16 // GPU labels only
	GPU        bool
	// Module marks a python_function "nn.Module: …" interval on a host
	// thread (the module call stack, recorded with with_stack=True).
	Module bool
}

// Trace is what Parse keeps of a Kineto trace: GPU ops, their launches,
// labels and profiler steps. Host ops (cpu_op), flows and metadata are read
// past without being stored, so memory grows with the number of GPU ops,
// not with the size of the JSON. Analyze with Options.Scratch streams the
// same records through bounded sort buffers instead.
type Trace struct {
	Ops      []Op
	Launches []Launch
	Labels   []Label
	Steps    []Label // ProfilerStep#N, host side
	Names    []string

	// DisplayTimeUnit is the trace's displayTimeUnit. Chrome's format says it
	// only changes how a viewer displays times: ts and dur stay in µs, which
	// is how Kineto writes them even when it says "ns".
	DisplayTimeUnit string
	// BaseTimeNS is baseTimeNanoseconds: newer Kineto writes ts relative to
	// it. Durations and gaps do not need it; it is reported for reference.
	BaseTimeNS int64

	// ProfilerStart/End bound the profiler's own "Trace" span when present.
	ProfilerStart, ProfilerEnd int64
	HasProfilerSpan            bool

	Events      int64            // trace events read
	Bytes       int64            // JSON bytes read
	Dropped     map[string]int64 // events that could not be used, by reason
	Truncated   bool             // the input ended inside the event list
	TruncatedAt int64            // byte offset where it ended

	names   map[string]int32
	threads map[threadKey]int32

	// sink, when set, receives ops, launches and labels instead of the
	// slices above (Analyze), so that they can be spilled to scratch.
	sink    *sinks
	sinkErr error // the first error filing a record into sink
	nOps    int64 // GPU ops read, kept in Ops or in sink

	nameBytes   int64              // Σ len(Names)
	namesMerged int64              // events whose new name found the table full
	forcedCat   map[int32]Category // categories of the merged op rows and of hinted kernels

	hostHints // categories that host ops give the kernels they launch

	// Rank is distributedInfo.rank, when the trace has it.
	Rank *int
	// Sync sums the cuda_sync events.
	Sync Sync

	// Host ops and GPU ops by External id, for the attribution of GPU time
	// to host ops (Options.HostOps). Parse keeps them here; Analyze files
	// them into its sinks.
	hostOpRecs  []hostOpRec
	opExtRecs   []opExt
	hostNames   []string
	hostNameIdx map[string]int32
}

// threadKey identifies a host thread. Kineto writes pid/tid as numbers, but
// the format allows strings; those are hashed.
type threadKey struct{ pid, tid int64 }

func (t *Trace) intern(b []byte) int32 {
	if i, ok := t.names[string(b)]; ok {
		return i
	}
	i := int32(len(t.Names))
	s := string(b)
	t.Names = append(t.Names, s)
	t.names[s] = i
	t.nameBytes += int64(len(s))
	return i
}

// Bounds on the name table. Every per-name table (kernels, labels) is
// bounded by it, so it bounds them all. Real traces have hundreds to a few
// thousand distinct kernel and label names; a trace with more (a name per
// step or per call) would otherwise make memory grow with the trace.
const (
	maxNames     = 20000
	maxNameBytes = 4 << 20
)

// OtherNames starts the name of the row that collects ops or labels whose
// names came after the name table was full.
const OtherNames = "(other names"

// internCapped interns a kernel or label name while the table has room.
// Past that, a new name is merged into one row per category for ops
// (the category is decided from the real name, so category figures stay
// exact) or one row for labels, and counted for the names_merged flag.
func (t *Trace) internCapped(b []byte, isOp bool, kind OpKind) int32 {
	if i, ok := t.names[string(b)]; ok {
		return i
	}
	if len(t.Names) < maxNames && t.nameBytes+int64(len(b)) <= maxNameBytes {
		return t.intern(b)
	}
	t.namesMerged++
	if !isOp {
		return t.intern([]byte(OtherNames + ": labels)"))
	}
	c := Categorize(kind, string(b))
	i := t.intern([]byte(OtherNames + ": " + c.String() + ")"))
	if t.forcedCat == nil {
		t.forcedCat = map[int32]Category{}
	}
	t.forcedCat[i] = c
	return i
}

func (t *Trace) thread(k threadKey) int32 {
	if i, ok := t.threads[k]; ok {
		return i
	}
	i := int32(len(t.threads))
	t.threads[k] = i
	return i
}

func (t *Trace) drop(reason string) { t.Dropped[reason]++ }

// event is the scratch state for one trace event while it is read.
type event struct {
	ph, cat, name     []byte
	pid, tid          int64
	pidOK, tidOK      bool
	ts, dur           int64
	tsOK, durOK       bool
	corr, stream, dev int64
	corrOK, streamOK  bool
	devOK             bool
	ext               int64 // args["External id"]: the launching host op
	extOK             bool
	bad               string // why the event cannot be used, if anything
	num, key, str     []byte
}

func (e *event) reset() {
	*e = event{ph: e.ph[:0], cat: e.cat[:0], name: e.name[:0], num: e.num[:0], key: e.key[:0], str: e.str[:0]}
}

// Parse reads a Kineto Chrome-trace JSON stream (already decompressed). It
// keeps only what Report needs. A trace cut off inside its event list is
// returned with Truncated set; one cut off before any GPU op
// returns an error wrapping ErrTruncated. Events with wrong field types or
// out-of-range numbers are counted in Dropped and skipped.
func Parse(r io.Reader) (*Trace, error) {
	return parse(r, nil)
}

// parse is Parse, filing records into sink when it is set. On error the
// sink's runs are released.
func parse(r io.Reader, sink *sinks) (_ *Trace, err error) {
	t := &Trace{Dropped: map[string]int64{}, names: map[string]int32{}, threads: map[threadKey]int32{}, sink: sink}
	defer func() {
		if err != nil && sink != nil {
			if cerr := sink.close(); cerr != nil {
				err = fmt.Errorf("%w (and releasing scratch: %v)", err, cerr)
			}
		}
	}()
	s := newScanner(r)
	err = t.parseTop(s)
	t.Bytes = s.offset()
	if err == nil {
		return t, nil
	}
	if t.sinkErr != nil {
		return nil, fmt.Errorf("spill to scratch: %w", t.sinkErr)
	}
	if errors.Is(err, errEOF) {
		if t.nOps == 0 {
			// Kineto writes host events before GPU ones: a trace cut early
			// can hold thousands of events and still nothing to account.
			return nil, fmt.Errorf("%w: input ends at byte %d before any GPU op (%d events read)", ErrTruncated, s.offset(), t.Events)
		}
		t.Truncated = true
		t.TruncatedAt = s.offset()
		return t, nil
	}
	return nil, err
}

func (t *Trace) parseTop(s *scanner) error {
	c, err := s.peek()
	if err != nil {
		if errors.Is(err, errEOF) && s.offset() == 0 {
			return fmt.Errorf("%w: input is empty", ErrNotTrace)
		}
		return err
	}
	switch c {
	case '[':
		// The JSON Array Format: a bare list of events. Chrome accepts it
		// without the closing bracket, so a missing one is not truncation.
		s.pos++
		err := t.parseEvents(s)
		if errors.Is(err, errEOF) && t.Events > 0 && s.rerr == io.EOF {
			return nil
		}
		return err
	case '{':
	default:
		return fmt.Errorf("%w: first character is %q, expected '{' or '['", ErrNotTrace, c)
	}
	s.pos++
	seen := false
	var key, str []byte
	more, err := s.first('}')
	for ; more && err == nil; more, err = s.more('}') {
		if key, err = s.key(key); err != nil {
			return err
		}
		switch string(key) {
		case "traceEvents":
			if c, err := s.peek(); err != nil {
				return err
			} else if c != '[' {
				return fmt.Errorf("%w: traceEvents is not an array (%s)", ErrNotTrace, s.errorf("found %q", c))
			}
			s.pos++
			seen = true
			if err := t.parseEvents(s); err != nil {
				return err
			}
		case "distributedInfo":
			if err := t.readDistributed(s); err != nil {
				return err
			}
		case "displayTimeUnit":
			if c, err := s.peek(); err == nil && c == '"' {
				if str, err = s.readString(str[:0]); err != nil {
					return err
				}
				t.DisplayTimeUnit = string(str)
			} else if err := s.skipValue(); err != nil {
				return err
			}
		case "baseTimeNanoseconds":
			if c, err := s.peek(); err == nil && c != '"' && c != '{' && c != '[' {
				if str, err = s.readNumber(str[:0]); err != nil && !errors.Is(err, errNumberTooLong) {
					return err
				}
				if v, err := parseInt(str); err == nil {
					t.BaseTimeNS = v
				}
			} else if err := s.skipValue(); err != nil {
				return err
			}
		default:
			if err := s.skipValue(); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return err
	}
	if !seen {
		return fmt.Errorf("%w: no traceEvents array", ErrNotTrace)
	}
	return nil
}

// readDistributed reads distributedInfo.rank; anything else in it, or a
// rank that is not an integer, is skipped.
func (t *Trace) readDistributed(s *scanner) error {
	if ok, err := s.openObject(); err != nil || !ok {
		return err
	}
	var e event
	more, err := s.first('}')
	for ; more && err == nil; more, err = s.more('}') {
		if e.key, err = s.key(e.key); err != nil {
			return err
		}
		if string(e.key) != "rank" {
			if err := s.skipValue(); err != nil {
				return err
			}
			continue
		}
		v, ok, err := t.readOptInt(s, &e)
		if err != nil {
			return err
		}
		if ok && v >= 0 && v <= math.MaxInt32 {
			r := int(v)
			t.Rank = &r
		}
	}
	return err
}

func (t *Trace) parseEvents(s *scanner) error {
	var e event
	more, err := s.first(']')
	for ; more && err == nil; more, err = s.more(']') {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c != '{' {
			if err := s.skipValue(); err != nil {
				return err
			}
			t.drop("event is not an object")
			t.Events++
		} else {
			e.reset()
			if err := t.readEvent(s, &e); err != nil {
				return err
			}
			t.Events++
			t.use(&e)
			if t.sinkErr != nil {
				return t.sinkErr
			}
		}
	}
	return err
}

// readEvent reads one event object, keeping the fields the analysis needs.
func (t *Trace) readEvent(s *scanner, e *event) error {
	s.pos++ // '{'
	more, err := s.first('}')
	for ; more && err == nil; more, err = s.more('}') {
		if e.key, err = s.key(e.key); err != nil {
			return err
		}
		switch string(e.key) {
		case "ph":
			e.ph, err = t.readStr(s, e, e.ph, "ph")
		case "cat":
			e.cat, err = t.readStr(s, e, e.cat, "cat")
		case "name":
			e.name, err = t.readStr(s, e, e.name, "name")
		case "ts":
			e.ts, e.tsOK, err = t.readNum(s, e, 3, "ts")
		case "dur":
			e.dur, e.durOK, err = t.readNum(s, e, 3, "dur")
		case "pid":
			e.pid, e.pidOK, err = t.readID(s, e)
		case "tid":
			e.tid, e.tidOK, err = t.readID(s, e)
		case "args":
			err = t.readArgs(s, e)
		default:
			err = s.skipValue()
		}
		if err != nil {
			return err
		}
	}
	return err
}

// readStr reads a string field; another type marks the event bad.
func (t *Trace) readStr(s *scanner, e *event, dst []byte, field string) ([]byte, error) {
	c, err := s.peek()
	if err != nil {
		return dst, err
	}
	if c != '"' {
		e.bad = field + " is not a string"
		return dst[:0], s.skipValue()
	}
	return s.readString(dst[:0])
}

// readNum reads a number field scaled by 10^shift; a wrong type or an
// out-of-range value marks the event bad rather than failing the parse.
func (t *Trace) readNum(s *scanner, e *event, shift int, field string) (int64, bool, error) {
	c, err := s.peek()
	if err != nil {
		return 0, false, err
	}
	if c != '-' && (c < '0' || c > '9') {
		e.bad = field + " is not a number"
		return 0, false, s.skipValue()
	}
	e.num, err = s.readNumber(e.num[:0])
	if errors.Is(err, errNumberTooLong) {
		e.bad = field + " is out of range"
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	v, _, perr := parseScaled(e.num, shift)
	if perr != nil {
		e.bad = field + " " + perr.Error()
		return 0, false, nil
	}
	return v, true, nil
}

// readOptInt reads an optional integer that the analysis can do without:
// any other type or value is skipped and leaves the event usable.
func (t *Trace) readOptInt(s *scanner, e *event) (int64, bool, error) {
	c, err := s.peek()
	if err != nil {
		return 0, false, err
	}
	if c != '-' && (c < '0' || c > '9') {
		return 0, false, s.skipValue()
	}
	e.num, err = s.readNumber(e.num[:0])
	if errors.Is(err, errNumberTooLong) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	v, err := parseInt(e.num)
	return v, err == nil, nil
}

// readID reads pid or tid: a number, or a string (hashed) as in the
// profiler's own "Spans" rows.
func (t *Trace) readID(s *scanner, e *event) (int64, bool, error) {
	c, err := s.peek()
	if err != nil {
		return 0, false, err
	}
	if c == '"' {
		e.str, err = s.readString(e.str[:0])
		h := fnv.New64a()
		h.Write(e.str)
		// Negative keeps hashed ids apart from numeric GPU devices/streams.
		return -int64(h.Sum64() >> 2), false, err
	}
	return t.readOptInt(s, e)
}

func (t *Trace) readArgs(s *scanner, e *event) error {
	if ok, err := s.openObject(); err != nil || !ok {
		return err
	}
	more, err := s.first('}')
	for ; more && err == nil; more, err = s.more('}') {
		if e.key, err = s.key(e.key); err != nil {
			return err
		}
		switch string(e.key) {
		case "correlation":
			e.corr, e.corrOK, err = t.readNum(s, e, 0, "args.correlation")
		case "stream":
			e.stream, e.streamOK, err = t.readIntOrString(s, e, "args.stream")
		case "device":
			e.dev, e.devOK, err = t.readIntOrString(s, e, "args.device")
		case "External id", "external id": // lower case: GPU ops in PyTorch 1.8–1.9 traces
			e.ext, e.extOK, err = t.readOptInt(s, e)
		default:
			err = s.skipValue()
		}
		if err != nil {
			return err
		}
	}
	return err
}

// readIntOrString reads an integer field that ROCm traces write as a
// string, decimal or hexadecimal ("stream": "0x0"). A string that is
// neither leaves the field unset (a GPU op then falls back to pid or tid)
// rather than dropping the event: a launch does not need its stream.
func (t *Trace) readIntOrString(s *scanner, e *event, field string) (int64, bool, error) {
	c, err := s.peek()
	if err != nil || c != '"' {
		if err != nil {
			return 0, false, err
		}
		return t.readNum(s, e, 0, field)
	}
	if e.str, err = s.readString(e.str[:0]); err != nil {
		return 0, false, err
	}
	v, perr := strconv.ParseInt(string(e.str), 0, 64)
	return v, perr == nil, nil
}

// Category names Kineto writes, with the capitalised legacy spellings.
func catIs(cat []byte, names ...string) bool {
	for _, n := range names {
		if bytes.EqualFold(cat, []byte(n)) {
			return true
		}
	}
	return false
}

// isLaunchName picks the runtime and driver calls that enqueue GPU work.
// Kineto gives every runtime call a correlation id, and most (cudaGetDevice,
// cudaStreamGetPriority, …) enqueue nothing; keeping only launches halves
// the memory for launches. A launch this misses shows up as an op without a
// launch ("no_launch" flag), so a gap in the list cannot go unnoticed.
func isLaunchName(name []byte) bool {
	return bytes.Contains(name, []byte("Launch")) || bytes.Contains(name, []byte("Memcpy")) ||
		bytes.Contains(name, []byte("Memset"))
}

const stepPrefix = "ProfilerStep#"

// Bounds on usable times. maxTS (2^61 ns, 73 years past 1970) admits
// absolute epoch timestamps; maxDur (2^40 ns, 18 minutes) is longer than any
// op or step a profiler window holds. Together they keep every end time,
// span and sum of durations inside int64.
const (
	maxTS  = 1 << 61
	maxDur = 1 << 40
)

// use files a complete event into the trace.
func (t *Trace) use(e *event) {
	if len(e.ph) != 1 || e.ph[0] != 'X' {
		return // flows, metadata, instants: not needed
	}
	gpuKind, isGPU := OpKind(0), false
	switch {
	case catIs(e.cat, "kernel"):
		gpuKind, isGPU = KindKernel, true
	case catIs(e.cat, "gpu_memcpy", "memcpy"):
		gpuKind, isGPU = KindMemcpy, true
	case catIs(e.cat, "gpu_memset", "memset"):
		gpuKind, isGPU = KindMemset, true
	}
	isRuntime := catIs(e.cat, "cuda_runtime", "cuda_driver", "runtime")
	isGPULabel := catIs(e.cat, "gpu_user_annotation")
	isLabel := catIs(e.cat, "user_annotation")
	isStep := !isGPU && !isGPULabel && bytes.HasPrefix(e.name, []byte(stepPrefix))
	isSpan := catIs(e.cat, "Trace")
	// "Operator" is what PyTorch 1.8–1.9 traces call a cpu_op.
	if (isLabel || catIs(e.cat, "cpu_op", "Operator")) && e.bad == "" && e.tsOK && e.durOK {
		t.noteHostOp(e)
		if e.extOK && t.wantHostOps() {
			t.addHostOp(hostOpRec{Ext: e.ext, Name: t.hostName(e.name)})
		}
	}
	if catIs(e.cat, "cuda_sync") {
		if e.bad == "" && e.tsOK && e.durOK && e.dur >= 0 && e.dur <= maxDur {
			t.Sync.Count++
			t.Sync.TotalNS += e.dur
			t.Sync.MaxNS = max(t.Sync.MaxNS, e.dur)
		}
		return
	}
	isModule := catIs(e.cat, "python_function") && bytes.HasPrefix(e.name, []byte(modulePrefix))
	if !isGPU && !isRuntime && !isGPULabel && !isLabel && !isStep && !isSpan && !isModule {
		return
	}
	if e.bad != "" {
		t.drop(e.bad)
		return
	}
	if !e.tsOK || !e.durOK {
		t.drop("missing ts or dur")
		return
	}
	if e.ts < -maxTS || e.ts > maxTS || e.dur < -maxDur || e.dur > maxDur {
		t.drop("ts or dur out of range")
		return
	}
	if e.ts <= 0 && (isGPU || isStep) {
		// Kineto's timestamps are positive (epoch or profiler-relative
		// µs); an op or step at 0 or before is a corrupted record, and
		// kept it would stretch a span across decades.
		t.drop("GPU op or step with a zero or negative timestamp")
		return
	}
	end := e.ts + e.dur
	switch {
	case isGPU:
		dev, stream := e.dev, e.stream
		if !e.devOK {
			dev = e.pid
			if !e.pidOK {
				t.drop("GPU op without device")
				return
			}
		}
		if !e.streamOK {
			stream = e.tid
			if !e.tidOK {
				t.drop("GPU op without stream")
				return
			}
		}
		if dev < 0 || dev > 1<<15-1 || stream < -1<<31 || stream > 1<<31-1 {
			t.drop("GPU op device or stream out of range")
			return
		}
		var name int32
		if h, ok := t.hintFor(e, gpuKind); ok {
			name = t.internHinted(e.name, h)
		} else {
			name = t.internCapped(e.name, true, gpuKind)
		}
		op := Op{Start: e.ts, Dur: e.dur, Name: name, Stream: int32(stream), Device: int16(dev), Kind: gpuKind}
		if e.corrOK && e.corr > 0 && e.corr <= math.MaxUint32 {
			op.Corr = uint32(e.corr)
		}
		if t.wantHostOps() {
			x := opExt{Ext: noExt, Dur: e.dur, Device: int16(dev)}
			if e.extOK && e.ext != noExt {
				x.Ext = e.ext
			}
			t.addOpExt(x)
		}
		t.addOp(op)
	case isRuntime:
		if e.corrOK && e.corr > 0 && e.corr <= math.MaxUint32 && isLaunchName(e.name) {
			t.addLaunch(Launch{Corr: uint32(e.corr), Start: e.ts, End: end, Thread: t.thread(threadKey{e.pid, e.tid}),
				Kernel: bytes.Contains(e.name, []byte("Launch")) && !bytes.Contains(e.name, []byte("HostFunc"))})
		}
	case isStep:
		t.Steps = append(t.Steps, Label{Start: e.ts, End: end, Name: t.intern(e.name), Track: t.thread(threadKey{e.pid, e.tid})})
	case isGPULabel:
		if bytes.HasPrefix(e.name, []byte(stepPrefix)) {
			return // a GPU-side copy of the step; steps come from the host side
		}
		if !e.pidOK || !e.tidOK || e.pid < 0 || e.pid > 1<<15-1 {
			t.drop("gpu_user_annotation without numeric device and stream")
			return
		}
		t.addLabel(Label{Start: e.ts, End: end, Name: t.internCapped(e.name, false, 0), Track: int32(e.tid), Device: int16(e.pid), GPU: true})
	case isModule:
		t.addLabel(Label{Start: e.ts, End: end, Name: t.internCapped(e.name, false, 0), Track: t.thread(threadKey{e.pid, e.tid}), Module: true})
	case isLabel:
		t.addLabel(Label{Start: e.ts, End: end, Name: t.internCapped(e.name, false, 0), Track: t.thread(threadKey{e.pid, e.tid})})
	case isSpan:
		if !t.HasProfilerSpan || e.ts < t.ProfilerStart {
			t.ProfilerStart = e.ts
		}
		if !t.HasProfilerSpan || end > t.ProfilerEnd {
			t.ProfilerEnd = end
		}
		t.HasProfilerSpan = true
	}
}

func (t *Trace) addOp(o Op) {
	t.nOps++
	if t.sink == nil {
		t.Ops = append(t.Ops, o)
	} else if err := t.sink.ops.add(o); err != nil {
		t.sinkErr = err
	}
}

func (t *Trace) addLaunch(l Launch) {
	if t.sink == nil {
		t.Launches = append(t.Launches, l)
	} else if err := t.sink.launches.add(l); err != nil {
		t.sinkErr = err
	}
}

// wantHostOps says whether host ops and GPU ops' External ids are kept:
// always by Parse, by Analyze only with Options.HostOps.
func (t *Trace) wantHostOps() bool { return t.sink == nil || t.sink.hostOps != nil }

func (t *Trace) addHostOp(h hostOpRec) {
	if t.sink == nil {
		t.hostOpRecs = append(t.hostOpRecs, h)
	} else if t.sink.hostOps != nil {
		if err := t.sink.hostOps.add(h); err != nil {
			t.sinkErr = err
		}
	}
}

func (t *Trace) addOpExt(o opExt) {
	if t.sink == nil {
		t.opExtRecs = append(t.opExtRecs, o)
	} else if t.sink.opExts != nil {
		if err := t.sink.opExts.add(o); err != nil {
			t.sinkErr = err
		}
	}
}

// noExt is the External id of GPU ops that have none: below every real id.
const noExt = math.MinInt64

// modulePrefix starts the python_function events of nn.Module calls.
const modulePrefix = "nn.Module: "

// hostName interns a host op's name in its own table, bounded like the
// name table; later names share one row, counted in names_merged.
func (t *Trace) hostName(b []byte) int32 {
	if i, ok := t.hostNameIdx[string(b)]; ok {
		return i
	}
	if t.hostNameIdx == nil {
		t.hostNameIdx = map[string]int32{}
	}
	s := string(b)
	if len(t.hostNames) >= maxNames {
		t.namesMerged++
		s = OtherNames + ": host ops)"
		if i, ok := t.hostNameIdx[s]; ok {
			return i
		}
	}
	i := int32(len(t.hostNames))
	t.hostNames = append(t.hostNames, s)
	t.hostNameIdx[s] = i
	return i
}

func (t *Trace) addLabel(l Label) {
	var err error
	switch {
	case t.sink == nil:
		t.Labels = append(t.Labels, l)
	case l.Module:
		err = t.sink.modLabels.add(l)
	case l.GPU:
		err = t.sink.gpuLabels.add(l)
	default:
		err = t.sink.hostLabels.add(l)
	}
	if err != nil {
		t.sinkErr = err
	}
}

// stepNumber parses N from "ProfilerStep#N"; -1 when it is not a number.
func stepNumber(name string) int64 {
	v, err := parseInt([]byte(strings.TrimPrefix(name, stepPrefix)))
	if err != nil || v < 0 {
		return -1
	}
	return v
}
