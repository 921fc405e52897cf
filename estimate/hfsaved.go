package estimate

import (
	"slices"
	"strings"
	"sync"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// hfSaved is what a transformers decoder layer keeps for the backward, tensor
// by tensor, as the fake-tensor oracle (oracle/fakestep.py) shows it for the
// code paths whose saved tensors were read one by one (docs/memory-model.md,
// "Activations: the transformers code path"). Bytes are per token (s·b).
type hfSaved struct {
	// Layer is one decoder layer's saved tensors without the s² scores.
	Layer float64
	// Scores is one eager layer's saved s² tensors per token, per unit of
	// sequence length (×s gives bytes per token).
	Scores float64
	// ScoresBackward is the transient of one eager layer's softmax backward
	// beyond its saved scores, per token per unit of sequence length.
	ScoresBackward float64
	// PostAttn is the part of Layer the layer's backward frees before the
	// attention's backward starts (per token).
	PostAttn float64
	// Final is the final norm's saved tensors (outside the checkpointed blocks).
	Final float64
	// BlockInput is what a checkpointed block keeps: its input hidden state.
	BlockInput float64
	// Mask is the saved attention mask per token per unit of sequence
	// length, one tensor for all layers: SDPA's boolean sliding-window
	// mask (1 B), or eager's additive causal mask (the activation dtype),
	// which only checkpointed blocks keep (as an input).
	Mask float64
	// ExpertsBackward is, per token, what an MoE block's backward holds at
	// its peak beyond the block's saved tensors, less the final norm's
	// saved tensors, which are freed before it (hfMoEBackward; 0 for a dense
	// model).
	ExpertsBackward float64
	// FirstUnsaved is, without checkpointing, what the first block saves
	// less than Layer, per token, when LoRA adapts no module upstream of its
	// MLP (hfFirstBlockKept); FirstUnsavedScores says its eager scores
	// (Scores) are not saved either.
	FirstUnsaved       float64
	FirstUnsavedScores bool
	// FirstPass and FirstPassScores are, under checkpointing, what one
	// block's first forward (which saves nothing) holds at its peak beyond
	// the blocks' inputs, per token and per token per unit of sequence
	// length; zero where the recomputation's backward is the larger.
	FirstPass, FirstPassScores float64
	// FirstMLP is what a parallel block's MLP saves per token, which the
	// first block's does not when its input needs no gradient (frozen
	// embeddings, no checkpointing) and its first matmul has no adapter
	// (hfAdaptsMLPInput): the MLP reads the frozen norm of the embeddings'
	// output, so no operator in it records a backward.
	FirstMLP float64
	// Full, with FullLayers of them, is the saved tensors of the
	// full-attention layers where they differ from the sliding ones this
	// hfSaved describes: past the window, fp32 grouped heads run SDPA's
	// math kernel there (sdpaWindowedGap); nil otherwise.
	Full       *hfSaved
	FullLayers float64
}

// hfWithFullLayers adds to hs, a windowed model's sliding layers, its
// full-attention layers as SDPA's math kernel runs them, where
// sdpaWindowedGap holds.
func hfWithFullLayers(r Request, hs hfSaved) hfSaved {
	if !sdpaWindowedGap(r) {
		return hs
	}
	n, _ := attentionKinds(r.Model)
	f := r
	f.Attn = SDPAMath
	full := hfLayerSaved(f)
	hs.Full, hs.FullLayers = &full, float64(n)
	return hs
}

// hfExactTypes are the model types whose decoder layer hfLayerSaved spells
// out: Llama-style RMSNorm (fp32 upcast inside the norm) and Gemma's
// (1 + weight) RMSNorm, Gemma 2's sandwich norms and soft-capped eager
// scores, Qwen3's per-head q/k norms (Gemma 3's text model: Gemma 2's norms
// with Qwen3's q/k norms), OLMo 2's post-norms and full-width q/k norms,
// Phi-3's fused qkv_proj, Granite's (Llama's layer with scalar multipliers,
// which save nothing), rotary attention with grouped key/value heads,
// StableLM's LayerNorm and partial rotary, a gated MLP, GPT-NeoX's, Phi's and
// Falcon 7B's parallel blocks (Falcon's multi-query attention always
// masked), SmolLM3's (Llama's layer; its NoPE layers skip rotary, which
// saves only cos and sin), and GPT-2's and GPT-BigCode's sequential blocks with a two-matmul
// MLP and dropouts. Others keep the fitted per-layer shape until their layer
// code is read the same way.
var hfExactTypes = map[string]bool{"llama": true, "mistral": true, "qwen2": true, "gemma": true, "qwen3": true, "gemma2": true, "phi3": true, "granite": true, "olmo2": true, "stablelm": true, "gpt_neox": true, "phi": true, "falcon": true, "gpt_bigcode": true, "gpt2": true, "gemma3_text": true, "smollm3": true}

// hfClassicMLPTypes are the model types whose sequential block (ln_1,
// attention, ln_2, MLP, LayerNorms) has a two-matmul MLP: GPTBigCodeMLP (c_fc,
// gelu_pytorch_tanh, c_proj) and GPT2MLP (Conv1D c_fc, gelu_new, c_proj).
// Their q, k and v are views of c_attn's output, which SDPA's saved q, k
// and v keep whole (as many bytes as the three).
var hfClassicMLPTypes = map[string]bool{"gpt_bigcode": true, "gpt2": true}

// hfQKNormTypes are the model types whose attention normalises q and k with
// an RMSNorm before rotary: per head (Qwen3Attention's q_norm, k_norm;
// Gemma3Attention's, in fp32 with 1 + weight) or
// over the whole projection (Olmo2Attention's); the bytes are the same.
var hfQKNormTypes = map[string]bool{"qwen3": true, "olmo2": true, "gemma3_text": true, "qwen3_moe": true, "olmoe": true}

// hfLayerNormTypes are the model types with nn.LayerNorm (StableLM) in place
// of an RMSNorm; StableLM's partial rotary concatenates the rotated and
// passed parts into a new q and k, which SDPA saves as Llama's are.
var hfLayerNormTypes = map[string]bool{"stablelm": true, "gpt_neox": true, "phi": true, "falcon": true, "gpt_bigcode": true, "gpt2": true}

// hfParallelTypes are the model types whose attention and MLP read the same
// block input, with a two-matmul MLP and partial rotary (a concatenated q
// and k): GPT-NeoX (use_parallel_residual, the default and Pythia's) through
// a LayerNorm each, with an exact GELU (F.gelu saves its input only) and a
// fused query_key_value whose output q, k and v are chunks of; Phi through
// one LayerNorm whose output both read, with gelu_new (NewGELUActivation in
// Python ops: pow saves its input, tanh its output, and the final multiply
// 0.5·x and 1 + tanh: four tensors of the MLP width); Falcon (7B's layout:
// parallel_attn, one input_layernorm whose output both read) with an exact
// GELU (FalconMLP's get_activation("gelu")) like GPT-NeoX's.
var hfParallelTypes = map[string]bool{"gpt_neox": true, "phi": true, "falcon": true}

// hfFusedQKVTypes are the model types whose attention projects q, k and v
// with one qkv_proj and slices views of its output (Phi3Attention): the
// attention saves the value view, which keeps the whole output alive.
var hfFusedQKVTypes = map[string]bool{"phi3": true}

// hfHeadsFirstQ reports whether the model's attention builds q as a new
// tensor in heads-first layout: GPT-NeoX's, Phi's and StableLM's partial
// rotary concatenates the rotated and passed parts (torch.cat after the
// transpose), and Phi-3's rotary reads a slice of the fused qkv_proj
// output, where Llama's keeps the projection's token-major strides. SDPA's
// flash kernel then returns a heads-first output, and the attention's
// reshape(...).contiguous() copies it for the output projection (the
// oracle: 2 B per hidden unit a layer, on full fine-tunes of StableLM and
// Phi-3 and on autocast QLoRA). The memory-efficient kernel, under a mask
// (Phi-3's window) or in fp32, and Falcon's masked SDPA return a view: this
// reads the mask only; the callers leave out fp32 attention (A != 4, or
// autocast's bf16 SDPA inputs).
func hfHeadsFirstQ(r Request) bool {
	switch r.Model.ModelType {
	case "gpt_neox", "phi", "stablelm", "phi3":
		return !hfSlidingMasked(r)
	}
	return false
}

// hfExact reports whether the request runs a code path the oracle imitates
// and hfLayerSaved spells out: transformers' modelling code with PEFT LoRA,
// QLoRA or full fine-tuning, in one dtype or under the autocast runs the
// oracle holds it to (hfAutocastLoRA, hfAutocastFull, hfAutocastQLoRA), a
// dense model of a type in hfExactTypes, or a mixture of experts of a type
// in hfMoETypes (hfmoe.go; under autocast LoRA only).
// Other requests keep the fitted activation coefficients.
func hfExact(r Request) bool {
	if r.Stack != "" && !r.Stack.Spec().TransformersLayers {
		return false
	}
	if r.Method != Full && r.Method != LoRA && !hfQLoRA(r) {
		return false
	}
	if r.GradCkpt.Spec().OpPolicy {
		// transformers checkpoints whole layers; a per-op policy keeps
		// other tensors than the spelled-out layer's (selectiveac.go).
		return false
	}
	if r.Precision.mixed() && !hfAutocastLoRA(r) && !hfAutocastFull(r) && !hfAutocastQLoRA(r) {
		return false
	}
	m := r.Model
	known := hfMoETypes[m.ModelType] || hfExactTypes[m.ModelType] && m.Experts == 0
	if !known || (m.MLP != hfconfig.MLPGated && !hfParallelTypes[m.ModelType] && !hfClassicMLPTypes[m.ModelType]) {
		return false
	}
	if r.Method == LoRA && hfAdaptsRoutedExperts(r) {
		return false
	}
	if m.ModelType == "gpt_oss" && (r.Method != LoRA || r.Attn != Eager) {
		// transformers runs GPT-OSS with eager attention only; its trained
		// experts (biases indexed per token) are not read yet.
		return false
	}
	if r.Precision.mixed() && m.Experts > 0 && !hfAutocastLoRA(r) {
		// A MoE full fine-tune (or QLoRA) under autocast hands the experts'
		// grouped_mm fp32 tokens and weights, which the oracle's grid does
		// not hold against CUDA: the fitted shape applies. LoRA on a bf16
		// base keeps experts and tokens bf16, and its grid rows (five MoE
		// members, checkpointing none/full) are read exactly.
		return false
	}
	if m.ModelType == "falcon" && !hfFalcon7BLayout(m) {
		return false
	}
	if r.Attn != SDPA && r.Attn != Eager && r.Attn != SDPAMath {
		// The flash-attn package's path (transformers' _flash_attention_forward)
		// keeps the fitted shape: the oracle imitates it, but spelling it out
		// moves development rows of an older transformers (see
		// docs/memory-model.md) and with them the fit.
		return false
	}
	return true
}

// hfAutocastLoRA reports whether the request is the oracle's bf16-mixed
// LoRA: a bf16 base (frozen, 2 bytes, as the emitted plans load it), fp32
// adapters, the forward under torch.autocast("cuda", bfloat16). Autocast
// leaves the base's bf16 matmuls as they are; what changes against
// bf16-true is where an operator on autocast's lists meets a tensor of
// another dtype: PEFT's fp32 copy of an adapted module's input goes into
// lora_A's matmul, which casts it back to bf16 (hfAdapterSaved);
// nn.LayerNorm and the pow in gelu_new run in fp32 (hfLayerSaved).
func hfAutocastLoRA(r Request) bool {
	return r.Precision == BF16Mixed && r.Method == LoRA && frozenBaseBytes(r) == 2 && adapterDtypeBytes(r) == 4 && hfAutocastSharding(r)
}

// hfAutocastSharding reports whether each GPU runs the oracle's autocast
// step: one GPU or DDP replicas. FSDP's mixed precision gathers 16-bit
// parameters, and DeepSpeed's bf16 trains 16-bit weights beside an fp32
// master copy, neither of them autocast over fp32 modules.
func hfAutocastSharding(r Request) bool {
	s := r.Sharding.Strategy
	return s == "" || s == NoSharding || s == DDP
}

// hfAutocastFull reports whether the request is a full fine-tune of fp32
// weights under bf16 autocast, as HF Trainer runs bf16-mixed: the
// embeddings, residual stream and norms in fp32, every matmul's inputs
// cast to bf16 per call (a weight's cast cached for the autocast region:
// the AutocastCache term), SDPA fed bf16 q, k and v.
func hfAutocastFull(r Request) bool {
	return r.Precision == BF16Mixed && r.Method == Full && r.paramBytes() == 4 && hfAutocastSharding(r)
}

// hfLinearReaders is how many Linears read the attention's pre-norm
// output and the MLP's (or the residual stream, OLMo 2): q, k and v and
// gate and up, or one fused projection each (Phi-3's qkv_proj and
// gate_up_proj, GPT-2's and GPT-BigCode's c_attn and c_fc, GPT-NeoX's and
// Falcon's query_key_value and dense_h_to_4h); Phi's q, k, v and fc1.
func hfLinearReaders(modelType string) (attn, mlp float64) {
	switch {
	case hfFusedQKVTypes[modelType] || hfClassicMLPTypes[modelType] || modelType == "gpt_neox" || modelType == "falcon":
		return 1, 1
	case modelType == "phi":
		return 3, 1
	}
	return 3, 2
}

// hfAdaptsMLPInput reports whether a LoRA request adapts the MLP's first
// matmul (Phi's fc1, GPT-NeoX's and Falcon's dense_h_to_4h: an MLP Linear
// reading the hidden state). Its adapter makes the matmul's output require
// grad even in the first block, whose input does not: the activation there
// records its backward and saves its input, as in every other block (the
// oracle: Pythia-1b with all-linear targets and no checkpointing peaks at
// the full count of every block's MLP).
func hfAdaptsMLPInput(r Request) bool {
	if r.Method == Full {
		return false
	}
	lins, err := r.Model.Targets(r.LoRATargets)
	if err != nil {
		return false
	}
	for _, l := range lins {
		if l.Role == hfconfig.RoleMLP && l.In == r.Model.Hidden {
			return true
		}
	}
	return false
}

// hfFalcon7BLayout reports whether a Falcon model has the layer hfLayerSaved
// spells out: multi-query attention (one key/value head, which _split_heads
// indexes out of the fused output as copies) and parallel attention through
// one LayerNorm, rotary positions. new_decoder_architecture (40B, 180B:
// ln_attn and ln_mlp, grouped key/value heads broadcast to every query
// head) and the ALiBi layouts are not read on the transformers path
// (LitGPT's Falcon-40B block is: falconNewDecoderLayout).
func hfFalcon7BLayout(m *hfconfig.Model) bool {
	f := m.Falcon
	return f != nil && !f.NewDecoder && f.Parallel && !f.Alibi && m.KVHeads == 1
}

// falconNewDecoderLayout reports whether a Falcon model has
// new_decoder_architecture's layer as Falcon-40B's config lays it out: two
// LayerNorms, ln_attn and ln_mlp, read by the attention and the MLP in
// parallel, grouped key/value heads, rotary positions (no ALiBi). LitGPT
// builds it as its falcon-40b config does: norm_1 and norm_2
// (shared_attention_norm off), n_query_groups key/value groups,
// parallel_residual, GptNeoxMLP, no bias. Falcon2-11B (one norm for both,
// num_ln_in_parallel_attn 1), a sequential block and ALiBi are not read.
func falconNewDecoderLayout(m *hfconfig.Model) bool {
	f := m.Falcon
	return m.ModelType == "falcon" && f != nil && f.NewDecoder && f.Parallel && !f.Alibi && f.ParallelNorms == 2 &&
		m.KVHeads > 1 && m.KVHeads < m.Heads
}

// hfWindowed reports whether the model's sliding window is shorter than the
// sequence: transformers then builds a mask, and SDPA leaves the flash kernel
// for the memory-efficient one, which saves the mask.
func hfWindowed(r Request) bool {
	w := r.Model.SlidingWindow
	return w > 0 && int64(r.SeqLen) > w
}

// hfLayerSaved spells out the saved tensors of one transformers decoder
// layer (LlamaDecoderLayer and the layers modelled on it), per token:
//
//   - each RMSNorm upcasts its input to fp32 and saves it (pow and mul both
//     read it): 4·h. A trained norm weight also saves the normalised input:
//     Llama casts it back to the activation dtype before the weight multiply
//     (act·h), Gemma multiplies in fp32 by (1 + weight) (4·h), and a trained
//     q/k/v (or gate/up) saves the norm's output (act·h).
//   - SDPA/flash saves q after rotary, k after rotary, v, its output and an
//     fp32 logsumexp per head; eager attention saves q, k and v after
//     repeat_kv (a copy per query head when key/value heads are grouped), the
//     fp32 softmax and its cast to the activation dtype (softmax(...,
//     dtype=float32).to(query.dtype)), and a trained o_proj the contiguous
//     attention output.
//   - the gated MLP saves gate and up (silu/gelu and the product read them)
//     and the activation's output; a trained down_proj also saves the
//     product: 3·act·f, +act·f.
//   - a LoRA adapter on a module casts the module's input to its own dtype
//     (PEFT's Linear.forward: x = self._cast_input_dtype(x, lora_A.dtype)),
//     one copy per adapted module even when modules share an input, which
//     lora_A saves; a dropout keeps its mask and output instead; lora_B
//     saves lora_A's output (rank elements).
//   - a frozen Linear saves no input (the matmul saves its input only for
//     the weight's gradient); rotary's multiplies save only cos and sin.
func hfLayerSaved(r Request) hfSaved {
	m := r.Model
	A := float64(residualBytes(r))
	// R is the residual stream's dtype (block inputs, norm inputs, the
	// eager mask); A the matmul outputs' and what reads them. They differ
	// only in a full fine-tune of fp32 weights under autocast, where the
	// embeddings, residual adds and norms run in fp32 and every matmul
	// returns bf16.
	R := A
	full := r.Method == Full
	mixedFull := full && r.Precision.mixed()
	if mixedFull {
		A = float64(r.Precision.Spec().ComputeBytes)
	}
	h := float64(m.Hidden)
	hd := float64(m.HeadDim)
	if hd == 0 {
		hd = h / float64(m.Heads)
	}
	heads := float64(m.Heads)
	hq, hkv := heads*hd, float64(m.KVHeads)*hd
	if m.KVHeads == 0 {
		hkv = hq
	}
	f := float64(m.ActiveFFN())
	// Gemma's norms (Gemma 3's too) and OLMo 2's multiply by the weight in
	// fp32, before the cast back; Llama's after it.
	fp32Weight := m.ModelType == "gemma" || m.ModelType == "gemma2" || m.ModelType == "olmo2" || m.ModelType == "gemma3_text"
	// OLMo 2 normalises after attention and after the MLP only (no norm
	// before them): q/k/v and gate/up read the residual stream itself.
	postNormOnly := m.ModelType == "olmo2"

	autocast := r.Precision.mixed() // hfAutocastLoRA, hfAutocastFull or hfAutocastQLoRA
	// gelu_new (GPT-2's and Phi's NewGELUActivation in Python ops) saves
	// four tensors of the MLP width: pow's input, tanh's output, 0.5·x and
	// 1 + tanh, all in the activation dtype; under autocast pow (fp32
	// list) casts its input to fp32 and what follows it promotes to fp32,
	// so only 0.5·x stays 16-bit.
	geluNew := 4 * A * f
	if autocast {
		geluNew = (4 + 4 + A + 4) * f
	}
	norm := 4 * h // the fp32 input (pow, mul)
	layerNorm := hfLayerNormTypes[m.ModelType]
	if layerNorm {
		// nn.LayerNorm's fused kernel saves its input in the activation
		// dtype (and per-row fp32 mean and rstd, left out), and computes
		// the weight's gradient from them: no normalised copy.
		norm = A * h
		if autocast {
			// layer_norm is on autocast's fp32 list: it saves the fp32
			// cast of its input.
			norm = 4 * h
		}
	}
	// A sandwich norm (Gemma 2's post_attention_layernorm and
	// post_feedforward_layernorm, OLMo 2's only norms) feeds the residual
	// add, not a Linear: no trained module saves its output.
	sandwich := 4 * h
	// casts is, under autocast with trained weights, the bf16 casts of the
	// pre-norms' outputs (or the residual) that the trained Linears save:
	// autocast casts a non-leaf per call, so q, k and v each keep one.
	casts, finalCast := 0.0, 0.0
	if full {
		switch {
		case mixedFull:
			if !layerNorm {
				// the fp32 normalised output, for the weight's gradient
				// (the input dtype is fp32: no cast back)
				norm += 4 * h
			}
			if fp32Weight {
				sandwich += 4 * h
			} else {
				sandwich += A * h
			}
			attnIn, mlpIn := hfLinearReaders(m.ModelType)
			casts = A * h * (attnIn + mlpIn)
			finalCast = A * h // the output layer's input
		case layerNorm:
			norm += A * h // the trained q/k/v or gate/up's input
		case fp32Weight:
			norm += 4*h + A*h
			sandwich += 4 * h
		default:
			norm += 2 * A * h
			sandwich += A * h
		}
	}
	// pre is what the two pre-norms (or, without them, the trained
	// projections reading the residual stream) save.
	pre := 2*norm + casts
	switch {
	case postNormOnly:
		sandwich *= 2
		pre = 0
		if full {
			pre = 2 * A * h
		}
		if mixedFull {
			pre = casts
		}
	case m.ModelType == "gemma2" || m.ModelType == "gemma3_text":
		sandwich *= 2 // beside the two pre-norms
	default:
		sandwich = 0
	}
	parallel := hfParallelTypes[m.ModelType]
	phi := m.ModelType == "phi"
	falcon := m.ModelType == "falcon"
	if parallel {
		// The LayerNorms save the one block input; trained, the projections
		// save their norm's output (Phi: one, read by q/k/v and fc1).
		sandwich = 0
		pre = A * h
		if full {
			pre += 2 * A * h
			if phi || falcon {
				pre -= A * h
			}
		}
		if autocast {
			// layer_norm runs in fp32: on a full fine-tune's fp32 block
			// input it saves that input once, beside the trained
			// projections' casts of its output; on a bf16 base each
			// LayerNorm saves its own fp32 cast of the input (GPT-NeoX's
			// two).
			pre = 4*h + casts
			if !full && m.ModelType == "gpt_neox" && R == 2 {
				pre = 8 * h
			}
		}
	}
	// The MLP: gated saves gate, up and the activation's output, and a
	// trained down_proj their product; the two-matmul one saves the first
	// matmul's output (GELU's input), and a trained second matmul the GELU's
	// output.
	gated := func(f float64) float64 {
		if full {
			return 4 * A * f
		}
		return 3 * A * f
	}
	mlp := gated(f)
	if m.Experts > 0 {
		mlp = hfMLPSaved(r, A, gated)
	}
	if hfClassicMLPTypes[m.ModelType] {
		mlp = A * f // F.gelu(approximate="tanh") saves its input only
		if m.ModelType == "gpt2" {
			mlp = geluNew // as Phi's
		}
		if full {
			mlp += A * f
		}
		if m.ResidDropout > 0 {
			// resid_dropout after c_proj in the attention and dropout
			// after the MLP's c_proj: a bool mask each, both freed before
			// the attention's backward.
			mlp += 2 * h
		}
	}
	if parallel {
		mlp = A * f
		if phi {
			mlp = geluNew
		}
		if full {
			mlp += A * f
		}
		if m.ResidDropout > 0 {
			// resid_dropout on the attention's and the MLP's outputs:
			// CUDA's fused dropout keeps a bool mask each.
			mlp += h
			pre += h
		}
	}
	var s hfSaved
	if parallel && !full && !hfAdaptsMLPInput(r) {
		s.FirstMLP = mlp
	}
	if full || ckptOn(r) {
		// Without checkpointing, under LoRA, the oracle shows the final
		// norm keeping nothing for the backward (no fp32 input, no rsqrt;
		// the cause is not traced yet); trained, or after checkpointed
		// blocks, it keeps its tensors like the layers' norms.
		s.Final = norm + finalCast
	}
	s.BlockInput = R * h
	layer := pre + sandwich + mlp
	mla := hfMLAShape(m)
	if mla != nil {
		layer += mla.norms(A, full)
	}
	if (hfFusedQKVTypes[m.ModelType] || m.ModelType == "gpt_neox") && (!autocast || A == float64(r.Precision.Spec().ComputeBytes)) {
		// The q and k parts of the storage v lives in. Where autocast
		// casts the fused output for SDPA (an fp32 QLoRA stream), SDPA
		// saves its cast of v instead, a tensor of its own.
		layer += A * (hq + hkv)
	}
	if hfQKNormTypes[m.ModelType] {
		// q_norm and k_norm upcast q and k to fp32 and save that copy; a
		// trained weight also saves the normalised product cast back. Their
		// outputs go to rotary, whose multiplies save only cos and sin.
		qk := hq + hkv
		layer += 4 * qk
		if full && fp32Weight {
			layer += 4 * qk
		} else if full {
			layer += A * qk
		}
	}
	// sd is the dtype the attention's matmuls run in: the activations', or
	// under autocast its compute dtype (SDPA and matmul are on autocast's
	// lower-precision list: over a QLoRA base's fp32 stream they save bf16
	// casts of q, k and v).
	sd := A
	if autocast {
		sd = float64(r.Precision.Spec().ComputeBytes)
	}
	if r.Attn.Spec().KeepsScores() {
		kv := hkv
		if hkv < hq {
			// repeat_kv copies key and value per query head; Falcon's
			// query @ key and probs @ value broadcast the one key/value
			// head, and torch.matmul expands and reshapes it into a copy
			// per query head, which bmm saves.
			kv = hq
		}
		layer += sd * (hq + 2*kv)
		if full {
			layer += A * hq // transpose(1, 2).contiguous() for o_proj
		}
		if mla != nil {
			layer += mla.eager(A, full) - sd*(hq+2*kv) - A*hq*b2f(full)
		}
		// The probabilities' chain, from the softmax to the value matmul
		// (scoreChain): transformers' eager_attention_forward takes the
		// softmax in fp32 and casts it to the query dtype; with attention
		// dropout (attn_pdrop) on the classic-MLP types, CUDA's fused
		// dropout keeps a bool mask between the two.
		ch := scoreChain{Softmax: 4, Cast: A, Matmul: sd, Dropout: hfClassicMLPTypes[m.ModelType] && m.AttnDropout > 0}
		switch {
		case r.Attn == SDPAMath:
			// transformers' sdpa_attention_forward on SDPA's math kernel:
			// q and k scaled (copies), key and value repeated per query
			// head as above, and the softmax in the activation dtype,
			// whose output the value matmul saves; with attention
			// dropout, at::dropout's bool mask and its output besides. First:
			// the kernel runs below autocast, whatever the model's code.
			ch = scoreChain{Softmax: A, Cast: A, Matmul: A, Dropout: m.AttnDropout > 0}
		case falcon:
			// FalconAttention: F.softmax(..., dtype=hidden_states.dtype)
			// saves its output in the activation dtype, which the value
			// matmul reads.
			ch = scoreChain{Softmax: A, Cast: A, Matmul: A}
		case m.ModelType == "gpt_oss":
			// GPT-OSS's eager_attention_forward concatenates each head's
			// sink logit to the scores and takes the softmax in the
			// activation dtype, which the value matmul reads through a
			// slice: one s × (s + 1) tensor a head, and the max subtracted
			// before it keeps its int64 indices.
			ch = scoreChain{Softmax: A, Cast: A, Matmul: A}
			layer += heads * (A + 8)
		case m.ModelType == "gpt2":
			// GPT-2's eager_attention_forward: a softmax without a dtype,
			// in the activation dtype (fp32 under autocast, whose fp32
			// list holds softmax), cast to the value dtype; attn_dropout
			// then keeps a bool mask, and the value matmul saves the
			// dropped-out copy (its bf16 cast under autocast over an fp32
			// stream).
			ch = scoreChain{Softmax: A, Cast: A, Matmul: sd, Dropout: m.AttnDropout > 0}
			if autocast {
				ch.Softmax = 4
			}
		}
		capped := 0.0
		if m.AttnSoftcap > 0 && r.Attn != SDPAMath { // SDPA has no soft-capping
			// tanh(scores/cap) keeps its output for the backward, in the
			// dtype of the scores' matmul
			capped = sd
		}
		s.Scores = heads * (ch.saved() + capped)
		s.ScoresBackward = heads * (ch.backwardPeak() - ch.saved())
		if ckptOn(r) && falcon && r.Attn == Eager {
			// FalconDecoderLayer returns its attention probabilities
			// (attn_weights), and FalconModel's loop keeps the returned
			// tuple (outputs) until the next block returns: through a
			// block's first forward, which saves nothing, the previous
			// block's probabilities stay alive beside the softmax's own
			// scores (query @ key, scaled in place), their sum with the
			// mask and its output; with them the norm's output (read by
			// the MLP after the attention), q and k after rotary and v.
			s.FirstPass = A*h + A*hq + 2*A*hkv
			s.FirstPassScores = heads * 4 * A
		}
		if ckptOn(r) && (r.Attn != SDPAMath || falcon || hfSlidingMasked(r)) {
			// Eager attention gets transformers' 4-D mask, built in the
			// model's dtype and kept as every checkpointed block's input;
			// SDPA (its math kernel included) gets none unless it is masked
			// (a window; Falcon always), and the math kernel's own causal
			// mask lives for one call.
			s.Mask = R // built in the model's dtype
			if hfWindowed(r) && (m.ModelType == "gemma2" || m.ModelType == "gpt_oss") {
				// Gemma 2 and GPT-OSS alternate sliding and full
				// layers: a mask of each kind.
				s.Mask = 2 * R
			}
		}
	} else {
		// FalconModel builds its causal mask with allow_is_causal_skip=False
		// ("Always materialize the mask so alibi can be added onto it"), so
		// its SDPA always gets a mask, as a windowed model's does.
		masked := hfSlidingMasked(r) || falcon
		kv := hkv
		if (sd == 4 || masked) && hkv < hq {
			// No flash kernel for fp32 or under a mask: the
			// memory-efficient one, fed key/value repeated per query head
			// (transformers' repeat_kv when a mask is passed; the oracle
			// does the same for fp32).
			kv = hq
		}
		layer += sd*(hq+2*kv) + sd*hq + 4*heads
		if mla != nil {
			layer += mla.sdpa(sd) - (sd*(hq+2*kv) + sd*hq + 4*heads)
		}
		if masked {
			s.Mask = 1
		}
	}
	// What the layer's backward frees before it reaches the attention: the
	// second norm, the MLP, o_proj's saved input and the adapters past q/k/v.
	post := pre/2 + sandwich + mlp
	if full && hfHeadsFirstQ(r) && !r.Attn.Spec().KeepsScores() && A != 4 {
		// GPT-NeoX's, Phi's and StableLM's q is a new (concatenated)
		// tensor in heads-first layout, and so is the flash kernel's
		// output: reshape(...).contiguous() copies it for the trained
		// output projection.
		layer += A * hq
		post += A * hq
	}
	if full {
		if r.Attn.Spec().KeepsScores() {
			post += A * hq
		}
	}
	if (r.Method == LoRA || r.Method == QLoRA) && r.LoRARank > 0 {
		all := hfAdapterSaved(r, A, nil)
		layer += all
		post += all - hfAdapterSaved(r, A, qkvOnly)
	}
	s.Layer = layer
	s.PostAttn = post
	if r.Method == LoRA && r.LoRARank > 0 && !ckptOn(r) && !r.Precision.mixed() && !parallel && !postNormOnly && !layerNorm && !hfAdaptsAttention(r) {
		s.FirstUnsaved = max(0, layer-mlp+hfFirstMLP(r, A, gated)-hfFirstBlockKept(r, A, norm, gated))
		s.FirstUnsavedScores = true
	}
	if m.Experts > 0 {
		s.ExpertsBackward = max(0, hfMoEBackward(r, A)-s.Final)
	}
	return s
}

// hfAdapterSaved is what PEFT's LoRA layers of one decoder layer save, per
// token: each adapted module's cast (or dropped-out) input and lora_A's
// output. keep selects the modules counted (nil: all).
func hfAdapterSaved(r Request, act float64, keep func(name string) bool) float64 {
	per, rankBytes := adapterInputBytes(r, act)
	autocastQ := hfAutocastQLoRA(r)
	m := r.Model
	sums, err := adapterTargets(m, r.LoRATargets)
	if err != nil {
		return 0
	}
	var in, modules, outIn int64
	var kept []targetSum
	for _, t := range sums {
		if keep == nil || keep(t.name) {
			in += t.in
			modules += t.copies
			outIn += t.outIn
			kept = append(kept, t)
		}
	}
	saved := per*float64(in) + rankBytes*float64(r.LoRARank*modules)
	if autocastQ && !r.Attn.Spec().KeepsScores() && !hfHeadsFirstQ(r) && (r.LoRADropout == nil || *r.LoRADropout == 0) {
		// PEFT's bnb Linear4bit makes no fp32 copy under autocast, so the
		// attention output projection's lora_A reads SDPA's bf16 output
		// (a view, saved by SDPA): its autocast cast is that tensor (a
		// heads-first output's copy is a new tensor, hfHeadsFirstQ).
		saved -= per * float64(outIn)
	}
	if per == 0 && len(kept) > 0 {
		// Adapters in the activations' dtype read the module's own input,
		// which a frozen module does not save but lora_A does: once per
		// distinct tensor (q, k and v read one). Summed over the modules
		// the targets select (GPT-2's attn.c_proj, not mlp.c_proj).
		distinct := in
		for _, g := range hfconfig.SharedInputs {
			var sum, most int64
			for _, t := range kept {
				if slices.Contains(g, t.name) {
					sum += t.in
					most = max(most, t.in)
				}
			}
			distinct -= sum - most
		}
		if !r.Attn.Spec().KeepsScores() {
			// SDPA saves its output, which is the attention's output
			// projection's input (a view): lora_A keeps no tensor of its
			// own there. (An fp32 model runs the memory-efficient kernel,
			// whose output reshapes to o_proj's, GPT-NeoX's dense or
			// GPT-2's c_proj input without a copy.)
			distinct -= outIn
		}
		saved += act * float64(distinct)
	}
	return saved / float64(m.NumLayers)
}

// adapterInputBytes is what one PEFT LoRA adapter saves per element of its
// module's input (per) and of lora_A's output (rankBytes), for activations
// of act bytes: a cast copy of the input in the adapter dtype (none where
// the dtypes agree: lora_A then saves the module's own input, per 0), or
// dropout's output and bool mask; under autocast lora_A's F.linear casts its
// input (PEFT's fp32 copy, dropout's fp32 output, or with PEFT's bnb layer
// the fp32 input itself) to bf16 and saves that cast, and lora_B saves
// lora_A's bf16 output.
func adapterInputBytes(r Request, act float64) (per, rankBytes float64) {
	ad := float64(adapterDtypeBytes(r))
	dropout := r.LoRADropout != nil && *r.LoRADropout > 0
	switch {
	case hfAutocastLoRA(r) || hfAutocastQLoRA(r):
		per, rankBytes = 2, 2
		if dropout {
			per = 2 + 1
		}
	case dropout:
		per, rankBytes = ad+1, ad
	case ad != act:
		per, rankBytes = ad, ad
	default:
		rankBytes = ad
	}
	return per, rankBytes
}

// hfAdaptsAttention reports whether a LoRA request adapts a module of the
// attention (or any module outside the feed-forward).
func hfAdaptsAttention(r Request) bool {
	lins, err := r.Model.Targets(r.LoRATargets)
	if err != nil {
		return true
	}
	for _, l := range lins {
		switch l.Role {
		case hfconfig.RoleMLP, hfconfig.RoleSharedExpert, hfconfig.RoleRouter:
		default:
			return true
		}
	}
	return false
}

// hfFirstBlockKept is, per token, what the first block saves when LoRA
// adapts only its feed-forward (a Llama-layout pre-norm block without
// checkpointing), as the oracle shows it: autograd saves a tensor only for
// a gradient something needs, and up to the first adapter nothing needs
// one (the embedding and every module before it are frozen). So the input
// norm, the attention, the second norm, the router and the routed experts
// (frozen, fed a hidden state that needs no gradient) save nothing; the
// adapted MLP (a dense block's gate, up and their product's operands, or
// an MoE block's shared expert and its gate) and the adapters themselves
// save as in any block. norm stands for the final norm, which Layer's
// first norm counts in its place (Final is 0 here). The adapters counted
// are the layers' average (hfAdapterSaved), which for DeepSeek's dense
// first blocks is a little under their own.
func hfFirstBlockKept(r Request, A, norm float64, gated func(f float64) float64) float64 {
	m := r.Model
	kept := norm + hfAdapterSaved(r, A, nil)
	if len(m.Layers) == 0 || !m.Layers[0].MoE {
		return kept + hfFirstMLP(r, A, gated)
	}
	sh := moeShape(m, m.Layers[0])
	if sh.Shared > 0 {
		kept += 3 * A * float64(sh.Shared)
		if sh.SharedGate {
			kept += A*float64(m.Hidden) + A
		}
	}
	return kept
}

// hfFirstMLP is what the first block's feed-forward saves as any block's
// does (Layer counts the average block's, hfMLPSaved).
func hfFirstMLP(r Request, A float64, gated func(f float64) float64) float64 {
	m := r.Model
	if len(m.Layers) == 0 {
		return gated(float64(m.ActiveFFN()))
	}
	if l := m.Layers[0]; l.MoE {
		return hfMoELayerSaved(r, moeShape(m, l), A)
	}
	return gated(float64(m.Layers[0].FFNActive))
}

// attnOutNames are the attention output projections whose input is the
// attention kernel's output (LlamaAttention's o_proj, GPT-NeoX's and Phi's
// dense, GPT-2's and GPT-BigCode's attn.c_proj).
var attnOutNames = []string{"o_proj", "dense", "c_proj"}

// qkvOnly selects the attention's input projections, whose adapters' saved
// tensors live until the attention's own backward.
func qkvOnly(name string) bool {
	return name == "qkv_proj" || name == "query_key_value" || slices.Contains(hfconfig.QKV, name)
}

// hfLogitBytes is what transformers' stock loss (ForCausalLMLoss: logits
// upcast to fp32, cross_entropy) holds per logit at its peak, the start of
// the backward: the fp32 log-softmax cross_entropy saves (4 B), nll_loss's
// fp32 gradient (4 B) and log-softmax's fp32 gradient (4 B). The 16-bit
// logits and their fp32 copy are saved by nothing and die with the forward
// (the Trainer drops the model outputs before the backward).
const hfLogitBytes = 12

// hfForwardLogitBytes is what the stock loss holds per logit inside the
// forward, when cross_entropy has run: the 16-bit logits (2 B), their fp32
// upcast (4 B) and the log-softmax (4 B). Under bf16-mixed the Trainer's
// forward returns through accelerate's convert_to_fp32, which makes an
// fp32 copy of the logits once the fp32 upcast is gone: 10 B again.
const hfForwardLogitBytes = 10

// hfActivations is, for hfExact requests, what the forward keeps for the
// backward (acts) and the transient that competes with the loss chain
// (recompute): under checkpointing, one block recomputed with its saved
// tensors and its backward transient; without, an eager layer's softmax
// backward, which runs once the loss chain is freed. kernelSaved is what one
// layer's fused kernels (or torch.compile) do not save of the eager
// tensors counted here, in bytes (kernelSavingPerLayer; the oracle runs the
// eager modules only).
func hfActivations(r Request, hs hfSaved, kernelSaved float64) (acts, transient float64) {
	if hs.Full != nil {
		// Sliding and full-attention layers: each full layer's saved
		// tensors in place of a sliding one's, and the larger of the two
		// kinds' transients (one layer at a time).
		sliding := hs
		sliding.Full = nil
		acts, transient = hfActivations(r, sliding, kernelSaved)
		_, fullTransient := hfActivations(r, *hs.Full, kernelSaved)
		if !ckptOn(r) {
			s := float64(r.SeqLen)
			tokens := s * float64(r.Batch)
			acts += hs.FullLayers * tokens * (hs.Full.Layer + hs.Full.Scores*s - hs.Layer - hs.Scores*s)
			if ls := r.Model.Layers; len(ls) > 0 && ls[0].Attention == "full" {
				// The first block, whose unsaved part the sliding kind's
				// terms described, is a full one.
				acts += tokens * (hfFirstUnsaved(sliding, s) - hfFirstUnsaved(*hs.Full, s) + sliding.FirstMLP - hs.Full.FirstMLP)
			}
		}
		return acts, max(transient, fullTransient)
	}
	s := float64(r.SeqLen)
	tokens := s * float64(r.Batch)
	L := float64(r.Model.NumLayers)
	layer := hs.Layer + hs.Scores*s
	kernelSaved = min(kernelSaved, tokens*hs.Layer/2)
	if ckptOn(r) {
		blocks := L
		if r.GradCkpt.Spec().OffloadsInputs {
			blocks = 1 // the others' inputs wait in host RAM
		}
		acts = tokens * (blocks*hs.BlockInput + hs.Final + hs.Mask*s)
		return acts, tokens*(layer+max(0, hs.ScoresBackward*s-hs.PostAttn, hs.ExpertsBackward)) - kernelSaved + hfAdapterCasts(r)/L
	}
	first := hfFirstUnsaved(hs, s)
	return tokens*(L*layer-first+hs.Final+hs.Mask*s-hs.FirstMLP) - L*kernelSaved + hfAdapterCasts(r), tokens * max(0, hs.ScoresBackward*s-hs.PostAttn, hs.ExpertsBackward)
}

// hfFirstUnsaved is what the first block saves less than hs's layer, per
// token, at sequence length s (hfSaved.FirstUnsaved, with its scores).
func hfFirstUnsaved(hs hfSaved, s float64) float64 {
	return hs.FirstUnsaved + hs.Scores*s*b2f(hs.FirstUnsavedScores)
}

// hfSoftmaxBackwardExtra is what a layer's softmax backward adds, under
// checkpointing, beyond the recomputed layer's saved tensors
// (hfActivations' transient), in bytes: 0 where the tensors freed before
// the attention's backward cover it.
func hfSoftmaxBackwardExtra(r Request, hs hfSaved) float64 {
	s := float64(r.SeqLen)
	x := s * float64(r.Batch) * max(0, hs.ScoresBackward*s-hs.PostAttn)
	if hs.Full != nil {
		x = max(x, hfSoftmaxBackwardExtra(r, *hs.Full))
	}
	return x
}

// hfAdapterCasts is, under autocast, the bf16 casts of the adapters' fp32
// weights: autocast caches the cast of a leaf that requires grad for the
// whole autocast region, and the adapters' matmuls save them for the
// backward (lora_A's only where its input requires grad, which the first
// layer's q, k and v inputs do not: a few rank × hidden casts, left in).
// Under checkpointing the forward's casts go with the autocast region (the
// blocks save nothing), and the recomputation casts one block's again.
func hfAdapterCasts(r Request) float64 {
	if !hfAutocastLoRA(r) && !hfAutocastQLoRA(r) {
		return 0
	}
	return 2 * float64(adapterParams(r))
}

// hfFirstPass is, under checkpointing, the transient of a block's first
// forward (hfSaved.FirstPass), to set beside the recomputation's.
func hfFirstPass(r Request, hs hfSaved) float64 {
	if !ckptOn(r) {
		return 0
	}
	s := float64(r.SeqLen)
	return s * float64(r.Batch) * (hs.FirstPass + hs.FirstPassScores*s)
}

// hfGradsDuringRecompute is what a full fine-tune's gradients add, beside
// every block's saved input (counted in the activations), when a block is
// recomputed. Recomputing block i, the blocks after it are done: their
// gradients exist and their inputs are freed. Both change by one block per
// step, so the peak is at an end: the last block, with the output layer's
// (or tied embedding's) and the final norm's gradients only, or the first,
// with every gradient but its own and, untied, the input embedding's
// (produced after it) and one block input left of L. Without
// checkpointing the loss chain's peak comes before any gradient.
func hfGradsDuringRecompute(r Request, grads int64, hs hfSaved) float64 {
	m := r.Model
	per := float64(grads) / float64(m.Params())
	head := per * float64(m.Vocab*m.Hidden+m.FinalNormParams)
	block := float64(m.LinearParams()+m.NormParams()-m.FinalNormParams) / float64(m.NumLayers)
	g := float64(grads) - per*block
	if !m.TiedEmbeddings {
		g -= per * float64(m.Vocab*m.Hidden)
	}
	freed := 0.0
	if !r.GradCkpt.Spec().OffloadsInputs {
		freed = float64(m.NumLayers-1) * hs.BlockInput * float64(r.SeqLen) * float64(r.Batch)
	}
	return max(head, g-freed, 0)
}

// targetSum is one LoRA target name's share of a model's adapted Linears:
// the sum of their input widths and how many modules there are.
type targetSum struct {
	name       string
	in, copies int64
	// mlpOutIn is the part of in read by the MLP's output projection (a
	// dense MLP Linear whose input is the feed-forward width: down_proj,
	// fc2, dense_4h_to_h, GPT-2's mlp.c_proj beside its attn.c_proj).
	mlpOutIn int64
	// outIn is the part of in read by the attention's output projection
	// (o_proj, dense, c_proj in the attention), whose input is SDPA's
	// saved output.
	outIn int64
}

// targetSums caches adapterTargets: a plan search asks for the same model's
// targets for every candidate, and listing them walks every layer's
// Linears. Keyed by the model's address and the target list; cleared when
// it grows past targetSumsMax, so a long-running server stays bounded.
var targetSums struct {
	sync.Mutex
	m map[targetKey][]targetSum
}

type targetKey struct {
	model *hfconfig.Model
	spec  string
}

const targetSumsMax = 256

// adapterTargets sums the Linears that LoRA targets adapt, by name, in the
// order the names first appear in the model (hfconfig.Model.Targets).
func adapterTargets(m *hfconfig.Model, spec []string) ([]targetSum, error) {
	k := targetKey{m, strings.Join(spec, "\x00")}
	targetSums.Lock()
	sums, ok := targetSums.m[k]
	targetSums.Unlock()
	if ok {
		return sums, nil
	}
	lins, err := m.Targets(spec)
	if err != nil {
		return nil, err
	}
	for _, l := range lins {
		i := slices.IndexFunc(sums, func(t targetSum) bool { return t.name == l.Name })
		if i < 0 {
			sums = append(sums, targetSum{name: l.Name})
			i = len(sums) - 1
		}
		sums[i].in += l.In * l.Copies
		sums[i].copies += l.Copies
		if l.Role == hfconfig.RoleAttention && slices.Contains(attnOutNames, l.Name) {
			sums[i].outIn += l.In * l.Copies
		}
		if l.Role == hfconfig.RoleMLP && l.In == m.ActiveFFN() {
			sums[i].mlpOutIn += l.In * l.Copies
		}
	}
	targetSums.Lock()
	if targetSums.m == nil || len(targetSums.m) >= targetSumsMax {
		targetSums.m = map[targetKey][]targetSum{}
	}
	targetSums.m[k] = sums
	targetSums.Unlock()
	return sums, nil
}

// sdpaMathFallback reports whether torch's scaled_dot_product_attention
// falls back to its math kernel for a transformers model's attention, as
// measured on an H200 with torch 2.11 (evidence/device/h200-20261204: the
// QLoRA probes of Qwen2.5-1.5B and Llama-3.2-3B held 10.6 and 21.1 GiB
// beyond the memory-efficient kernel's figure, every head's fp32 s²
// softmax output in each layer, and the math kernel's figure is within
// 0.2 % of both). transformers' sdpa_attention_forward passes
// enable_gqa=True, with key and value not repeated, when it gives no mask
// and the head dims are at most 256 (integrations/sdpa_attention.py,
// use_gqa_in_sdpa). With fp32 query, key and value (no autocast and an
// fp32 residual stream: fp32 runs, an fp32 LoRA base, QLoRA after PEFT's
// kbit preparation) the flash kernel is out (16-bit inputs only), and
// torch's memory-efficient kernel refuses query and key/value head counts
// that differ (sdp_utils.cpp, check_batch_size_and_num_heads_dense<false>)
// until PyTorch PR #191085 (July 2026; which release carries it was not
// checked) adds grouped heads to it: the math kernel is what is left. Under a mask (sliding windows, Falcon, padded
// batches) transformers repeats key and value itself and the
// memory-efficient kernel runs.
func sdpaMathFallback(r Request) bool {
	m := r.Model
	if !fp32GroupedSDPA(r) {
		return false
	}
	if m.Seq2Seq != nil || m.Disentangled || m.ModelType == "falcon" || hfSlidingMasked(r) {
		// Masked (hfWindowed; the full-attention layers of a model that
		// alternates them get no mask and run the math kernel:
		// sdpaWindowedGap, hfWithFullLayers).
		return false
	}
	if r.Lengths != nil && r.Batch > 1 {
		// Padded batches carry a mask; one sample per batch has no padding,
		// and transformers drops an all-ones mask.
		return false
	}
	return true
}

// sdpaWindowedGap reports a request whose full-attention layers run SDPA's
// math kernel while its sliding ones, masked, run the memory-efficient
// kernel (hfWithFullLayers counts the two kinds apart).
func sdpaWindowedGap(r Request) bool {
	if !fp32GroupedSDPA(r) || !hfSlidingMasked(r) {
		return false
	}
	// Both kinds: a model whose every layer slides (Mistral 7B v0.1) is
	// masked throughout.
	full, sliding := attentionKinds(r.Model)
	return full > 0 && sliding > 0
}

// fp32GroupedSDPA reports whether transformers' sdpa_attention_forward
// hands SDPA fp32 query, key and value with fewer key/value heads than
// query heads, unrepeated when it gives no mask (enable_gqa; head dims at
// most 256): the requests sdpaMathFallback and sdpaWindowedGap read further.
func fp32GroupedSDPA(r Request) bool {
	m := r.Model
	if r.Attn != SDPA || m == nil || m.KVHeads <= 0 || m.KVHeads >= m.Heads || m.HeadDim > 256 {
		return false
	}
	if r.Stack != "" && !r.Stack.Spec().TransformersLayers {
		return false
	}
	if !hfExactTypes[m.ModelType] && !hfMoETypes[m.ModelType] {
		// Only the model types whose transformers code was read go through
		// sdpa_attention_forward; remote code (ChatGLM, ...) repeats key
		// and value itself before SDPA.
		return false
	}
	// Autocast runs SDPA on 16-bit inputs: the flash kernel.
	return !r.Precision.mixed() && residualBytes(r) == 4
}

// attentionKinds counts a model's full-attention and sliding layers.
func attentionKinds(m *hfconfig.Model) (full, sliding int) {
	for _, l := range m.Layers {
		switch l.Attention {
		case "full":
			full++
		case "sliding":
			sliding++
		}
	}
	return full, sliding
}

// hfSlidingMasked reports whether transformers gives a sliding layer's SDPA
// a mask: from a sequence as long as the window (its mask interface skips
// the mask only below it, kv_length < sliding_window), one token earlier
// than the window starts to cut (hfWindowed).
func hfSlidingMasked(r Request) bool {
	w := r.Model.SlidingWindow
	return w > 0 && int64(r.SeqLen) >= w
}

// sdpaWindowedAssumption is sdpaWindowedGap's assumption line.
const sdpaWindowedAssumption = "attention: past the sliding window the sliding layers, masked, run the memory-efficient kernel, and the full-attention layers, given no mask and fp32 grouped heads, SDPA's math kernel, which keeps every head's s² fp32 softmax output (measured on torch 2.11)"

// sdpaMathAssumption is the assumption line of a request sdpaMathFallback
// holds for.
const sdpaMathAssumption = "attention: SDPA falls back to its math kernel, which keeps every head's s² fp32 softmax output: fp32 query/key/value (no flash kernel) with fewer key/value heads than query heads, which torch's memory-efficient kernel refuses (measured on torch 2.11; PyTorch PR #191085 of July 2026 adds grouped heads to it, and a torch that carries it holds less)"

// sdpaKernel is r with the attention torch actually runs: SDPAMath where
// sdpaMathFallback says the fused kernels refuse the inputs.
func sdpaKernel(r Request) Request {
	if sdpaMathFallback(r) {
		r.Attn = SDPAMath
	}
	return r
}

// scoreChain is what eager attention does with a layer's s × s scores
// between its softmax and the value matmul, as the bytes per score element
// of each tensor's dtype: the softmax output, its cast (the same dtype: no
// cast), an optional dropout in the cast's dtype (a bool mask), and the
// matmul's input dtype (autocast casts to it).
type scoreChain struct {
	Softmax, Cast, Matmul float64
	Dropout               bool
}

// saved is what the chain keeps for the backward, per score element: the
// softmax output, dropout's mask, and the value matmul's input — with a
// dropout its output or cast; without one, the softmax output itself
// unless a cast stands between them.
func (c scoreChain) saved() float64 {
	n := c.Softmax
	if c.Dropout {
		return n + 1 + c.Matmul
	}
	if c.Cast != c.Softmax || c.Matmul != c.Cast {
		n += c.Matmul
	}
	return n
}

// backwardPeak is the most the chain holds through its backward, per
// score element, walking it in reverse: the matmul's backward makes the
// gradient beside everything saved, then releases its input; each cast's
// backward holds its gradient in both dtypes; dropout's holds its
// gradient input and output beside the mask and the softmax output; the
// softmax backward holds its output, gradient input and gradient output.
func (c scoreChain) backwardPeak() float64 {
	mask := 0.0
	if c.Dropout {
		mask = 1
	}
	peak := max(c.saved()+c.Matmul, 3*c.Softmax)
	if c.Matmul != c.Cast {
		peak = max(peak, c.Softmax+mask+c.Matmul+c.Cast)
	}
	if c.Dropout {
		peak = max(peak, c.Softmax+mask+2*c.Cast)
	}
	if c.Cast != c.Softmax {
		peak = max(peak, 2*c.Softmax+c.Cast)
	}
	return peak
}
