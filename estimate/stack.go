package estimate

import (
	"fmt"
	"slices"
)

// Stack is a training framework's defaults: what a run made with it does
// unless told otherwise. Each default names its source.
type Stack struct {
	Name string
	// Precision is the default precision of the framework's fine-tuning recipes.
	Precision Precision
	Optimizer string
	// OptimizerStateDtype: "" follows the parameter dtype.
	OptimizerStateDtype string
	// UpcastFrozen: frozen embeddings and norms are upcast to fp32 under QLoRA.
	UpcastFrozen bool
	// QuantStorage is the dtype packed 4-bit weights are stored in.
	QuantStorage string
	Attn         string
	// LoRADropout is the recipes' default adapter dropout.
	LoRADropout float64
	// GradCkpt and FusedCE: "" leaves seed 000's defaults (none).
	GradCkpt, FusedCE string
	Sources           []string
}

var stacks = []Stack{
	{Name: "hf-trainer", Precision: BF16Mixed, Optimizer: "adamw_torch", UpcastFrozen: true, QuantStorage: "uint8", Attn: "sdpa", Sources: []string{
		"transformers TrainingArguments: optim defaults to adamw_torch; bf16=True autocasts, trainable params keep their load dtype",
		"peft prepare_model_for_kbit_training: casts non-quantized (embeddings, norms) params to fp32",
		"transformers >= 4.36 defaults attn_implementation to sdpa when available",
		"peft LoraConfig: lora_dropout defaults to 0.0",
	}},
	{Name: "trl", Precision: BF16Mixed, Optimizer: "adamw_torch", UpcastFrozen: true, QuantStorage: "uint8", Attn: "sdpa", Sources: []string{
		"trl SFTTrainer subclasses transformers.Trainer: same optimizer and precision defaults as hf-trainer",
	}},
	{Name: "peft-accelerate", Precision: BF16Mixed, Optimizer: "adamw_torch", UpcastFrozen: true, QuantStorage: "uint8", Attn: "sdpa", Sources: []string{
		"peft examples with accelerate: torch.optim.AdamW (foreach) and accelerate mixed precision",
	}},
	{Name: "axolotl", Precision: BF16Mixed, Optimizer: "adamw_torch", UpcastFrozen: true, QuantStorage: "uint8", Attn: "flash_attention_2", LoRADropout: 0.05, Sources: []string{
		"axolotl builds a transformers.Trainer; its example configs set flash_attention: true, bf16: auto and lora_dropout: 0.05",
	}},
	{Name: "litgpt", Precision: BF16True, Optimizer: "adamw_torch", UpcastFrozen: false, QuantStorage: "uint8", Attn: "sdpa", LoRADropout: 0.05, Sources: []string{
		"litgpt finetune/lora.py: lora_dropout defaults to 0.05; one dropout feeds the fused qkv adapter",
		"litgpt finetune scripts: precision defaults to bf16-true where supported; torch.optim.AdamW",
		"litgpt quantizes with bnb.nf4 through its own wrapper and does not upcast embeddings/norms to fp32",
		"litgpt's CausalSelfAttention calls torch scaled_dot_product_attention",
	}},
	{Name: "torchtune", Precision: BF16True, Optimizer: "adamw_torch", OptimizerStateDtype: "bf16", UpcastFrozen: false, QuantStorage: "uint8", Attn: "sdpa", Sources: []string{
		"torchtune recipes: dtype bf16 trains in pure bf16 with no fp32 master weights (optimizer states in bf16)",
		"torchtune QLoRA uses torchao NF4Tensor (block 64, scales quantized again) and keeps embeddings in bf16",
		"torchtune attention calls torch scaled_dot_product_attention",
		"torchtune LoRA builders: lora_dropout 0.0 in current recipes (0.05 in the 2024-04 builders)",
	}},
	{Name: "fsdp_qlora", Precision: BF16True, Optimizer: "adamw_torch", UpcastFrozen: false, QuantStorage: "bf16", Attn: "sdpa", LoRADropout: 0.1, Sources: []string{
		"AnswerDotAI fsdp_qlora train.py: lora_dropout defaults to 0.1",
		"AnswerDotAI fsdp_qlora train.py: precision bf16 casts params to bf16; bnb_4bit_quant_storage=bf16 so FSDP can shard packed weights",
	}},
	{Name: "unsloth", Precision: BF16True, Optimizer: "adamw_8bit", UpcastFrozen: false, QuantStorage: "uint8", Attn: "sdpa", GradCkpt: "unsloth", FusedCE: "chunked", Sources: []string{
		"unsloth notebooks: optim adamw_8bit, use_gradient_checkpointing='unsloth', fast (chunked) cross-entropy; frozen weights stay bf16; lora_dropout = 0 (its fast path)",
	}},
}

// Stacks lists the framework presets.
func Stacks() []Stack { return slices.Clone(stacks) }

// StackByName returns a preset.
func StackByName(name string) (Stack, error) {
	for _, s := range stacks {
		if s.Name == name {
			return s, nil
		}
	}
	var names []string
	for _, s := range stacks {
		names = append(names, s.Name)
	}
	return Stack{}, fmt.Errorf("unknown stack %q (have %v)", name, names)
}

// Apply fills the fields the request leaves empty with the stack's defaults.
func (s Stack) Apply(r *Request) {
	r.Stack = s.Name
	orDefault(&r.Precision, s.Precision)
	orDefault(&r.Optimizer, s.Optimizer)
	orDefault(&r.OptimizerStateDtype, s.OptimizerStateDtype)
	orDefault(&r.QuantStorage, s.QuantStorage)
	orDefault(&r.Attn, s.Attn)
	orDefault(&r.GradCkpt, s.GradCkpt)
	orDefault(&r.FusedCE, s.FusedCE)
	if r.UpcastFrozen == nil {
		r.UpcastFrozen = &s.UpcastFrozen
	}
	if r.LoRADropout == nil && r.Method != Full {
		// A full fine-tune has no adapters, so no adapter dropout.
		r.LoRADropout = &s.LoRADropout
	}
}

// orDefault sets *p to d when *p is the zero value (an unset field).
func orDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}
