package trace

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func kernelOn(name string, stream int, ts, dur string, corr, ext int) string {
	return fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": %q, "pid": 0, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "device": 0, "stream": %d, "correlation": %d}}`,
		name, stream, ts, dur, ext, stream, corr)
}

func launchAt(ts string, corr int) string {
	return fmt.Sprintf(`{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": %s, "dur": 0.5, "args": {"correlation": %d}}`, ts, corr)
}

// statsTrace: three calls of one GEMM (2, 4 and 9 µs) and one of an add (1
// µs) on stream 7, launched by aten::mm (ext 1, two GEMMs), aten::addmm (ext
// 2, one GEMM) and aten::add (ext 3), inside nn.Module calls; one kernel
// whose External id (9) no host op has; two cuda_sync events.
//
//	host (tid 11): Model [0,100) ⊃ Linear_0 [0,30) ⊃ mm [1,2), addmm [20,21); Act [40,50) ⊃ add [41,42)
//	launches:      1 @1.2, 2 @1.6, 3 @20.2, 4 @41.2, 5 @60
//	GPU stream 7:  mm#1 [10,12)  mm#2 [12.02,16.02)  addmm [30,39)  add [45,46)  orphan [70,70.5)
func statsTrace() string {
	const gemm = "ampere_sgemm_128x64_nn"
	return traceJSON(
		`{"ph": "X", "cat": "python_function", "name": "nn.Module: Model_0", "pid": 10, "tid": 11, "ts": 0, "dur": 100}`,
		`{"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 10, "tid": 11, "ts": 0, "dur": 30}`,
		`{"ph": "X", "cat": "python_function", "name": "torch/nn/functional.py(10): relu", "pid": 10, "tid": 11, "ts": 40, "dur": 10}`,
		`{"ph": "X", "cat": "python_function", "name": "nn.Module: Act_0", "pid": 10, "tid": 11, "ts": 40, "dur": 10}`,
		hostOp("cpu_op", "aten::mm", 11, "1", "1", 1),
		hostOp("cpu_op", "aten::addmm", 11, "20", "1", 2),
		hostOp("cpu_op", "aten::add", 11, "41", "1", 3),
		launchAt("1.2", 1), launchAt("1.6", 2), launchAt("20.2", 3), launchAt("41.2", 4), launchAt("60", 5),
		kernelOn(gemm, 7, "10", "2", 1, 1),
		kernelOn(gemm, 7, "12.02", "4", 2, 1),
		kernelOn(gemm, 7, "30", "9", 3, 2),
		kernelOn("vectorized_elementwise_kernel<add>", 7, "45", "1", 4, 3),
		kernelOn("my_custom_kernel", 7, "70", "0.5", 5, 9),
		`{"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 50, "dur": 3, "args": {"device": 0, "stream": 7}}`,
		`{"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": 7, "ts": 80, "dur": 7.5, "args": {"device": 0}}`,
	)
}

// TestKernelDurStats: count, mean, min, max and sample std of each kernel
// name's durations. GEMM: 2, 4, 9 µs → mean 5 µs, Σ(x−5)² = 9+1+16 = 26 µs²,
// std = √13 µs.
func TestKernelDurStats(t *testing.T) {
	for _, opts := range []Options{{}, {Scratch: MemScratch{}, BufferBytes: 1}} {
		r := analyzeString(t, statsTrace(), opts)
		got := map[string]*DurStats{}
		for _, k := range r.Devices[0].Kernels {
			got[k.Name] = k.Dur
		}
		want := map[string]*DurStats{
			"ampere_sgemm_128x64_nn":             {Count: 3, MeanNS: 5000, MinNS: 2000, MaxNS: 9000, StdNS: math.Sqrt(13) * 1000},
			"vectorized_elementwise_kernel<add>": {Count: 1, MeanNS: 1000, MinNS: 1000, MaxNS: 1000},
			"my_custom_kernel":                   {Count: 1, MeanNS: 500, MinNS: 500, MaxNS: 500},
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
			t.Errorf("kernel duration stats (-want +got):\n%s", diff)
		}
		for _, c := range r.Devices[0].Categories {
			if c.Dur != nil {
				t.Errorf("category row %s has dur stats; only kernel rows do", c.Name)
			}
		}
	}
}

// TestHostOpSelfGPUTime: each kernel's duration goes to the host op with
// its External id; an id no host op has goes to "(no host op)". Without
// Options.HostOps there are no rows.
func TestHostOpSelfGPUTime(t *testing.T) {
	want := []HostOpRow{
		{Name: "aten::addmm", GPUOps: 1, SelfGPUNS: 9000, Share: 9000.0 / 16500},
		{Name: "aten::mm", GPUOps: 2, SelfGPUNS: 6000, Share: 6000.0 / 16500},
		{Name: "aten::add", GPUOps: 1, SelfGPUNS: 1000, Share: 1000.0 / 16500},
		{Name: NoHostOp, GPUOps: 1, SelfGPUNS: 500, Share: 500.0 / 16500},
	}
	for _, opts := range []Options{{HostOps: true}, {HostOps: true, Scratch: MemScratch{}, BufferBytes: 1}} {
		r := analyzeString(t, statsTrace(), opts)
		if diff := cmp.Diff(want, r.Devices[0].HostOps); diff != "" {
			t.Errorf("host ops (-want +got):\n%s", diff)
		}
	}
	tr, err := Parse(strings.NewReader(statsTrace()))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, tr.Report(Options{HostOps: true}).Devices[0].HostOps); diff != "" {
		t.Errorf("host ops after Parse (-want +got):\n%s", diff)
	}
	if r := analyzeString(t, statsTrace(), Options{}); r.Devices[0].HostOps != nil {
		t.Errorf("host ops without the option: %v", r.Devices[0].HostOps)
	}
}

// TestModuleLabels: GPU time goes to the innermost nn.Module call that
// contains the launch; python_function events that are not modules are
// ignored. Exclusive (busy) times: Linear_0 gets the three GEMMs (2 + 4 +
// 9 µs), Act_0 the add (1), Model_0 the orphan launched at 60 (0.5).
func TestModuleLabels(t *testing.T) {
	r := analyzeString(t, statsTrace(), Options{})
	ls := r.Devices[0].Labels
	if len(ls) != 3 || ls[2].Kind != "module" {
		t.Fatalf("label tables = %d, want gpu_user_annotation, user_annotation, module", len(ls))
	}
	got := map[string][2]int64{}
	for _, row := range ls[2].Rows {
		got[row.Name] = [2]int64{row.ExclusiveNS, row.InclusiveNS}
	}
	for _, row := range ls[2].Aggregates {
		got[row.Name] = [2]int64{row.ExclusiveNS, row.InclusiveNS}
	}
	want := map[string][2]int64{
		"nn.Module: Linear_0": {15000, 15000},
		"nn.Module: Act_0":    {1000, 1000},
		"nn.Module: Model_0":  {500, 16500},
		Unlabelled:            {0, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("module table exclusive, inclusive (-want +got):\n%s", diff)
	}
	// A trace without modules keeps two tables.
	if n := len(analyzeString(t, traceJSON(kernel("k", 7, "1", "1", 1)), Options{}).Devices[0].Labels); n != 2 {
		t.Errorf("label tables without modules = %d, want 2", n)
	}
}

// TestCUDASyncAndRank: cuda_sync events are counted and summed; they are
// not GPU ops. distributedInfo.rank is read.
func TestCUDASyncAndRank(t *testing.T) {
	r := analyzeString(t, statsTrace(), Options{})
	if diff := cmp.Diff(Sync{Count: 2, TotalNS: 10500, MaxNS: 7500}, r.CUDASync); diff != "" {
		t.Errorf("cuda_sync (-want +got):\n%s", diff)
	}
	if r.Devices[0].Ops != 5 {
		t.Errorf("ops = %d, want 5 (syncs are not ops)", r.Devices[0].Ops)
	}
	if r.Rank != nil {
		t.Errorf("rank = %d without distributedInfo", *r.Rank)
	}
	in := strings.Replace(statsTrace(), `{"schemaVersion": 1,`, `{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4},`, 1)
	if r := analyzeString(t, in, Options{}); r.Rank == nil || *r.Rank != 3 {
		t.Errorf("rank = %v, want 3", r.Rank)
	}
}

// TestIdleKernelWait: an interval under 30 ns between ops on a stream,
// launched before the previous op ended, is kernel wait (HTA's
// consecutive_kernel_delay). In statsTrace, stream 7:
//
//	mm#2 starts 20 ns after mm#1 (launched 1.6 < 12): kernel wait 20 ns
//	addmm 13.98 µs after mm#2 (launched 20.2 > 16.02): host wait
//	add 6 µs after addmm (launched 41.2 > 39): host wait
//	orphan 24 µs after add (launched 60 > 46): host wait
func TestIdleKernelWait(t *testing.T) {
	r := analyzeString(t, statsTrace(), Options{})
	s := r.Devices[0].Streams[0]
	want := Stream{Stream: 7, Ops: 5, BusyNS: 16500, SumDurNS: 16500, IdleNS: 20 + 13980 + 6000 + 24000,
		IdleHostWaitNS: 13980 + 6000 + 24000, IdleKernelWaitNS: 20}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
}

// TestIdleKernelWaitThreshold: Options.KernelWaitBelowNS moves the
// threshold; host wait does not depend on it. Four ops on stream 7, all
// launched before any starts, with 20 ns, 5 µs and 40 µs between them.
// HTA's default (30 compared with µs) is 30 µs: the 5 µs interval is
// kernel wait there and other at the documented 30 ns.
func TestIdleKernelWaitThreshold(t *testing.T) {
	in := traceJSON(
		launchAt("0.1", 1), launchAt("0.2", 2), launchAt("0.3", 3), launchAt("0.4", 4),
		kernel("k", 7, "10", "1", 1),
		kernel("k", 7, "11.020", "1", 2),
		kernel("k", 7, "17.020", "1", 3),
		kernel("k", 7, "58.020", "1", 4),
	)
	for _, c := range []struct {
		below         int64
		kernel, other int64
	}{
		{0, 20, 5000 + 40000},
		{30, 20, 5000 + 40000},
		{30_000, 20 + 5000, 40000},
		{40_001, 20 + 5000 + 40000, 0},
	} {
		s := analyzeString(t, in, Options{KernelWaitBelowNS: c.below}).Devices[0].Streams[0]
		got := [3]int64{s.IdleHostWaitNS, s.IdleKernelWaitNS, s.IdleOtherNS}
		if want := [3]int64{0, c.kernel, c.other}; got != want {
			t.Errorf("KernelWaitBelowNS %d: host/kernel/other wait %v, want %v", c.below, got, want)
		}
	}
}
