package estimate

import (
	"fmt"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// Encoder-decoder models (hfconfig.Seq2Seq): the encoder's blocks see the
// source (Request.SeqLen), the decoder's the target (Request.TargetLen),
// and every decoder block adds a cross-attention whose keys and values span
// the source. The default estimator's terms are first computed as for a
// decoder of all the blocks at the source length; seq2seqTerms then
// replaces the length-dependent ones with their per-stack sums.

// checkExpertParameters refuses a QLoRA base for a model whose experts are
// not nn.Linear modules: bitsandbytes would leave them unquantized, which
// the QLoRA weight formula (every decoder Linear packed) does not describe.
func checkExpertParameters(r Request) error {
	if r.Method == QLoRA && r.Model.ExpertParameters {
		return fieldErr("method", r.Method, "full or lora for %s: its routed experts are 3-D parameters, not nn.Linear modules, so bitsandbytes leaves them in 16 bits under QLoRA (not modelled)", r.Model.ModelType)
	}
	return nil
}

// checkSeq2Seq fills the target length of an encoder-decoder request and
// refuses settings that have no encoder-decoder meaning.
func checkSeq2Seq(r *Request) error {
	if r.Model.Seq2Seq == nil {
		if r.TargetLen != 0 {
			return fieldErr("target_len", r.TargetLen, "unset for a decoder-only or encoder-only model (it is the decoder's length of an encoder-decoder model; --seq-len is this model's whole sequence)")
		}
		return nil
	}
	if r.TargetLen != 0 {
		if err := intIn("target_len", r.TargetLen, 1, MaxSeqLen); err != nil {
			return err
		}
		if r.TargetLen*r.Batch > MaxTokens {
			return fieldErr("target_len × batch", fmt.Sprintf("%d × %d", r.TargetLen, r.Batch), "at most %d tokens per micro-batch", MaxTokens)
		}
	}
	if len(r.Kernels) > 0 {
		return fieldErr("kernels", r.Kernels, "none for an encoder-decoder model: Liger and Unsloth patch decoder-only families, not T5 or BART")
	}
	if fusedCE(*r) {
		return fieldErr("fused_ce", r.FusedCE, "none for an encoder-decoder model: the fused losses patch decoder-only LM heads")
	}
	if r.Model.Seq2Seq.PositionBias && r.Attn != SDPA && r.Attn != Eager {
		return fieldErr("attn", r.Attn, "sdpa or eager for %s: its attention adds a relative position bias to the scores and runs eagerly whatever is asked (transformers has no FlashAttention or flex path for it)", r.Model.ModelType)
	}
	return nil
}

// targetLen is the decoder's length: TargetLen, or when not given the
// conservative reading, a target as long as the source (translation;
// summarisation targets are shorter, and saying so lowers the estimate).
func (r Request) targetLen() int64 {
	if r.TargetLen > 0 {
		return r.TargetLen
	}
	return r.SeqLen
}

// seq2seqLayerTokens is Σ over blocks of the tokens each block sees, per
// sequence of the batch: encoder blocks × source + decoder blocks × target.
func seq2seqLayerTokens(r Request) float64 {
	ss := r.Model.Seq2Seq
	return float64(ss.EncoderLayers*r.SeqLen + ss.DecoderLayers*r.targetLen())
}

// seq2seqTerms replaces the length-dependent terms of an encoder-decoder
// request (docs/memory-model.md, "Encoder-decoder models"):
//
//   - activations: seed 000's per-block shape at the source length for each
//     encoder block and at the target length for each decoder block, whose
//     cross-attention keeps the same tensors as its self-attention except
//     that its keys and values (2 × inner per token) span the source, plus
//     the encoder's output, which every decoder block reads;
//   - attention scores under eager attention: heads × source² per encoder
//     block, heads × (target² + target × source) per decoder block; under
//     SDPA, T5's per-block bias masks instead;
//   - dropout masks (T5 trains with dropout_rate 0.1, BART with dropout 0.1);
//   - the loss chain: target × batch × vocabulary logits;
//   - what scales with the tokens a block sees (adapter inputs, the trained
//     inputs of a full fine-tune, fused-kernel savings): weighted by each
//     stack's length;
//   - checkpointed block inputs: one hidden state per block at its stack's
//     length.
func seq2seqTerms(t *terms, r Request, act, mlpT, mlpBytes float64) {
	m, ss := r.Model, r.Model.Seq2Seq
	S, T, b, h := float64(r.SeqLen), float64(r.targetLen()), float64(r.Batch), float64(m.Hidden)
	inner := float64(ss.Inner)
	Le, Ld := float64(ss.EncoderLayers), float64(ss.DecoderLayers)
	L := Le + Ld
	block := func(tokens, ffn float64) float64 {
		return tokens * b * (refAttnTensors*h*act + mlpT*ffn*mlpBytes)
	}
	enc := block(S, float64(ss.EncoderFFN))
	cross := b * act * (refAttnTensors*T*h + 2*(S-T)*inner)
	dec := block(T, float64(ss.DecoderFFN)) + cross
	encOut := S * b * h * act
	t.ActUnit = Le*enc + Ld*dec + encOut
	t.LayerUnit = max(enc, dec)

	// The terms computed for all blocks at the source length scale to
	// each stack's length.
	w := seq2seqLayerTokens(r) / (L * S)
	t.AdapterAct *= w
	t.TrainedInputs *= w
	t.KernelSavedLayer *= w

	heads, decHeads := float64(m.Heads), float64(ss.DecoderHeads)
	t.Eager = 0
	if r.Attn.Spec().KeepsScores() {
		// Korthikanti's 5·a·q·k per block under eager (as for decoders, per
		// 16-bit element; scoreTensors); Estimate multiplies the per-block
		// term by the block count.
		scores := Le*heads*S*S + Ld*decHeads*(T*T+T*S)
		t.Eager = scoreTensors(r) * scores * b * act / L
	} else if ss.PositionBias {
		// SDPA's memory-efficient kernel keeps each block's float bias
		// mask: with a padded batch (the Trainer's seq2seq collator pads
		// and passes attention_mask) batch × heads × S² per encoder
		// block, heads × T² per decoder self-attention (causal, no
		// decoder mask) and batch × heads × T × S per cross-attention.
		t.BlockExtra += act * (Le*b*heads*S*S + Ld*(decHeads*T*T+b*decHeads*T*S))
	}
	if ss.Dropout > 0 {
		// One-byte masks of the residual dropouts: two per encoder block,
		// three per decoder block, and each stack's embedding dropout.
		t.BlockExtra += b * h * (2*Le*S + 3*Ld*T + S + T)
	}
	if ss.FFNDropout > 0 {
		// The feed-forward's inner dropout keeps its mask and its output
		// (the down projection's input) beside the activation's.
		t.BlockExtra += b * (act + 1) * (Le*S*float64(ss.EncoderFFN) + Ld*T*float64(ss.DecoderFFN))
	}
	switch ck := r.GradCkpt.Spec(); {
	case ck.OffloadsInputs:
		t.CkptUnit = max(S, T) * b * h
	case ck.Recomputes:
		// Each checkpointed block keeps its input; the encoder's output,
		// an input of every decoder block, is kept once.
		t.CkptUnit = (Le*S + Ld*T + S) * b * h * act / 2
	}
	if t.LogitUnit > 0 {
		t.LogitUnit = T * b * float64(m.Vocab)
	}
	switch t.Loss {
	case "full":
		// The logits in the loss's dtype: fp32 under autocast or fp32,
		// else the model's (seq2seqLogitBytes).
		t.Largest = float64(r.actBytes()) * t.LogitUnit
		if r.Precision.mixed() || r.Precision == FP32 {
			t.Largest = 4 * t.LogitUnit
		}
	default:
		t.Largest = 4 * max(S, T) * b * float64(max(m.ActiveFFN(), m.Hidden))
	}
}

// seq2seqLogitBytes is the stock loss chain's bytes per logit of an
// encoder-decoder model. T5ForConditionalGeneration and
// BartForConditionalGeneration call CrossEntropyLoss on the logits in the
// model's dtype, with no fp32 upcast (the decoders' ForCausalLMLoss
// upcasts): in 16-bit training the backward holds log_softmax's saved
// output, its gradient and the logits' gradient, 3 × 2 bytes; the logits
// themselves are freed with the model output before the backward. Under
// autocast (mixed precision) or fp32, cross_entropy runs in fp32, which is
// the decoders' fitted chain.
func seq2seqLogitBytes(r Request, fitted float64) float64 {
	if r.Precision.mixed() || r.Precision == FP32 {
		return fitted
	}
	return 3 * float64(r.actBytes())
}

// seq2seqAssumptions says what the target length is and where it came from.
func seq2seqAssumptions(r Request) []string {
	if r.Model.Seq2Seq == nil {
		return nil
	}
	src := "given"
	if r.TargetLen == 0 {
		src = "not given: assumed as long as the source (--seq-len); a shorter target (--target-len) lowers the decoder's activations and the loss chain"
	}
	return []string{fmt.Sprintf("encoder-decoder: source %d tokens × %d encoder blocks, target %d tokens × %d decoder blocks (target length %s)",
		r.SeqLen, r.Model.Seq2Seq.EncoderLayers, r.targetLen(), r.Model.Seq2Seq.DecoderLayers, src)}
}

// errSeq2SeqEstimator is what estimators without an encoder-decoder model
// answer.
func errSeq2SeqEstimator(name string, m *hfconfig.Model) error {
	return fmt.Errorf("%w: the %s estimator models decoder-only and encoder-only models; %s is encoder-decoder — use the default estimator", ErrInvalidRequest, name, m.ModelType)
}
