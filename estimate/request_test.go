package estimate

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Every numeric field is bounded in Normalize, NaN and infinities included,
// and the error names the field, the value and what is accepted.
func TestNormalizeRejectsOutOfRange(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	base := func() Request {
		return Request{Model: m, Method: LoRA, SeqLen: 2048, Batch: 1, GPUTotal: 24 * GiB}
	}
	tests := []struct {
		name  string
		edit  func(*Request)
		field string
		want  string // in the message
	}{
		{"rank 2^40 wraps", func(r *Request) { r.LoRARank = 1 << 40 }, "lora_rank", "an integer in 1..1048576, got 1099511627776"},
		{"rank negative", func(r *Request) { r.LoRARank = -3 }, "lora_rank", "got -3"},
		{"rank beyond the modules", func(r *Request) { r.LoRARank = 100000 }, "lora_rank", "at most 3584, the largest min(in, out)"},
		{"rank beyond all-linear", func(r *Request) { r.LoRARank, r.LoRATargets = 5000, []string{"all-linear"} }, "lora_rank", "at most 3584"},
		{"dropout NaN", func(r *Request) { r.LoRADropout = ptr(math.NaN()) }, "lora_dropout", "a probability in [0, 1), got NaN"},
		{"dropout 1", func(r *Request) { r.LoRADropout = ptr(1.0) }, "lora_dropout", "got 1"},
		{"seq_len -5", func(r *Request) { r.SeqLen = -5 }, "seq_len", "an integer in 1..16777216, got -5"},
		{"seq_len 2^25", func(r *Request) { r.SeqLen = 1 << 25 }, "seq_len", "got 33554432"},
		{"batch 0", func(r *Request) { r.Batch = 0 }, "batch", "an integer in 1..65536, got 0"},
		{"tokens", func(r *Request) { r.SeqLen, r.Batch = 1<<20, 1<<10 }, "seq_len × batch", "at most 67108864 tokens"},
		{"grad_accum -1", func(r *Request) { r.GradAccum = -1 }, "grad_accum", "got -1"},
		{"grad_accum 2^40", func(r *Request) { r.GradAccum = 1 << 40 }, "grad_accum", "an integer in 1..1048576"},
		{"gpus", func(r *Request) { r.Sharding = Sharding{Strategy: "ddp", GPUs: 1 << 20} }, "num_gpus", "an integer in 1..65536"},
		{"gpu memory 1 byte", func(r *Request) { r.GPUTotal = 1 }, "gpu_vram_gb", "a size in GiB from"},
		{"gpu memory negative", func(r *Request) { r.GPUTotal = math.MinInt64 }, "gpu_vram_gb", "a size in GiB from"},
		{"available above total", func(r *Request) { r.Available = 30 * GiB }, "available_vram_gb", "at most the card's 24 GiB"},
		{"available without total", func(r *Request) { r.GPUTotal, r.Available = 0, 8*GiB }, "available_vram_gb", "given with the card's total"},
		{"safety NaN", func(r *Request) { r.SafetyFraction = math.NaN() }, "safety_fraction", "got NaN"},
		{"overhead Inf", func(r *Request) { r.OverheadFraction = math.Inf(1) }, "overhead_fraction", "got +Inf"},
		{"frozen bytes", func(r *Request) { r.FrozenBaseBytes = 3 }, "frozen_base_bytes", "got 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.edit(&r)
			_, err := r.Normalize()
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("err = %v, want a FieldError wrapping ErrInvalidRequest", err)
			}
			if fe.Field != tt.field || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q (field %q), want field %q and %q", err, fe.Field, tt.field, tt.want)
			}
			// No estimator turns the request into a verdict either.
			for _, name := range Names() {
				est, _ := ByName(name)
				if e, err := est.Estimate(r); err == nil {
					t.Errorf("%s estimated it: total %d, verdict %s", name, e.Total, e.Verdict.Fit)
				}
			}
		})
	}
}

// Options that contradict each other, or a card that cannot run them, are
// errors naming the field; the rest of the request is fine.
func TestNormalizeRejectsContradictions(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	t4 := &CardFeatures{Name: "Tesla T4"}
	tests := []struct {
		name  string
		r     Request
		field string
		want  string
	}{
		{"ddp with optimizer offload", Request{Method: Full, Sharding: Sharding{Strategy: "ddp", GPUs: 4, CPUOffload: "optimizer"}}, "cpu_offload", "none with ddp: PyTorch DDP has no CPU offload"},
		{"single GPU offload", Request{Method: Full, Sharding: Sharding{CPUOffload: "params+optimizer"}}, "cpu_offload", "none without a sharding strategy"},
		{"zero2 with param offload", Request{Method: Full, Sharding: Sharding{Strategy: "zero2", GPUs: 4, CPUOffload: "params"}}, "cpu_offload", "only under ZeRO stage 3"},
		{"fsdp with optimizer offload alone", Request{Method: Full, Sharding: Sharding{Strategy: "fsdp_full_shard", GPUs: 4, CPUOffload: "optimizer"}}, "cpu_offload", "params+optimizer or none with fsdp_full_shard: FSDP's CPUOffload moves"},
		{"hybrid fsdp with optimizer offload alone", Request{Method: Full, Sharding: Sharding{Strategy: "fsdp_hybrid_shard", GPUs: 4, CPUOffload: "optimizer"}}, "cpu_offload", "no optimizer-only offload"},
		{"zero1 with both", Request{Method: Full, Sharding: Sharding{Strategy: "zero1", GPUs: 4, CPUOffload: "params+optimizer"}}, "cpu_offload", "only under ZeRO stage 3"},
		{"rank under full", Request{Method: Full, LoRARank: 8}, "lora_rank", "unset under method full"},
		{"targets under full", Request{Method: Full, LoRATargets: []string{"all-linear"}}, "lora_targets", "unset under method full"},
		{"dropout under full", Request{Method: Full, LoRADropout: ptr(0.05)}, "lora_dropout", "unset under method full"},
		{"extra under full", Request{Method: Full, ExtraTrainable: []string{"lm_head"}}, "extra_trainable", "every module trains already"},
		{"unknown extra module", Request{Method: LoRA, ExtraTrainable: []string{"foo"}}, "extra_trainable", `got "foo"`},
		{"flash-attention on a T4", Request{Method: LoRA, Attn: "flash_attention_2", Card: t4}, "attn", "Tesla T4 is not one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			r.Model, r.SeqLen, r.Batch = m, 1024, 1
			_, err := r.Normalize()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want field %q and %q", err, tt.field, tt.want)
			}
		})
	}
	ok := []Request{
		{Method: Full, Sharding: Sharding{Strategy: "zero3", GPUs: 4, CPUOffload: "params+optimizer"}},
		{Method: Full, Sharding: Sharding{Strategy: "zero2", GPUs: 4, CPUOffload: "optimizer"}},
		{Method: Full, Sharding: Sharding{Strategy: "fsdp_full_shard", GPUs: 4, CPUOffload: "params+optimizer"}},
		{Method: Full, Sharding: Sharding{Strategy: "fsdp_shard_grad_op", GPUs: 4, CPUOffload: "params"}},
		{Method: Full, Sharding: Sharding{Strategy: "zero3", GPUs: 4, CPUOffload: "params"}},
		{Method: Full, Sharding: Sharding{Strategy: "zero1", GPUs: 4, CPUOffload: "optimizer"}},
		{Method: LoRA, ExtraTrainable: []string{"lm_head", "embed_tokens"}, LoRARank: 3584},
		{Method: LoRA, Attn: "flash_attention_2", Card: &CardFeatures{Name: "A100", BF16: true, FlashAttention2: true}},
	}
	for _, r := range ok {
		r.Model, r.SeqLen, r.Batch = m, 1024, 1
		if _, err := r.Normalize(); err != nil {
			t.Errorf("%+v: %v", r.Sharding, err)
		}
	}
}

// What runs but probably not as meant is a warning on the estimate.
func TestWarnings(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	if m.MaxPositions != 131072 {
		t.Fatalf("Qwen2.5-7B max_position_embeddings = %d, want 131072", m.MaxPositions)
	}
	tests := []struct {
		name string
		r    Request
		want []string
	}{
		{"plain", Request{Method: LoRA, SeqLen: 2048}, nil},
		{"beyond the context", Request{Method: LoRA, SeqLen: 1000000}, []string{"a sequence of 1000000 tokens is beyond the model's context of 131072 tokens"}},
		{"bf16 on a T4", Request{Method: LoRA, SeqLen: 2048, Precision: BF16Mixed, Card: &CardFeatures{Name: "Tesla T4"}}, []string{"Tesla T4 has no native bf16"}},
		{"fp16 on a T4", Request{Method: LoRA, SeqLen: 2048, Precision: FP16Mixed, Card: &CardFeatures{Name: "Tesla T4"}}, nil},
		{"rank above k_proj", Request{Method: LoRA, SeqLen: 2048, LoRARank: 1024}, []string{"LoRA rank 1024 is above the width of k_proj (min(in, out) = 512)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			r.Model, r.Batch = m, 1
			for _, name := range Names() {
				est, _ := ByName(name)
				e, err := est.Estimate(r)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(e.Warnings) != len(tt.want) {
					t.Fatalf("%s: warnings %q, want %d", name, e.Warnings, len(tt.want))
				}
				for i, w := range tt.want {
					if !strings.Contains(e.Warnings[i], w) {
						t.Errorf("%s: warning %q, want %q", name, e.Warnings[i], w)
					}
				}
			}
		})
	}
}

func TestGiBBytes(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -1, 1e-308, 1e6} {
		if b, err := GiBBytes("gpu_vram_gb", v); err == nil {
			t.Errorf("GiBBytes(%v) = %d, want an error", v, b)
		} else if !strings.Contains(err.Error(), "gpu_vram_gb must be a size in GiB from") {
			t.Errorf("GiBBytes(%v): %v", v, err)
		}
	}
	if b, err := GiBBytes("gpu_vram_gb", 24); err != nil || b != 24*GiB {
		t.Errorf("GiBBytes(24) = %d, %v", b, err)
	}
}

// A figure that came out negative or beyond any memory is an error, never a
// verdict.
func TestFinishRefusesBrokenFigures(t *testing.T) {
	r := Request{Model: catalogModel(t, "Qwen/Qwen2.5-0.5B"), SeqLen: 8, Batch: 1}
	for _, e := range []*Estimate{
		{Total: -4 << 50, Verdict: Classify(-4<<50, 24*GiB)},
		{Total: 1 << 62},
		{Components: []Component{{Name: CWeights, Bytes: -1}}},
		{Verdict: Verdict{Ratio: math.NaN()}},
	} {
		if _, err := finish(e, r); !errors.Is(err, ErrNotComputable) {
			t.Errorf("finish(%+v) = %v, want ErrNotComputable", e, err)
		}
	}
}
