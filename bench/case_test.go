package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/canifinetune/canifinetune/evidence"
	"github.com/google/go-cmp/cmp"
)

// roundTrip writes c as a JSON line and reads it back through evidence.ReadCases,
// the reader validate and calibrate use.
func roundTrip(t *testing.T, c evidence.Case) evidence.Case {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := evidence.ReadCases(bytes.NewReader(b), "bench.jsonl")
	if err != nil {
		t.Fatalf("ReadCases: %v\n%s", err, b)
	}
	if diff := cmp.Diff(c, cases[0]); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	return cases[0]
}

func TestToCaseSuccess(t *testing.T) {
	r := runFake(t, "success", nil)
	c, err := ToCase(r)
	if err != nil {
		t.Fatal(err)
	}
	c = roundTrip(t, c)
	want := evidence.Measured{Kind: "reserved", GiB: ptr(6.0), Original: "max_memory_reserved 6442450944 bytes"}
	if diff := cmp.Diff(want, c.Measured); diff != "" {
		t.Errorf("measured (-want +got):\n%s", diff)
	}
	if c.ID != r.ID || *c.Arch != "qwen2" || c.LoRA.Rank != 16 || *c.LoRA.Alpha != 32 || *c.OptimizerStateDtype != "fp32" ||
		*c.GPU.Name != "NVIDIA H200" || *c.GPU.VRAMGiB != 140.4014 || *c.GradCkpt != "none" || *c.SeqLen != 1024 || c.SeqLenKind != "fixed" {
		t.Errorf("case = %+v", c)
	}
	for _, note := range []string{"max_memory_allocated 5368709120 bytes (5.0000 GiB)", "random-init", "peft 0.17.0", "driver 570.133.20"} {
		if !bytes.Contains([]byte(c.Notes), []byte(note)) {
			t.Errorf("notes %q lack %q", c.Notes, note)
		}
	}
}

// A bench case must flow into validate: the evidence package turns it into an
// estimate request without assuming anything the receipt pins.
func TestToCaseFeedsValidate(t *testing.T) {
	r := runFake(t, "success", func(o *Options) {
		o.Config.Model, o.Config.ModelID = "scripts/device-configs/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B"
	})
	c, err := ToCase(r)
	if err != nil {
		t.Fatal(err)
	}
	req, assumed, unsupported := evidence.RequestFor(c)
	if unsupported != "" || len(assumed) != 0 {
		t.Fatalf("RequestFor: unsupported %q, assumed %v", unsupported, assumed)
	}
	if req.SeqLen != 1024 || req.Batch != 2 || req.LoRARank != 16 || req.Stack != CaseFramework {
		t.Errorf("request = %+v", req)
	}
}

func TestToCaseOOM(t *testing.T) {
	r := runFake(t, "oom", func(o *Options) {
		o.Config.Method = "qlora"
		o.Config.Quant = &Quant{Scheme: "nf4", DoubleQuant: true}
		o.Config.Model, o.Config.ModelID = "scripts/device-configs/Qwen2.5-7B", "Qwen/Qwen2.5-7B"
	})
	if r.ID != "bench-20261130T020000Z-qwen2.5-7b-qlora-s1024-b2-bd4773" {
		t.Errorf("id = %q, want one named for the model id", r.ID)
	}
	c, err := ToCase(r)
	if err != nil {
		t.Fatal(err)
	}
	c = roundTrip(t, c)
	if !c.Measured.OOM || c.Measured.GiB != nil || c.Measured.Original != "CUDA out of memory at stage backward after 1 of 3 updates" {
		t.Errorf("measured = %+v; want oom with gib null", c.Measured)
	}
	if c.Model != "Qwen/Qwen2.5-7B" {
		t.Errorf("model = %q, want the model id rather than the local directory", c.Model)
	}
	if c.Quant == nil || c.Quant.Scheme != "nf4" || !*c.Quant.DoubleQuant || c.OptimizerStateDtype != nil {
		t.Errorf("quant %+v, optimizer_state_dtype %v", c.Quant, c.OptimizerStateDtype)
	}
}

func TestToCaseRefusesFailures(t *testing.T) {
	for _, fake := range []string{"dependency", "crash", "garbage"} {
		r := runFake(t, fake, nil)
		if _, err := ToCase(r); !errors.Is(err, ErrNotACase) {
			t.Errorf("%s: ToCase error = %v, want ErrNotACase", fake, err)
		}
	}
	// A success that lost its peak is not a case either (missing is not zero).
	r := runFake(t, "success", nil)
	r.Measured.PeakReservedBytes = nil
	if _, err := ToCase(r); !errors.Is(err, ErrNotACase) {
		t.Errorf("success without peak: ToCase error = %v", err)
	}
}

func TestStateDtype(t *testing.T) {
	tests := []struct {
		o    *OptimizerRecord
		want *string
	}{
		{nil, nil},
		{&OptimizerRecord{States: []StateRecord{{Dtype: "bfloat16"}}}, ptr("bf16")},
		{&OptimizerRecord{States: []StateRecord{{Dtype: "float32"}, {Dtype: "uint8"}}}, nil},
		{&OptimizerRecord{}, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, stateDtype(tt.o)); diff != "" {
			t.Errorf("stateDtype(%+v): %s", tt.o, diff)
		}
	}
}

// ConfigCase is ToCase without what a receipt adds: for a receipt that found
// nothing beyond its configuration, the two differ only in identity, notes
// and the measurement, so the estimate bench records before a run (on
// ConfigCase) is made on the case validate later reads.
func TestConfigCaseIsToCaseBeforeTheRun(t *testing.T) {
	peak := int64(5 << 30)
	for _, cfg := range []ProbeConfig{
		{Model: "Qwen/Qwen2.5-0.5B", Method: "lora", Rank: 16, Alpha: 32, Targets: []string{"q_proj", "v_proj"}, Precision: "bf16-true",
			Optimizer: "adamw_torch", Attn: "sdpa", SeqLen: 1024, Batch: 2, Updates: 3, GradAccum: 4},
		{Model: "Qwen/Qwen2.5-1.5B", Method: "qlora", Rank: 8, Targets: []string{"all-linear"}, Precision: "bf16-true",
			Quant: &Quant{Scheme: "nf4", DoubleQuant: true}, Optimizer: "paged_adamw_8bit", Attn: "eager", GradCkpt: true, SeqLen: 512, Batch: 4, Updates: 3, GradAccum: 1},
		{Model: "./local", ModelID: "Qwen/Qwen2.5-0.5B", Method: "full", Precision: "bf16-mixed", Optimizer: "adamw_torch_fused", Attn: "sdpa", SeqLen: 2048, Batch: 1, Updates: 3, GradAccum: 2},
	} {
		full, err := ToCase(Receipt{ID: "bench-x", Status: StatusSuccess, Config: cfg, Measured: Measured{PeakReservedBytes: &peak}})
		if err != nil {
			t.Fatal(err)
		}
		got := ConfigCase(cfg)
		full.ID, full.Source, full.Trust, full.Notes, full.Measured = "", "", "", "", got.Measured
		full.GPU.VRAMGiB = nil
		if diff := cmp.Diff(full, got); diff != "" {
			t.Errorf("%s %s: ConfigCase differs from ToCase (-ToCase +ConfigCase):\n%s", cfg.Model, cfg.Method, diff)
		}
	}
}

// caseOptimizer names the implementation torch ran: the probe's old
// AdamW(fused=False) (no impl recorded) and a for-loop are
// adamw_torch_forloop, a fused step adamw_torch_fused; foreach and other
// optimizers keep the asked name.
func TestCaseOptimizer(t *testing.T) {
	adamw := func(impl string) *OptimizerRecord {
		return &OptimizerRecord{Class: "torch.optim.adamw.AdamW", Impl: impl}
	}
	for _, tc := range []struct {
		asked string
		rec   *OptimizerRecord
		want  string
	}{
		{"adamw_torch", adamw(""), "adamw_torch_forloop"},
		{"adamw_torch", adamw("for-loop"), "adamw_torch_forloop"},
		{"adamw_torch", adamw("foreach"), "adamw_torch"},
		{"adamw_torch", adamw("fused"), "adamw_torch_fused"},
		{"adamw_torch", nil, "adamw_torch"},
		{"adamw_torch_fused", adamw("fused"), "adamw_torch_fused"},
		{"adamw_8bit", &OptimizerRecord{Class: "bitsandbytes.optim.adamw.AdamW8bit", Impl: "own"}, "adamw_8bit"},
	} {
		if got := caseOptimizer(tc.asked, tc.rec); got != tc.want {
			t.Errorf("caseOptimizer(%q, %+v) = %q, want %q", tc.asked, tc.rec, got, tc.want)
		}
	}
}

// A success receipt's speed case carries the configuration ToCase reads and
// the timed updates' tokens/s; an OOM receipt, or one without a timed
// update, is no speed case.
func TestToThroughput(t *testing.T) {
	r := runFake(t, "success", nil)
	tc, err := ToThroughput(r)
	if err != nil {
		t.Fatal(err)
	}
	if r.Timing == nil || r.Timing.TokensPerS == nil || tc.Measured.TokensPerSec == nil || *tc.Measured.TokensPerSec != *r.Timing.TokensPerS {
		t.Errorf("tokens/s: case %v, receipt timing %+v", tc.Measured.TokensPerSec, r.Timing)
	}
	c, _ := ToCase(r)
	if tc.ID != c.ID || tc.Model != c.Model || tc.Method != c.Method || *tc.SeqLen != *c.SeqLen || *tc.Batch != *c.Batch {
		t.Errorf("speed case %+v does not carry the memory case's configuration %+v", tc, c)
	}
	b, _ := json.Marshal(tc)
	if _, err := evidence.ReadThroughput(bytes.NewReader(b), "t.jsonl"); err != nil {
		t.Errorf("ReadThroughput refuses the speed case: %v\n%s", err, b)
	}
	r.Timing.TokensPerS = nil
	if _, err := ToThroughput(r); !errors.Is(err, ErrNotACase) {
		t.Errorf("no timed update: err %v, want ErrNotACase", err)
	}
	if _, err := ToThroughput(runFake(t, "oom", nil)); !errors.Is(err, ErrNotACase) {
		t.Errorf("oom receipt: err %v, want ErrNotACase", err)
	}
}
