package plan

import "github.com/canifinetune/canifinetune/estimate"

// The rules below say how the engines a plan launches on (DeepSpeed, FSDP,
// bitsandbytes) actually run a combination of levers. The search applies
// them to every candidate it makes, so that a plan is estimated as it will
// run; the recipe package refuses a request that breaks them (one the user
// gave, not the search), so the two read one table and cannot drift.

// RunPrecision is the precision a sharding strategy trains in when asked
// for p. DeepSpeed ZeRO's bf16 and fp16 modes are mixed precision: the
// engine keeps fp32 master weights and fp32 optimizer states for the
// 16-bit model (deepspeed/runtime/bf16_optimizer.py, fp16/fused_optimizer.py),
// so "-true" under ZeRO runs as "-mixed". Other strategies train p as given.
func RunPrecision(s estimate.Strategy, p estimate.Precision) estimate.Precision {
	if s.Spec().Family != estimate.FamilyDeepSpeed {
		return p
	}
	switch p {
	case estimate.BF16True:
		return estimate.BF16Mixed
	case estimate.FP16True:
		return estimate.FP16Mixed
	}
	return p
}

// RunQuantStorage is the dtype packed 4-bit weights are stored in under a
// strategy. FSDP and ZeRO-3 shard a flat buffer of one dtype, so a QLoRA
// base they shard must store its packed weights in the 16-bit dtype of the
// other parameters (bitsandbytes' bnb_4bit_quant_storage, as fsdp_qlora
// sets it); elsewhere storage is as given.
//
// torchtune's QLoRA is torchao's NF4Tensor, which FSDP2 shards per
// parameter in its uint8 storage: storage is as given there.
func RunQuantStorage(st estimate.StackName, s estimate.Strategy, m estimate.Method, p estimate.Precision, storage estimate.Dtype) estimate.Dtype {
	if m != estimate.QLoRA || s.Spec().Shards != estimate.ShardParameters || st == estimate.StackTorchtune {
		return storage
	}
	if storage == estimate.DtypeBF16 || storage == estimate.DtypeFP16 {
		return storage
	}
	if p == estimate.FP16Mixed || p == estimate.FP16True {
		return estimate.DtypeFP16
	}
	return estimate.DtypeBF16
}

// OffloadRuns reports whether an optimizer can take its step on the CPU.
// DeepSpeed's ZeRO-Offload runs its own CPU AdamW (DeepSpeedCPUAdam, fp32
// states) in place of the optimizer, and FSDP's CPUOffload steps the
// optimizer on host tensors, where bitsandbytes' 8-bit and paged
// optimizers (CUDA kernels, CUDA managed memory) do not run.
func OffloadRuns(o estimate.Optimizer) bool {
	return o == estimate.AdamWTorch || o == estimate.AdamWTorchFused
}

// runnable appends to dst the shardings the request's stack runs a
// candidate with, on world GPUs (a search reuses one dst for its many
// lever settings). The Trainer-based stacks run every sharding but CPU
// offload of an optimizer with no CPU step. LitGPT's finetune scripts run
// one GPU with no checkpointing, or FSDP full-shard over every GPU with each
// block checkpointed and no offload, quantizing on one GPU only; torchtune's
// recipes run one GPU or FSDP2 (full shard, or no reshard after forward,
// with or without CPU offload, and torch's optimizers: torchtune supports
// bitsandbytes' on one device only). A lever the search adds (a method, a loss
// kernel) that the stack has no equivalent for gives no candidate; the
// request's own settings are kept, and a recipe refuses them by name.
func runnable(dst []shard, base estimate.Request, m estimate.Method, ck estimate.Checkpointing, ce estimate.LossKernel, op estimate.Optimizer, world int64, shards []shard) []shard {
	own := base.Stack == estimate.StackLitGPT || base.Stack == estimate.StackTorchtune || base.Stack == estimate.StackTorchtitan
	if own && ce != base.FusedCE && ce != estimate.LossNone && ce != estimate.LossChunked {
		return dst
	}
	out := dst
	for _, sh := range shards {
		off := sh.offload.Spec()
		ok := !off.Optimizer || OffloadRuns(op)
		switch base.Stack {
		case estimate.StackLitGPT:
			if world == 1 {
				ok = ok && ck == estimate.CkptNone
			} else {
				ok = ok && ck == estimate.CkptFull && sh.strategy == estimate.FSDPFullShard && sh.offload == estimate.OffloadNone &&
					(m != estimate.QLoRA || m == base.Method)
			}
		case estimate.StackTorchtitan:
			// torchtitan trains in full with torch's optimizers, on one
			// GPU, DDP replicas or FSDP2 (resharding after the forward
			// or not), with FSDP2's CPU offload of parameters and
			// optimizer or none (its parallelize functions).
			ok = ok && m == estimate.Full && torchOptimizer(op) &&
				(sh.offload == estimate.OffloadNone || sh.offload == estimate.OffloadParamsOptimizer)
			if world > 1 {
				ok = ok && (sh.strategy == estimate.FSDPFullShard || sh.strategy == estimate.FSDPShardGradOp || sh.strategy == estimate.DDP)
			}
		case estimate.StackTorchtune:
			if world > 1 {
				ok = ok && (sh.strategy == estimate.FSDPFullShard || sh.strategy == estimate.FSDPShardGradOp) &&
					(sh.offload == estimate.OffloadNone || sh.offload == estimate.OffloadParamsOptimizer) &&
					(torchOptimizer(op) || op == base.Optimizer)
			}
		}
		if ok {
			out = append(out, sh)
		}
	}
	return out
}

// torchOptimizer reports whether an optimizer is one of torch.optim's.
func torchOptimizer(o estimate.Optimizer) bool {
	return o == estimate.AdamWTorch || o == estimate.AdamWTorchFused || o == estimate.SGD
}
