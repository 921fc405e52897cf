package trace

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

func TestParseScaled(t *testing.T) {
	tests := []struct {
		in    string
		shift int
		want  int64
		exact bool
		err   error
	}{
		{"0", 3, 0, true, nil},
		{"1", 3, 1000, true, nil},
		{"68.0", 3, 68000, true, nil},
		{"156.777", 3, 156777, true, nil},
		// The ns_resolution trace: float64 would give ...689.047 as ...689.0469...
		{"1712195495519689.047", 3, 1712195495519689047, true, nil},
		{"4458676522690.655", 3, 4458676522690655, true, nil},
		{"1.5e3", 3, 1500000, true, nil},
		{"15E-1", 3, 1500, true, nil},
		{"-2.5", 3, -2500, true, nil},
		{"0.0004", 3, 0, false, nil},
		{"0.0005", 3, 1, false, nil},   // half rounds away from zero
		{"-0.0005", 3, -1, false, nil}, // symmetric
		{"1.0009999", 3, 1001, false, nil},
		{"9223372036854775.807", 3, 9223372036854775807, true, nil},
		{"9223372036854775.808", 3, 0, false, errRange},
		{"9223372036854775.8074", 3, 9223372036854775807, false, nil},
		{"9223372036854775.8075", 3, 0, false, errRange},
		{"1e400000000000", 3, 0, false, errRange},
		{"1e-400000000000", 3, 0, false, nil},
		{"123456789012345678901234567890", 0, 0, false, errRange},
		{"7.0", 0, 7, true, nil},
		{"7.5", 0, 8, false, nil},
		{"", 3, 0, false, errNumber},
		{"-", 3, 0, false, errNumber},
		{"1.", 3, 0, false, errNumber},
		{".5", 3, 0, false, errNumber},
		{"1e", 3, 0, false, errNumber},
		{"1e+", 3, 0, false, errNumber},
		{"1-2", 3, 0, false, errNumber},
		{"--1", 3, 0, false, errNumber},
	}
	for _, tt := range tests {
		got, exact, err := parseScaled([]byte(tt.in), tt.shift)
		if !errors.Is(err, tt.err) {
			t.Errorf("parseScaled(%q, %d) error = %v, want %v", tt.in, tt.shift, err, tt.err)
			continue
		}
		if err == nil && (got != tt.want || exact != tt.exact) {
			t.Errorf("parseScaled(%q, %d) = %d, %v; want %d, %v", tt.in, tt.shift, got, exact, tt.want, tt.exact)
		}
	}
}

// trace wraps events in the usual Kineto object.
func traceJSON(events ...string) string {
	return `{"schemaVersion": 1, "traceEvents": [` + strings.Join(events, ",\n") + `], "displayTimeUnit": "ms", "baseTimeNanoseconds": 1711964646000000000}`
}

func kernel(name string, stream int, ts, dur string, corr int) string {
	return fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": %q, "pid": 0, "tid": %d, "ts": %s, "dur": %s, "args": {"device": 0, "stream": %d, "correlation": %d, "grid": [1, 2, 3]}}`,
		name, stream, ts, dur, stream, corr)
}

// profilerStep is a ProfilerStep#n annotation on the launching thread.
func profilerStep(n int, ts, dur string) string {
	return fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": 10, "tid": 11, "ts": %s, "dur": %s}`, n, ts, dur)
}

func launch(ts, dur string, corr int) string {
	return fmt.Sprintf(`{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": %s, "dur": %s, "args": {"correlation": %d, "cbid": 211}}`, ts, dur, corr)
}

func TestParseFields(t *testing.T) {
	in := traceJSON(
		`{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}`,
		`{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 1, "dur": 2, "args": {"Input Dims": [[1, 2], [3, [4, [5]]]], "s": "a \"quoted\" \\ string {["}}`,
		launch("10.5", "3", 42),
		`{"ph": "X", "cat": "cuda_runtime", "name": "cudaGetDevice", "pid": 10, "tid": 11, "ts": 9, "dur": 1, "args": {"correlation": 41}}`,
		kernel("gemm\u00e9 \\u00e9", 7, "20.001", "5.5", 42),
		`{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 30, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 43}}`,
		`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10, "tid": 11, "ts": 1, "dur": 99}`,
		`{"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 10, "tid": 11, "ts": 5, "dur": 10}`,
		`{"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 19, "dur": 10}`,
		`{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 1000}`,
		`{"ph": "f", "id": 42, "pid": 0, "tid": 7, "ts": 20, "cat": "ac2g", "name": "ac2g", "bp": "e"}`,
	)
	tr, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if tr.DisplayTimeUnit != "ms" || tr.BaseTimeNS != 1711964646000000000 || tr.Events != 11 || tr.Truncated {
		t.Errorf("meta = %q %d events=%d truncated=%v", tr.DisplayTimeUnit, tr.BaseTimeNS, tr.Events, tr.Truncated)
	}
	wantOps := []Op{
		{Start: 20001, Dur: 5500, Corr: 42, Name: tr.names["gemmé é"], Stream: 7, Kind: KindKernel},
		{Start: 30000, Dur: 1000, Corr: 43, Name: tr.names["Memcpy HtoD"], Stream: 7, Kind: KindMemcpy},
	}
	if diff := cmp.Diff(wantOps, tr.Ops); diff != "" {
		t.Errorf("ops (-want +got):\n%s", diff)
	}
	// cudaGetDevice enqueues nothing and is not kept.
	if diff := cmp.Diff([]Launch{{Corr: 42, Start: 10500, End: 13500, Kernel: true}}, tr.Launches); diff != "" {
		t.Errorf("launches (-want +got):\n%s", diff)
	}
	if len(tr.Steps) != 1 || tr.Names[tr.Steps[0].Name] != "ProfilerStep#3" || tr.Steps[0].End != 100000 {
		t.Errorf("steps = %+v", tr.Steps)
	}
	if len(tr.Labels) != 2 || !tr.Labels[1].GPU || tr.Labels[1].Track != 7 {
		t.Errorf("labels = %+v", tr.Labels)
	}
	if !tr.HasProfilerSpan || tr.ProfilerEnd != 1000000 {
		t.Errorf("profiler span = %v %d", tr.HasProfilerSpan, tr.ProfilerEnd)
	}
}

func TestParseArrayFormat(t *testing.T) {
	// Chrome's JSON Array Format; the closing bracket is optional there.
	for _, in := range []string{
		"[" + kernel("k", 7, "1", "2", 1) + "]",
		"[" + kernel("k", 7, "1", "2", 1) + ",\n",
	} {
		tr, err := Parse(strings.NewReader(in))
		if err != nil {
			t.Fatalf("Parse(%.20q…): %v", in, err)
		}
		if len(tr.Ops) != 1 || tr.Truncated {
			t.Errorf("ops = %d, truncated = %v", len(tr.Ops), tr.Truncated)
		}
	}
}

func TestParseBadEventsAreDropped(t *testing.T) {
	in := traceJSON(
		kernel("good", 7, "1", "2", 1),
		`{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "12", "dur": 1}`,
		`{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1e999, "dur": 1}`,
		`{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 9223372036854775, "dur": 9223372036854775}`,
		`{"ph": "X", "cat": "kernel", "name": 12, "pid": 0, "tid": 7, "ts": 1, "dur": 1}`,
		`{"ph": "X", "cat": "kernel", "name": "k", "tid": 7, "ts": 1, "dur": 1}`,
		`{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1}`,
		`{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": []}`,
		`{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"correlation": "x"}}`,
		`"not an object"`,
		`{"ph": "X", "cat": "cpu_op", "name": "ignored", "ts": "wrong types here do not matter"}`,
	)
	tr, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"ts is not a number":               1,
		"ts number out of range":           1,
		"ts or dur out of range":           1,
		"name is not a string":             1,
		"GPU op without device":            1,
		"missing ts or dur":                1,
		"args.correlation is not a number": 1,
		"event is not an object":           1,
	}
	if diff := cmp.Diff(want, tr.Dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
	// The good kernel and the one whose args is not an object.
	if len(tr.Ops) != 2 {
		t.Errorf("ops = %d, want 2", len(tr.Ops))
	}
}

func TestParseErrors(t *testing.T) {
	full := traceJSON(kernel("a", 7, "1", "2", 1), kernel("b", 7, "5", "2", 2))
	cut := strings.Index(full, `{"ph": "X", "cat": "kernel", "name": "b"`) + 20
	tests := []struct {
		name      string
		in        string
		wantErr   error // nil: parse succeeds
		msg       string
		truncated bool
		ops       int
	}{
		{"empty", "", ErrNotTrace, "input is empty", false, 0},
		{"not json", "hello", ErrNotTrace, `first character is 'h'`, false, 0},
		{"number", "12", ErrNotTrace, "expected '{' or '['", false, 0},
		{"no events", `{"schemaVersion": 1}`, ErrNotTrace, "no traceEvents", false, 0},
		{"events not array", `{"traceEvents": {}}`, ErrNotTrace, "not an array", false, 0},
		{"cut before events", `{"schemaVersion": 1, "traceEv`, ErrTruncated, "before any GPU op", false, 0},
		{"cut in first event", full[:cut-30], ErrTruncated, "before any GPU op", false, 0},
		{"cut in second event", full[:cut], nil, "", true, 1},
		{"cut after events", full[:len(full)-30], nil, "", true, 2},
		{"garbage in events", `{"traceEvents": [{"ph": "X"} x]}`, nil, "at byte 29: expected ',' or ']'", false, 0},
		{"bad escape", `{"traceEvents": [{"ph": "\q"}]}`, nil, `invalid escape '\q'`, false, 0},
		{"bad literal", `{"traceEvents": [{"ph": nul}]}`, nil, `invalid literal`, false, 0},
		{"complete", full, nil, "", false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// OneByteReader exercises every refill boundary in the scanner.
			tr, err := Parse(iotest.OneByteReader(strings.NewReader(tt.in)))
			if tt.msg != "" {
				if err == nil || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("error = %v, want one containing %q", err, tt.msg)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want errors.Is %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tr.Truncated != tt.truncated || len(tr.Ops) != tt.ops {
				t.Errorf("truncated = %v, ops = %d; want %v, %d", tr.Truncated, len(tr.Ops), tt.truncated, tt.ops)
			}
		})
	}
}

func TestParseDeepNesting(t *testing.T) {
	deep := strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000)
	in := traceJSON(`{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"x": ` + deep + `}}`)
	tr, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Ops) != 1 {
		t.Errorf("ops = %d, want 1", len(tr.Ops))
	}
}

func TestParseSurrogates(t *testing.T) {
	in := traceJSON(kernel(`x`, 7, "1", "1", 1))
	in = strings.Replace(in, `"x"`, `"\ud83d\ude00 \ud83d \u00e9 \ud83d\n"`, 1)
	tr, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Names[tr.Ops[0].Name], "😀 \uFFFD é \uFFFD\n"; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}
}

func TestParseLongStringIsCapped(t *testing.T) {
	long := strings.Repeat("k", 3*maxStringLen+17)
	in := traceJSON(kernel(long, 7, "1", "1", 1), kernel("short", 7, "3", "1", 2))
	tr, err := Parse(iotest.HalfReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Names[tr.Ops[0].Name]; got != long[:maxStringLen] {
		t.Errorf("kept %d bytes of the long name, want %d", len(got), maxStringLen)
	}
	if got := tr.Names[tr.Ops[1].Name]; got != "short" {
		t.Errorf("next name = %q, want short", got)
	}
}

// TestClassify: Kineto's spellings are found by the exact switch, other
// spellings by case folding, as the comparisons it replaced did (the Kelvin
// sign folds to k); anything else is unused.
func TestClassify(t *testing.T) {
	for in, want := range map[string]eventCat{
		"kernel": evKernel, "Kernel": evKernel, "KERNEL": evKernel, "\u212aernel": evKernel,
		"gpu_memcpy": evMemcpy, "Memcpy": evMemcpy, "gpu_memset": evMemset, "memset": evMemset,
		"cuda_runtime": evRuntime, "cuda_driver": evRuntime, "Runtime": evRuntime,
		"gpu_user_annotation": evGPULabel, "user_annotation": evLabel, "User_Annotation": evLabel,
		"Trace": evSpan, "trace": evSpan, "cpu_op": evHostOp, "Operator": evHostOp, "operator": evHostOp,
		"cuda_sync": evSync, "python_function": evPython,
		"": evUnused, "kernels": evUnused, "ac2g": evUnused, "cpu_instant_event": evUnused, "gpu_op": evUnused,
	} {
		if got := classify([]byte(in)); got != want {
			t.Errorf("classify(%q) = %d, want %d", in, got, want)
		}
	}
}
