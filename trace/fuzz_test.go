package trace

import (
	"bytes"
	"errors"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse feeds arbitrary bytes to the parser and the report. Neither may
// panic; an error must be one of the documented kinds; a report must keep
// its accounting identities whatever the input.
func FuzzParse(f *testing.F) {
	f.Add([]byte(traceJSON(kernel("sm80_gemm", 7, "1.5", "2", 1), launch("0.5", "0.2", 1),
		`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 11, "ts": 0, "dur": 100}`,
		`{"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 0, "dur": 10}`,
		kernel("ncclKernel", 8, "2", "5", 2))))
	f.Add([]byte(`[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1e3,"dur":-1}`))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"Kernel","name":"\ud83d","pid":0,"tid":7,"ts":"1","dur":[[[[{}]]]]}]}`))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":99999999999999999999999,"dur":1}]}`))
	f.Add([]byte(`{"traceEvents":[` + kernel("k", 7, "1", "2", 1)))
	// Host ops whose hints recategorise the kernels they launch.
	f.Add([]byte(traceJSON(hostOp("user_annotation", "Optimizer.step#SGD.step", 11, "0", "9", 1),
		hostOp("cpu_op", "aten::mul_", 11, "1", "1", 2), hostOp("cpu_op", "nccl:all_reduce", 11, "3", "1", 3),
		launch("1.2", "0.2", 2), launch("3.2", "0.2", 3),
		kernelExt("vectorized_elementwise_kernel<4, MulFunctor>", "5", "1", 2, 2), kernelExt("CatArrayBatchedCopy", "7", "1", 3, 3))))
	f.Add([]byte("hello"))
	f.Add([]byte(""))
	// The opening of a real trace: metadata, deviceProperties, first events.
	f.Add(gunzipTestdata(f, "hta_sampled_rank0_4streams_2steps.json.gz")[:8192])
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Parse(bytes.NewReader(data))
		if err != nil {
			var se *syntaxError
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrNotTrace) && !errors.As(err, &se) {
				t.Fatalf("unexpected error kind %T: %v", err, err)
			}
			return
		}
		var gaps []Gap
		r := tr.Report(Options{onGap: func(_ int, g Gap) { gaps = append(gaps, g) }})
		for _, d := range r.Devices {
			checkInvariants(t, d)
		}
		checkGaps(t, gaps)
		// Spilling after every few records must not change a figure.
		spilled, err := Analyze(bytes.NewReader(data), Options{Scratch: MemScratch{}, BufferBytes: 1})
		if err != nil {
			t.Fatalf("Parse succeeded, spilling Analyze failed: %v", err)
		}
		if diff := cmp.Diff(r, spilled); diff != "" {
			t.Fatalf("spilled report differs (-memory +spilled):\n%s", diff)
		}
	})
}

// FuzzParseScaled checks parseScaled's short path, which reads what traces
// hold, against the general one on any text both accept.
func FuzzParseScaled(f *testing.F) {
	for _, s := range []string{"0", "-0", "7.0", "37.5", "63.813", "0.0005", "-0.0005", "1.0009999",
		"1712195495519689.047", "999999999999999.9995", "123456789012345678", "00000000000000000012.5", "1e3", "1.", ".5"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, shift uint8) {
		sh := int(shift % 8)
		v, exact, ok := parseScaledShort(b, sh)
		if !ok {
			return
		}
		want, wantExact, err := parseScaledLong(b, sh)
		if err != nil || v != want || exact != wantExact {
			t.Fatalf("parseScaledShort(%q, %d) = %d, %v; parseScaledLong = %d, %v, %v", b, sh, v, exact, want, wantExact, err)
		}
	})
}

// FuzzParseReadSizes checks the scanner's in-buffer fast paths against its
// refill paths: the same bytes read whole and one byte per Read must give
// the same trace or the same error, offsets included.
func FuzzParseReadSizes(f *testing.F) {
	f.Add([]byte(traceJSON(kernel("sm80_gemm", 7, "1.5", "2", 1), launch("0.5", "0.2", 1),
		`{"ph": "X", "cat": "User_Annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 11, "ts": 0, "dur": 100}`,
		`{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":10,"tid":11,"ts":1.0000005,"dur":2e0,"args":{"External id":7}}`)))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","name":"a\"b\\u00e9","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":"0x7","correlation":12345678901234567890}}]}`))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1` + "\t\r\n" + `,"dur":-` + "\x01" + `}]}`))
	f.Add(gunzipTestdata(f, "hta_sampled_rank0_4streams_2steps.json.gz")[:8192])
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, werr := Parse(bytes.NewReader(data))
		bytewise, berr := Parse(iotest.OneByteReader(bytes.NewReader(data)))
		if (werr == nil) != (berr == nil) || werr != nil && werr.Error() != berr.Error() {
			t.Fatalf("errors differ: read whole %v, byte by byte %v", werr, berr)
		}
		if werr != nil {
			return
		}
		if diff := cmp.Diff(whole.Report(Options{}), bytewise.Report(Options{})); diff != "" {
			t.Fatalf("reports differ (-whole +byte by byte):\n%s", diff)
		}
	})
}
