package estimate

import "testing"

// The eager scores' chain counted by hand against the oracle's live sets
// (bytes per score element): what is saved for the backward, and the most
// held through it.
func TestScoreChain(t *testing.T) {
	for _, c := range []struct {
		name        string
		ch          scoreChain
		saved, peak float64
	}{
		// Llama's softmax(dtype=fp32).to(bf16): fp32 output and its bf16
		// cast saved; the softmax backward holds output, gradient in and
		// out in fp32.
		{"fp32 softmax, bf16 cast", scoreChain{Softmax: 4, Cast: 2, Matmul: 2}, 6, 12},
		// fp32 throughout: the matmul saves the softmax output itself.
		{"fp32", scoreChain{Softmax: 4, Cast: 4, Matmul: 4}, 4, 12},
		// QLoRA's fp32 stream under autocast: .to(fp32) is a no-op and the
		// matmul saves its own bf16 cast.
		{"autocast over fp32", scoreChain{Softmax: 4, Cast: 4, Matmul: 2}, 6, 12},
		// GPT-2 in bf16 with dropout: the peak is the value matmul's
		// backward (softmax output, mask, dropped copy, gradient).
		{"gpt2 bf16", scoreChain{Softmax: 2, Cast: 2, Matmul: 2, Dropout: true}, 5, 7},
		// GPT-2 under autocast over bf16 weights: fp32 softmax cast to
		// bf16 before the dropout; the softmax backward is the peak.
		{"gpt2 bf16-mixed", scoreChain{Softmax: 4, Cast: 2, Matmul: 2, Dropout: true}, 7, 12},
		// GPT-2 QLoRA under autocast: dropout in fp32, its bf16 cast
		// saved; dropout's backward (mask, fp32 gradient in and out beside
		// the softmax output) is the peak.
		{"gpt2 qlora autocast", scoreChain{Softmax: 4, Cast: 4, Matmul: 2, Dropout: true}, 7, 13},
		// fp32 with dropout: the dropped copy is a new fp32 tensor.
		{"fp32 dropout", scoreChain{Softmax: 4, Cast: 4, Matmul: 4, Dropout: true}, 9, 13},
	} {
		if got := c.ch.saved(); got != c.saved {
			t.Errorf("%s: saved %g B, want %g", c.name, got, c.saved)
		}
		if got := c.ch.backwardPeak(); got != c.peak {
			t.Errorf("%s: backward peak %g B, want %g", c.name, got, c.peak)
		}
	}
}

// Each layer reads its chain from the model's attention code: GPT-2's
// softmax without a dtype is fp32 under autocast (softmax is on its fp32
// list) and its dropout sits behind the cast; SDPA's math kernel runs below
// autocast in the activation dtype whatever the model's code, its dropout
// included. Per head per token per key.
func TestScoreChainPerModel(t *testing.T) {
	gpt2 := catalogModel(t, "openai-community/gpt2")
	for _, c := range []struct {
		name        string
		prec        Precision
		attn        Attention
		saved, back float64
	}{
		{"eager bf16-true", BF16True, Eager, 2 + 1 + 2, 7 - 5},
		{"eager bf16-mixed", BF16Mixed, Eager, 4 + 1 + 2, 12 - 7},
		{"sdpa_math bf16-true", BF16True, SDPAMath, 2 + 1 + 2, 7 - 5},
		{"sdpa_math bf16-mixed", BF16Mixed, SDPAMath, 2 + 1 + 2, 7 - 5},
	} {
		r := must(Request{Model: gpt2, Method: LoRA, Precision: c.prec, Stack: StackHFTrainer, LoRARank: 16,
			LoRATargets: []string{"attention"}, SeqLen: 512, Batch: 2, Attn: c.attn, GradCkpt: CkptFull}.Normalize())
		s := hfLayerSaved(r)
		heads := float64(gpt2.Heads)
		if s.Scores != heads*c.saved || s.ScoresBackward != heads*c.back {
			t.Errorf("gpt2 %s: scores %g B, backward %g B; want %g × (%g, %g)", c.name, s.Scores, s.ScoresBackward, heads, c.saved, c.back)
		}
	}
}
