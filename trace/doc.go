// Package trace accounts for where a training step's GPU time goes, from a
// PyTorch profiler (Kineto) Chrome-trace JSON, so that the parts add up.
//
// It provides a streaming parser (Parse), the accounting (Trace.Report, or
// Analyze for both), a bound on what a faster category saves (WhatIf) and a two-run comparison
// (Compare). It takes an io.Reader of JSON: opening files and gunzipping
// them is the caller's job, and nothing here touches the file system, the
// network or the clock. It refuses to guess: what it cannot account for is
// reported as a reliability flag with the figures it affects.
//
// # The method
//
// The accounting follows a research note on GPU time in training loops:
//
//   - Busy time is the union of the GPU op intervals (kernels, memcpy,
//     memset) of a device. Σdur exceeds it wherever ops overlap; the
//     difference is reported as overlap.
//   - Every breakdown is exclusive: each busy nanosecond belongs to exactly
//     one op, so category, kernel, label and step tables each sum to the
//     union in integer nanoseconds. Where ops overlap, compute ops keep the
//     time over memcpy/memset, and those over communication (so the
//     communication row is exposed communication); then the op that started
//     first; then the lower stream.
//   - Labels: an op's time goes to its innermost label. For
//     gpu_user_annotation, the label on the op's stream containing the op's
//     start; for user_annotation, the label on the launching host thread
//     containing the launch. The remainder is an explicit "(unlabelled)" row.
//     Inclusive times (an op counted under every label containing it) are
//     kept beside: a label with inclusive but no exclusive time is an
//     aggregate, labels with identical inclusive time are duplicates, Σ
//     inclusive above busy is flagged as double counting, and labels with
//     host time but no GPU time are listed (they launch nothing, or their
//     work is attributed elsewhere).
//   - Steps come from host-side ProfilerStep#N annotations. An op belongs to
//     the step that launched it (joined by correlation id), not the step in
//     which it ran. The first step (warm-up) and the last (cut by the
//     profiler window) are not typical. The typical step is one step, the
//     one with the median host span, so its figures agree with each other;
//     per_step_ns in the tables is a mean over the typical steps. A step's
//     GPU time is its ops' busy time plus the gaps they end, so that the
//     steps' parts add up to the device's span as busy and gaps do.
//   - Idle gaps are the spaces between busy intervals. Each gap splits
//     exactly into host late (before the launch call of the op that ends the
//     gap began), launch (inside that call), queued (after the call
//     returned) and unattributed (no launch to join). Statistics are
//     nearest-rank percentiles, with p50 × n beside mean × n.
//   - WhatIf bounds what speeding up a category by S can take off the
//     device's timeline: (1 − 1/S) × the union of the category's intervals
//     over all streams, since the chain of waiting ops that sets the
//     timeline's end never overlaps itself; with the host's launch times
//     as recorded, only the union after the last gap the host caused
//     counts (see Projection for the model and its assumptions).
//   - Beside the accounting, in the same pass: per-kernel duration
//     statistics (count, mean, min, max, sample std; Welford), each
//     stream's idle time split as HolisticTraceAnalysis does (host wait,
//     kernel wait, other), the share of communication that ran beside
//     computation, kernels under 10 µs, launch-to-start delay percentiles,
//     cuda_sync totals, a label table of nn.Module calls, and with
//     Options.HostOps the GPU time of each launching host op (a sort-join
//     on External ids). Ranks compares the traces of a multi-rank run one
//     file at a time: stragglers by typical step, the slowest rank per
//     step, and collective wait time (the n-th communication kernel of
//     every rank is one collective; wait is the time beyond the fastest).
//
// # Categories
//
// Memcpy and memset events are memcpy_memset. A kernel is matched on its
// own identifier: the lower-cased qualified name without "void " or another
// return type, template arguments and parameter list, so that the functor
// inside at::native::vectorized_elementwise_kernel<4, …{lambda()#1}…> does
// not decide its category ("lambda" is not LAMB). A generic wrapper
// (cutlass::Kernel<X>, cutlass::device_kernel<X>) is matched with X's name.
// "fbgemm" is masked (a library name, not a GEMM). The first rule with a
// matching substring wins; "sgd" and "lamb" count only as whole words:
//
//	communication   nccl rccl allreduce all_reduce allgather all_gather reducescatter
//	                reduce_scatter alltoall all_to_all sendrecv broadcast_kernel c10d
//	attention       flash fmha attention attn sdpa mha_fwd mha_bwd
//	optimizer       multi_tensor_apply adam adagrad rmsprop optimizer fused_optim sgd lamb
//	gemm            gemm gemv cublas cutlass xmma matmul wgmma hmma bmm cijk_ splitkreduce
//	                epilogue::impl:: scudnn implicit conv winograd fft2d fft1d cask_cudnn
//	                dgrad wgrad fprop igemm im2col col2im flip_filter   (convolutions run
//	                as implicit GEMMs, their helpers count with them; cijk_ is
//	                rocBLAS/Tensile, splitkreduce and epilogue::impl:: are cuBLAS's)
//	reduction_norm  reduce norm softmax bn_fw bn_bw welford moments gammabeta cross_entropy
//	                nll argmax argmin cumsum scan topk sort max_pool avg_pool average_pool
//	                pooling cub::device triton_red triton_per
//	elementwise     elementwise pointwise triton_poi vectorized unrolled copy fill cat index
//	                indices gather scatter where clamp relu gelu silu dropout add mul div
//	                cast transpose permute nchwtonhwc nhwctonchw scal embedding bucketize
//	                range to_dense quantize fp8
//	other           everything else
//
// Where the trace links a kernel to its launching host op (the kernel's
// "External id", "external id" in PyTorch 1.8–1.9 traces, whose host ops
// are "Operator" rather than "cpu_op"), the host op can move the kernel out of elementwise,
// reduction_norm or other: aten::_fused_adam*, _fused_sgd, _fused_adagrad
// and aten::_foreach_* ops, and every host op inside an Optimizer.step#…
// span on the same thread, make it optimizer; nccl:*, c10d::* and
// record_param_comms make it communication. Such a kernel has a row of its
// own in the kernel table, beside the same name launched elsewhere.
//
// testdata/kernel_labels.tsv holds real kernel names from public traces
// with the category a person gave each; a test checks every row.
//
// The order matters: NCCL kernels contain "reduce", flash attention uses
// cutlass, fused optimizers are elementwise kernels by shape, and FBGEMM's
// embedding backward kernels fuse the optimizer update into a scatter.
//
// # Input
//
// ts and dur are decimal microseconds (Chrome's format, whatever
// displayTimeUnit says) and are converted to integer nanoseconds without
// float64: epoch-µs timestamps need 17 significant digits. Only events with
// ph "X" are used. Host ops, flows and metadata are skipped without being
// stored. A trace cut off inside its events is analysed and flagged
// "truncated"; one cut off before any GPU op fails with ErrTruncated.
// Analyze reads decompressed JSON; a caller that gunzips reads the stream to
// its end, so that gzip's CRC-32 and length are checked, and reports a
// mismatch as ErrCorrupt.
//
// # Memory
//
// The analysis is a pipeline of sorts over compact fixed-size records:
// GPU ops (31 bytes) and launches (25) by correlation id for the join, the
// joined ops (56) by time for the sweep, label points (29) by track for the
// label tables, and gap lengths (12) for exact percentiles. Given
// Options.Scratch (the CLI gives it temporary files), each sort holds at
// most Options.BufferBytes and spills full buffers as sorted runs, merged
// on read at most 32 at a time, so memory does not grow with the number of
// ops or the size of the JSON. The figures are the same as in memory. What
// is still held in full is small and grows only with the trace's shape:
// one entry per step, stream, host thread and device, the ops running at
// one instant and the labels open at one instant. Names are capped at
// 20,000 (or 4 MiB); later kernel names are merged into one row per
// category, later label names into one row, flagged "names_merged", and
// every sum stays exact. Without Scratch everything is sorted in memory:
// about 100 bytes per GPU op at the peak.
//
// The --json schema is documented in docs/trace-json.md.
package trace
