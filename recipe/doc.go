// Package recipe writes the files that launch a chosen plan: a TRL SFT
// script with its SFTConfig, an HF Trainer + PEFT script with its
// TrainingArguments, the LoRA and model-loading settings both scripts read,
// an accelerate config (single GPU, DDP, the FSDP plugin or the DeepSpeed
// plugin), the DeepSpeed JSON under ZeRO, launch.sh with the torchrun and
// accelerate launch commands for N GPUs × M nodes, and a README.txt saying
// what the estimate assumed.
//
// Every memory-relevant setting in those files is the one the estimate
// assumed: precision and the dtype the weights load in, the 4/8-bit scheme,
// LoRA rank, targets and dropout, the adapters' dtype, activation
// checkpointing, the attention implementation, the loss kernel, the
// optimizer, the sharding strategy and its CPU offload, the micro-batch,
// gradient accumulation, world size and sequence length. A setting the
// stacks have no equivalent for (Unsloth's offloaded checkpointing, a
// chunked loss the Trainer cannot select, bf16 optimizer states next to
// other parameters, pure 16-bit weights under DeepSpeed, which keeps fp32
// master weights) is refused with an error naming it, never replaced by
// something that holds a different amount of memory.
//
// The package is pure: Files takes a plan and returns file names and
// contents; it writes nothing.
package recipe
