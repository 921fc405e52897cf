package cli

// RequestFlags are the flags that describe the training run, shared by every
// command that takes one (estimate, bench), so that a run is spelled the same
// way everywhere. A command that cannot honour a value (bench's probe runs
// one stack) refuses it with a usage error naming the flag.
type RequestFlags struct {
	Method     string   `enum:"full,lora,qlora" default:"lora" help:"What is trained: full, lora or qlora (${enum})."`
	Precision  string   `help:"bf16-true (default): weights, grads and optimizer states in bf16; bf16-mixed, fp16-mixed keep fp32 master weights; fp16-true; fp32."`
	Quant      string   `help:"QLoRA base quantization: nf4, nf4-dq (double quant, default), fp4, int8."`
	Rank       *int64   `placeholder:"16" help:"LoRA rank, from 1 up to the widest targeted module (default 16)."`
	Targets    []string `sep:"," help:"LoRA targets: 'attention' (default), 'all-linear', 'mlp', or module names as the model names them (q_proj,v_proj)."`
	Extra      []string `name:"extra-trainable" sep:"," help:"Modules trained in full besides adapters (lm_head, embed_tokens)."`
	SeqLen     int64    `name:"seq-len" default:"2048" help:"Tokens per sequence (padded or packed length)."`
	Batch      int64    `default:"1" help:"Micro-batch size per GPU."`
	GradAccum  int64    `name:"grad-accum" default:"1" help:"Micro-batches per optimizer update. Above 1 the gradients stay resident through the next forward, and FSDP's no_sync keeps them unsharded."`
	Dynamic    bool     `name:"dynamic-padding" help:"Batches are padded to their own longest sample (--seq-len is the longest): shapes change between steps and the caching allocator reserves more."`
	Dropout    *float64 `name:"lora-dropout" help:"LoRA dropout probability; above 0 each adapter keeps its dropped-out input and mask for the backward. Default: the stack's (0 for plain PEFT)."`
	GradCkpt   string   `name:"grad-ckpt" help:"Activation checkpointing: none (default), full, unsloth, offload."`
	Optimizer  string   `help:"adamw_torch (foreach; default), adamw_torch_fused, sgd, adamw_8bit, paged_adamw_8bit, paged_adamw_32bit, adafactor, lion_8bit."`
	OptimDtype string   `name:"optimizer-state-dtype" help:"fp32 or bf16; default: the parameter dtype."`
	Attn       string   `help:"Attention implementation: sdpa (default), flash_attention_2, flex_attention, or eager, which adds the s² score matrix."`
	FusedCE    string   `name:"fused-ce" help:"Fused or chunked cross-entropy: none (default), liger or cut_cross_entropy (no logits materialised), chunked."`
	Compile    bool     `help:"The run uses torch.compile (not modelled: noted in the assumptions)."`
	Stack      string   `help:"Framework preset that fills what the flags leave unset: hf-trainer, trl, peft-accelerate, axolotl, litgpt, torchtune, fsdp_qlora, unsloth (precision, optimizer, attention, adapter and frozen dtypes, fp32 upcast under QLoRA, the loss path)."`
}
