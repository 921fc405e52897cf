package estimate

import (
	"strings"
	"testing"
)

// TestDisentangledTerms: a DeBERTa-v2 block keeps its s² scores under any
// --attn (Korthikanti's 5·heads·s²·b bytes at 16 bits), the scaled keys
// (heads × head_dim per token and block) and the int64 relative-position
// index once; a BERT block of the same shape keeps none of them.
func TestDisentangledTerms(t *testing.T) {
	m := testdataModel(t, "deberta-v2.json")
	req := Request{Model: m, Method: LoRA, SeqLen: 256, Batch: 2}
	tm, r, err := PhasePeak{Coef: DefaultCoefficients}.terms(req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Task != TaskClassification {
		t.Errorf("task %s, want the encoder default %s", r.Task, TaskClassification)
	}
	const s, b, heads, inner, layers, act = 256.0, 2.0, 24.0, 24 * 64.0, 48.0, 2.0
	if want := 5 * heads * s * s * b * act / 2; tm.Eager != want {
		t.Errorf("Eager %.0f per block under sdpa, want %.0f", tm.Eager, want)
	}
	if want := layers*s*b*inner*act + 8*s*s; tm.BlockExtra != want {
		t.Errorf("BlockExtra %.0f, want %.0f", tm.BlockExtra, want)
	}
	bert := testdataModel(t, "xlm-roberta.json")
	tb, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(Request{Model: bert, Method: LoRA, SeqLen: 256, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if tb.Eager != 0 || tb.BlockExtra != 0 {
		t.Errorf("XLM-R under sdpa: Eager %.0f, BlockExtra %.0f; want 0, 0", tb.Eager, tb.BlockExtra)
	}
	x := explained(t, req)
	if !strings.Contains(strings.Join(x.Assumptions, "\n"), "no SDPA path") {
		t.Errorf("assumptions do not say --attn does not apply:\n%s", strings.Join(x.Assumptions, "\n"))
	}
}
