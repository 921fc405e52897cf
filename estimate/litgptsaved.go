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
// (padded_vocab_size equals the HF vocab_size). Gemma (v1) saves the same
// tensors, as its census and the oracle's rows show: GemmaMLP's tanh GELU
// keeps fc_1's output as silu does and its own output as silu's, the
// norms' unit offset (1 + weight) and the embedding's √hidden scale keep
// nothing more, and its 256 000 vocabulary is not padded either. Others
// keep the fitted shape.
var litgptExactTypes = map[string]bool{"llama": true, "mistral": true, "gemma": true}

// litgptExact reports whether the request runs the LitGPT code path
// litgptLayerSaved spells out: the litgpt stack, bf16-true, no
// checkpointing, full fine-tuning or LoRA on (a subset of) the fused qkv
// (LitGPT's query, key, value switches), one GPU, torch AdamW, its chunked
// loss, a Llama-style dense model.
func litgptExact(r Request) bool {
	if r.Stack != StackLitGPT || r.Precision != BF16True || r.GradCkpt.Spec().Recomputes || r.GradCkpt.Spec().OffloadsInputs {
		return false
	}
	if r.Method != Full && r.Method != LoRA && (r.Method != QLoRA || !litgptQLoRA(r)) {
		return false
	}
	m := r.Model
	if !litgptExactTypes[m.ModelType] || m.Experts > 0 || m.MLP != hfconfig.MLPGated || m.SlidingWindow > 0 || m.LogitSoftcap > 0 {
		return false
	}
	if r.Attn != SDPA || fusedCE(r) || r.Compile || len(r.Kernels) > 0 || r.OptimizerInBackward {
		return false
	}
	if r.Sharding.GPUs > 1 || (r.Sharding.Strategy != "" && r.Sharding.Strategy != NoSharding) || (r.Method != QLoRA && r.Optimizer != AdamWTorch) || (r.OptimizerStateDtype != "" && r.OptimizerStateDtype != DtypeBF16 && r.Method != QLoRA) {
		return false
	}
	if !r.Task.Spec().VocabLogits || m.Seq2Seq != nil {
		return false
	}
	if r.Method == LoRA || r.Method == QLoRA {
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

// litgptAdaptsQuery reports whether the LoRA targets adapt the q slice.
func litgptAdaptsQuery(r Request) bool {
	for _, t := range r.LoRATargets {
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "q_proj", "query", "q":
			return true
		}
	}
	return false
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
//   - the rotated q and k (apply_rope's torch.cat, 2·(q+kv)) and SDPA's
//     output (2q) and fp32 log-sum-exp (4 per head); a full fine-tune adds
//     the contiguous copy of its transposed output that proj reads (2q);
//   - with as many key/value heads as query heads, the fused qkv output
//     (2·(q+2kv)): SDPA saves v, a view of it (under LoRA the sum of the
//     base's and the adapters' outputs); with fewer, the repeat_interleave
//     copies of k and v SDPA reads instead (2·2q), and the qkv output dies;
//   - LLaMAMLP: fc_1's and fc_2's outputs and silu's (3·2·ffn); a full
//     fine-tune adds the product proj reads (2·ffn);
//   - LoRA: the adapter input, dropout's output (or the norm's bf16 output
//     without dropout, 2h) with dropout's bool mask (h), lora_A's output
//     (2·r per enabled slice) and, where a slice is left out and the qkv
//     output is saved, lora_B's (the grouped convolution, 2 B per enabled
//     output), which zero_pad scatters into the full width; a grouped-query
//     block adapting q but not all three slices keeps one more 2q.
//
// The block's output (2h) is not saved: the next norm copies it to fp32.
// The first block reads the frozen embeddings (LoRA): its norm_1 keeps no
// copy and its dropout no mask.
func litgptLayerSaved(r Request) hfSaved {
	m := r.Model
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	q, kv := float64(m.Heads*m.HeadDim), float64(m.KVHeads*m.HeadDim)
	mha := m.KVHeads == m.Heads
	norm := litgptNormSaved(h)
	layer := 2*norm + 2*(q+kv) + 2*q + 4*float64(m.Heads) + 3*2*ffn
	if mha {
		layer += 2 * (q + 2*kv)
	} else {
		layer += 2 * 2 * q
	}
	var hs hfSaved
	if r.Method == Full {
		layer += 2*(4*h+2*h) + 2*q + 2*ffn
		hs.Final = norm + 4*h + 2*h
	} else {
		w, n := litgptQKVAdapters(r)
		layer += 2*h + 2*float64(r.LoRARank*n)
		if mha && n < 3 {
			layer += 2 * float64(w)
		}
		if !mha && n < 3 && litgptAdaptsQuery(r) {
			// The census of a grouped-query block whose adapters cover q
			// but not all three slices (Mistral 7B, q and v) shows one more
			// q-sized torch.cat output saved (2q); with all three, or
			// without q (TinyLlama, k), it does not.
			layer += 2 * q
		}
		first := norm
		if r.LoRADropout != nil && *r.LoRADropout > 0 {
			layer += h
			first += h
		}
		hs.FirstUnsaved = first
		hs.Final = norm
		if r.Method == QLoRA {
			// Twice: this micro-batch's and the previous one's
			// (litgptQLoRASaved).
			l, f, fin := litgptQLoRASaved(r)
			layer += 2 * l
			hs.FirstUnsaved += 2 * f
			hs.Final += 2 * fin
			if litgptNoDropout(r) {
				// This micro-batch's norm_1 output is lora_A's saved
				// input already (counted above); the first block's
				// qkv keeps none, lora_A does.
				layer -= 2 * h
				hs.FirstUnsaved -= 2 * h
			}
		}
	}
	hs.Layer = layer
	return hs
}

// litgptLMHeadChunk is the positions per chunk of LitGPT's LoRA forward
// (lm_head_chunk_size=128) and of chunked_cross_entropy's default chunks.
const litgptLMHeadChunk = 128

// litgptLogitBytes is what LitGPT's loss chain holds per logit (s·b·vocab)
// at the step's peak, beside every block's saved tensors, as the oracle
// shows it: the larger of two moments.
//
// The end of the forward (LoRA, lm_head_chunk_size=128): Fabric's bf16-true
// plugin converts the bf16 logit chunks (2 B) to fp32 (4 B) while fit()
// still holds the previous micro-batch's fp32 logits (4 B): 10. A full
// fine-tune's single lm_head output is converted the same way.
//
// The backward of the loss, chunk by chunk (chunked_cross_entropy, 128
// positions each): the fp32 logits fit() holds (4 B), the log-softmax
// gradients of the chunks done (4 B over all of them), and for the chunk
// being done its saved log-softmax and nll_loss's gradient (8 B over one
// chunk's share). A full fine-tune's loss reads a slice of the logits: once
// the chunks are done, the torch.cat of their gradients, the slice's
// zero-padded backward and the logits coexist: 12.
func litgptLogitBytes(r Request) float64 {
	chunk := min(1, float64(litgptLMHeadChunk)/float64(r.SeqLen))
	b := max(10, 8+8*chunk)
	if r.Method == Full {
		b = max(b, 12)
	}
	return b
}

// litgptStepLogitBytes is what the optimizer step holds per logit beside
// the gradients and states: fit() keeps the micro-batch's fp32 logits
// referenced until the next forward has returned.
const litgptStepLogitBytes = 4

// LitGPTExact reports whether the default estimator spells a request out
// on LitGPT's own code path (litgptExact) rather than the fitted shape.
func LitGPTExact(req Request) bool {
	r, err := req.Normalize()
	return err == nil && litgptExact(r)
}
