package estimate

import "testing"

// torchtune's own loop (torchtune.go): the chunked output and loss, the
// output layer's gradient its chunks accumulate, the tied embedding at the
// end of the backward, and its configs' fused AdamW.

// torchtuneFull is the optimization-flags table's run: Llama 3.2 3B (tied
// embeddings, vocab 128256, hidden 3072) fully fine-tuned in bf16 on packed
// 4096-token sequences, batch 2, with the chunked loss.
func torchtuneFull(t *testing.T) Request {
	t.Helper()
	r := Request{Model: catalogModel(t, "meta-llama/Llama-3.2-3B-Instruct"), Method: Full, Precision: BF16True,
		SeqLen: 4096, Batch: 2, GradAccum: 1, FusedCE: LossChunked, Compile: true, GradCkpt: CkptFull,
		Optimizer: AdamWTorch}
	StackTorchtune.Spec().Apply(&r) // as the command line and validate do
	return r
}

// The chain by hand for 4096·2 tokens and 128 256 logits each
// (L = 1 050 673 152 logits) with a vocab × hidden bf16 head gradient
// (H = 128 256 · 3072 · 2 = 788 004 864 B), over 8 chunks:
//
//	compiled, full: max(2L + 2L/8, 2L + H, 2L·7/8 + 2H) = 2L·7/8 + 2H = 3 414 687 744
//	compiled, LoRA (frozen head): 2L + 2L/8 (the first chunk's new gradient) = 2 364 014 592
//	eager, LoRA: 4L (fp32 log-softmax) + 8L/8 (one chunk's fp32 gradients) = 5L = 5 253 365 760
func TestTorchtuneChunkedLossByHand(t *testing.T) {
	r, err := torchtuneFull(t).Normalize()
	if err != nil {
		t.Fatal(err)
	}
	const logits = 4096 * 2 * 128256
	if got, want := torchtuneChunkedLossBytes(r, logits), 3414687744.0; got != want {
		t.Errorf("compiled full fine-tune: chain %.0f B, want the second chunk's projection backward (7/8 of the chunk gradients and two head gradients) %.0f", got, want)
	}
	lora := r
	lora.Method = LoRA
	if got, want := torchtuneChunkedLossBytes(lora, logits), 2364014592.0; got != want {
		t.Errorf("compiled LoRA: chain %.0f B, want the saved 16-bit chunks and one chunk's gradient %.0f", got, want)
	}
	lora.Compile = false
	if got, want := torchtuneChunkedLossBytes(lora, logits), 5253365760.0; got != want {
		t.Errorf("eager LoRA: chain %.0f B, want fp32 log-softmax of every chunk and one chunk's fp32 gradients %.0f", got, want)
	}
}

// The chunked chain replaces the flat 2 B per logit only on the torchtune
// stack; another stack with the chunked loss keeps it.
func TestTorchtuneChunkedLossOnlyOnItsStack(t *testing.T) {
	tt := torchtuneFull(t)
	other := tt
	other.Stack = StackLitGPT
	other.Compile = false
	r, _ := other.Normalize()
	if torchtuneChunkedLoss(r) {
		t.Fatal("the litgpt stack runs torchtune's chunked loss")
	}
	r, _ = tt.Normalize()
	if !torchtuneChunkedLoss(r) {
		t.Fatal("the torchtune stack with the chunked loss does not run torchtune's chunked loss")
	}
	unchunked := tt
	unchunked.FusedCE = LossNone
	r, _ = unchunked.Normalize()
	if torchtuneChunkedLoss(r) {
		t.Fatal("torchtune without the chunked loss runs the chunked chain")
	}
}

// torchtune's configs pass fused: True to torch.optim.AdamW: a torchtune run
// naming torch's AdamW has no foreach step buffer; another stack keeps it.
func TestTorchtuneAdamWIsFused(t *testing.T) {
	r := Request{Optimizer: AdamWTorch}
	StackTorchtune.Spec().Apply(&r)
	if r.Optimizer != AdamWTorchFused {
		t.Errorf("torchtune: adamw_torch reads as %s, want %s", r.Optimizer, AdamWTorchFused)
	}
	h := Request{Optimizer: AdamWTorch}
	StackHFTrainer.Spec().Apply(&h)
	if h.Optimizer != AdamWTorch {
		t.Errorf("hf-trainer: adamw_torch reads as %s, want it kept", h.Optimizer)
	}
	tr, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(torchtuneFull(t))
	if err != nil {
		t.Fatal(err)
	}
	if tr.OptTransient != 0 {
		t.Errorf("torchtune AdamW keeps a %d B foreach buffer", tr.OptTransient)
	}
}

// The end of the backward of a tied full fine-tune holds every gradient and
// the embedding's own vocab × hidden contribution beside the output layer's:
// the step phase is the gradients plus one head gradient when that is larger
// than the (fused) step's buffers; an untied model has no such moment.
func TestTorchtuneTiedBackwardEnd(t *testing.T) {
	r := torchtuneFull(t)
	tr, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	e := est(t, r)
	m := r.Model
	head := m.Vocab * m.Hidden * 2
	if got, want := e.Phases.Step, tr.Grads+head; got != want {
		t.Errorf("tied: step phase %d, want the gradients %d + the embedding's second gradient %d", got, tr.Grads, head)
	}
	if e.Phases.ForwardPeak {
		t.Fatalf("checkpointed 3B full fine-tune: the forward phase (%d) wins over the backward's end (%d)", e.Phases.Forward, e.Phases.Step)
	}
	if got := component(e, CGradients); got != e.Phases.Step {
		t.Errorf("gradients component %d, want the phase's %d", got, e.Phases.Step)
	}
	untied := *m
	untied.TiedEmbeddings = false
	u := r
	u.Model = &untied
	ue := est(t, u)
	tu, _, _ := PhasePeak{Coef: DefaultCoefficients}.terms(u)
	if ue.Phases.Step != tu.Grads {
		t.Errorf("untied: step phase %d, want the gradients alone %d", ue.Phases.Step, tu.Grads)
	}
}

// With optimizer-in-backward the head gradient the chunked chain counts is
// the gradient the in-backward step holds: the forward phase at the loss is
// the same with and without it (the chain dominates the recomputation here).
func TestTorchtuneChunkedChainCountsTheHeadGradientOnce(t *testing.T) {
	r := torchtuneFull(t)
	off := est(t, r)
	r.OptimizerInBackward = true
	on := est(t, r)
	if on.Phases.Forward != off.Phases.Forward {
		t.Errorf("forward phase %d with optimizer-in-backward, %d without: the head gradient is counted twice or not at all", on.Phases.Forward, off.Phases.Forward)
	}
}
