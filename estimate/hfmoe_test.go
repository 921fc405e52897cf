package estimate

import "testing"

// The MoE feed-forward's saved tensors, per token of one MoE block in bf16,
// against the oracle's census (oracle/fakestep.py --census, one block's
// difference between a model cut to one and two blocks), each term worked
// out by hand from the block's widths.
func TestMoELayerSavedCensus(t *testing.T) {
	for _, tc := range []struct {
		id     string
		method Method
		want   float64
		terms  string
	}{
		// k=8, I=512, h=1024, E=32: grouped_mm outputs 8·2·(2·512+1024),
		// silu 8·2·512, four int64 indices 8·32, top-k softmax 8·4, bf16
		// routing weights 8·2.
		{"ibm-granite/granite-3.0-1b-a400m-base", LoRA, 32768 + 8192 + 256 + 32 + 16, "granitemoe"},
		// k=2, I=14336, h=4096, E=8: 2·2·(2·14336+4096) + 2·2·14336 +
		// 2·32, fp32 weights 2·4, softmax 8·4, the normalisation's clone
		// 2·4 and sum 4.
		{"mistralai/Mixtral-8x7B-v0.1", LoRA, 131072 + 57344 + 64 + 8 + 32 + 8 + 4, "mixtral"},
		// Trained: + the gathered copies 2·2·4096 and the product 2·2·14336.
		{"mistralai/Mixtral-8x7B-v0.1", Full, 131072 + 57344 + 64 + 8 + 32 + 8 + 4 + 16384 + 57344, "mixtral full"},
		// k=4, I=1408, h=2048, E=60: 4·2·(2·1408+2048) + 4·2·1408 + 4·32,
		// weights 4·2, softmax 60·4; shared expert (5632): gate, up and
		// silu 3·2·5632, the gated output 2·2048 and the sigmoid 2.
		{"Qwen/Qwen1.5-MoE-A2.7B", LoRA, 38912 + 11264 + 128 + 8 + 240 + 33792 + 4096 + 2, "qwen2_moe"},
		// k=8, I=768, h=2048, E=128, norm_topk_prob: 8·2·(2·768+2048) +
		// 8·2·768 + 8·32 + weights 8·2 + softmax 128·4 + clone 8·4 + sum 4.
		{"Qwen/Qwen3-30B-A3B", LoRA, 57344 + 12288 + 256 + 16 + 512 + 32 + 4, "qwen3_moe"},
		// k=6, I=1408, h=2048, E=64, 2 shared (2816): 6·2·(2·1408+2048) +
		// 6·2·1408 + 6·32 + fp32 weights 6·4 + softmax 64·4 + shared 3·2·2816.
		{"deepseek-ai/DeepSeek-V2-Lite", LoRA, 58368 + 16896 + 192 + 24 + 256 + 16896, "deepseek_v2"},
		// k=8, I=1024, h=2048, E=64: 8·2·(2·1024+2048) + 8·2·1024 + 8·32,
		// weights 8·2, softmax 64·4.
		{"allenai/OLMoE-1B-7B-0924", LoRA, 65536 + 16384 + 256 + 16 + 256, "olmoe"},
		// DeepSeek-V3 (a model cut to MoE blocks: first_k_dense_replace
		// 0), k=8, I=2048, h=7168, E=256, 1 shared (2048):
		// 8·2·(2·2048+7168) + 8·2·2048 + 8·32, fp32 weights (the gather of
		// the sigmoid scores) 8·4, the sigmoid's fp32 output 256·4 (the
		// group-limited choice saves nothing: its top-k values feed only
		// indices), the normalisation's clone 8·4 and sum 4, shared gate,
		// up and silu 3·2·2048.
		{"deepseek-ai/DeepSeek-V3", LoRA, 180224 + 32768 + 256 + 32 + 1024 + 36 + 12288, "deepseek_v3"},
		// GPT-OSS (eager), k=4, I=2880, h=2880: 4·2·(2·2880+2880) for the
		// grouped_mm outputs, clamp, sigmoid, their product and up + 1
		// 4·4·2·2880, 4·32, bf16 weights 4·2 and the top-k softmax 4·2.
		{"openai/gpt-oss-20b", LoRA, 69120 + 92160 + 128 + 8 + 8, "gpt_oss"},
		// Trained: + 6·2·(2048+1408), the shared product 2·2816 and the
		// router's fp32 input 4·2048.
		{"deepseek-ai/DeepSeek-V2-Lite", Full, 58368 + 16896 + 192 + 24 + 256 + 16896 + 41472 + 5632 + 8192, "deepseek_v2 full"},
	} {
		m := catalogModel(t, tc.id)
		r := Request{Model: m, Method: tc.method, Precision: BF16True, SeqLen: 1024, Batch: 1, LoRARank: 16}
		var got float64
		for _, l := range m.Layers {
			if l.MoE {
				got = hfMoELayerSaved(r, moeShape(m, l), 2)
				break
			}
		}
		if got != tc.want {
			t.Errorf("%s: MoE block saves %g B per token, want %g", tc.terms, got, tc.want)
		}
	}
}

// DeepSeek-V2-Lite's latent attention under SDPA (the memory-efficient
// kernel: query/key heads of 192, value heads of 128), per token in bf16,
// against the census: the concatenated query and the new_empty key
// (16·192 each), kv_b_proj's output the value slices (16·256), the output
// (16·128) and its fp32 logsumexp (16·4); kv_a_layernorm's fp32 input
// (512·4).
func TestMLASavedCensus(t *testing.T) {
	a := hfMLAShape(catalogModel(t, "deepseek-ai/DeepSeek-V2-Lite"))
	if a == nil {
		t.Fatal("no MLA shape for DeepSeek-V2-Lite")
	}
	if got, want := a.sdpa(2), float64(6144+6144+8192+4096+64); got != want {
		t.Errorf("MLA SDPA saves %g B per token, want %g", got, want)
	}
	if got, want := a.norms(2, false), float64(2048); got != want {
		t.Errorf("kv_a_layernorm saves %g B per token, want %g", got, want)
	}
	// Eager: q and k, the value's contiguous copy (16·128) instead of
	// kv_b_proj's whole output.
	if got, want := a.eager(2, false), float64(6144+6144+4096); got != want {
		t.Errorf("MLA eager saves %g B per token beside the scores, want %g", got, want)
	}
}

// LoRA on a mixture of experts' MLP scope: where PEFT maps transformers 4's
// expert names onto the 3-D expert parameters (Qwen3-MoE), all-linear
// reaches the routed experts through target_parameters, which the oracle
// does not run, and leaves the exact path; where it does not (Qwen2-MoE,
// GraniteMoE), the scopes adapt only nn.Linear modules and stay on it:
// Qwen1.5-MoE's mlp is its shared expert and shared_expert_gate,
// GraniteMoE's all-linear its attention.
func TestMoEExactPathTargets(t *testing.T) {
	for _, tc := range []struct {
		id, targets string
		exact       bool
		modules     int64 // adapted modules per layer
	}{
		{"Qwen/Qwen3-30B-A3B", "attention", true, 4},
		{"Qwen/Qwen3-30B-A3B", "all-linear", false, 7},
		{"Qwen/Qwen1.5-MoE-A2.7B", "mlp", true, 4},
		{"Qwen/Qwen1.5-MoE-A2.7B", "all-linear", true, 8},
		{"ibm-granite/granite-3.0-1b-a400m-base", "all-linear", true, 4},
	} {
		m := catalogModel(t, tc.id)
		r, err := Request{Model: m, Method: LoRA, Precision: BF16True, SeqLen: 1024, Batch: 1, LoRARank: 16, LoRATargets: []string{tc.targets}}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if hfExact(r) != tc.exact {
			t.Errorf("%s LoRA on %s: on the exact path %v, want %v", tc.id, tc.targets, hfExact(r), tc.exact)
		}
		lins, err := m.Targets(r.LoRATargets)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(len(lins)) / m.NumLayers; got != tc.modules {
			t.Errorf("%s LoRA on %s: %d modules a layer, want %d", tc.id, tc.targets, got, tc.modules)
		}
	}
	if _, err := (Request{Model: catalogModel(t, "ibm-granite/granite-3.0-1b-a400m-base"), Method: LoRA, Precision: BF16True, SeqLen: 1024, Batch: 1, LoRARank: 16, LoRATargets: []string{"mlp"}}).Normalize(); err == nil {
		t.Error("GraniteMoE LoRA on mlp (routed experts only) gave no error")
	}
}

// LoRA on the feed-forward only: the first block saves nothing upstream of
// its adapters (the embedding and the attention are frozen), so of
// Qwen1.5-MoE's first block the census (a model cut to one block, less the
// loss chain) shows only the final norm's fp32 input it stands in for
// (4·2048), the adapters' fp32 input copies (4·(3·2048 + 5632)) and rank-16
// lora_A outputs (4 modules · 16 · 4), and the shared expert's gate, up and
// silu outputs (3·2·5632), its gated output (2·2048) and the sigmoid (2);
// beside them the final norm's rsqrt (4), left out.
func TestFirstBlockMLPOnlyCensus(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen1.5-MoE-A2.7B")
	r, err := Request{Model: m, Method: LoRA, Precision: BF16True, SeqLen: 1024, Batch: 1, LoRARank: 16, LoRATargets: []string{"mlp"}, Attn: SDPA}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	hs := hfLayerSaved(r)
	if got, want := hs.Layer-hs.FirstUnsaved, float64(8192+47104+256+33792+4096+2); got != want {
		t.Errorf("first block keeps %g B per token, want %g", got, want)
	}
	r.LoRATargets = []string{"all-linear"}
	if hs := hfLayerSaved(r); hs.FirstUnsaved != 0 {
		t.Errorf("all-linear: first block short of the others by %g B per token, want 0 (q/k/v adapters come first)", hs.FirstUnsaved)
	}
}
