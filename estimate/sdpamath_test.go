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
	tf, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(fused)
	if err != nil {
		t.Fatal(err)
	}
	tm, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(math)
	if err != nil {
		t.Fatal(err)
	}
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
		tt, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
		if err != nil {
			t.Fatal(err)
		}
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
