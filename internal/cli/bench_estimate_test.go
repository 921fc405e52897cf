package cli

import (
	"testing"

	"github.com/canifinetune/canifinetune/bench"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The request a probe is estimated with follows the probe's configuration
// field by field, and the stack the probe runs fills the rest.
func TestProbeRequest(t *testing.T) {
	env := &Env{}
	tests := []struct {
		name string
		cfg  bench.ProbeConfig
		want func(r estimate.Request) []any
		vals []any
	}{
		{
			name: "qlora double quant, checkpointed",
			cfg: bench.ProbeConfig{Model: "Qwen/Qwen2.5-1.5B", Method: "qlora", Rank: 8, Targets: []string{"all-linear"}, Precision: "bf16-true",
				Quant: &bench.Quant{Scheme: "nf4", DoubleQuant: true}, Optimizer: "paged_adamw_8bit", Attn: "sdpa", GradCkpt: true, SeqLen: 512, Batch: 4},
			want: func(r estimate.Request) []any {
				return []any{r.Method, r.Quant, r.LoRARank, r.LoRATargets, r.GradCkpt, r.Optimizer, r.SeqLen, r.Batch, *r.UpcastFrozen, r.Stack}
			},
			vals: []any{estimate.QLoRA, estimate.NF4DQ, int64(8), []string{"all-linear"}, estimate.CkptFull, estimate.PagedAdamW8bit, int64(512), int64(4), true, estimate.StackPEFTAccelerate},
		},
		{
			name: "qlora without double quant",
			cfg: bench.ProbeConfig{Model: "Qwen/Qwen2.5-1.5B", Method: "qlora", Rank: 16, Precision: "bf16-true",
				Quant: &bench.Quant{Scheme: "nf4"}, Optimizer: "adamw_torch", Attn: "eager", SeqLen: 128, Batch: 1},
			want: func(r estimate.Request) []any { return []any{r.Quant, r.Attn, r.GradCkpt} },
			vals: []any{estimate.NF4, estimate.Eager, estimate.CkptNone},
		},
		{
			name: "full fine-tuning keeps no LoRA fields",
			cfg: bench.ProbeConfig{Model: "Qwen/Qwen2.5-0.5B", Method: "full", Rank: 16, Targets: []string{"q_proj"}, Precision: "bf16-mixed",
				Optimizer: "adamw_torch_fused", Attn: "sdpa", SeqLen: 1024, Batch: 2},
			want: func(r estimate.Request) []any {
				return []any{r.Method, r.Precision, r.LoRARank, len(r.LoRATargets), r.Optimizer, r.Quant}
			},
			vals: []any{estimate.Full, estimate.BF16Mixed, int64(0), 0, estimate.AdamWTorchFused, estimate.Quant("")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := probeRequest(env, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.vals, tt.want(r)); d != "" {
				t.Errorf("request (-want +got):\n%s", d)
			}
		})
	}
}

// The record is the default estimator's reserved level for that request,
// with the components in bytes; a detected device adds its safety margin.
func TestEstimateProbe(t *testing.T) {
	cfg := bench.ProbeConfig{Model: "Qwen/Qwen2.5-0.5B", Method: "lora", Rank: 16, Targets: []string{"q_proj", "v_proj"},
		Precision: "bf16-true", Optimizer: "adamw_torch", Attn: "sdpa", SeqLen: 1024, Batch: 2}
	req, err := probeRequest(&Env{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	est, _ := estimate.ByName("")
	want, err := est.Estimate(req)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := estimateProbe(&Env{}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Estimator != estimate.Default || rec.Version != want.Version || rec.Kind != "reserved" || rec.TotalBytes != want.Levels.Reserved {
		t.Errorf("record %s %s %s %d, want %s %s reserved %d", rec.Estimator, rec.Version, rec.Kind, rec.TotalBytes, estimate.Default, want.Version, want.Levels.Reserved)
	}
	if len(rec.Components) != len(want.Components) {
		t.Fatalf("%d components, want %d", len(rec.Components), len(want.Components))
	}
	for i, c := range want.Components {
		if rec.Components[i].Name != c.Name || rec.Components[i].Bytes != c.Bytes {
			t.Errorf("component %d = %+v, want %s %d", i, rec.Components[i], c.Name, c.Bytes)
		}
		if c.Name == estimate.CSafety {
			t.Errorf("safety margin without a GPU")
		}
	}

	dev := gpu.Device{Index: 0, Name: "NVIDIA H100 80GB HBM3", TotalMiB: 81559, FreeMiB: 80000}
	rec, err = estimateProbe(&Env{}, cfg, &dev)
	if err != nil {
		t.Fatal(err)
	}
	last := rec.Components[len(rec.Components)-1]
	if last.Name != estimate.CSafety || last.Bytes != int64(float64(dev.TotalBytes())*0.05) {
		t.Errorf("last component %+v, want the safety margin 5 %% of %d", last, dev.TotalBytes())
	}
	if rec.TotalBytes != want.Levels.Reserved {
		t.Errorf("the device changed the reserved level: %d, want %d", rec.TotalBytes, want.Levels.Reserved)
	}

	if _, err := estimateProbe(&Env{}, bench.ProbeConfig{Model: "no/such-model", Method: "lora", Precision: "bf16-true", SeqLen: 1, Batch: 1}, nil); err == nil {
		t.Error("an unknown model gave an estimate")
	}
}

// The estimate a receipt records before its run is the one validate makes
// for the case the receipt becomes: probeRequest and evidence.RequestFor
// build the same request from the same probe.
func TestProbeRequestMatchesCase(t *testing.T) {
	peak := int64(6 << 30)
	for _, cfg := range []bench.ProbeConfig{
		{Model: "Qwen/Qwen2.5-0.5B", Method: "lora", Rank: 16, Targets: []string{"q_proj", "v_proj"}, Precision: "bf16-true",
			Optimizer: "adamw_torch", Attn: "sdpa", SeqLen: 1024, Batch: 2, Updates: 3, GradAccum: 4},
		{Model: "Qwen/Qwen2.5-1.5B", Method: "qlora", Rank: 8, Targets: []string{"all-linear"}, Precision: "bf16-true",
			Quant: &bench.Quant{Scheme: "nf4", DoubleQuant: true}, Optimizer: "paged_adamw_8bit", Attn: "eager", GradCkpt: true, SeqLen: 512, Batch: 4, Updates: 3, GradAccum: 1},
		{Model: "Qwen/Qwen2.5-0.5B", Method: "full", Precision: "bf16-mixed", Optimizer: "adamw_torch_fused", Attn: "sdpa", SeqLen: 2048, Batch: 1, Updates: 3, GradAccum: 2},
	} {
		got, err := probeRequest(&Env{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := bench.ToCase(bench.Receipt{ID: "bench-x", Status: bench.StatusSuccess, Config: cfg, Measured: bench.Measured{PeakReservedBytes: &peak}})
		if err != nil {
			t.Fatal(err)
		}
		want, _, skip := evidence.RequestFor(c)
		if skip != "" {
			t.Fatalf("RequestFor skips the case: %s", skip)
		}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(hfconfig.Model{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s %s: probeRequest differs from the case's request (-case +probe):\n%s", cfg.Model, cfg.Method, diff)
		}
	}
}
