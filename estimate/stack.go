package estimate

import (
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// Stack is a training framework's defaults: what a run made with it does
// unless told otherwise. Each default names its source.
type Stack struct {
	Name StackName
	// Help is the one line the CLI lists the preset with.
	Help string
	// Precision is the default precision of the framework's fine-tuning recipes.
	Precision Precision
	Optimizer Optimizer
	// OptimizerStateDtype: "" follows the parameter dtype.
	OptimizerStateDtype Dtype
	// UpcastFrozen: frozen embeddings and norms are upcast to fp32 under QLoRA.
	UpcastFrozen bool
	// QuantStorage is the dtype packed 4-bit weights are stored in.
	QuantStorage Dtype
	Attn         Attention
	// LoRADropout is the recipes' default adapter dropout.
	LoRADropout float64
	// GradCkpt and FusedCE: "" leaves the request's defaults (none).
	GradCkpt Checkpointing
	FusedCE  LossKernel
	// FP32Adapters: PEFT creates the adapters in fp32 whatever the base's
	// dtype (LoraModel's autocast_adapter_dtype); stacks with their own
	// adapters make them in the training dtype.
	FP32Adapters bool
	// NoSyncAccumulation: the training loop enters FSDP's no_sync() on the
	// micro-batches that accumulate (accelerate's accumulate(), Fabric's
	// no_backward_sync), so every rank keeps unsharded gradients between
	// updates; torchtune's and fsdp_qlora's loops do not.
	NoSyncAccumulation bool
	// HoldsOutputs: the training loop keeps the model's output, and so its
	// logits, referenced through the backward and the optimizer step
	// (heldLogitBytes); the transformers Trainer drops it before the backward.
	HoldsOutputs bool
	// FusedAdamW: the stack's configs instantiate torch.optim.AdamW with
	// fused=True, so a run that names torch's AdamW (adamw_torch) gets the
	// fused step, without foreach's tensor-sized temporaries.
	FusedAdamW bool
	// TransformersLayers: the stack trains transformers' own model code, so
	// its layers' saved tensors are read tensor by tensor (hfExact).
	TransformersLayers bool
	// NoLever: the preset is not offered as a change that makes a run fit
	// (Changes): what it changes is other levers' settings inside the same
	// transformers Trainer.
	NoLever bool
	// OwnLoss: the loop calls the model without labels and computes
	// F.cross_entropy on the logits it returns, in their own dtype, instead
	// of transformers' loss, which upcasts them to fp32 first (ownLossChain16).
	OwnLoss bool
	// QuantOptimizer is the optimizer the stack runs a QLoRA request with
	// when none is given ("" for Optimizer's).
	QuantOptimizer Optimizer
	// Methods and ModelTypes, when set, are all the stack is estimated
	// for: a framework with its own model code runs only the
	// architectures it implements.
	Methods    []Method
	ModelTypes []string
	// Check, when set, refuses by field what else the framework does not
	// run (after Methods and ModelTypes).
	Check func(Request) error
	// Model, when set, is the model the framework trains in place of the
	// checkpoint's own (Unsloth's llama-fied Phi uploads); Normalize reads
	// the request through it before anything else.
	Model   func(*hfconfig.Model) *hfconfig.Model
	Sources []string
}

var stacks = []Stack{
	{Name: StackHFTrainer, Help: "transformers Trainer", Precision: BF16Mixed, Optimizer: AdamWTorch, UpcastFrozen: true, QuantStorage: DtypeUint8, Attn: SDPA, FP32Adapters: true, NoSyncAccumulation: true, TransformersLayers: true, Sources: []string{
		"transformers TrainingArguments: optim defaults to adamw_torch; bf16=True autocasts, trainable params keep their load dtype",
		"peft prepare_model_for_kbit_training: casts non-quantized (embeddings, norms) params to fp32",
		"transformers >= 4.36 defaults attn_implementation to sdpa when available",
		"peft LoraConfig: lora_dropout defaults to 0.0",
	}},
	{Name: StackTRL, Help: "TRL's SFTTrainer (as hf-trainer)", Precision: BF16Mixed, Optimizer: AdamWTorch, UpcastFrozen: true, QuantStorage: DtypeUint8, Attn: SDPA, FP32Adapters: true, NoSyncAccumulation: true, TransformersLayers: true, Sources: []string{
		"trl SFTTrainer subclasses transformers.Trainer: same optimizer and precision defaults as hf-trainer",
	}},
	{Name: StackPEFTAccelerate, Help: "a PyTorch loop over PEFT and accelerate", Precision: BF16Mixed, Optimizer: AdamWTorch, UpcastFrozen: true, QuantStorage: DtypeUint8, Attn: SDPA, FP32Adapters: true, NoSyncAccumulation: true, TransformersLayers: true, Sources: []string{
		"peft examples with accelerate: torch.optim.AdamW (foreach) and accelerate mixed precision",
	}},
	{Name: StackAxolotl, Help: "flash-attention, LoRA dropout 0.05", Precision: BF16Mixed, Optimizer: AdamWTorch, UpcastFrozen: true, QuantStorage: DtypeUint8, Attn: FlashAttention2, LoRADropout: 0.05, FP32Adapters: true, NoSyncAccumulation: true, TransformersLayers: true, Sources: []string{
		"axolotl builds a transformers.Trainer; its example configs set flash_attention: true, bf16: auto and lora_dropout: 0.05",
	}},
	{Name: StackLlamaFactory, Help: "transformers Trainer with LLaMA-Factory's defaults: checkpointing on, norms left in 16 bits", Precision: BF16Mixed, Optimizer: AdamWTorch, UpcastFrozen: false, QuantStorage: DtypeBF16, Attn: SDPA, GradCkpt: CkptFull, FP32Adapters: true, NoSyncAccumulation: true, NoLever: true, TransformersLayers: true, Sources: []string{
		"LLaMA-Factory (hiyouga/LLaMA-Factory at ff6d4d12e, src/llamafactory) trains with a transformers Trainer subclass on transformers' model code",
		"hparams/model_args.py: disable_gradient_checkpointing defaults to False (prepare_model_for_training enables it), upcast_layernorm and upcast_lmhead_output to False, flash_attn to auto (transformers' default attention)",
		"model/adapter.py: trainable parameters (adapters, or every weight of a full fine-tune) are cast to fp32 unless pure_bf16 or BAdam (and, unquantized, under DeepSpeed ZeRO-3, which keeps them fp32 itself); it never calls PEFT's prepare_model_for_kbit_training, so a QLoRA base keeps its norms and embeddings in 16 bits",
		"hparams/finetuning_args.py: lora_dropout defaults to 0.0; model_utils/quantization.py: bnb_4bit_quant_storage is the compute dtype",
	}},
	{Name: StackLitGPT, Help: "LitGPT: bf16-true, its own LoRA and a chunked loss", Precision: BF16True, Optimizer: AdamWTorch, UpcastFrozen: false, QuantStorage: DtypeUint8, Attn: SDPA, LoRADropout: 0.05, NoSyncAccumulation: true, QuantOptimizer: PagedAdamW32bit, Sources: []string{
		"litgpt finetune/lora.py: lora_dropout defaults to 0.05; one dropout feeds the fused qkv adapter",
		"litgpt finetune scripts: with --quantize bnb.* the optimizer is bitsandbytes' PagedAdamW (instantiate_bnb_optimizer), fp32 states",
		"litgpt finetune scripts: precision defaults to bf16-true where supported; torch.optim.AdamW",
		"litgpt quantizes with bnb.nf4 through its own wrapper and does not upcast embeddings/norms to fp32",
		"litgpt's CausalSelfAttention calls torch scaled_dot_product_attention",
	}},
	{Name: StackTorchtune, Help: "pure bf16, bf16 optimizer states", Precision: BF16True, Optimizer: AdamWTorchFused, OptimizerStateDtype: DtypeBF16, UpcastFrozen: false, QuantStorage: DtypeUint8, Attn: SDPA, FusedAdamW: true, Sources: []string{
		"torchtune recipes: dtype bf16 trains in pure bf16 with no fp32 master weights (optimizer states in bf16)",
		"torchtune configs (recipes/configs at 1814feb17, 2024-11-18): 105 of the 107 that use torch.optim.AdamW pass fused: True, every llama3_2 one among them",
		"torchtune QLoRA uses torchao NF4Tensor (block 64, scales quantized again) and keeps embeddings in bf16",
		"torchtune attention calls torch scaled_dot_product_attention",
		"torchtune LoRA builders: lora_dropout 0.0 in current recipes (0.05 in the 2024-04 builders)",
	}},
	{Name: StackFSDPQLoRA, Help: "Answer.AI's FSDP-QLoRA: packed weights stored in bf16", Precision: BF16True, Optimizer: AdamWTorch, UpcastFrozen: false, QuantStorage: DtypeBF16, Attn: SDPA, LoRADropout: 0.1, HoldsOutputs: true, Sources: []string{
		"AnswerDotAI fsdp_qlora train.py: lora_dropout defaults to 0.1",
		"AnswerDotAI fsdp_qlora train.py: precision bf16 casts params to bf16; bnb_4bit_quant_storage=bf16 so FSDP can shard packed weights",
		"AnswerDotAI fsdp_qlora train.py: output = model(...) stays referenced through loss.backward() and optimizer.step(), and is set to None only after them ('so more memory frees up before the next forward pass')",
	}},
	{Name: StackUnsloth, Help: "adamw_8bit, offloaded checkpointing, a chunked loss", Precision: BF16True, Optimizer: AdamW8bit, UpcastFrozen: false, QuantStorage: DtypeUint8, Attn: SDPA, GradCkpt: CkptUnsloth, FusedCE: LossChunked, FP32Adapters: true, NoSyncAccumulation: true, Model: unslothModel, Sources: []string{
		"unsloth notebooks: optim adamw_8bit, use_gradient_checkpointing='unsloth', fast (chunked) cross-entropy; frozen weights stay bf16; lora_dropout = 0 (its fast path)",
	}},
	{Name: StackTorchtitan, Help: "full training, FSDP2 bf16 mixed precision, per-op selective checkpointing, a chunked loss", Precision: BF16Mixed, Optimizer: AdamWTorchFused, UpcastFrozen: false, QuantStorage: DtypeUint8, Attn: SDPA, GradCkpt: CkptSelectiveOp, FusedCE: LossChunked, FP32Adapters: true,
		Methods: []Method{Full}, ModelTypes: torchtitanModelTypes, Check: checkTorchtitan, Sources: []string{
			"torchtitan trains its own model code; this preset covers its dense Llama 3 (torchtitan/models/llama3) and Qwen3 (torchtitan/models/qwen3) decoders; it has no 4-bit base, and its LoRA converter is not modelled here",
			"torchtitan FSDP2 MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): sharded fp32 parameters, gradients and AdamW states, bf16 compute (mixed_precision_param defaults to bfloat16)",
			"torchtitan llama3_8b config (train_configs/llama3_8b.toml at 9dec370, 2024-12; llama3_8b() in models/llama3/config_registry.py, 2026): activation checkpointing 'selective' with option 'op'; its 70B and 405B configs use full",
			"torchtitan optimizer implementation defaults to 'fused' since 2025-02-24 (6e4988550 'use Fused AdamW as default'; foreach before: name adamw_torch for those runs)",
			"torchtitan's Llama attention calls F.scaled_dot_product_attention(is_causal=True)",
			"torchtitan train loop: cross_entropy on pred.float(), then del pred before loss.backward(); its Llama 3 configs wrap it in ChunkedLossWrapper (8 chunks) since 786e26f8e, 2026-04-27 (name --fused-ce none for older runs)",
			"torchtitan compiles its loss function with the model when training.compile is on (build_cross_entropy_loss since bbb1b616e, 2025-04-02; --eager-loss for runs from 2024-12-18 to then)",
		}},
	{Name: StackPyTorch, Help: "a plain PyTorch loop over transformers' model: bf16 weights, no autocast, F.cross_entropy on the logits it returns, kept referenced through the backward (--frees-logits when the loop frees them first)", Precision: BF16True, Optimizer: AdamWTorch, UpcastFrozen: true, QuantStorage: DtypeUint8, Attn: SDPA, FP32Adapters: true, TransformersLayers: true, OwnLoss: true, HoldsOutputs: true, NoLever: true, Sources: []string{
		"a loop that calls model(input_ids) without labels and then F.cross_entropy(logits.flatten(0, 1), targets.flatten()) on the logits it returns: no fp32 upcast — transformers' causal-LM heads upcast only when labels are passed (PR #31292, #33902 and #34147; Llama, Mistral, Qwen2, Phi-3 and Mixtral from 4.46, whose ForCausalLMLoss upcasts inside the loss); with an older transformers, whose heads upcast always, name --stack hf-trainer",
		"the inline loop (logits = model(x).logits; loss = F.cross_entropy(...); loss.backward()) keeps the logits referenced until the next step overwrites them: held through the backward and the optimizer step, in their dtype; a loss function that returns only the loss (or del logits) frees them first: --frees-logits",
		"without torch.autocast the cross-entropy runs in the logits' dtype; under autocast it runs in fp32 (cross_entropy is on CUDA autocast's float32 list), as transformers' loss does: name --precision bf16-mixed for such a loop",
		"torch.optim.AdamW defaults (foreach on CUDA); PEFT's adapters in fp32 (autocast_adapter_dtype) and, under QLoRA, prepare_model_for_kbit_training as PEFT's docs recommend; no no_sync() on accumulating micro-batches",
	}},
}

// Stacks lists the framework presets.
func Stacks() []Stack { return slices.Clone(stacks) }

// StackByName returns a preset.
func StackByName(name string) (Stack, error) {
	n, err := ParseStack(name)
	if err != nil {
		return Stack{}, err
	}
	return n.Spec(), nil
}

// Apply fills the fields the request leaves empty with the stack's defaults,
// and reads torch's AdamW as the stack's configs instantiate it (FusedAdamW).
func (s Stack) Apply(r *Request) {
	r.Stack = s.Name
	orDefault(&r.Precision, s.Precision)
	if r.Method == QLoRA && s.QuantOptimizer != "" {
		orDefault(&r.Optimizer, s.QuantOptimizer)
	}
	orDefault(&r.Optimizer, s.Optimizer)
	if s.FusedAdamW && r.Optimizer == AdamWTorch {
		r.Optimizer = AdamWTorchFused
	}
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

// checkStack refuses a request the stack is not estimated for (Methods,
// ModelTypes, Check).
func checkStack(r Request) error {
	s := r.Stack.Spec()
	if len(s.Methods) > 0 && !slices.Contains(s.Methods, r.Method) {
		return fieldErr("method", r.Method, "%s under --stack %s, the methods it is estimated for", joinNames(s.Methods), s.Name)
	}
	if len(s.ModelTypes) > 0 && !slices.Contains(s.ModelTypes, r.Model.ModelType) {
		return fieldErr("model", r.Model.ModelType, "a model type the %s preset covers (%s)", s.Name, strings.Join(s.ModelTypes, ", "))
	}
	if s.Check != nil {
		return s.Check(r)
	}
	return nil
}

// joinNames lists names with commas.
func joinNames[T ~string](names []T) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = string(n)
	}
	return strings.Join(out, ", ")
}

// orDefault sets *p to d when *p is the zero value (an unset field).
func orDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// unslothModel is the model Unsloth trains for a checkpoint: its
// llama-fied upload (split q/k/v and gate/up projections, patched as Llama)
// for the Phi-3-family checkpoints its loader maps to one
// (hfconfig.UnslothLlamafies), else the checkpoint's own.
func unslothModel(m *hfconfig.Model) *hfconfig.Model {
	if m.ModelType == "phi3" && hfconfig.UnslothLlamafies(m.Name) {
		return m.Llamafied()
	}
	return m
}
