package estimate

import "testing"

// BenchmarkEstimate measures estimates per second on one core for each
// estimator (the goal for the default is ≥ 1 M/s): the numbers alone, as
// searches, calibration and placement use them. The default is also
// measured on full fine-tuning (trained Linear inputs) and a litgpt LoRA
// run (dropout inputs with the shared qkv dropout), and torchtitan's
// defaults (per-op checkpointing, its chunked loss).
func BenchmarkEstimate(b *testing.B) {
	m := catalogModel(b, "meta-llama/Llama-3.1-8B")
	req := Request{Model: m, Method: QLoRA, LoRARank: 16, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 2, GradCkpt: "full", GPUTotal: 24 * GiB}
	full := Request{Model: m, Method: Full, SeqLen: 2048, Batch: 2, GradCkpt: "full", GPUTotal: 80 * GiB}
	litgpt := Request{Model: m, Method: LoRA, LoRARank: 8, LoRATargets: []string{"q_proj", "k_proj", "v_proj"}, SeqLen: 2048, Batch: 2, Stack: "litgpt", LoRADropout: ptr(0.05), GPUTotal: 40 * GiB}
	// On LitGPT's spelled-out path (bf16-true, no checkpointing).
	exact := litgpt
	exact.Precision, exact.Attn, exact.Optimizer = BF16True, SDPA, AdamWTorch
	// torchtitan's defaults: FSDP2, per-op checkpointing, the chunked loss.
	titan := Request{Model: m, Method: Full, SeqLen: 8192, Batch: 2, Sharding: Sharding{Strategy: FSDPFullShard, GPUs: 8}, GPUTotal: 80 * GiB}
	StackTorchtitan.Spec().Apply(&titan)
	// bitsandbytes' 8-bit AdamW (Unsloth's default), unpaged and paged:
	// their states depend on each trained tensor's size.
	eight, paged := req, req
	eight.Optimizer, paged.Optimizer = AdamW8bit, PagedAdamW8bit
	for _, c := range []struct {
		name, estimator string
		req             Request
	}{
		{"canifinetune", "canifinetune", req}, {"canifinetune-full", "canifinetune", full}, {"canifinetune-litgpt", "canifinetune", litgpt}, {"canifinetune-litgpt-exact", "canifinetune", exact},
		{"canifinetune-torchtitan", "canifinetune", titan},
		{"canifinetune-adamw8bit", "canifinetune", eight}, {"canifinetune-paged8bit", "canifinetune", paged},
		{"seed000", "seed000", req}, {"unsloth", "unsloth", req},
	} {
		est, err := ByName(c.estimator)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := est.Estimate(c.req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "estimates/s")
		})
	}
}

// BenchmarkExplained measures an estimate with its explanation, as the
// estimate command makes one.
func BenchmarkExplained(b *testing.B) {
	m := catalogModel(b, "meta-llama/Llama-3.1-8B")
	req := Request{Model: m, Method: QLoRA, LoRARank: 16, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 2, GradCkpt: "full", GPUTotal: 24 * GiB}
	for _, name := range []string{"canifinetune", "seed000", "unsloth"} {
		est, err := ByName(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e, err := est.Estimate(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := est.Explain(req, e); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "estimates/s")
		})
	}
}
