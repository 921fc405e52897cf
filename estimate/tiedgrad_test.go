package estimate

import "testing"

// On the transformers path a full fine-tune with tied embeddings holds two
// vocab × hidden gradients beyond the others at the backward's end (the
// oracle's SGD runs): with a fused step, or SGD, the step phase is the
// gradients and those two; an untied model, accumulation (not read) and
// torchtune (one, its own reading) differ.
func TestTiedBackwardEnd(t *testing.T) {
	tied := catalogModel(t, "Qwen/Qwen2.5-0.5B") // tied, 151,936 × 896
	untied := catalogModel(t, "Qwen/Qwen2.5-7B")
	step := func(r Request) (phase, grads int64) {
		return est(t, r).Phases.Step, termsOf(t, r).Grads
	}
	head := int64(151936 * 896 * 2)
	base := Request{Model: tied, Method: Full, Precision: BF16True, SeqLen: 256, Batch: 1, Optimizer: AdamWTorchFused, GPUTotal: 80 * GiB}
	for _, tc := range []struct {
		name  string
		edit  func(*Request)
		extra int64 // beyond the gradients
	}{
		{"tied, fused", func(*Request) {}, 2 * head},
		{"tied, SGD", func(r *Request) { r.Optimizer = SGD }, 2 * head},
		{"tied, fused, fp32", func(r *Request) { r.Precision = FP32 }, 4 * head},
		{"untied, fused", func(r *Request) { r.Model = untied }, 0},
		{"torchtune, fused", func(r *Request) { r.Stack = StackTorchtune }, head},
	} {
		r := base
		tc.edit(&r)
		if got, grads := step(r); got-grads != tc.extra {
			t.Errorf("%s: step phase %d = gradients %d + %d, want + %d", tc.name, got, grads, got-grads, tc.extra)
		}
	}
	r := base
	r.GradAccum = 2
	if end := tiedBackwardEnd(r); end != 0 {
		t.Errorf("accumulating: backward end %g, want 0 (not read)", end)
	}
}
