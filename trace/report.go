package trace

// SchemaVersion is the version of the --json schema documented in
// docs/trace-json.md. It changes only when a field changes meaning or goes
// away; new fields may be added within a version.
const SchemaVersion = 1

// Report is the analysis of one trace. All times are integer nanoseconds.
type Report struct {
	SchemaVersion   int    `json:"schema_version"`
	Source          string `json:"source,omitempty"`
	DisplayTimeUnit string `json:"display_time_unit,omitempty"`
	BaseTimeNS      int64  `json:"base_time_ns,omitempty"`
	Events          int64  `json:"events"`
	Bytes           int64  `json:"bytes"`
	// Rank is the trace's distributedInfo.rank, when it has one.
	Rank *int `json:"rank,omitempty"`
	// CUDASync sums the trace's cuda_sync events (stream, event, context
	// and device synchronisations CUPTI records).
	CUDASync Sync     `json:"cuda_sync"`
	Devices  []Device `json:"devices"`
	Flags    []Flag   `json:"flags"`
}

// Sync sums synchronisation events.
type Sync struct {
	Count   int64 `json:"count"`
	TotalNS int64 `json:"total_ns"`
	MaxNS   int64 `json:"max_ns"`
}

// Device is the accounting for one GPU.
type Device struct {
	Device int `json:"device"`
	Ops    int `json:"ops"`
	// SpanNS runs from the first op's start to the last op's end.
	SpanNS int64 `json:"span_ns"`
	// BusyNS is the union of all op intervals: the time the GPU did anything.
	BusyNS int64 `json:"busy_ns"`
	// SumDurNS is Σdur over ops; OverlapNS = SumDurNS − BusyNS is the time
	// counted twice by anyone who adds durations.
	SumDurNS     int64    `json:"sum_dur_ns"`
	OverlapNS    int64    `json:"overlap_ns"`
	BusyFraction float64  `json:"busy_fraction"`
	Streams      []Stream `json:"streams"`
	// Categories and Kernels split BusyNS exclusively: each overlapped
	// nanosecond goes to one op, so each table's exclusive_ns sums to busy_ns.
	Categories []Row        `json:"categories"`
	Kernels    []Row        `json:"kernels"`
	Labels     []LabelTable `json:"labels"`
	Steps      Steps        `json:"steps"`
	Gaps       Gaps         `json:"gaps"`
	// CommCompOverlapNS is the time a communication op ran while a
	// computation op (any category but communication and memcpy_memset)
	// ran; CommCompOverlap is its share of the communication union
	// (HolisticTraceAnalysis's comm/comp overlap; 0 without communication).
	CommCompOverlapNS int64   `json:"comm_comp_overlap_ns"`
	CommCompOverlap   float64 `json:"comm_comp_overlap"`
	// ShortKernels counts the kernels shorter than ShortKernelNS.
	ShortKernels ShortKernels `json:"short_kernels"`
	// LaunchDelay is the time from each kernel's launch call to its GPU start.
	LaunchDelay LaunchDelay `json:"launch_delay"`
	// HostOps attributes GPU time to the host op that launched it (only
	// with Options.HostOps; nil otherwise).
	HostOps []HostOpRow `json:"host_ops,omitempty"`
}

// ShortKernelNS is the threshold of a short kernel: 10 µs.
const ShortKernelNS = 10_000

// ShortKernels describes the kernels shorter than ShortKernelNS.
type ShortKernels struct {
	ThresholdNS int64   `json:"threshold_ns"`
	Count       int     `json:"count"`
	Kernels     int     `json:"kernels"` // all kernels with dur ≥ 0
	Share       float64 `json:"share"`   // Count / Kernels
	SumDurNS    int64   `json:"sum_dur_ns"`
	// DurShare is SumDurNS over the Σdur of all kernels.
	DurShare float64 `json:"dur_share"`
}

// LaunchDelay is the distribution of launch-to-start delays of kernels
// with a launch: GPU start − start of the launch call.
type LaunchDelay struct {
	Count  int   `json:"count"`
	MeanNS int64 `json:"mean_ns"`
	P50NS  int64 `json:"p50_ns"`
	P90NS  int64 `json:"p90_ns"`
	MaxNS  int64 `json:"max_ns"`
}

// HostOpRow is the GPU time of the ops one host op name launched directly
// (the kernel's External id is the op's): PyTorch's "self CUDA time".
type HostOpRow struct {
	Name string `json:"name"`
	// GPUOps counts the GPU ops it launched.
	GPUOps int `json:"gpu_ops"`
	// SelfGPUNS is the Σdur of those ops.
	SelfGPUNS int64 `json:"self_gpu_ns"`
	// Share is SelfGPUNS over the device's sum_dur_ns.
	Share float64 `json:"share"`
}

// Stream is one stream's share of a device.
type Stream struct {
	Stream   int   `json:"stream"`
	Ops      int   `json:"ops"`
	BusyNS   int64 `json:"busy_ns"`
	SumDurNS int64 `json:"sum_dur_ns"`
	// SelfOverlaps counts ops that start before the previous op on the same
	// stream ended; a stream runs its work in order, so these are suspect.
	SelfOverlaps int `json:"self_overlaps"`
	// IdleNS is Σ (start − previous op's end) over the stream's ops in start
	// order, split as HolisticTraceAnalysis does: host wait (the op's launch
	// call began after the previous op ended), kernel wait (otherwise, an
	// interval under Options.KernelWaitBelowNS, by default
	// IdleKernelWaitBelowNS), other (the rest).
	IdleNS           int64 `json:"idle_ns"`
	IdleHostWaitNS   int64 `json:"idle_host_wait_ns"`
	IdleKernelWaitNS int64 `json:"idle_kernel_wait_ns"`
	IdleOtherNS      int64 `json:"idle_other_ns"`
}

// IdleKernelWaitBelowNS is HolisticTraceAnalysis's default
// consecutive_kernel_delay: a shorter interval between two ops on a stream
// is the cost of launching back to back.
const IdleKernelWaitBelowNS = 30

// Row is one line of a breakdown: a category or a kernel name.
type Row struct {
	Name     string `json:"name"`
	Category string `json:"category,omitempty"`
	Ops      int    `json:"ops"`
	SumDurNS int64  `json:"sum_dur_ns"`
	// ExclusiveNS is this row's part of the busy union.
	ExclusiveNS int64   `json:"exclusive_ns"`
	Share       float64 `json:"share"`
	// PerStepNS is the mean exclusive time per typical step; null without steps.
	PerStepNS *int64 `json:"per_step_ns"`
	// UnionNS (categories only) is the union of the category's op
	// intervals over all streams: the time at least one of its ops ran.
	// UnionNS − ExclusiveNS is the time it ran under another category's op.
	// It is what a speed-up of the category can take off the timeline.
	UnionNS *int64 `json:"union_ns,omitempty"`
	// TailUnionNS (categories only) is the part of UnionNS after the last
	// gap the host caused (see WhatIf): with the host's launch times as
	// recorded, only this part can shorten the device's timeline.
	TailUnionNS *int64 `json:"tail_union_ns,omitempty"`
	// Dur (kernel rows only) is the distribution of the row's op durations.
	Dur *DurStats `json:"dur,omitempty"`
}

// DurStats are per-call duration statistics over ops with dur ≥ 0,
// accumulated in one pass (Welford).
type DurStats struct {
	Count  int     `json:"count"`
	MeanNS float64 `json:"mean_ns"`
	MinNS  int64   `json:"min_ns"`
	MaxNS  int64   `json:"max_ns"`
	// StdNS is the sample standard deviation (n − 1; 0 for one op), as
	// pandas' std, which HolisticTraceAnalysis reports.
	StdNS float64 `json:"std_ns"`
}

// LabelTable attributes busy time to one kind of annotation.
type LabelTable struct {
	// Kind is "gpu_user_annotation" (labels on the GPU timeline, matched by
	// stream and op start) or "user_annotation" (host labels, matched by the
	// thread and time of the op's launch).
	Kind string `json:"kind"`
	// Rows are the leaf labels (non-zero exclusive time) and the
	// "(unlabelled)" remainder; their exclusive_ns sums to busy_ns.
	Rows         []LabelRow `json:"rows"`
	UnlabelledNS int64      `json:"unlabelled_ns"`
	// InclusiveSumNS is Σ inclusive_ns over all label names. Above busy_ns it
	// means summing per-label times double counts (DoubleCounted).
	InclusiveSumNS int64 `json:"inclusive_sum_ns"`
	DoubleCounted  bool  `json:"double_counted"`
	// Aggregates are labels whose GPU time is entirely inside other labels:
	// their inclusive time is the sum of their children's.
	Aggregates []LabelRow `json:"aggregates"`
	// Duplicates groups labels with identical non-zero inclusive time: they
	// cover the same work and must not be added together.
	Duplicates [][]string `json:"duplicates"`
	// NoGPUTime are labels with host time but no GPU time attributed: either
	// they launch nothing, or their work is collected under another label
	// (an attribution leak).
	NoGPUTime []LabelRow `json:"no_gpu_time"`
}

// LabelRow is one label name.
type LabelRow struct {
	Name        string  `json:"name"`
	Instances   int     `json:"instances"`
	HostNS      int64   `json:"host_ns"` // Σ of the label intervals' durations
	ExclusiveNS int64   `json:"exclusive_ns"`
	InclusiveNS int64   `json:"inclusive_ns"`
	Share       float64 `json:"share"`
	PerStepNS   *int64  `json:"per_step_ns"`
}

// Steps is the per-step view from ProfilerStep#N annotations.
type Steps struct {
	Steps []Step `json:"steps"`
	// Typical is one step: the median of the typical steps by host span.
	// The typical steps are all steps but the first (warm-up) and the last
	// (cut by the profiler window), unless there are fewer than three or
	// Options.AllSteps is set.
	Typical Typical `json:"typical"`
	// UntaggedBusyNS is busy time of ops launched outside every step, and
	// UntaggedGapNS the gaps such ops end: Σ steps' gpu_time_ns +
	// UntaggedBusyNS + UntaggedGapNS = the device's span_ns.
	UntaggedBusyNS int64 `json:"untagged_busy_ns"`
	UntaggedGapNS  int64 `json:"untagged_gap_ns"`
}

// Step is one ProfilerStep. Ops belong to the step in which they were
// launched, not the one in which they ran.
type Step struct {
	Name   string `json:"name"`
	Number int64  `json:"number"`
	// StartNS is relative to the first step's start.
	StartNS   int64 `json:"start_ns"`
	SpanNS    int64 `json:"span_ns"` // host-side step duration
	GPUSpanNS int64 `json:"gpu_span_ns"`
	// GPUTimeNS = BusyNS + GapNS: the step's part of the device's timeline
	// (its ops' busy time and the gaps they end). The steps' parts and the
	// untagged parts add up to the device's span exactly; for steps that
	// run one after another on the GPU it is the time from the previous
	// step's last op end to this step's.
	GPUTimeNS int64 `json:"gpu_time_ns"`
	Ops       int   `json:"ops"`
	BusyNS    int64 `json:"busy_ns"`
	GapCount  int   `json:"gap_count"`
	GapNS     int64 `json:"gap_ns"`
	GapP50NS  int64 `json:"gap_p50_ns"`
	// HostWaitNS is the part of GapNS the GPU spent waiting for the host:
	// the host-late and in-launch-call parts of the step's gaps.
	HostWaitNS int64  `json:"host_wait_ns"`
	Typical    bool   `json:"typical"`
	Note       string `json:"note,omitempty"`
}

// Typical is the typical step: of the typical steps, the one with the
// median host span (the lower median; the earlier step on ties). Every
// figure in it is that one step's, so they agree with each other: BusyNS +
// GapNS = GPUTimeNS, BusyFraction = BusyNS / GPUTimeNS in [0, 1].
type Typical struct {
	// Steps is how many steps are typical; Step names the median one ("" without steps).
	Steps        int     `json:"steps"`
	Step         string  `json:"step"`
	SpanNS       int64   `json:"span_ns"` // host-side duration
	GPUTimeNS    int64   `json:"gpu_time_ns"`
	BusyNS       int64   `json:"busy_ns"`
	BusyFraction float64 `json:"busy_fraction"`
	GapNS        int64   `json:"gap_ns"`
	HostWaitNS   int64   `json:"host_wait_ns"`
	// CategoryUnionNS is, per category with ops in the step, the union of
	// the intervals of the step's ops of that category.
	CategoryUnionNS map[string]int64 `json:"category_union_ns"`
}

// Gaps describes the idle time between consecutive busy intervals of a device.
type Gaps struct {
	Count   int   `json:"count"`
	TotalNS int64 `json:"total_ns"` // = mean × n
	MeanNS  int64 `json:"mean_ns"`
	P50NS   int64 `json:"p50_ns"`
	P90NS   int64 `json:"p90_ns"`
	MaxNS   int64 `json:"max_ns"`
	// P50xNNS is p50 × count, the typical cost; when it is far below TotalNS
	// a few long gaps dominate and deserve their own look.
	P50xNNS int64 `json:"p50_x_n_ns"`
	// The parts of every gap, summed. Each gap splits exactly into: host
	// late (the GPU was idle before the host began the launch call of the
	// next op), launch (inside that call), queued (the call had returned and
	// the op still waited: dependencies, events, launch latency), and
	// unattributed (the next op has no launch to join).
	HostLateNS     int64 `json:"host_late_ns"`
	LaunchNS       int64 `json:"launch_ns"`
	QueuedNS       int64 `json:"queued_ns"`
	UnattributedNS int64 `json:"unattributed_ns"`
}

// Flag is a reliability warning with the figures it affects.
type Flag struct {
	Code string `json:"code"`
	// Device is null for flags about the whole trace.
	Device      *int   `json:"device"`
	Count       int64  `json:"count"`
	Detail      string `json:"detail"`
	BlastRadius string `json:"blast_radius"`
}

// Gap is one idle interval, with its parts. HostLate+Launch+Queued+
// Unattributed == End−Start for every gap.
type Gap struct {
	Start, End                             int64
	Next                                   Op
	HostLate, Launch, Queued, Unattributed int64
	Step                                   int // index into Steps, -1 if none
}
