package estimate

// DeepSpeed's bf16 and fp16 modes are not torch.autocast. The engine casts
// the whole module to 16 bits when it is built (runtime/engine.py,
// _configure_distributed_model: module.half() / module.bfloat16()), and
// accelerate turns its own autocast off under DeepSpeed (accelerator.py:
// native_amp only when the distributed type is not DEEPSPEED). So weights,
// gradients, adapters and activations are 16-bit, nothing is cast per
// matmul, and the ZeRO optimizer keeps what "-mixed" means: an fp32 copy of
// each trained parameter's partition (runtime/zero/stage_1_and_2.py,
// single_partition_of_fp32_groups: "A partition of the fp32 master weights
// that will be updated by this process"; stage3.py fp32_partitioned_groups_flat),
// fp32 optimizer states for it, and an fp32 gradient partition during the
// step. DeepSpeed's own estimate_zero2_model_states_mem_needs counts the
// same per GPU: 2 B of 16-bit parameters + 18 B ÷ N (16-bit and fp32
// gradients, fp32 parameters, two fp32 Adam states).
// (Read at microsoft/DeepSpeed 38327e07f6, accelerate 1.2.1.)

// deepspeedMixed reports a DeepSpeed ZeRO run in a -mixed precision.
func deepspeedMixed(r Request) bool {
	return r.Precision.mixed() && r.Sharding.Strategy.Spec().Family == FamilyDeepSpeed
}

// deepspeedModule is the request as DeepSpeed trains it, and whether it was
// rewritten: a -mixed precision becomes its 16-bit module (bf16-true,
// fp16-true), whose fp32 master weights the caller adds (terms.DSMaster), a
// frozen base is 16-bit whatever it was loaded in (the engine casts every
// floating parameter; 4-bit packed weights in uint8 are not floating), and
// PEFT's fp32 upcast of the norms under QLoRA is undone by the same cast.
// Other requests are returned unchanged. The default estimator applies it
// after Normalize; the frozen reference estimators do not.
func deepspeedModule(r Request) (Request, bool) {
	if !deepspeedMixed(r) {
		return r, false
	}
	switch r.Precision {
	case BF16Mixed:
		r.Precision = BF16True
	case FP16Mixed:
		r.Precision = FP16True
	}
	r.FrozenBaseBytes = 0
	no := false
	r.UpcastFrozen = &no
	return r, true
}

// dsMasterBytes are the fp32 master weights DeepSpeed's ZeRO optimizer
// keeps for the trained parameters (whole model; applySharding divides
// them with the optimizer states), and dsGradBytes the fp32 gradient
// partition it builds for the step (whole model; divided per GPU by
// stepTempPerGPU).
const (
	dsMasterBytes = 4
	dsGradBytes   = 4
)
