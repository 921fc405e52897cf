package estimate

import (
	"slices"
	"testing"
)

// sdpaMathFallback holds exactly where transformers hands SDPA fp32
// grouped key/value heads with no mask (the H200 QLoRA probes), and nowhere
// else: not under autocast or in 16 bits (flash), not for full-head models,
// not on stacks with their own attention, remote-code models, masked
// (windowed, padded) batches or Falcon.
func TestSDPAMathFallbackScope(t *testing.T) {
	qwen := catalogModel(t, "Qwen/Qwen2.5-0.5B")      // 14 query heads, 2 key/value heads
	pythia := catalogModel(t, "EleutherAI/pythia-1b") // full heads
	glm := catalogModel(t, "THUDM/chatglm3-6b")       // remote code, grouped heads
	gemma3 := catalogModel(t, "google/gemma-3-1b-pt") // sliding window 512, full layers between
	base := Request{Model: qwen, Method: QLoRA, Precision: BF16True, LoRARank: 16, LoRATargets: []string{"attention"}, SeqLen: 1024, Batch: 2}
	d, err := LengthsMedianMax(500, 1000)
	dist := &d
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Request)
		want bool
	}{
		{"qlora bf16-true, grouped heads", func(*Request) {}, true},
		{"fp32 lora", func(r *Request) { r.Method, r.Precision = LoRA, FP32 }, true},
		{"fp32 full", func(r *Request) { r.Method, r.Precision, r.LoRARank, r.LoRATargets = Full, FP32, 0, nil }, true},
		{"bf16 lora: flash", func(r *Request) { r.Method = LoRA }, false},
		{"qlora under autocast", func(r *Request) { r.Precision = BF16Mixed }, false},
		{"full heads", func(r *Request) { r.Model = pythia }, false},
		{"eager asked", func(r *Request) { r.Attn = Eager }, false},
		{"litgpt stack", func(r *Request) { r.Stack = StackLitGPT }, false},
		{"remote code", func(r *Request) { r.Model, r.Method, r.Precision = glm, LoRA, FP32 }, false},
		{"padded batches", func(r *Request) { r.Lengths = dist }, false},
		{"padded batch of one", func(r *Request) { r.Lengths, r.Batch = dist, 1 }, true},
		{"past gemma 3's window", func(r *Request) { r.Model, r.SeqLen = gemma3, 2048 }, false},
	} {
		r := base
		tc.edit(&r)
		if got := sdpaMathFallback(deepspeedModule(must(r.Normalize()))); got != tc.want {
			t.Errorf("%s: sdpaMathFallback = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Past Gemma 3's window the full layers' gap is named, not hidden.
	r := base
	r.Model, r.SeqLen = gemma3, 2048
	x := explained(t, r)
	if !slices.Contains(x.Assumptions, sdpaWindowedAssumption) {
		t.Errorf("gemma-3 past its window: no %q among %q", sdpaWindowedAssumption, x.Assumptions)
	}
	r = base
	x = explained(t, r)
	if !slices.Contains(x.Assumptions, sdpaMathAssumption) {
		t.Errorf("qlora bf16-true: no %q among %q", sdpaMathAssumption, x.Assumptions)
	}
}

// Read as the math kernel, --attn sdpa gives exactly --attn sdpa_math's
// figure (whose terms the oracle's math-kernel rows hold), and more than
// the same run under autocast (flash).
func TestSDPAMathFallbackKeepsScores(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	r := Request{Model: m, Method: QLoRA, Precision: BF16Mixed, LoRARank: 16, LoRATargets: []string{"attention"}, SeqLen: 2048, Batch: 2}
	est := PhasePeak{Coef: DefaultCoefficients}
	flash, err := est.Estimate(r) // autocast: flash, no fallback
	if err != nil {
		t.Fatal(err)
	}
	r.Precision = BF16True
	fallback, err := est.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Attn = SDPAMath
	asked, err := est.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	if fallback.Total != asked.Total {
		t.Errorf("sdpa read as math: %d B, sdpa_math asked: %d B", fallback.Total, asked.Total)
	}
	if fallback.Total <= flash.Total {
		t.Errorf("sdpa read as math: %d B, not above autocast's flash (%d B)", fallback.Total, flash.Total)
	}
}

// torch's for-loop AdamW holds two state-sized temporaries of the largest
// trained parameter in its step: for a full bf16 fine-tune of Qwen2.5-0.5B
// (tied 151,936 × 896 embeddings, the largest) the step phase is the
// gradients plus 2 × 2 B × 151,936 × 896, where foreach holds a whole extra
// copy and fused none.
func TestForLoopAdamWStepTemporaries(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	r := Request{Model: m, Method: Full, Precision: BF16True, SeqLen: 256, Batch: 1, Optimizer: AdamWTorchLoop}
	n := must(r.Normalize())
	tl := PhasePeak{Coef: DefaultCoefficients}.normalizedTerms(n)
	if want := float64(2 * 2 * 151936 * 896); float64(tl.OptTransient) != want {
		t.Errorf("for-loop step temporaries %d B, want %.0f", tl.OptTransient, want)
	}
	r.Sharding = Sharding{Strategy: "zero2", GPUs: 2}
	if _, err := r.Normalize(); err == nil {
		t.Error("for-loop AdamW under DeepSpeed ZeRO-2: no error (its flat partitions' temporaries are not modelled)")
	}
}

// Past Gemma 3's window its four full-attention layers (of 26) are counted
// as SDPA's math kernel runs them, the 22 sliding ones as the
// memory-efficient kernel (the oracle's Gemma 3 rows hold the figure).
func TestGemma3FullLayersApart(t *testing.T) {
	m := catalogModel(t, "google/gemma-3-1b-pt")
	r := Request{Model: m, Method: QLoRA, Precision: BF16True, LoRARank: 16, LoRATargets: []string{"attention"}, SeqLen: 2048, Batch: 2}
	n := must(r.Normalize())
	hs := hfWithFullLayers(n, hfLayerSaved(n))
	if hs.Full == nil || hs.FullLayers != 4 {
		t.Fatalf("full layers %v × %g, want 4 apart", hs.Full != nil, hs.FullLayers)
	}
	sliding := hs
	sliding.Full = nil
	withFull, _ := hfActivations(n, hs, 0)
	without, _ := hfActivations(n, sliding, 0)
	// The math kernel's fp32 softmax outputs, heads × s² × batch × 4 B in
	// each of the four layers, less what the memory-efficient kernel saves
	// there instead (its output and log-sum-exp, a few MB at 2048 tokens).
	d, scores := withFull-without, 4*float64(m.Heads)*2048*2048*2*4
	if d <= 0.95*scores || d > scores {
		t.Errorf("full layers add %.0f B, want just under their softmax outputs' %.0f B", d, scores)
	}
}
