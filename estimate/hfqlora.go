package estimate

import (
	"fmt"
	"slices"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// QLoRA on the transformers path as the oracle imitates it (oracle/qlora.py):
// transformers' BitsAndBytesConfig(load_in_4bit) base loaded in bf16 with
// bf16 compute, PEFT's prepare_model_for_kbit_training, PEFT's LoRA on
// bitsandbytes' Linear4bit, without autocast or under HF Trainer's bf16
// autocast (hfAutocastQLoRA).

// hfQLoRA reports whether a QLoRA request is one the oracle imitates: a
// bitsandbytes 4-bit base (NF4 or FP4, with or without double
// quantization) stored in uint8, its other parameters upcast to fp32 by
// PEFT's kbit preparation, a dense model; one precision (no autocast), or
// HF Trainer's bf16=True autocast over it (hfAutocastQLoRA).
func hfQLoRA(r Request) bool {
	if r.Method != QLoRA || !upcastFrozen(r) {
		return false
	}
	if r.Precision != BF16True && !hfAutocastQLoRA(r) {
		return false
	}
	if r.Model.Experts > 0 {
		// MoE experts are 3-D parameters, not Linears: transformers leaves
		// them unquantized and PEFT's preparation casts them to fp32. The
		// oracle grid has no MoE QLoRA rows to read that against.
		return false
	}
	switch r.Quant {
	case NF4, NF4DQ, FP4:
	default:
		return false
	}
	return r.QuantStorage == "" || r.QuantStorage == DtypeUint8
}

// hfAutocastQLoRA reports whether a QLoRA request runs under HF Trainer's
// bf16 autocast (bf16=True) on one GPU or DDP replicas, with SDPA or eager
// attention, as the oracle imitates it (oracle/qlora.py). The residual stream stays fp32 (the
// embeddings and norms after kbit preparation, Linear4bit's output cast
// back to its input's dtype), as without autocast; what autocast changes
// is where an operator on its lists meets an fp32 tensor: SDPA casts q, k
// and v to bf16 (the flash kernel, not the math one), each adapter's lora_A
// saves a bf16 cast of its module's input (PEFT's bnb Linear4bit skips its
// own fp32 cast under autocast), lora_B a bf16 rank-wide input, the
// adapters' fp32 weights are cast once for the region, and the fp32
// output layer is cast to bf16 for the logits; eager attention's matmuls
// run in bf16 too (hfLayerSaved's sd and scoreChain). Falcon's unconverted
// Linears are not this path: unconvertedQLoRA makes its request the LoRA
// over fp32 frozen weights that it runs (the fitted LoRA shape).
func hfAutocastQLoRA(r Request) bool {
	return r.Method == QLoRA && r.Precision == BF16Mixed && (r.Attn == SDPA || r.Attn == Eager) && hfAutocastSharding(r) &&
		r.Model != nil
}

// bnbUnconverted are the model types whose Linears transformers does not
// quantize: replace_with_bnb_linear (integrations/bitsandbytes.py) converts
// a module only when type(module) is nn.Linear (or Conv1D), and Falcon's
// FalconLinear is a subclass. Their weights stay in the load dtype, then
// fp32 after PEFT's kbit preparation, and PEFT adapts them with its plain
// LoRA Linear: a QLoRA request runs as LoRA on an fp32 base.
var bnbUnconverted = map[string]bool{"falcon": true}

// unconvertedQLoRA returns a transformers QLoRA request on a
// bnbUnconverted model as the run it is, LoRA over unquantized frozen
// weights, so that no QLoRA term (bnb4bitStorage, Linear4bit's working set,
// the quant state) sees it: fp32 weights after kbit preparation's upcast
// (under autocast each cast to bf16 per call), sharded by FSDP as they are
// (transformers leaves the Linears unquantized before FSDP wraps them);
// 16-bit weights without the upcast, and under DeepSpeed, whose engine
// casts every floating parameter to the module's 16 bits (deepspeedModule,
// applied first). Other requests are returned unchanged; LitGPT quantizes
// its own Linears. (The oracle grid's twelve bf16-true Falcon QLoRA runs
// are read this way.)
func unconvertedQLoRA(r Request) Request {
	if r.Method != QLoRA || r.Model == nil || !bnbUnconverted[r.Model.ModelType] || r.Stack == StackLitGPT {
		return r
	}
	switch {
	case deepspeedZeRO(r) && r.Precision != FP32:
		r.Method, r.FrozenBaseBytes = LoRA, 0 // the module's 16 bits
	case upcastFrozen(r) || r.Precision == FP32:
		r.Method, r.FrozenBaseBytes = LoRA, 4
		r.UpcastFrozen = nil
	default:
		r.Method, r.FrozenBaseBytes = LoRA, 0
	}
	r.Quant, r.QuantStorage = "", ""
	return r
}

// unconvertedAssumption is the assumption line of a QLoRA request that
// unconvertedQLoRA made the LoRA run r.
func unconvertedAssumption(r Request) string {
	base := "the 16-bit frozen weights it loads"
	switch {
	case deepspeedZeRO(r):
		base = "the 16-bit frozen weights DeepSpeed's cast leaves"
	case frozenBaseBytes(r) == 4 && r.Precision.mixed():
		base = "fp32 frozen weights (kbit preparation's upcast) that autocast casts to bf16 per call"
	case frozenBaseBytes(r) == 4:
		base = "fp32 frozen weights (kbit preparation's upcast)"
	}
	acts := "its activations take the fitted LoRA shape"
	if hfExact(r) {
		acts = "its layers' saved tensors are spelled out as for that LoRA run"
	}
	return fmt.Sprintf("%s: transformers quantizes none of its Linear layers (its Linear class is not type nn.Linear), so this QLoRA run is LoRA over %s; %s", r.Model.ModelType, base, acts)
}

// asRun is the request as the model runs it, after Normalize: DeepSpeed's
// module dtype (deepspeedModule) and a QLoRA base transformers leaves
// unquantized (unconvertedQLoRA).
func asRun(r Request) Request { return unconvertedQLoRA(deepspeedModule(r)) }

// bnbBlock and bnbNestedBlock are bitsandbytes' quantize_4bit block (one
// absmax per 64 weights) and, with double quantization, quantize_blockwise's
// block over those absmax (256).
const (
	bnbBlock       = 64
	bnbNestedBlock = 256
)

// bnb4bitStorage is what bitsandbytes keeps for a model's quantized Linears
// (functional.py quantize_4bit, as oracle/qlora.py imitates it): the packed
// weights, (n+1)/2 bytes each, and the quantization state: per Linear one
// absmax per 64 weights (fp32; uint8 with double quantization, which adds
// one fp32 absmax per 256 blocks, a copy of the 256-entry fp32 dynamic code
// and an fp32 offset scalar) and the 16-entry fp32 4-bit code. Each of these
// is its own allocation, counted in the caching allocator's 512-byte blocks.
// weights is the quantized weight count (no biases: those stay parameters).
func bnb4bitStorage(r Request) (packed, state, weights int64) {
	dq := r.Quant.Spec().DoubleQuant
	for _, l := range r.Model.Layers {
		for _, lin := range l.Linears {
			n := lin.In * lin.Out
			p, st := bnb4bitLinear(n, dq)
			packed += p * lin.Copies
			state += st * lin.Copies
			weights += n * lin.Copies
		}
	}
	return packed, state, weights
}

// bnb4bitLinear is one Linear4bit of n weights as bitsandbytes stores it,
// each tensor rounded to the allocator's 512 B: the packed uint8 weight and
// the quantization state (the 4-bit code, and an fp32 absmax per 64-weight
// block, or with double quant a uint8 absmax, an fp32 absmax per 256 blocks,
// the 256-entry code and an fp32 offset).
func bnb4bitLinear(n int64, doubleQuant bool) (packed, state int64) {
	blocks := (n + bnbBlock - 1) / bnbBlock
	state = round512(4 * 16) // the 4-bit code
	if doubleQuant {
		state += round512(blocks) + round512(4*((blocks+bnbNestedBlock-1)/bnbNestedBlock)) + round512(4*256) + round512(4)
	} else {
		state += round512(4 * blocks)
	}
	return round512((n + 1) / 2), state
}

func round512(n int64) int64 { return (n + 511) / 512 * 512 }

// bnbLinearTransient is the largest working set of one Linear4bit call
// beyond its input and output in the residual dtype (oracle/qlora.py, after
// bitsandbytes' nn/modules.py Linear4bit.forward and autograd/_functions.py
// MatMul4Bit): the input cast to the bf16 compute dtype, the weight
// dequantized into a bf16 temporary, and the bf16 product before its cast
// back; the backward holds the same three (the gradient cast to bf16, the
// weight dequantized again, the input's bf16 gradient).
func bnbLinearTransient(r Request) float64 {
	tokens := float64(r.SeqLen) * float64(r.Batch)
	q := 0.0
	for _, l := range r.Model.Layers {
		for _, lin := range l.Linears {
			in, out := float64(lin.In), float64(lin.Out)
			q = max(q, 2*in*out+2*tokens*(in+out))
		}
	}
	return q
}

// qloraMLPBackward is what the MLP's backward holds beyond the layer's saved
// tensors, as the oracle's census at the peak of a checkpointed QLoRA step
// shows it (Mistral-7B, 8,192 tokens): the gradient of the down projection's
// input, cast back to the fp32 residual dtype from Linear4bit's bf16
// (nn/modules.py: the input's .to(compute_dtype)), and, in a gated MLP, the
// two gradients the product's backward makes (gate's activation and up);
// in a two-matmul MLP the activation's gradient alone.
func qloraMLPBackward(r Request) float64 {
	grads := 2.0
	if r.Model.MLP == hfconfig.MLPGated {
		grads = 3
	}
	return grads * float64(residualBytes(r)) * float64(r.SeqLen) * float64(r.Batch) * float64(r.Model.ActiveFFN())
}

// qloraMLPFreed is what the MLP's backward has freed of the layer's saved
// tensors by its peak, in bytes, when the MLP's output projection carries an
// adapter: its lora_A's saved input, the product (fp32, the residual dtype,
// without autocast; its bf16 cast under autocast, hfAutocastQLoRA; with
// dropout, dropout's output and bool mask), released once lora_A's
// backward has made the input's gradient, before the product's two
// gradients exist. The oracle's snapshots at the peak of checkpointed steps
// (Mistral-7B, 8,192 tokens, all-linear) show it gone.
func qloraMLPFreed(r Request) float64 {
	if !hfQLoRA(r) {
		return 0
	}
	sums, err := adapterTargets(r.Model, r.LoRATargets) // cached: an estimate's hot path
	if err != nil || !slices.ContainsFunc(sums, func(t targetSum) bool { return t.mlpOutIn > 0 }) {
		return 0
	}
	act := float64(residualBytes(r))
	per, _ := adapterInputBytes(r, act)
	if per == 0 {
		per = act // lora_A saves the product itself
	}
	return per * float64(r.Model.ActiveFFN()) * float64(r.SeqLen) * float64(r.Batch)
}
