package estimate

import (
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// LitGPT's own model code (litgpt.model, litgpt.lora) on the path the LitGPT
// oracle imitates (oracle/litgptstep.py): the tensors each block saves for
// the backward, read one by one from the oracle's census
// (`python -m oracle.litgptstep MODEL REQUEST --census --layers 2`, which
// prints what each block's forward leaves alive by creating operator), for a
// Llama-style block (RMSNorm, fused qkv with rotary on the whole head,
// LLaMAMLP) under bf16-true without checkpointing. Bytes are per token.

// litgptExactTypes are the model types whose LitGPT block litgptLayerSaved
// spells out: LitGPT builds Llama 2/3.x, TinyLlama and Mistral 7B with
// RMSNorm, LLaMAMLP and full rotary, and pads none of their vocabularies
// (padded_vocab_size equals the HF vocab_size). Others keep the fitted shape.
var litgptExactTypes = map[string]bool{"llama": true, "mistral": true}

// litgptExact reports whether the request runs the LitGPT code path
// litgptLayerSaved spells out: the litgpt stack, bf16-true, no
// checkpointing, full fine-tuning or LoRA on (a subset of) the fused qkv
// (LitGPT's query, key, value switches), one GPU, torch AdamW, its chunked
// loss, a Llama-style dense model.
func litgptExact(r Request) bool {
	if r.Stack != StackLitGPT || r.Precision != BF16True || r.GradCkpt.Spec().Recomputes || r.GradCkpt.Spec().OffloadsInputs {
		return false
	}
	if r.Method != Full && r.Method != LoRA {
		return false
	}
	m := r.Model
	if !litgptExactTypes[m.ModelType] || m.Experts > 0 || m.MLP != hfconfig.MLPGated || m.SlidingWindow > 0 || m.LogitSoftcap > 0 {
		return false
	}
	if r.Attn != SDPA || fusedCE(r) || r.Compile || len(r.Kernels) > 0 || r.OptimizerInBackward || r.DynamicShapes || r.Lengths != nil {
		return false
	}
	if r.Sharding.GPUs > 1 || (r.Sharding.Strategy != "" && r.Sharding.Strategy != NoSharding) || r.Optimizer != AdamWTorch || (r.OptimizerStateDtype != "" && r.OptimizerStateDtype != DtypeBF16) {
		return false
	}
	if !r.Task.Spec().VocabLogits || m.Seq2Seq != nil {
		return false
	}
	if r.Method == LoRA {
		if r.ExtraLoRAOnHead || len(r.ExtraTrainable) > 0 {
			return false
		}
		_, n := litgptQKVAdapters(r)
		if n == 0 {
			return false
		}
	}
	return true
}

// litgptQKVAdapters is, for LoRA targets that name only q, k and v, the
// summed output width of the enabled slices and how many there are; 0, 0
// when a target names anything else (the projection, the MLP, the head:
// not read yet).
func litgptQKVAdapters(r Request) (width, n int64) {
	m := r.Model
	on := map[string]bool{}
	for _, t := range r.LoRATargets {
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "q_proj", "query", "q":
			on["q"] = true
		case "k_proj", "key", "k":
			on["k"] = true
		case "v_proj", "value", "v":
			on["v"] = true
		default:
			return 0, 0
		}
	}
	if on["q"] {
		width, n = width+m.Heads*m.HeadDim, n+1
	}
	if on["k"] {
		width, n = width+m.KVHeads*m.HeadDim, n+1
	}
	if on["v"] {
		width, n = width+m.KVHeads*m.HeadDim, n+1
	}
	return width, n
}

// litgptNormSaved is what one of LitGPT's RMSNorms keeps per token when its
// input needs a gradient: the fp32 copy of its input (x.float(), 4 B per
// element) and, per token, 16 B more the census attributes to the same
// copy, and rsqrt's fp32 output (4 B).
func litgptNormSaved(h float64) float64 { return 4*h + 16 + 4 }

// litgptLayerSaved is one LitGPT block's saved tensors (hfSaved.Layer),
// the first block's shortfall (FirstUnsaved) and the final norm's (Final),
// per token, as the census shows them for a Llama-style block:
//
//   - norm_1 and norm_2 (litgptNormSaved each); a full fine-tune adds each
//     norm's fp32 x·rsqrt (4h, for the weight's gradient) and its bf16 cast
//     (2h);
//   - the fused qkv output (2·(q+2kv) B): SDPA saves v, a view of it; under
//     LoRA it is the sum of the base and adapter outputs;
//   - the rotated q and k (torch.cat in apply_rope, 2·(q+kv));
//   - SDPA's output (2q) and its fp32 log-sum-exp (4 per head); a full
//     fine-tune adds the contiguous copy of its transposed output that proj
//     reads (2q);
//   - LLaMAMLP: fc_1's and fc_2's outputs and silu's (3·2·ffn); a full
//     fine-tune adds the product proj reads (2·ffn);
//   - LoRA: the adapter input, dropout's output (or the norm's bf16 output
//     without dropout, 2h) with dropout's bool mask (h), lora_A's output
//     (2·r per enabled slice) and lora_B's (the grouped convolution, 2 B per
//     enabled output).
//
// The block's output (2h) is not saved: the next norm copies it to fp32.
// The first block reads the frozen embeddings (LoRA): its norm_1 keeps no
// copy and its dropout no mask.
func litgptLayerSaved(r Request) hfSaved {
	m := r.Model
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	q, kv := float64(m.Heads*m.HeadDim), float64(m.KVHeads*m.HeadDim)
	norm := litgptNormSaved(h)
	layer := 2*norm + 2*(q+2*kv) + 2*(q+kv) + 2*q + 4*float64(m.Heads) + 3*2*ffn
	var hs hfSaved
	if r.Method == Full {
		layer += 2*(4*h+2*h) + 2*q + 2*ffn
		hs.Final = norm + 4*h + 2*h
	} else {
		w, n := litgptQKVAdapters(r)
		layer += 2*h + 2*float64(r.LoRARank*n) + 2*float64(w)
		first := norm
		if r.LoRADropout != nil && *r.LoRADropout > 0 {
			layer += h
			first += h
		}
		hs.FirstUnsaved = first
		hs.Final = norm
	}
	hs.Layer = layer
	return hs
}

// litgptLogitBytes is what LitGPT's loss chain holds per logit (s·b·vocab)
// at the step's peak, beside every block's saved tensors, as the oracle
// shows it. LoRA (lm_head_chunk_size=128): the end of the forward, where
// Fabric's bf16-true plugin converts the bf16 logit chunks (2 B) to fp32
// (4 B) while fit() still holds the previous micro-batch's fp32 logits
// (4 B): 10. Full (one lm_head): the start of the backward, where
// chunked_cross_entropy's gradient (the torch.cat of its chunks', fp32),
// the slice's backward (a zero-padded fp32 copy) and the fp32 logits fit()
// holds coexist: 12.
func litgptLogitBytes(r Request) float64 {
	if r.Method == Full {
		return 12
	}
	return 10
}
