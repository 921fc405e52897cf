package estimate

import (
	"math"
	"testing"
)

// A GPTQ base packs 4 bits a weight like NF4, and carries an fp16 scale and
// a 4-bit zero per 128-weight group and column: 2.5/128 B a weight, between
// NF4 with double quantization (≈0.0159) and plain NF4 (0.0625).
func TestGPTQState(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	r := Request{Model: m, Method: QLoRA, Quant: GPTQ4, Precision: BF16Mixed, SeqLen: 1024, Batch: 1, GradCkpt: CkptFull}
	tg, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(float64(m.LinearParams()) * 2.5 / 128); tg.QuantMeta != want {
		t.Errorf("GPTQ state %d B, want %d", tg.QuantMeta, want)
	}
	r.Quant = NF4
	tn, _, _ := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	r.Quant = NF4DQ
	td, _, _ := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if !(td.QuantMeta < tg.QuantMeta && tg.QuantMeta < tn.QuantMeta) || math.Abs(float64(tg.Weights-tn.Weights)) > 0 {
		t.Errorf("state nf4-dq %d < gptq %d < nf4 %d, same packed weights (%d, %d): not so", td.QuantMeta, tg.QuantMeta, tn.QuantMeta, tg.Weights, tn.Weights)
	}
	if q, err := ParseQuant("autogptq"); err != nil || q != GPTQ4 {
		t.Errorf("alias autogptq: %v %v", q, err)
	}
}
