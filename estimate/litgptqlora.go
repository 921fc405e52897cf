package estimate

import (
	"slices"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// QLoRA on LitGPT's own code path, as the LitGPT oracle imitates it
// (oracle/litgptstep.py): Fabric's BitsandbytesPrecision(quant, bf16)
// quantizes every Linear of LitGPT's GPT, the fused qkv, the MLP's fc_1,
// fc_2 and proj, the LM head and the LoRA layers' bases; the norms, the
// embedding and the adapters stay bf16; the optimizer is bitsandbytes'
// PagedAdamW.
//
// The estimate assumes the code the measured LitGPT QLoRA rows ran (their
// sources date them between 2023-10 and 2024-09, and oracle/vsreal.py
// imitates them so): bitsandbytes before 0.43.2 (LitGPT pinned 0.42.0
// until 2024-12-28), whose MatMul4Bit keeps its input for the backward, and
// LitGPT's finetune script before the StableEmbedding swap (litgpt
// ae798aba, 2024-10-04). On bitsandbytes 0.43.2 and later the four inputs
// per block that MatMul4Bit keeps (litgptQLoRASaved) are not kept.

// litgptQLoRA reports whether a QLoRA request is the one the LitGPT oracle
// imitates: a 4-bit base (NF4 with or without double quantization, FP4)
// stored in uint8 and PagedAdamW's fp32 states.
func litgptQLoRA(r Request) bool {
	switch r.Quant {
	case NF4, NF4DQ, FP4:
	default:
		return false
	}
	return (r.QuantStorage == "" || r.QuantStorage == DtypeUint8) && r.Optimizer == PagedAdamW32bit
}

// litgptQLoRAStorage is bnb4bitStorage for LitGPT's module layout: the q, k
// and v projections are one fused Linear, and the LM head is quantized too
// (tied or not: LitGPT keeps a separate lm_head). Returns the packed
// weights, the quantization state and the quantized weight count.
func litgptQLoRAStorage(r Request) (packed, state, weights int64) {
	m := r.Model
	dq := r.Quant.Spec().DoubleQuant
	one := func(n int64) {
		p, st := bnb4bitLinear(n, dq)
		packed += p
		state += st
		weights += n
	}
	for _, l := range m.Layers {
		var qkv int64
		for _, lin := range l.Linears {
			if slices.Contains(hfconfig.QKV, lin.Name) {
				qkv += lin.In * lin.Out
				continue
			}
			for range lin.Copies {
				one(lin.In * lin.Out)
			}
		}
		if qkv > 0 {
			one(qkv)
		}
	}
	one(m.Vocab * m.Hidden)
	return packed, state, weights
}

// litgptQLoRASaved is what MatMul4Bit (bitsandbytes before 0.43.2) keeps
// per token beyond the LoRA block's saved tensors, as the census of a
// QLoRA block shows it: the bf16 input of each quantized Linear whose
// input needs a gradient — norm_1's output (the qkv's; none in the first
// block, which reads the frozen embeddings), norm_2's (fc_1 and fc_2 share
// it), the attention output proj reads (q) and the MLP product proj reads
// (ffn); the LM head's input, the final norm's output, after the blocks.
// In a LayerNorm parallel block fc reads the block's norm output too (a
// shared norm's is the qkv's own), and in the first block neither fc's
// input nor, unless the MLP is adapted, proj's needs a gradient.
//
// MatMul4Bit of those versions keeps them as a plain attribute of its
// autograd context (ctx.tensors = (A, B)), which the backward does not
// free: they live as long as the graph, and fit() keeps the graph alive by
// holding the micro-batch's logits until the next forward has returned.
// So at the next micro-batch's peak the previous one's inputs are alive
// beside its own (the oracle's per-layer growth of the forward peak shows
// both), and through the optimizer step the last micro-batch's are
// (litgptQLoRAStepHeld).
func litgptQLoRASaved(r Request) (layer, first, final float64) {
	m := r.Model
	h, q, ffn := float64(m.Hidden), float64(m.Heads*m.HeadDim), float64(m.ActiveFFN())
	if litgptLNTypes[m.ModelType] {
		// Parallel blocks: fc reads the norm output too (Phi: the qkv's
		// own), and in the first block fc's input needs no gradient, nor,
		// unless the MLP is adapted, proj's.
		a, _ := litgptAdapters(r)
		sep := b2f(litgptLNNorms(m) == 2)
		return 2*h + 2*h*sep + 2*q + 2*ffn, 2*h + 2*h*sep + 2*ffn*b2f(!a.MLP), 2 * h
	}
	return 2*h + 2*h + 2*q + 2*ffn, 2 * h, 2 * h
}

// litgptNoDropout reports whether the LoRA adapters read the norm's output
// itself (no dropout): the tensor LoRA saves for lora_A is then the one
// MatMul4Bit keeps for the qkv.
func litgptNoDropout(r Request) bool { return r.LoRADropout == nil || *r.LoRADropout == 0 }

// litgptQLoRAHeadBytes is the forward's moment at the last LM head chunk of
// a QLoRA step, per the census of its peak: every chunk's matmul
// dequantizes the whole head, to fp16 (the quantization state's dtype:
// Fabric's _Linear4bit.quantize casts the weight to fp16 first) and then
// copies it to bf16 (2 + 2 B per head weight), while the earlier chunks'
// bf16 logits (2 B per logit outside the last chunk) and fit()'s fp32
// logits of the previous micro-batch (4 B per logit) are alive.
func litgptQLoRAHeadBytes(r Request, logitUnit float64) float64 {
	m := r.Model
	chunk := min(1, float64(litgptLMHeadChunk)/float64(r.SeqLen))
	return 4*float64(m.Vocab*m.Hidden) + (4*litgptPrevAlive(r)+2*(1-chunk))*logitUnit
}

// litgptQLoRAHeadBackward is the backward's moment at the LM head of a
// QLoRA step, per the census of a longest-first step's peak: the head's
// MatMul4Bit backward dequantizes the whole head again (fp16, then the bf16
// copy: 2 + 2 B per head weight) while the fp32 logits fit() holds (4 B
// per logit) and their gradients converted back to bf16 (2 B) are alive.
// The previous micro-batch's kept inputs are gone by then (fit() let its
// graph go when this forward returned): the caller sets this moment
// against the forward's less what they add there.
func litgptQLoRAHeadBackward(r Request, logitUnit float64) float64 {
	return 4*float64(r.Model.Vocab*r.Model.Hidden) + 6*logitUnit
}

// litgptKept is how many micro-batches' MatMul4Bit inputs
// (litgptQLoRASaved) are alive at the forward's peak: this one's and the
// previous one's (litgptPrevAlive).
func litgptKept(r Request) float64 { return 1 + litgptPrevAlive(r) }

// litgptPrevAlive is 1 when the previous micro-batch's logits, which fit()
// holds until the next forward has returned, and what its graph keeps are
// alive at a micro-batch's peak; 0 when the peak is the first micro-batch
// of a longest-first run (Request.LongestFirst), with no earlier one.
func litgptPrevAlive(r Request) float64 { return b2f(!r.LongestFirst) }

// litgptQLoRAStepHeld is what the optimizer step holds of the last
// micro-batch's MatMul4Bit inputs (litgptQLoRASaved), for s·b tokens.
func litgptQLoRAStepHeld(r Request) float64 {
	l, f, fin := litgptQLoRASaved(r)
	return float64(r.SeqLen) * float64(r.Batch) * (float64(r.Model.NumLayers)*l - f + fin)
}
