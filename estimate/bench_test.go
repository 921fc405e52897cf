package estimate

import "testing"

// BenchmarkEstimate measures estimates per second on one core for each
// estimator (the goal for the default is ≥ 1 M/s).
func BenchmarkEstimate(b *testing.B) {
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
				if _, err := est.Estimate(req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "estimates/s")
		})
	}
	// The numbers alone, as searches use them (Request.Terse), for the
	// QLoRA request above, full fine-tuning (trained Linear inputs) and a
	// litgpt LoRA run (dropout inputs with the shared qkv dropout).
	full := Request{Model: m, Method: Full, SeqLen: 2048, Batch: 2, GradCkpt: "full", GPUTotal: 80 * GiB}
	litgpt := Request{Model: m, Method: LoRA, LoRARank: 8, LoRATargets: []string{"q_proj", "k_proj", "v_proj"}, SeqLen: 2048, Batch: 2, Stack: "litgpt", LoRADropout: ptr(0.05), GPUTotal: 40 * GiB}
	for _, c := range []struct {
		name string
		req  Request
	}{{"canifinetune-terse", req}, {"canifinetune-terse-full", full}, {"canifinetune-terse-litgpt", litgpt}} {
		terse := c.req
		terse.Terse = true
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			est, _ := ByName("canifinetune")
			for b.Loop() {
				if _, err := est.Estimate(terse); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "estimates/s")
		})
	}
}
