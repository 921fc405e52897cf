package estimate

import "testing"

// SDPA's math kernel keeps every head's s² softmax output for the
// backward (the probabilities·v matmul saves it): in LitGPT's spelled-out
// block 2 B per head per token per key, one layer's more in its backward;
// nothing else changes. Falcon 7B's one key/value head is the case that
// sent lit-gpt's SDPA there in 2023.
func TestSDPAMathLitGPTSoftmaxKept(t *testing.T) {
	const s = 1079
	fused := litgptRequest(t, "tiiuae/falcon-7b", LoRA, []string{"query_key_value"}, 0.05)
	fused.SeqLen = s
	math := fused
	math.Attn = SDPAMath
	tf := termsOf(t, fused)
	tm := termsOf(t, math)
	if !tf.LitGPT || !tm.LitGPT {
		t.Fatalf("LitGPT's block: fused %v, math %v; want both spelled out", tf.LitGPT, tm.LitGPT)
	}
	heads := float64(fused.Model.Heads)
	if tf.HF.Scores != 0 || tm.HF.Scores != 2*heads || tm.HF.ScoresBackward != 4*heads {
		t.Errorf("scores per token per key: fused %g, math %g (backward %g); want 0, %g (%g)",
			tf.HF.Scores, tm.HF.Scores, tm.HF.ScoresBackward, 2*heads, 4*heads)
	}
	if tm.HF.Layer != tf.HF.Layer || tm.HF.Final != tf.HF.Final {
		t.Errorf("the rest of the block: math %g/%g, fused %g/%g; want the same", tm.HF.Layer, tm.HF.Final, tf.HF.Layer, tf.HF.Final)
	}
	ef, em := est(t, fused), est(t, math)
	got := component(em, CActivations) - component(ef, CActivations)
	want := int64(2 * heads * s * s * float64(fused.Model.NumLayers))
	if d := got - want; d < -1 || d > 1 {
		t.Errorf("activations grow by %d B; want every layer's softmax output, 2 B × %g heads × %d² × %d layers = %d", got, heads, s, fused.Model.NumLayers, want)
	}
}

// Outside the spelled-out blocks the math kernel's softmax output is one s²
// tensor per head at the activation width, against eager's Korthikanti
// 2.5 (5·a·s² bytes at 2 B) and none for the fused kernels.
func TestSDPAMathGenericScores(t *testing.T) {
	m := catalogModel(t, "facebook/opt-1.3b")
	const s, b = 1024, 2
	base := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj"},
		SeqLen: s, Batch: b, GradCkpt: "none"}
	eager := func(a Attention) float64 {
		r := base
		r.Attn = a
		tt := termsOf(t, r)
		if tt.HF != nil {
			t.Fatalf("%s: %s is spelled out; the test wants the generic terms", a, m.ModelType)
		}
		return tt.Eager
	}
	one := float64(m.Heads) * s * s * b * 2
	for a, want := range map[Attention]float64{SDPA: 0, SDPAMath: one, Eager: 2.5 * one} {
		if got := eager(a); got != want {
			t.Errorf("%s: s² scores per layer %g B; want %g", a, got, want)
		}
	}
}

// "math" reads as sdpa_math.
func TestSDPAMathAlias(t *testing.T) {
	a, err := ParseAttention("math")
	if err != nil || a != SDPAMath {
		t.Errorf(`ParseAttention("math") = %q, %v; want %q`, a, err, SDPAMath)
	}
}

// transformers' SDPA path on the math kernel is the eager census's block
// (q and k scaled, key and value repeated per query head) with the softmax
// in the activation dtype: one 2-byte tensor per head where eager keeps its
// fp32 softmax and the cast (6 B), so it stays below eager.
func TestSDPAMathHFCensus(t *testing.T) {
	base := Request{Model: catalogModel(t, "meta-llama/Llama-3.1-8B"), Method: LoRA, Precision: BF16True,
		LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj"}, SeqLen: 1024, Batch: 1, GradCkpt: CkptNone, Stack: StackHFTrainer}
	saved := func(a Attention) (hfSaved, *Estimate) {
		r := base
		r.Attn = a
		tt := termsOf(t, r)
		if tt.HF == nil {
			t.Fatalf("%s: not in the census", a)
		}
		return *tt.HF, est(t, r)
	}
	hm, em := saved(SDPAMath)
	he, ee := saved(Eager)
	heads := float64(base.Model.Heads)
	if hm.Layer != he.Layer {
		t.Errorf("block without scores: math %g, eager %g B per token; want the same", hm.Layer, he.Layer)
	}
	if hm.Scores != 2*heads || he.Scores != 6*heads || hm.ScoresBackward != 4*heads {
		t.Errorf("scores per token per key: math %g (backward %g), eager %g; want %g (%g), %g", hm.Scores, hm.ScoresBackward, he.Scores, 2*heads, 4*heads, 6*heads)
	}
	if am, ae := component(em, CActivations), component(ee, CActivations); am >= ae {
		t.Errorf("activations: math %d ≥ eager %d", am, ae)
	}
}

// With attention dropout the math kernel's at::dropout keeps its mask and
// output beside the probabilities: eager's 2.5 tensors per head.
func TestSDPAMathDropout(t *testing.T) {
	m := *catalogModel(t, "facebook/opt-1.3b")
	m.AttnDropout = 0.1
	r := Request{Model: &m, Method: LoRA, Precision: BF16True, LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj"},
		SeqLen: 512, Batch: 1, GradCkpt: CkptNone, Attn: SDPAMath}
	tt := termsOf(t, r)
	if want := 2.5 * float64(m.Heads) * 512 * 512 * 2; tt.Eager != want {
		t.Errorf("scores per layer %g B, want eager's %g", tt.Eager, want)
	}
}
