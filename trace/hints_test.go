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
