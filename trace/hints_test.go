package trace

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func hostOp(cat, name string, tid int, ts, dur string, ext int) string {
	return fmt.Sprintf(`{"ph": "X", "cat": %q, "name": %q, "pid": 10, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d}}`,
		cat, name, tid, ts, dur, ext)
}

func kernelExt(name string, ts, dur string, corr, ext int) string {
	return fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": %q, "pid": 0, "tid": 7, "ts": %s, "dur": %s, "args": {"External id": %d, "device": 0, "stream": 7, "correlation": %d}}`,
		name, ts, dur, ext, corr)
}

// Real kernel names (HolisticTraceAnalysis sample traces).
const (
	mulKernel  = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2>)"
	catKernel  = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)"
	gemmKernel = "ampere_sgemm_128x64_nn"
)

// TestHostOpHints: the launching host op, found through the kernel's
// External id, moves elementwise kernels into optimizer or communication;
// GEMMs keep their category; the same name launched by the model stays
// elementwise, in its own row.
func TestHostOpHints(t *testing.T) {
	in := traceJSON(
		hostOp("cpu_op", "aten::mul", 11, "0", "2", 1),           // the model's multiply
		hostOp("cpu_op", "aten::_fused_adamw_", 11, "3", "2", 2), // fused optimizer
		hostOp("user_annotation", "Optimizer.step#AdamW.step", 11, "6", "4", 3),
		hostOp("cpu_op", "aten::mul_", 11, "7", "1", 4),          // for-loop optimizer, inside the step
		hostOp("cpu_op", "aten::mm", 11, "8", "1", 5),            // a GEMM inside the step
		hostOp("cpu_op", "record_param_comms", 12, "11", "1", 6), // a collective's copy
		hostOp("cpu_op", "aten::mul", 11, "20", "1", 7),          // after the step: the model again
		launch("0.5", "0.5", 1), launch("3.5", "0.5", 2), launch("7.2", "0.5", 4),
		launch("8.2", "0.5", 5), launch("11.2", "0.5", 6), launch("20.2", "0.5", 7),
		kernelExt(mulKernel, "30", "1", 1, 1),
		kernelExt(mulKernel, "32", "2", 2, 2),
		kernelExt(mulKernel, "35", "3", 4, 4),
		kernelExt(gemmKernel, "39", "4", 5, 5),
		kernelExt(catKernel, "44", "5", 6, 6),
		kernelExt(mulKernel, "50", "6", 7, 7),
	)
	r := analyzeString(t, in, Options{})
	d := r.Devices[0]
	want := map[string]int64{"elementwise": 7000, "optimizer": 5000, "gemm": 4000, "communication": 5000}
	if diff := cmp.Diff(want, catExcl(d)); diff != "" {
		t.Errorf("category exclusive ns (-want +got):\n%s", diff)
	}
	rows := map[string]int64{}
	for _, k := range d.Kernels {
		rows[k.Category+" "+k.Name[:min(len(k.Name), 40)]] = k.ExclusiveNS
	}
	wantRows := map[string]int64{
		"elementwise " + mulKernel[:40]:   7000,
		"optimizer " + mulKernel[:40]:     5000,
		"gemm " + gemmKernel:              4000,
		"communication " + catKernel[:40]: 5000,
	}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("kernel rows (-want +got):\n%s", diff)
	}
	// The same through scratch with tiny buffers.
	analyzeBoth(t, []byte(in), 64, Options{})
}

// TestHostOpHintsBounded: past maxHints hinted host ops, later ones are
// not remembered and the flag says so.
func TestHostOpHintsBounded(t *testing.T) {
	var tr Trace
	for i := range maxHints + 3 {
		e := event{name: []byte("aten::_foreach_add_"), ext: int64(i), extOK: true}
		tr.noteHostOp(&e)
	}
	if len(tr.hints) != maxHints || tr.hintsDropped != 3 {
		t.Errorf("hints %d, dropped %d; want %d, 3", len(tr.hints), tr.hintsDropped, maxHints)
	}
	if codes := flagCodes(&Report{Flags: tr.traceFlags()}); !cmp.Equal(codes, []string{"host_hints_dropped"}) {
		t.Errorf("flags %v", codes)
	}
}

// TestHostOpHintsLegacyFormat: Kineto traces from PyTorch 1.8–1.9 (the
// TensorBoard plugin's ResNet-50 samples) spell host ops "cat": "Operator",
// launches "Runtime", kernels "Kernel", and write a kernel's launching op
// as "external id" in lower case. The optimizer step's kernels (SGD's
// aten::add_ inside Optimizer.step#SGD.step) must still be optimizer, and
// --ops must still attribute GPU time to the host op. The events are
// copied from that sample (names, field spelling and layout), shortened.
func TestHostOpHintsLegacyFormat(t *testing.T) {
	const add = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)"
	op := func(name string, ts, dur string, ext int) string {
		return fmt.Sprintf(`{"ph": "X", "cat": "Operator", "name": %q, "pid": 25738, "tid": "25738", "ts": %s, "dur": %s, "args": {"Device": 25738, "External id": %d, "Trace name": "PyTorch Profiler", "Trace iteration": 0}}`, name, ts, dur, ext)
	}
	rt := func(ts string, corr, ext int) string {
		return fmt.Sprintf(`{"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 25738, "tid": "25738", "ts": %s, "dur": 1, "args": {"correlation": %d, "external id": %d}}`, ts, corr, ext)
	}
	kern := func(ts, dur string, corr, ext int) string {
		return fmt.Sprintf(`{"ph": "X", "cat": "Kernel", "name": %q, "pid": 0, "tid": "stream 7", "ts": %s, "dur": %s, "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": %d, "external id": %d}}`, add, ts, dur, corr, ext)
	}
	// As in the sample, a span is written after the ops inside it (events
	// in order of their end), and External ids count up in order of start.
	in := traceJSON(
		op("aten::add_", "10", "2", 1), // the model's residual add
		op("aten::add_", "21", "2", 3), // SGD's update, inside the step
		op("aten::mul_", "23.5", "2", 4),
		op("aten::add_", "24", "1", 5), // nested in the mul_, written before it
		op("Optimizer.step#SGD.step", "20", "10", 2),
		op("aten::add_", "31", "2", 6), // after the step: the model again
		rt("10.5", 101, 1), rt("21.5", 103, 3), rt("24.2", 105, 5), rt("31.5", 106, 6),
		kern("40", "4", 101, 1),
		kern("50", "6", 103, 3),
		kern("60", "1", 105, 5),
		kern("70", "2", 106, 6),
	)
	r := analyzeString(t, in, Options{})
	want := map[string]int64{"elementwise": 6000, "optimizer": 7000}
	if diff := cmp.Diff(want, catExcl(r.Devices[0])); diff != "" {
		t.Errorf("category exclusive ns (-want +got):\n%s", diff)
	}
	r = analyzeString(t, in, Options{HostOps: true})
	got := map[string]int64{}
	for _, h := range r.Devices[0].HostOps {
		got[h.Name] = h.SelfGPUNS
	}
	if diff := cmp.Diff(map[string]int64{"aten::add_": 13000}, got); diff != "" {
		t.Errorf("self GPU time per host op (-want +got):\n%s", diff)
	}
}

// TestOptRangesBounded: optimizer steps written after their ops, in
// descending order (each insertion at the front), are kept sorted up to
// maxOptRanges; later ones are counted as dropped hints, and a kernel's
// External id finds its step's range and no other.
func TestOptRangesBounded(t *testing.T) {
	var tr Trace
	const n = maxOptRanges + 2
	for i := n - 1; i >= 0; i-- {
		// Step i: span id 10i, ops 10i+1 … 10i+5 on thread 1, written first.
		op := event{name: []byte("aten::add_"), tid: 1, ext: int64(10*i + 5), extOK: true}
		tr.noteHostOp(&op)
		span := event{name: []byte("Optimizer.step#SGD.step"), tid: 1, ext: int64(10 * i), extOK: true}
		tr.noteHostOp(&span)
		// threadMaxExt stays at the largest id: later (lower) steps'
		// ranges reach up to it, so each range is (10i, 10(n-1)+5].
	}
	if len(tr.optRanges) != maxOptRanges || tr.hintsDropped != 2 {
		t.Fatalf("ranges %d, dropped %d; want %d, 2", len(tr.optRanges), tr.hintsDropped, maxOptRanges)
	}
	for i := 1; i < len(tr.optRanges); i++ {
		if tr.optRanges[i-1][0] >= tr.optRanges[i][0] {
			t.Fatalf("ranges not sorted at %d: %v, %v", i, tr.optRanges[i-1], tr.optRanges[i])
		}
	}
	// Steps 0 and 1 came last and were dropped: ids 15 and below are in
	// no range; 25 is in step 2's; past the largest id nothing is.
	for _, c := range []struct {
		ext  int64
		want bool
	}{{15, false}, {25, true}, {int64(10*(n-1) + 3), true}, {int64(10*(n-1) + 6), false}} {
		e := event{ext: c.ext, extOK: true}
		_, got := tr.hintFor(&e, KindKernel)
		if got != c.want {
			t.Errorf("hintFor(ext %d) = %v, want %v", c.ext, got, c.want)
		}
	}
}
