package estimate

import (
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// LitGPT's own model code (litgpt.model, litgpt.lora) on the path the LitGPT
// oracle imitates (oracle/litgptstep.py): the tensors each block saves for
// the backward, read one by one from the oracle's census
// (`python -m oracle.litgptstep MODEL REQUEST --census --layers 2`, which
// prints what each block's forward leaves alive by creating operator), for
// Llama-style blocks (RMSNorm, fused qkv, LLaMAMLP; Gemma, Phi-3, sliding
// windows), Gemma 2 (litgptGemma2) and the LayerNorm parallel blocks of
// Phi, GPT-NeoX and Falcon 7B (litgptLNLayerSaved), under bf16-true without
// checkpointing. Bytes are per token.

// litgptExactTypes are the model types whose LitGPT block litgptLayerSaved
// spells out: LitGPT builds Llama 2/3.x, TinyLlama and Mistral 7B with
// RMSNorm, LLaMAMLP and full rotary, and pads none of their vocabularies
// (padded_vocab_size equals the HF vocab_size). Gemma (v1) saves the same
// tensors, as its census and the oracle's rows show: GemmaMLP's tanh GELU
// keeps fc_1's output as silu does and its own output as silu's, the
// norms' unit offset (1 + weight) and the embedding's √hidden scale keep
// nothing more, and its 256 000 vocabulary is not padded either. Phi-3
// (mini) is a Llama-style block too in LitGPT (RMSNorm, LLaMAMLP with fc_1
// and fc_2 split from HF's gate_up_proj, no biases; its 32 064-token
// vocabulary is LitGPT's padded one). Others keep the fitted shape.
var litgptExactTypes = map[string]bool{"llama": true, "mistral": true, "gemma": true, "phi3": true}

// litgptExact reports whether the request runs the LitGPT code path
// litgptLayerSaved spells out: the litgpt stack, bf16-true, no
// checkpointing, full fine-tuning or LoRA with LitGPT's switches (query,
// key, value on the fused qkv, at least one of them; projection; mlp;
// head), or QLoRA as litgptQLoRA says, one GPU, torch AdamW, its chunked
// loss, a dense model of litgptExactTypes (Llama-style blocks), Gemma 2
// (litgptGemma2) or litgptLNTypes (LayerNorm parallel blocks; Falcon's,
// 7B's multi-query layout and 40B's grouped one, not fully fine-tuned).
func litgptExact(r Request) bool {
	if r.Stack != StackLitGPT || r.Precision != BF16True || r.GradCkpt.Spec().Recomputes || r.GradCkpt.Spec().OffloadsInputs {
		return false
	}
	if r.Method != Full && r.Method != LoRA && (r.Method != QLoRA || !litgptQLoRA(r)) {
		return false
	}
	m := r.Model
	switch {
	case m.Experts > 0:
		return false
	case m.ModelType == "gemma2" && m.MLP == hfconfig.MLPGated && m.KVHeads < m.Heads:
		// Gemma 2 (litgptGemma2).
	case m.LogitSoftcap > 0:
		return false
	case litgptExactTypes[m.ModelType] && m.MLP == hfconfig.MLPGated:
	case litgptLNTypes[m.ModelType] && m.MLP == hfconfig.MLPClassic && (m.KVHeads == m.Heads || r.Method != Full):
		// LayerNorm parallel blocks; with fewer key/value heads (Falcon
		// 7B's one, Falcon-40B's eight groups), LoRA and QLoRA only (read),
		// not full fine-tuning.
		if m.ModelType == "falcon" && !hfFalcon7BLayout(m) && !falconNewDecoderLayout(m) {
			return false
		}
	default:
		return false
	}
	if (r.Attn != SDPA && r.Attn != SDPAMath) || fusedCE(r) || r.Compile || len(r.Kernels) > 0 || r.OptimizerInBackward {
		return false
	}
	if r.Sharding.GPUs > 1 || (r.Sharding.Strategy != "" && r.Sharding.Strategy != NoSharding) || (r.Method != QLoRA && r.Optimizer != AdamWTorch) || (r.OptimizerStateDtype != "" && r.OptimizerStateDtype != DtypeBF16 && r.Method != QLoRA) {
		return false
	}
	if !r.Task.Spec().VocabLogits || m.Seq2Seq != nil {
		return false
	}
	if r.Method == LoRA || r.Method == QLoRA {
		if len(r.ExtraTrainable) > 0 {
			return false
		}
		a, ok := litgptAdapters(r)
		if !ok || a.QKV == 0 {
			return false
		}
	}
	return true
}

// litgptSwitches is which of LitGPT's LoRA switches a request's targets
// turn on (litgpt/lora.py's Config: lora_query, lora_key, lora_value on
// the fused qkv, lora_projection, lora_mlp for every Linear of the MLP,
// lora_head), with the enabled qkv slices' summed output width.
type litgptSwitches struct {
	QKV, QKVWidth   int64 // enabled q/k/v slices and their output width
	Query           bool  // the q slice is enabled
	Proj, MLP, Head bool
}

// litgptAdapters maps the request's LoRA targets (the HF names the rows
// use: q_proj, k_proj, v_proj; o_proj for the attention's proj; gate_proj,
// up_proj and down_proj for the MLP's fc_1, fc_2 and proj; lm_head) onto
// LitGPT's switches. LitGPT's lora_mlp adapts all three MLP Linears, so a
// target list naming only some of them is not a LitGPT run: ok is false
// then, and for any name LitGPT has no switch for.
func litgptAdapters(r Request) (a litgptSwitches, ok bool) {
	m := r.Model
	var lins []hfconfig.Linear
	if len(m.Layers) > 0 {
		lins = m.Layers[0].Linears
	}
	// The MLP's Linears named so far, as bits of their index in lins (no
	// map: this runs on every estimate of the litgpt stack).
	var named, all uint64
	for i, lin := range lins {
		if lin.Role == hfconfig.RoleMLP && i < 64 {
			all |= 1 << i
		}
	}
	var q, k, v bool
	for _, t := range r.LoRATargets {
		switch hfconfig.ScopeOf(t) {
		case hfconfig.ScopeMLP:
			named = all
			continue
		case hfconfig.ScopeAttention:
			// As the LitGPT oracle reads it: q, k, v and proj.
			q, k, v, a.Proj = true, true, true, true
			continue
		case hfconfig.ScopeAllLinear:
			// Every Linear of the blocks: the attention's and the MLP
			// (not the head).
			q, k, v, a.Proj, named = true, true, true, true, all
			continue
		}
		name := strings.TrimSpace(t)
		switch strings.ToLower(name) {
		case "q_proj", "query", "q":
			q = true
		case "k_proj", "key", "k":
			k = true
		case "v_proj", "value", "v":
			v = true
		case "qkv_proj", "qkv":
			// Phi-3's fused projection: LitGPT's three slices.
			q, k, v = true, true, true
		case "query_key_value":
			// A fused query_key_value target is LitGPT's default slices,
			// lora_query and lora_value (as the LitGPT oracle reads it).
			q, v = true, true
		case "o_proj", "dense", "projection", "proj":
			a.Proj = true
		default:
			i := slices.IndexFunc(lins, func(l hfconfig.Linear) bool { return l.Name == name })
			if i < 0 || i >= 64 || all&(1<<i) == 0 {
				return a, false
			}
			named |= 1 << i
		}
	}
	if named != 0 && named != all {
		return a, false
	}
	a.MLP = named != 0
	a.Head = r.ExtraLoRAOnHead
	if q {
		a.QKVWidth, a.QKV, a.Query = a.QKVWidth+m.Heads*m.HeadDim, a.QKV+1, true
	}
	if k {
		a.QKVWidth, a.QKV = a.QKVWidth+m.KVHeads*m.HeadDim, a.QKV+1
	}
	if v {
		a.QKVWidth, a.QKV = a.QKVWidth+m.KVHeads*m.HeadDim, a.QKV+1
	}
	return a, true
}

// litgptFactors are the LoRA factors LitGPT builds, as numel: per block
// (Block[:N]), lora_A (r·enabled × in) and lora_B (out × r) of the fused
// qkv (LoRAQKVLinear), of the attention's proj, and of the MLP's Linears;
// the head's (lora_A r × hidden, lora_B vocab × r) apart (Head[:H]), since
// the head is one per model. Fixed arrays: no allocation per estimate.
type litgptFactors struct {
	Block [10]int64
	N     int
	Head  [2]int64
	H     int
}

func (f *litgptFactors) add(numel ...int64) {
	f.N += copy(f.Block[f.N:], numel)
}

// litgptAdapterShapes is every LoRA factor LitGPT builds (litgptFactors).
func litgptAdapterShapes(r Request, a litgptSwitches) litgptFactors {
	m := r.Model
	rank, h := int64(r.LoRARank), m.Hidden
	q, ffn := m.Heads*m.HeadDim, m.ActiveFFN()
	var f litgptFactors
	if a.QKV > 0 {
		f.add(rank*a.QKV*h, a.QKVWidth*rank)
	}
	if a.Proj {
		f.add(rank*q, h*rank)
	}
	if a.MLP {
		if m.MLP == hfconfig.MLPGated { // fc_1 and fc_2, then proj
			f.add(rank*h, ffn*rank, rank*h, ffn*rank, rank*ffn, h*rank)
		} else { // GptNeoxMLP: fc, then proj
			f.add(rank*h, ffn*rank, rank*ffn, h*rank)
		}
	}
	if a.Head {
		f.Head, f.H = [2]int64{rank * h, m.Vocab * rank}, 2
	}
	return f
}

// litgptNormSaved is what one of LitGPT's RMSNorms keeps per token when its
// input needs a gradient: the fp32 copy of its input (x.float(), 4 B per
// element) and, per token, 16 B more the census attributes to the same
// copy, and rsqrt's fp32 output (4 B).
func litgptNormSaved(h float64) float64 { return 4*h + 16 + 4 }

// litgptAttnSaved is what LitGPT's attention keeps per token in one
// block (litgptLayerSaved's census, the same in the LayerNorm blocks): the
// rotated q and k (2·(q+kv)), SDPA's output (2q) and fp32 log-sum-exp (4
// per head), and with as many key/value heads as query heads the fused qkv
// output (2·(q+2kv)), with fewer the repeat_interleave copies of k and v
// SDPA reads (2·2q).
func litgptAttnSaved(m *hfconfig.Model) float64 {
	q, kv := float64(m.Heads*m.HeadDim), float64(m.KVHeads*m.HeadDim)
	saved := 2*(q+kv) + 2*q + 4*float64(m.Heads)
	if m.KVHeads == m.Heads {
		return saved + 2*(q+2*kv)
	}
	return saved + 2*2*q
}

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
//   - LoRA, per adapted Linear (the fused qkv, proj, and the MLP's fc_1,
//     fc_2 and proj, each a LoRALinear with its own dropout): dropout's
//     output (2 B per input element) with its bool mask (1 B), or without
//     dropout the input itself, which lora_A saves (the norms' bf16
//     outputs, 2h, the one after norm_2 shared by fc_1 and fc_2; SDPA's
//     output reshaped for proj, 2q; the MLP product, 2·ffn), and lora_A's
//     output (2·r, per enabled slice for the qkv); where a qkv slice is
//     left out and the qkv output is saved, lora_B's (the grouped
//     convolution, 2 B per enabled output), which zero_pad scatters into
//     the full width; a grouped-query block adapting q but not all three
//     slices keeps one more 2q. A LoRA head (lora_head) keeps the same per
//     chunk of the final norm's output (2h and h, or 2h without dropout;
//     2·r), counted with the final norm.
//
// The block's output (2h) is not saved: the next norm copies it to fp32.
// The first block reads the frozen embeddings (LoRA): its norm_1 keeps no
// copy and its dropout no mask.
func litgptLayerSaved(r Request) hfSaved {
	m := r.Model
	if litgptLNTypes[m.ModelType] {
		return litgptLNLayerSaved(r)
	}
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	q := float64(m.Heads * m.HeadDim)
	mha := m.KVHeads == m.Heads
	norm := litgptNormSaved(h)
	layer := 2*norm + litgptAttnSaved(m) + 3*2*ffn
	var hs hfSaved
	// SDPA's memory-efficient kernel (a sliding-window mask) returns its
	// output laid out so that the reshape proj reads is a view of it, saved
	// already, not a copy (the oracle's QLoRA and full fine-tuning rows of
	// Mistral 7B v0.1 and Phi-3 against v0.2's flash kernel: 2q less per
	// block).
	viewOut := litgptMaskedSDPA(m)
	if m.ModelType == "gemma2" {
		layer, hs.Scores = litgptGemma2(r, layer, norm)
	} else if viewOut {
		// A sliding-window config (Mistral 7B v0.1, Phi-3): LitGPT adds
		// the window's bias to the causal mask in every block, whatever
		// the length, and SDPA's memory-efficient kernel saves that bf16
		// s × s mask for the backward (2 B per token per key; the
		// census's "full" tensor of each block).
		hs.Scores = 2
	}
	if r.Method == Full {
		layer += 2*(4*h+2*h) + 2*q*b2f(!viewOut) + 2*ffn
		hs.Final = norm + 4*h + 2*h
	} else {
		a, _ := litgptAdapters(r)
		terms, in := litgptAdapterTerms(r, a, mha, 2, false, viewOut)
		layer += terms
		// The first block's qkv reads the frozen embeddings through
		// norm_1: the norm keeps no copy and the dropout no mask; every
		// adapter after it reads an input that needs a gradient.
		hs.FirstUnsaved = norm + h*b2f(!litgptNoDropout(r))
		hs.Final = norm + litgptHeadSaved(r, a)
		if r.Method == QLoRA {
			layer = litgptQLoRATerms(r, a, layer, in, 2*h, &hs)
			if viewOut {
				layer -= 2 * q // this micro-batch's proj input is SDPA's output
			}
		}
	}
	hs.Layer = layer
	return hs
}

// litgptMathScores adds, when SDPA runs its math kernel (SDPAMath), the
// s² tensors the kernel keeps beside what the census's fused kernel keeps:
// every head's bf16 softmax output, which the probabilities·v matmul saves
// (2 B per head per token per key, in place of the sliding-window mask the
// memory-efficient kernel would have saved: the math kernel adds the mask
// in place and keeps none), and in the backward the probabilities'
// gradient and softmax's (two more, one layer at a time). The math
// kernel's scaled q and broadcast k and v copies are read as the fused
// kernel's rotated q and k and repeated k and v, which they match in size
// (lit-gpt's block of September 2023 skipped the repeat with one key/value
// head and let the matmul broadcast). Gemma 2's soft-capped scores are
// LitGPT's own matmuls, counted already (litgptGemma2).
func litgptMathScores(r Request, hs *hfSaved) {
	if r.Attn != SDPAMath || r.Model.ModelType == "gemma2" {
		return
	}
	heads := float64(r.Model.Heads)
	hs.Scores = 2 * heads
	hs.ScoresBackward = max(hs.ScoresBackward, 2*2*heads)
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
	b := max(6+4*litgptPrevAlive(r), 8+8*chunk)
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

// litgptLNTypes are the model types whose LitGPT block litgptLNLayerSaved
// spells out: LayerNorm (bf16, saving its input and fp32 mean and rstd),
// GptNeoxMLP (fc, GELU, proj), biases, partial rotary, and attention and
// MLP in parallel off the block input (LitGPT's parallel_residual, as
// hfParallelTypes, the same HF types, reads them on the transformers
// path): Phi-1.5 and Phi-2 (one norm both read, shared_attention_norm),
// Falcon 7B (the same, with one key/value head), Falcon-40B (norm_1 and
// norm_2, eight key/value groups: falconNewDecoderLayout) and GPT-NeoX
// (StableLM-Alpha, Pythia: norm_1 and norm_2).
var litgptLNTypes = hfParallelTypes

// litgptLNSaved is what one of LitGPT's LayerNorms keeps per token beyond
// its input: the fp32 mean and rstd (8 B). Its input, the block's input,
// is the previous block's output, counted there.
const litgptLNSaved = 8

// litgptLNNorms is how many LayerNorms a LitGPT block of this type runs
// on its input: Phi and Falcon 7B share one between attention and MLP;
// GPT-NeoX and Falcon-40B's new decoder layout have one each.
func litgptLNNorms(m *hfconfig.Model) float64 {
	if m.ModelType == "phi" || (m.ModelType == "falcon" && !falconNewDecoderLayout(m)) {
		return 1
	}
	return 2
}

// litgptLNLayerSaved is litgptLayerSaved for the LayerNorm, parallel
// blocks of litgptLNTypes, as the LitGPT oracle's census of Phi-1.5 and
// StableLM-Alpha-3B blocks shows them (per token):
//
//   - the block's output (2h), which the next block's LayerNorm (or the
//     final one) saves as its input, and each norm's mean and rstd;
//   - the fused qkv output (2·(q+2kv)), a view of which (v) SDPA saves; the
//     rotated q and k (torch.cat, 2·(q+kv), whole heads also under partial
//     rotary); SDPA's output (2q) and log-sum-exp (4 per head);
//   - fc's output (2·ffn), which GELU saves;
//   - a full fine-tune adds the norms' outputs (2h each) the trained qkv and
//     fc save, SDPA's output made contiguous for proj (2q) and GELU's
//     output (2·ffn) proj saves; its first block reads the trained
//     embedding and saves all of it;
//   - LoRA adds litgptLayerSaved's adapter terms for fc and proj instead of
//     fc_1, fc_2 and proj (without dropout fc's lora_A saves norm_2's
//     output, Phi's shared norm's being the qkv adapter's already), and
//     lora_B's output where a qkv slice is left out (2 B per enabled
//     output). The first block's norms read the frozen embedding (no
//     statistics kept) and, in parallel, so does fc: unless the MLP is
//     adapted its output needs no gradient and GELU keeps nothing.
func litgptLNLayerSaved(r Request) hfSaved {
	m := r.Model
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	q := float64(m.Heads * m.HeadDim)
	norms := litgptLNNorms(m)
	mha := m.KVHeads == m.Heads
	layer := 2*h + litgptLNSaved*norms + litgptAttnSaved(m) + 2*ffn
	var hs hfSaved
	if r.Method == Full {
		layer += 2*h*norms + 2*q + 2*ffn
		hs.Final = litgptLNSaved + 2*h
		hs.Layer = layer
		return hs
	}
	a, _ := litgptAdapters(r)
	terms, in := litgptAdapterTerms(r, a, mha, 1, norms == 1, false)
	layer += terms
	dropout := !litgptNoDropout(r)
	hs.FirstUnsaved = litgptLNSaved*norms + h*b2f(dropout)
	if a.MLP {
		hs.FirstUnsaved += h * b2f(dropout)
	} else {
		hs.FirstUnsaved += 2 * ffn
	}
	hs.Final = litgptLNSaved + litgptHeadSaved(r, a)
	if r.Method == QLoRA {
		// In the first block the qkv's and, with separate norms and the
		// MLP adapted, fc's inputs are lora_A's only.
		layer = litgptQLoRATerms(r, a, layer, in, 2*h+2*h*b2f(a.MLP && norms == 2), &hs)
	}
	hs.Layer = layer
	return hs
}

// litgptGemma2 is litgptLayerSaved's Llama-style block as LitGPT builds
// Gemma 2 (its Gemma-2-2b/9b/27b configs), per the LitGPT oracle's census
// of Gemma-2-2B blocks: two norms more per block (post_attention_norm and
// post_mlp_norm, litgptNormSaved each), and attention computed by hand
// because its logits are soft-capped (attention_logit_softcapping): no
// SDPA output or log-sum-exp, but per query position and head, over the s
// keys, tanh's bf16 output, the fp32 softmax and its bf16 cast that the
// probabilities·v matmul saves (2 + 4 + 2 B: Scores). The final logit
// soft-capping is the loss chain's (softcapLogitBytes). Past the sliding
// window the same scores are computed (the window layers only add a bias to
// the mask, which saves nothing): the oracle's rows at 5120–8192 tokens
// hold to 0.3 %. A full fine-tune's backward peak at 4096 tokens is 2.2 %
// above the estimate (the softmax backward beside the gradients made so
// far, not counted).
func litgptGemma2(r Request, layer, norm float64) (float64, float64) {
	m := r.Model
	q := float64(m.Heads * m.HeadDim)
	return layer + 2*norm - 2*q - 4*float64(m.Heads), 8 * float64(m.Heads)
}

// litgptHeadSaved is what a LoRA head (lora_head) keeps per token beside
// the final norm: per chunk of the norm's output, dropout's output and
// mask (2h and h; without dropout lora_A saves the output itself, 2h) and
// lora_A's output (2·r).
func litgptHeadSaved(r Request, a litgptSwitches) float64 {
	if !a.Head {
		return 0
	}
	h := float64(r.Model.Hidden)
	return 2*h + h*b2f(!litgptNoDropout(r)) + 2*float64(r.LoRARank)
}

// litgptAddKept adds to a QLoRA block's terms the inputs MatMul4Bit keeps
// (litgptQLoRASaved): this micro-batch's and the previous one's, or once
// for a longest-first peak (litgptKept). It returns the block's Layer.
func litgptAddKept(r Request, layer float64, hs *hfSaved) float64 {
	l, f, fin := litgptQLoRASaved(r)
	k := litgptKept(r)
	hs.FirstUnsaved += k * f
	hs.Final += k * fin
	return layer + k*l
}

// litgptAdapterParams is the LoRA parameter count of LitGPT's own layers
// (litgptAdapterShapes) over every block, with the head's.
func litgptAdapterParams(r Request, a litgptSwitches) int64 {
	f := litgptAdapterShapes(r, a)
	var n int64
	for _, x := range f.Block[:f.N] {
		n += x
	}
	n *= r.Model.NumLayers
	for _, x := range f.Head[:f.H] {
		n += x
	}
	return n
}

// litgptMaskedSDPA reports whether LitGPT gives SDPA a mask in every block
// and so its memory-efficient kernel: a sliding-window config (Mistral 7B
// v0.1, Phi-3) adds the window's bias to the causal mask whatever the
// length. Gemma 2 computes its soft-capped attention by hand instead.
func litgptMaskedSDPA(m *hfconfig.Model) bool {
	return m.SlidingWindow > 0 && m.ModelType != "gemma2"
}

// litgptAdapterTerms is what LitGPT's LoRA layers keep per token in one
// block beside the block's own tensors, as the census shows it (each
// adapted Linear a LoRALinear with its own dropout): the dropout's output
// (2 B per input element) and bool mask (1 B), or without dropout the input
// lora_A saves; lora_A's output (2·r per adapter, per enabled slice for
// the qkv); where a qkv slice is left out, lora_B's output (the fused qkv
// output is saved with as many key/value heads as query heads) or, with
// fewer and the q slice adapted, one more q-sized copy. fc is how many MLP
// Linears read the norm's output (LLaMAMLP's fc_1 and fc_2: 2; GptNeoxMLP's
// fc: 1), which without dropout share one input tensor; fcShared says it is
// the qkv adapter's own (one norm both read); viewOut that proj's input is
// a view of SDPA's output, saved already. It returns the terms and the
// inputs lora_A saves (in: without dropout, MatMul4Bit's kept tensors too).
func litgptAdapterTerms(r Request, a litgptSwitches, mha bool, fc float64, fcShared, viewOut bool) (terms, in float64) {
	m := r.Model
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	q := float64(m.Heads * m.HeadDim)
	dropout := !litgptNoDropout(r)
	in, mask := 2*h, h*b2f(dropout) // the qkv adapter's input
	if a.Proj {
		in, mask = in+2*q*b2f(dropout || !viewOut), mask+q*b2f(dropout)
	}
	if a.MLP {
		if dropout {
			in, mask = in+fc*2*h+2*ffn, mask+fc*h+ffn
		} else {
			in += 2*h*b2f(!fcShared) + 2*ffn
		}
	}
	adapters := float64(a.QKV) + b2f(a.Proj) + (fc+1)*b2f(a.MLP)
	terms = in + mask + 2*float64(r.LoRARank)*adapters
	switch {
	case mha && a.QKV < 3:
		terms += 2 * float64(a.QKVWidth)
	case !mha && a.QKV < 3 && a.Query:
		// The census of a grouped-query block whose adapters cover q but
		// not all three slices (Mistral 7B, q and v) shows one more
		// q-sized torch.cat output saved (2q); with all three, or without
		// q (TinyLlama, k), it does not.
		terms += 2 * q
	}
	return terms, in
}

// litgptQLoRATerms adds a QLoRA block's MatMul4Bit inputs (litgptAddKept)
// to its terms. Without dropout the input lora_A saves is the tensor
// MatMul4Bit keeps for its base (the norms' outputs, proj's, the MLP
// product, the final norm's for the head), counted in the adapter terms
// already for this micro-batch: in once less, and in the first block
// firstOwn, the inputs lora_A keeps there and MatMul4Bit does not.
func litgptQLoRATerms(r Request, a litgptSwitches, layer, in, firstOwn float64, hs *hfSaved) float64 {
	layer = litgptAddKept(r, layer, hs)
	if litgptNoDropout(r) {
		layer -= in
		hs.FirstUnsaved -= firstOwn
		if a.Head {
			hs.Final -= 2 * float64(r.Model.Hidden)
		}
	}
	return layer
}
