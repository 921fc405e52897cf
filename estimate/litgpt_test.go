package estimate

import (
	"testing"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// litgptRequest is a normalised LitGPT bf16-true request of a catalog
// model shaped like the census requests below: one micro-batch of 512
// tokens, LoRA rank 8.
func litgptRequest(t *testing.T, id string, method Method, targets []string, dropout float64) Request {
	t.Helper()
	r := Request{
		Model: catalogModel(t, id), Method: method, Stack: StackLitGPT, Precision: BF16True,
		SeqLen: 512, Batch: 1, Attn: SDPA, Optimizer: AdamWTorch,
	}
	if method != Full {
		r.LoRARank, r.LoRATargets, r.LoRADropout = 8, targets, ptr(dropout)
	}
	n, err := r.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLitGPTAdapters(t *testing.T) {
	all := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
	for _, tt := range []struct {
		model   string
		targets []string
		ok      bool
		want    litgptSwitches
	}{
		{"google/gemma-2b", []string{"q_proj", "v_proj"}, true, litgptSwitches{QKV: 2, QKVWidth: 2048 + 256, Query: true}},
		{"google/gemma-2b", all, true, litgptSwitches{QKV: 3, QKVWidth: 2048 + 2*256, Query: true, Proj: true, MLP: true, Head: true}},
		// lora_mlp adapts every MLP Linear: one of them alone is no LitGPT run.
		{"google/gemma-2b", []string{"q_proj", "gate_proj"}, false, litgptSwitches{}},
		{"microsoft/phi-1_5", []string{"q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"}, true, litgptSwitches{QKV: 3, QKVWidth: 3 * 2048, Query: true, Proj: true, MLP: true}},
		// A fused query_key_value is LitGPT's default slices, query and value.
		{"stabilityai/stablelm-base-alpha-3b", []string{"query_key_value", "dense_h_to_4h", "dense_4h_to_h"}, true, litgptSwitches{QKV: 2, QKVWidth: 2 * 4096, Query: true, MLP: true}},
		{"stabilityai/stablelm-base-alpha-3b", []string{"query_key_value", "dense_h_to_4h"}, false, litgptSwitches{}},
		// The scopes, as the LitGPT oracle reads them.
		{"google/gemma-2b", []string{"attention"}, true, litgptSwitches{QKV: 3, QKVWidth: 2048 + 2*256, Query: true, Proj: true}},
		{"google/gemma-2b", []string{"all-linear"}, true, litgptSwitches{QKV: 3, QKVWidth: 2048 + 2*256, Query: true, Proj: true, MLP: true}},
		// all-linear's aliases, as hfconfig reads them.
		{"google/gemma-2b", []string{"all"}, true, litgptSwitches{QKV: 3, QKVWidth: 2048 + 2*256, Query: true, Proj: true, MLP: true}},
		{"google/gemma-2b", []string{" All_Linear "}, true, litgptSwitches{QKV: 3, QKVWidth: 2048 + 2*256, Query: true, Proj: true, MLP: true}},
		// Phi-3's fused projections.
		{"microsoft/Phi-3-mini-4k-instruct", []string{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}, true, litgptSwitches{QKV: 3, QKVWidth: 3 * 3072, Query: true, Proj: true, MLP: true}},
	} {
		r := litgptRequest(t, tt.model, LoRA, tt.targets, 0.05)
		got, ok := litgptAdapters(r)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("%s %v: litgptAdapters = %+v, %v; want %+v, %v", tt.model, tt.targets, got, ok, tt.want, tt.ok)
		}
	}
}

// The LitGPT oracle's census of two-block models (litgpt 0.5.13; the
// saved bytes per token of the second block, and the first block's
// shortfall), for requests of 512 tokens, LoRA rank 8, dropout 0.05:
//
//	python -m oracle.litgptstep MODEL REQUEST.json --census --layers 2
//
// The census's fixed-size entries are left out: SDPA's philox seed and
// offset (uint64, 2 B per token at 512 tokens) and zero_pad's index of
// enabled qkv outputs (int64, (q+kv)·8 B in all).
func TestLitGPTLayerSavedCensus(t *testing.T) {
	all := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	phiAll := []string{"q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"}
	for _, tt := range []struct {
		name          string
		r             Request
		layer, unsavd float64
	}{
		// Phi-1.5 (one LayerNorm, parallel): q,k,v block 51 386 − 2; the
		// first block lacks fc's output, the norm's statistics and the
		// dropout mask (32 946 in all).
		{"phi-1.5 qkv", litgptRequest(t, "microsoft/phi-1_5", LoRA, []string{"q_proj", "k_proj", "v_proj"}, 0.05), 51384, 51386 - 32946},
		// q and v only: lora_B's output (2·(q+kv)) saved for zero_pad.
		{"phi-1.5 qv", litgptRequest(t, "microsoft/phi-1_5", LoRA, []string{"q_proj", "v_proj"}, 0.05), 59626 - 2 - 64, 59626 - 41186},
		{"phi-1.5 every Linear", litgptRequest(t, "microsoft/phi-1_5", LoRA, phiAll, 0.05), 88296, 88298 - 84194},
		{"phi-1.5 full", litgptRequest(t, "microsoft/phi-1_5", Full, nil, 0), 69768, 0},
		// StableLM-Alpha-3B (norm_1 and norm_2), query_key_value: q and v.
		{"stablelm-alpha query_key_value", litgptRequest(t, "stabilityai/stablelm-base-alpha-3b", LoRA, []string{"query_key_value"}, 0.05), 119090 - 2 - 128, 119090 - 82210},
	} {
		hs := litgptLayerSaved(tt.r)
		if hs.Layer != tt.layer || hs.FirstUnsaved != tt.unsavd {
			t.Errorf("%s: Layer %v, FirstUnsaved %v; census %v, %v", tt.name, hs.Layer, hs.FirstUnsaved, tt.layer, tt.unsavd)
		}
	}
	// Gemma-2B (RMSNorm, GemmaMLP): adapting proj and the MLP's three
	// Linears adds what the census's second block adds over q,k,v alone
	// (209 082 − 141 434): dropout outputs and masks of q, h, h and ffn
	// wide inputs and four lora_A outputs.
	qkv := litgptLayerSaved(litgptRequest(t, "google/gemma-2b", LoRA, []string{"q_proj", "k_proj", "v_proj"}, 0.05))
	every := litgptLayerSaved(litgptRequest(t, "google/gemma-2b", LoRA, all, 0.05))
	if d := every.Layer - qkv.Layer; d != 209082-141434 {
		t.Errorf("gemma-2b: every Linear adds %v B per token over q,k,v; the census %v", d, 209082-141434)
	}
	if every.FirstUnsaved != 209082-198822 {
		t.Errorf("gemma-2b every Linear: FirstUnsaved %v; census %v", every.FirstUnsaved, 209082-198822)
	}
}

// A longest-first run's peak is its first micro-batch's: on LitGPT's QLoRA
// path it holds no earlier micro-batch's inputs or logits, so the estimate
// falls, and the backward's LM head moment (the whole head dequantized
// again beside the fp32 logits and their bf16 gradients) is the floor of
// the loss chain. Other stacks ignore the switch.
func TestLongestFirst(t *testing.T) {
	est := func(r Request) *Estimate {
		t.Helper()
		e, err := PhasePeak{Coef: DefaultCoefficients}.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	r := litgptRequest(t, "microsoft/phi-1_5", QLoRA, []string{"q_proj", "v_proj"}, 0.05)
	r.Quant, r.Optimizer, r.SeqLen, r.GradAccum = NF4, PagedAdamW32bit, 1044, 4
	if !litgptExact(r) {
		t.Fatal("phi-1.5 QLoRA is not on LitGPT's exact path")
	}
	lf := r
	lf.LongestFirst = true
	a, b := est(r), est(lf)
	if b.Levels.Allocated >= a.Levels.Allocated {
		t.Errorf("longest first: allocated %d, not below the steady state's %d", b.Levels.Allocated, a.Levels.Allocated)
	}
	logits, _ := b.Component(CLogits)
	unit := float64(lf.SeqLen * lf.Batch * lf.Model.Vocab)
	if floor := int64(litgptQLoRAHeadBackward(lf, unit)); logits < floor {
		t.Errorf("longest first: logits chain %d below the head's backward moment %d", logits, floor)
	}
	hf := Request{Model: r.Model, Method: LoRA, LoRARank: 8, Stack: StackHFTrainer, Precision: BF16Mixed, SeqLen: 1024, Batch: 1}
	hf2 := hf
	hf2.LongestFirst = true
	if x, y := est(hf), est(hf2); x.Levels.Allocated != y.Levels.Allocated {
		t.Errorf("hf-trainer: longest first moved the estimate %d -> %d", x.Levels.Allocated, y.Levels.Allocated)
	}
}

// Gemma 2's soft-capped attention keeps, per token and head, 8 B per key
// (the census of Gemma-2-2B's blocks at 512 and 1024 tokens: tanh's bf16
// output, the fp32 softmax and its bf16 cast, 16 384 + 8192 + 8192 B per
// token at 512), past its sliding window too (the window layers only add a
// bias to the mask), and fully fine-tuned.
func TestLitGPTGemma2(t *testing.T) {
	r := litgptRequest(t, "google/gemma-2-2b", LoRA, []string{"q_proj", "k_proj", "v_proj"}, 0.05)
	if !litgptExact(r) {
		t.Fatal("gemma-2-2b LoRA at 512 tokens is not on LitGPT's exact path")
	}
	if hs := litgptLayerSaved(r); hs.Scores != (16384+8192+8192)/512 {
		t.Errorf("Scores = %v B per token per key, census %v", hs.Scores, (16384+8192+8192)/512)
	}
	long := r
	long.SeqLen = r.Model.SlidingWindow + 1
	full := litgptRequest(t, "google/gemma-2-2b", Full, nil, 0)
	if !litgptExact(long) || !litgptExact(full) {
		t.Error("gemma 2 past its window, or fully fine-tuned, is off the exact path")
	}
	if hs := litgptLayerSaved(long); hs.Scores != 64 {
		t.Errorf("past the window: Scores = %v B per token per key, want the same 64", hs.Scores)
	}
}

// A sliding-window config (Mistral 7B v0.1) puts a bf16 s × s mask in every
// block that SDPA's memory-efficient kernel saves: the census's "full"
// tensor, 1024 B per token at 512 tokens, 2 B per key.
func TestLitGPTSlidingWindowMask(t *testing.T) {
	v1 := litgptRequest(t, "mistralai/Mistral-7B-v0.1", LoRA, []string{"q_proj", "v_proj"}, 0.05)
	v2 := litgptRequest(t, "unsloth/Mistral-7B-v0.2", LoRA, []string{"q_proj", "v_proj"}, 0.05)
	if !litgptExact(v1) || !litgptExact(v2) {
		t.Fatal("Mistral 7B v0.1 or v0.2 LoRA is not on LitGPT's exact path")
	}
	a, b := litgptLayerSaved(v1), litgptLayerSaved(v2)
	if a.Scores != 1024.0/512 || b.Scores != 0 {
		t.Errorf("mask per token per key: v0.1 %v, v0.2 %v; census 2 and 0", a.Scores, b.Scores)
	}
	// The per-token block terms are the same (the census of both blocks
	// differs only by the mask).
	if a.Layer != b.Layer {
		t.Errorf("v0.1 block %v B per token, v0.2 %v", a.Layer, b.Layer)
	}
}

// Falcon 7B's multi-query parallel block, LoRA on query_key_value (LitGPT's
// q and v slices): the census's second block, 105 038 B per token less
// zero_pad's index (72) and SDPA's seed (2); the first block lacks fc's
// output, the norm's statistics and the dropout mask (64 134 in all).
func TestLitGPTFalconCensus(t *testing.T) {
	hs := litgptLayerSaved(litgptRequest(t, "tiiuae/falcon-7b", LoRA, []string{"query_key_value"}, 0.05))
	if hs.Layer != 105038-72-2 || hs.FirstUnsaved != 105038-64134 {
		t.Errorf("Layer %v, FirstUnsaved %v; census %v, %v", hs.Layer, hs.FirstUnsaved, 105038-72-2, 105038-64134)
	}
	if litgptExact(litgptRequest(t, "tiiuae/falcon-7b", Full, nil, 0)) {
		t.Error("Falcon 7B full fine-tuning is on the exact path, whose multi-query full block is not read")
	}
}

// On the litgpt stack the trained count is LitGPT's own adapter shapes
// whatever the checkpointing and sharding (the fitted shape applies to
// checkpointed and FSDP runs, the adapters are the same layers): Phi-3's
// fused qkv adapter has lora_A of rank r per enabled slice, not PEFT's one.
func TestLitGPTTrainableWhateverCheckpointing(t *testing.T) {
	targets := []string{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
	base := litgptRequest(t, "microsoft/Phi-3-mini-4k-instruct", LoRA, targets, 0.05)
	var counts []int64
	for _, edit := range []func(*Request){
		func(*Request) {},
		func(q *Request) { q.GradCkpt = CkptFull },
		func(q *Request) { q.GradCkpt, q.Sharding = CkptFull, Sharding{Strategy: FSDPFullShard, GPUs: 4} },
	} {
		q := base
		edit(&q)
		e, err := PhasePeak{Coef: DefaultCoefficients}.Estimate(q)
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, e.TrainableParams)
	}
	r, _ := base.Normalize()
	a, ok := litgptAdapters(r)
	if !ok {
		t.Fatal("Phi-3's four projections are a LitGPT run")
	}
	want := litgptAdapterParams(r, a)
	if want == adapterParams(r) {
		t.Fatal("the test wants LitGPT's count to differ from PEFT's")
	}
	for i, n := range counts {
		if n != want {
			t.Errorf("case %d: trainable %d, want LitGPT's %d", i, n, want)
		}
	}
}

// The Falcon layouts the estimator spells out are recognised by what the
// config says, not by a parameter count: Falcon 7B (multi-query, one
// shared norm) on both paths, Falcon-40B's new decoder layout (two
// parallel norms, grouped key/value heads, rotary) on LitGPT's; Falcon2-11B's
// one shared norm under the new architecture, a sequential block and ALiBi
// on neither.
func TestFalconLayouts(t *testing.T) {
	base := `{"model_type":"falcon","hidden_size":512,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":1000,`
	cases := []struct {
		name         string
		cfg          string
		seven, forty bool
	}{
		{"7B-like", base + `"multi_query":true,"parallel_attn":true}`, true, false},
		{"40B-like", base + `"new_decoder_architecture":true,"num_kv_heads":2,"parallel_attn":true}`, false, true},
		{"40B-like, num_ln_in_parallel_attn 2", base + `"new_decoder_architecture":true,"num_kv_heads":2,"num_ln_in_parallel_attn":2}`, false, true},
		{"Falcon2-11B-like: one norm", base + `"new_decoder_architecture":true,"num_kv_heads":2,"num_ln_in_parallel_attn":1}`, false, false},
		{"new decoder, sequential", base + `"new_decoder_architecture":true,"num_kv_heads":2,"parallel_attn":false}`, false, false},
		{"new decoder, ALiBi", base + `"new_decoder_architecture":true,"num_kv_heads":2,"alibi":true}`, false, false},
		{"7B-like, ALiBi", base + `"multi_query":true,"alibi":true}`, false, false},
		{"7B-like, sequential", base + `"multi_query":true,"parallel_attn":false}`, false, false},
	}
	for _, c := range cases {
		m, err := hfconfig.Parse([]byte(c.cfg))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := hfFalcon7BLayout(m); got != c.seven {
			t.Errorf("%s: Falcon 7B layout %v, want %v", c.name, got, c.seven)
		}
		if got := falconNewDecoderLayout(m); got != c.forty {
			t.Errorf("%s: Falcon-40B layout %v, want %v", c.name, got, c.forty)
		}
	}
	for id, want := range map[string][2]bool{"tiiuae/falcon-7b": {true, false}, "tiiuae/falcon-40b": {false, true}} {
		m := catalogModel(t, id)
		if got := [2]bool{hfFalcon7BLayout(m), falconNewDecoderLayout(m)}; got != want {
			t.Errorf("%s: 7B and 40B layouts %v, want %v", id, got, want)
		}
	}
}
