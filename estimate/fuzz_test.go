package estimate

import (
	"errors"
	"math"
	"testing"
)

// FuzzNormalize builds a request from fuzzed numbers, the way the CLI's
// numeric flags do (memory through GiBBytes): Normalize refuses it, or every
// estimator gives finite, non-negative figures. Never a panic, never a
// wrapped total.
func FuzzNormalize(f *testing.F) {
	models := []string{"Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-0.5B", "mistralai/Mixtral-8x7B-v0.1", "openai-community/gpt2", "google-t5/t5-small", "microsoft/deberta-v2-xxlarge"}
	f.Add(uint8(0), uint8(1), uint8(0), uint8(0), int64(16), int64(2048), int64(1), int64(1), 0.05, 24.0, 21.5, int64(1), 0.0, 0.0)
	f.Add(uint8(0), uint8(1), uint8(0), uint8(0), int64(1<<40), int64(2048), int64(1), int64(1), 0.0, 24.0, 0.0, int64(1), 0.0, 0.0)
	f.Add(uint8(1), uint8(0), uint8(3), uint8(2), int64(0), int64(1<<24), int64(4), int64(1<<20), math.NaN(), math.NaN(), math.Inf(1), int64(1<<16), math.NaN(), 0.99)
	f.Add(uint8(2), uint8(2), uint8(8), uint8(3), int64(3584), int64(1), int64(1<<16), int64(0), 0.999, 1e-308, 16384.0, int64(-1), math.Copysign(0, -1), 1.0)
	f.Add(uint8(3), uint8(1), uint8(1), uint8(1), int64(1<<20), int64(1<<13), int64(1<<13), int64(7), 0.5, 16384.0, 16384.0, int64(65536), 0.5, 0.5)
	var cached = map[string]Request{}
	f.Fuzz(func(t *testing.T, model, method, strategy, offload uint8, rank, seq, batch, accum int64, dropout, vramGiB, freeGiB float64, gpus int64, overhead, safety float64) {
		id := models[int(model)%len(models)]
		base, ok := cached[id]
		if !ok {
			base = Request{Model: catalogModel(t, id)}
			cached[id] = base
		}
		r := base
		r.Method = []Method{Full, LoRA, QLoRA}[int(method)%3]
		r.Sharding = Sharding{Strategy: Strategies[int(strategy)%len(Strategies)].Name, GPUs: gpus, CPUOffload: Offloads[int(offload)%len(Offloads)].Name}
		r.SeqLen, r.Batch, r.GradAccum = seq, batch, accum
		if r.Method != Full {
			r.LoRARank, r.LoRADropout = rank, &dropout
		}
		r.OverheadFraction, r.SafetyFraction = overhead, safety
		if b, err := GiBBytes("gpu_vram_gb", vramGiB); err == nil {
			r.GPUTotal = b
			if b, err := GiBBytes("available_vram_gb", freeGiB); err == nil {
				r.Available = b
			}
		}
		if _, err := r.Normalize(); err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Normalize: %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		for _, name := range Names() {
			est, _ := ByName(name)
			e, err := est.Estimate(r)
			if err != nil {
				if errors.Is(err, ErrNotComputable) {
					t.Fatalf("%s: Normalize accepted %+v but %v", name, r, err)
				}
				continue // an estimator's own refusal (unsloth: no int8 base)
			}
			if e.Total < 0 || e.PlanningProxy < 0 || e.Levels.Allocated < 0 || math.IsNaN(e.Verdict.Ratio) {
				t.Fatalf("%s: total %d, levels %+v, ratio %v", name, e.Total, e.Levels, e.Verdict.Ratio)
			}
		}
	})
}
