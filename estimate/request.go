package estimate

import (
	"errors"
	"fmt"
	"slices"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// GiB is 2^30 bytes; every *_gb field of the project means GiB.
const GiB = 1 << 30

// Method is what a run trains.
type Method string

// Methods.
const (
	Full  Method = "full"
	LoRA  Method = "lora"
	QLoRA Method = "qlora"
)

// Precision is how weights, gradients and optimizer states are held.
// "-mixed" keeps fp32 master weights and autocasts compute; "-true" holds
// everything in that dtype (docs/measurements-schema.md).
type Precision string

// Precisions.
const (
	BF16Mixed Precision = "bf16-mixed"
	BF16True  Precision = "bf16-true"
	FP16Mixed Precision = "fp16-mixed"
	FP16True  Precision = "fp16-true"
	FP32      Precision = "fp32"
)

// Request is one training configuration to estimate.
type Request struct {
	Model *hfconfig.Model

	Method    Method
	Precision Precision
	// Quant is the 4/8-bit scheme of a QLoRA base: "nf4", "nf4-dq", "fp4", "int8".
	Quant string
	// QuantStorage is the dtype packed 4-bit weights are stored in: "uint8"
	// (bitsandbytes default) or "bf16" (FSDP-QLoRA's bnb_4bit_quant_storage).
	QuantStorage string

	LoRARank    int64
	LoRATargets []string // scope keywords or module names; nil: attention scope
	// ExtraTrainable lists fully trained modules besides adapters ("lm_head", "embed_tokens").
	ExtraTrainable []string
	// LoRADropout is the adapters' dropout probability; above 0 every
	// adapter keeps its dropped-out input and mask for the backward. nil:
	// the stack's default.
	LoRADropout *float64
	// ExtraLoRAOnHead puts an adapter on the output layer too (lm_head in the
	// target list): rank × (hidden + vocab) more trainable parameters.
	ExtraLoRAOnHead bool

	SeqLen, Batch int64
	// DynamicShapes: batches are padded to their own longest sample, so the
	// step's tensor shapes change from batch to batch (SeqLen is then the
	// longest); the caching allocator keeps blocks of several sizes.
	DynamicShapes bool
	// GradAccum is the number of micro-batches per optimizer update (0 or 1:
	// none). It matters only where accumulation changes what is resident:
	// FSDP's no_sync() keeps unsharded gradients between updates.
	GradAccum int64

	// GradCkpt is "none", "full", "unsloth" or "offload".
	GradCkpt string
	// Optimizer: adamw_torch (foreach), adamw_torch_fused, sgd, adamw_8bit,
	// paged_adamw_8bit, paged_adamw_32bit, adafactor, lion_8bit.
	Optimizer string
	// OptimizerStateDtype is "fp32" or "bf16"; empty: the parameter dtype.
	OptimizerStateDtype string
	// Attn is "sdpa", "flash_attention_2" or "eager".
	Attn string
	// FusedCE is "none", "liger", "chunked" or "cut_cross_entropy".
	FusedCE string
	// UpcastFrozen: frozen embeddings and norms upcast to fp32 under QLoRA
	// (PEFT's prepare_model_for_kbit_training). nil: the stack's default.
	UpcastFrozen *bool
	// FrozenBaseBytes overrides the dtype size of a frozen LoRA base (0:
	// 2 bytes, or 4 under fp32); stacks that keep fp32 weights set 4.
	FrozenBaseBytes int64
	// Compile is torch.compile.
	Compile bool
	// Stack is the framework preset the defaults came from (informational).
	Stack string

	Sharding Sharding

	// GPUTotal is the card's total memory; it sizes overhead allowances.
	GPUTotal int64
	// Available is the memory currently free for the run (0: GPUTotal).
	Available int64
	// OverheadFraction and SafetyFraction override seed 000's 8 % and 5 %.
	OverheadFraction, SafetyFraction float64

	// Terse asks for the numbers only: no component sources, assumptions or
	// confidence text. Searches over many requests (Changes, calibration,
	// GPU selection) set it; the figures are identical.
	Terse bool
}

// Sharding spreads training state over data-parallel GPUs.
type Sharding struct {
	// Strategy: "none", "ddp", "fsdp_full_shard", "fsdp_shard_grad_op",
	// "fsdp_no_shard", "fsdp_hybrid_shard", "zero1", "zero2", "zero3".
	Strategy string
	// GPUs is the data-parallel world size (per node for hybrid).
	GPUs int64
	// CPUOffload: "none", "params", "optimizer", "params+optimizer".
	CPUOffload string
}

// ErrInvalidRequest is wrapped by every validation error.
var ErrInvalidRequest = errors.New("invalid request")

var (
	optimizers = []string{"adamw_torch", "adamw_torch_fused", "adamw", "sgd", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "adafactor", "lion_8bit", "adamw_bnb_8bit"}
	ckpts      = []string{"none", "full", "unsloth", "offload"}
	attns      = []string{"sdpa", "flash_attention_2", "eager", "flex_attention"}
	fusedCEs   = []string{"none", "liger", "chunked", "cut_cross_entropy"}
	quants     = []string{"nf4", "nf4-dq", "fp4", "int8"}
	strategies = []string{"none", "ddp", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_no_shard", "fsdp_hybrid_shard", "zero1", "zero2", "zero3"}
	offloads   = []string{"none", "params", "optimizer", "params+optimizer"}
	precisions = []Precision{BF16Mixed, BF16True, FP16Mixed, FP16True, FP32}
)

// isOutputLayer reports whether a module name is a model's output layer
// (lm_head in HF models, output_layer in ChatGLM, embed_out in GPT-NeoX).
func isOutputLayer(name string) bool {
	switch name {
	case "lm_head", "output_layer", "embed_out":
		return true
	}
	return false
}

// isInputEmbedding reports whether a module name is a model's token embedding.
func isInputEmbedding(name string) bool {
	switch name {
	case "embed_tokens", "wte", "word_embeddings", "embed_in":
		return true
	}
	return false
}

// Normalize fills defaults (seed 000's HF-Trainer path) and validates. It
// returns a copy; the caller's request is not changed.
func (r Request) Normalize() (Request, error) {
	bad := func(field string, v any, want any) (Request, error) {
		return r, fmt.Errorf("%w: %s %v (want %v)", ErrInvalidRequest, field, v, want)
	}
	if r.Model == nil {
		return r, fmt.Errorf("%w: no model", ErrInvalidRequest)
	}
	orDefault(&r.Method, LoRA)
	orDefault(&r.Precision, BF16True)
	orDefault(&r.GradCkpt, "none")
	orDefault(&r.Optimizer, "adamw_torch")
	orDefault(&r.Attn, "sdpa")
	orDefault(&r.FusedCE, "none")
	orDefault(&r.Sharding.Strategy, "none")
	orDefault(&r.Sharding.CPUOffload, "none")
	orDefault(&r.QuantStorage, "uint8")
	if r.Sharding.GPUs == 0 {
		r.Sharding.GPUs = 1
	}
	if r.LoRADropout != nil && (*r.LoRADropout < 0 || *r.LoRADropout >= 1) {
		return bad("lora_dropout", *r.LoRADropout, "a probability in [0, 1)")
	}
	if r.GradAccum < 0 {
		return bad("grad_accum", r.GradAccum, "a positive number of micro-batches")
	}
	switch r.Method {
	case Full, LoRA, QLoRA:
	default:
		return bad("method", r.Method, "full, lora or qlora")
	}
	if !slices.Contains(precisions, r.Precision) {
		return bad("precision", r.Precision, precisions)
	}
	if r.Method == QLoRA {
		orDefault(&r.Quant, "nf4-dq")
		if !slices.Contains(quants, r.Quant) {
			return bad("quant", r.Quant, quants)
		}
	} else if r.Quant != "" {
		return bad("quant", r.Quant, "no quantization outside qlora")
	}
	if r.Method != Full {
		if r.LoRARank <= 0 {
			if r.LoRARank < 0 {
				return bad("lora rank", r.LoRARank, "a positive integer")
			}
			r.LoRARank = 16
		}
		// An output-layer name in the target list is an adapter on lm_head,
		// which sits outside the decoder layers the other names select.
		var layerTargets []string
		for _, t := range r.LoRATargets {
			if isOutputLayer(t) {
				r.ExtraLoRAOnHead = true
			} else {
				layerTargets = append(layerTargets, t)
			}
		}
		r.LoRATargets = layerTargets
		if len(r.LoRATargets) == 0 {
			r.LoRATargets = []string{hfconfig.ScopeAttention}
		}
	}
	if r.SeqLen <= 0 {
		return bad("seq_len", r.SeqLen, "a positive number of tokens")
	}
	if r.Batch <= 0 {
		return bad("batch", r.Batch, "a positive micro-batch size")
	}
	if r.SeqLen > 1<<24 || r.Batch > 1<<16 {
		return bad("seq_len × batch", fmt.Sprintf("%d × %d", r.SeqLen, r.Batch), "a realistic size")
	}
	for _, c := range []struct {
		field, v string
		ok       []string
	}{
		{"optimizer", r.Optimizer, optimizers},
		{"gradient checkpointing", r.GradCkpt, ckpts},
		{"attention", r.Attn, attns},
		{"fused cross-entropy", r.FusedCE, fusedCEs},
		{"sharding strategy", r.Sharding.Strategy, strategies},
		{"cpu offload", r.Sharding.CPUOffload, offloads},
		{"quant storage", r.QuantStorage, []string{"uint8", "bf16", "fp16", "fp32"}},
	} {
		if !slices.Contains(c.ok, c.v) {
			return bad(c.field, fmt.Sprintf("%q", c.v), c.ok)
		}
	}
	if r.OptimizerStateDtype != "" && r.OptimizerStateDtype != "fp32" && r.OptimizerStateDtype != "bf16" {
		return bad("optimizer state dtype", r.OptimizerStateDtype, "fp32 or bf16")
	}
	if r.Sharding.GPUs < 1 {
		return bad("sharding GPUs", r.Sharding.GPUs, "at least 1")
	}
	if r.GPUTotal < 0 || r.Available < 0 {
		return bad("GPU memory", r.GPUTotal, "non-negative")
	}
	if r.Available > 0 && r.GPUTotal > 0 && r.Available > r.GPUTotal {
		return bad("available memory", fmt.Sprintf("%.2f GiB", float64(r.Available)/GiB), fmt.Sprintf("at most the card's %.2f GiB", float64(r.GPUTotal)/GiB))
	}
	if r.OverheadFraction < 0 || r.OverheadFraction >= 1 || r.SafetyFraction < 0 || r.SafetyFraction >= 1 {
		return bad("overhead/safety fraction", fmt.Sprintf("%v/%v", r.OverheadFraction, r.SafetyFraction), "in [0, 1)")
	}
	if _, err := r.Model.AdapterSum(r.targetsOrNil()); r.Method != Full && err != nil {
		return r, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	return r, nil
}

func (r Request) targetsOrNil() []string {
	if r.Method == Full {
		return []string{hfconfig.ScopeAttention}
	}
	return r.LoRATargets
}

// actBytes is the activation dtype size: 2 under bf16/fp16 autocast or pure
// 16-bit, 4 for fp32 runs.
func (r Request) actBytes() int64 {
	if r.Precision == FP32 {
		return 4
	}
	return 2
}

// paramBytes is the dtype size of trained base weights in a full fine-tune
// (seed 000 §1: 4 / 2 / 2): mixed precision keeps fp32 master weights.
// mixed reports whether the precision keeps fp32 weights and runs the
// matmuls under torch.autocast (bf16-mixed, fp16-mixed).
func (p Precision) mixed() bool { return p == BF16Mixed || p == FP16Mixed }

func (r Request) paramBytes() int64 {
	switch r.Precision {
	case BF16True, FP16True:
		return 2
	}
	return 4
}

// frozenBytes is the dtype size of a frozen (LoRA) base: loaded in 16-bit
// unless FrozenBaseBytes or an fp32 run says otherwise.
func (r Request) frozenBytes() int64 {
	if r.FrozenBaseBytes > 0 {
		return r.FrozenBaseBytes
	}
	if r.Precision == FP32 {
		return 4
	}
	return 2
}
