package trace

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// kernelNames are templated names of the length real traces carry.
var kernelNames = func() []string {
	bases := []string{
		"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)",
		"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
		"void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
		"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)",
		"ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
		"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::FusedSgdMathFunctor<float, 3>, float>(int, int*, float*)",
		"void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t>, false, true, false>(Flash_fwd_params)",
	}
	var ns []string
	for i := range 60 {
		ns = append(ns, fmt.Sprintf("%s_v%d", bases[i%len(bases)], i))
	}
	return ns
}()

// writeSyntheticTrace writes a Kineto-shaped trace of at least size bytes:
// per GPU op, host ops with shapes, a launch, a flow pair, a non-launch
// runtime call and the kernel with its launch parameters, about 2.4 KB in
// all, which is the density of the HTA sample traces (2.6, 2.5 and 1.5 KB of
// JSON per GPU op). Every 2000 ops a ProfilerStep and annotations.
func writeSyntheticTrace(w io.Writer, size int64) (ops int, err error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countingWriter{w: bw}
	fmt.Fprint(cw, `{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85029158912}], "traceEvents": [`+"\n")
	ts := int64(1_712_195_495_519_689_047) / 1000 // µs
	// A constant nanosecond part keeps gaps exact and still exercises
	// the fraction parsing.
	frac := 47
	step := 0
	for cw.n < size {
		if ops%2000 == 0 {
			fmt.Fprintf(cw, `  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": 1102, "tid": 1102, "ts": %d.%03d, "dur": 2000000.5, "args": {"External id": %d}},`+"\n", step, ts, frac, ops)
			fmt.Fprintf(cw, `  {"ph": "X", "cat": "gpu_user_annotation", "name": "## forward ##", "pid": 0, "tid": 7, "ts": %d.%03d, "dur": 900000.25, "args": {"External id": %d}},`+"\n", ts+50, frac, ops)
			step++
		}
		corr := 100000 + ops
		name := kernelNames[ops%len(kernelNames)]
		for k := range 3 {
			fmt.Fprintf(cw, `  {"ph": "X", "cat": "cpu_op", "name": "aten::linear_%d", "pid": 1102, "tid": 1102, "ts": %d.%03d, "dur": 63.813, "args": {"External id": %d, "Sequence number": %d, "Fwd thread id": 1, "Record function id": 0, "Ev Idx": %d, "Input Dims": [[64, 1024, 4096], [4096, 4096], [4096]], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"], "Input Strides": [[4194304, 4096, 1], [4096, 1], [1]], "Concrete Inputs": ["", "", ""]}},`+"\n",
				k, ts, frac, ops*3+k, ops, ops*3+k)
		}
		fmt.Fprintf(cw, `  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1102, "tid": 1102, "ts": %d.%03d, "dur": 4.125, "args": {"External id": %d, "cbid": 211, "correlation": %d}},`+"\n", ts+1, frac, ops, corr)
		fmt.Fprintf(cw, `  {"ph": "s", "id": %d, "pid": 1102, "tid": 1102, "ts": %d.%03d, "cat": "ac2g", "name": "ac2g"},`+"\n", corr, ts+1, frac)
		fmt.Fprintf(cw, `  {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamIsCapturing", "pid": 1102, "tid": 1102, "ts": %d.%03d, "dur": 0.5, "args": {"External id": %d, "cbid": 317, "correlation": %d}},`+"\n", ts+5, frac, ops, corr+50_000_000)
		fmt.Fprintf(cw, `  {"ph": "X", "cat": "kernel", "name": %s, "pid": 0, "tid": 7, "ts": %d.%03d, "dur": 37.5, "args": {"External id": %d, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": %d, "registers per thread": 168, "shared memory": 73728, "blocks per SM": 1.2, "warps per SM": 9.6, "grid": [132, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %%": 12}},`+"\n",
			strconv.Quote(name), ts+10, frac, ops, corr)
		fmt.Fprintf(cw, `  {"ph": "f", "id": %d, "pid": 0, "tid": 7, "ts": %d.%03d, "cat": "ac2g", "name": "ac2g", "bp": "e"},`+"\n", corr, ts+10, frac)
		ops++
		ts += 40
	}
	fmt.Fprint(cw, `  {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1712195495519689.047, "dur": 1.5}`+"\n], \"displayTimeUnit\": \"ms\"}\n")
	if cw.err != nil {
		return ops, cw.err
	}
	return ops, bw.Flush()
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

var benchData []byte

func syntheticTrace(b *testing.B) []byte {
	if benchData == nil {
		var buf bytes.Buffer
		if _, err := writeSyntheticTrace(&buf, 64<<20); err != nil {
			b.Fatal(err)
		}
		benchData = buf.Bytes()
	}
	return benchData
}

// benchTrace times read over the generated trace. SetBytes makes the
// output carry MB/s, and b.Loop starts the timer after the generation.
// MB/cpu-s is the same bytes per second of this process's CPU time (user +
// system, the garbage collector's included): on a shared, loaded machine
// wall time is mostly waiting for a core, and MB/s says more about the
// load than about the parser.
func benchTrace(b *testing.B, read func(io.Reader) error) {
	data := syntheticTrace(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if err := read(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data))*float64(b.N)/1e6/(cpuTime(b)-cpu0), "MB/cpu-s")
}

// cpuTime is the user and system CPU seconds this process has used.
func cpuTime(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Skip("no rusage:", err)
	}
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return sec(ru.Utime) + sec(ru.Stime)
}

// BenchmarkParse measures the scanner and the event filter on 64 MB of
// generated trace: one goroutine, so MB/s is per core.
func BenchmarkParse(b *testing.B) {
	benchTrace(b, func(r io.Reader) error { _, err := Parse(r); return err })
}

// BenchmarkAnalyze adds the report: sorting, the sweep, labels and steps.
func BenchmarkAnalyze(b *testing.B) {
	benchTrace(b, func(r io.Reader) error { _, err := Analyze(r, Options{}); return err })
}

// BenchmarkAnalyzeHostOps adds the attribution of GPU time to host ops
// (Options.HostOps): one more sorted record per host op (three per kernel
// in the generated trace) and per GPU op.
func BenchmarkAnalyzeHostOps(b *testing.B) {
	benchTrace(b, func(r io.Reader) error { _, err := Analyze(r, Options{HostOps: true}); return err })
}

func TestSyntheticTraceIsValid(t *testing.T) {
	var buf bytes.Buffer
	ops, err := writeSyntheticTrace(&buf, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(&buf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	// 40 µs apart, 37.5 µs long: one gap of 2.5 µs between each pair.
	if d.Ops != ops || d.Gaps.Count != ops-1 || d.Gaps.P50NS != 2500 || d.BusyNS != int64(ops)*37500 {
		t.Errorf("ops %d/%d, gaps %d p50 %d, busy %d", d.Ops, ops, d.Gaps.Count, d.Gaps.P50NS, d.BusyNS)
	}
	checkInvariants(t, d)
	for _, f := range r.Flags {
		if f.Code != "no_steps" && f.Code != "few_steps" && f.Code != "out_of_window" {
			t.Errorf("unexpected flag %+v", f)
		}
	}
}

var synthetic = flag.String("synthetic", "", "write a generated trace of -synthetic-mb MB to this path (for RSS measurements) and exit the test")
var syntheticMB = flag.Int64("synthetic-mb", 1100, "size of the -synthetic trace in MB")

// TestWriteSynthetic writes the large trace used to measure the CLI's peak
// RSS against Python's json.load; it does nothing unless -synthetic is set:
//
//	go test ./trace -run TestWriteSynthetic -synthetic /tmp/big.json
func TestWriteSynthetic(t *testing.T) {
	if *synthetic == "" {
		t.Skip("set -synthetic PATH to write a generated trace")
	}
	f, err := os.Create(*synthetic)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := writeSyntheticTrace(f, *syntheticMB*1e6)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: %d GPU ops", *synthetic, ops)
}

// fileScratch is the CLI's kind of scratch, for the benchmark: runs as
// temporary files, removed on Close.
type fileScratch struct{ dir string }

func (s fileScratch) Create() (ScratchFile, error) {
	f, err := os.CreateTemp(s.dir, "run-")
	if err != nil {
		return nil, err
	}
	return removeOnClose{f}, nil
}

type removeOnClose struct{ *os.File }

func (f removeOnClose) Close() error {
	err := f.File.Close()
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	return err
}

// BenchmarkAnalyzeSpill is BenchmarkAnalyze through temporary files with
// 256 KiB sort buffers, so that every stage spills runs and merges them,
// as a multi-GB trace does with the default buffers.
func BenchmarkAnalyzeSpill(b *testing.B) {
	opts := Options{Scratch: fileScratch{b.TempDir()}, BufferBytes: 256 << 10}
	benchTrace(b, func(r io.Reader) error { _, err := Analyze(r, opts); return err })
}
