package estimate

import "fmt"

// DeepSpeed's bf16 and fp16 modes are not torch.autocast. The engine casts
// the whole module to 16 bits when it is built (runtime/engine.py,
// _configure_distributed_model: module.half() / module.bfloat16()), and
// accelerate turns its own autocast off under DeepSpeed (accelerator.py:
// native_amp only when the distributed type is not DEEPSPEED). So weights,
// gradients, adapters and activations are 16-bit, nothing is cast per
// matmul, and the ZeRO optimizer keeps an fp32 copy of each trained
// parameter's partition (runtime/zero/stage_1_and_2.py,
// single_partition_of_fp32_groups: "A partition of the fp32 master weights
// that will be updated by this process", cloned with .float() whatever the
// module's dtype; stage3.py fp32_partitioned_groups_flat), fp32 optimizer
// states for it, and an fp32 gradient partition during the step. DeepSpeed's
// own estimate_zero2_model_states_mem_needs counts the same per GPU since
// v0.14.3 (PR #5099): 2 B of 16-bit parameters + 18 B ÷ N (16-bit and fp32
// gradients, fp32 parameters, two fp32 Adam states).
//
// Three schedules of the step are DeepSpeed's own:
//   - ZeRO-1 reduces the whole 16-bit gradients at the end of the backward,
//     keeps views of its rank's partition and frees the rest
//     (stage_1_and_2.py, the backward epilogue's zero_grad(set_to_none))
//     before the step builds the fp32 partition: the peak is the larger of
//     the whole 16-bit gradients and partition + fp32 partition + step
//     temporaries (dsStepGradients).
//   - ZeRO-3 builds the fp32 gradient and steps one sub-group at a time
//     (stage3.py; sub_group_size, 1e9 elements by default, zero/config.py):
//     the step's fp32 temporaries are those of one sub-group at most
//     (dsSubGroupElems).
//   - Stage 0 (zero0) keeps a full replica and all-reduces through transient
//     flat buckets, not a persistent copy of the gradients (gradientBuckets);
//     its optimizer follows the precision (dsMasterCopy, dsBF16Stage0).
//
// (Read at microsoft/DeepSpeed 38327e07f6, accelerate 1.2.1.)

// deepspeedZeRO reports a run of DeepSpeed's engine (zero0 … zero3), which
// casts a 16-bit or mixed-precision module to 16 bits (deepspeedModule).
func deepspeedZeRO(r Request) bool {
	return r.Sharding.Strategy.Spec().Family == FamilyDeepSpeed
}

// deepspeedModule is the request as DeepSpeed trains it: a -mixed precision
// becomes its 16-bit module (bf16-true, fp16-true), a frozen base loaded in
// fp32 is 16-bit (the engine casts every floating parameter; 4-bit packed
// weights in uint8 are not floating), and PEFT's fp32 upcast of the norms
// under QLoRA is undone by the same cast. The fp32 master weights are the
// optimizer's (normalizedTerms). Other requests, and fp32 ones, are
// returned unchanged. The default estimator applies it after Normalize; the
// frozen reference estimators do not.
func deepspeedModule(r Request) Request {
	if !deepspeedZeRO(r) || r.Precision == FP32 {
		return r
	}
	switch r.Precision {
	case BF16Mixed:
		r.Precision = BF16True
	case FP16Mixed:
		r.Precision = FP16True
	}
	if r.FrozenBaseBytes == 4 {
		r.FrozenBaseBytes = 0
	}
	no := false
	r.UpcastFrozen = &no
	return r
}

// dsMasterCopy reports a DeepSpeed run whose optimizer keeps fp32 master
// weights: every ZeRO stage (it clones an fp32 partition whatever the
// module's dtype), and stage 0 with a 16-bit module (FP16_Optimizer,
// BF16_Optimizer); stage 0 in fp32 runs the plain optimizer (engine.py,
// _do_optimizer_sanity_check).
func dsMasterCopy(r Request) bool {
	if !deepspeedZeRO(r) {
		return false
	}
	return r.Sharding.Strategy.Spec().Shards != ShardNothing || r.Precision != FP32
}

// dsBF16Stage0 reports DeepSpeed's stage 0 in bf16, which BF16_Optimizer
// runs (its gradients accumulate in fp32): it divides the fp32 master
// weights and states over the data-parallel ranks (bf16_optimizer.py,
// partition_size = numel // dp_world_size) and keeps a whole fp32 gradient
// buffer from start-up (fp32_groups_gradients_flat, zeros_like the flat
// bf16 parameters), into which each bf16 gradient is accumulated and freed.
func dsBF16Stage0(r Request) bool {
	return deepspeedZeRO(r) && r.Sharding.Strategy.Spec().Shards == ShardNothing && r.Precision == BF16True
}

// deepspeed16 reports a request deepspeedModule has made a 16-bit module
// (its adapters are 16-bit too).
func deepspeed16(r Request) bool {
	return deepspeedZeRO(r) && r.Precision.Spec().ParamBytes == 2
}

const (
	// dsMasterBytes are the fp32 master weights DeepSpeed's ZeRO optimizer
	// keeps per trained parameter (divided with the optimizer states), and
	// dsGradBytes the fp32 gradient partition it builds for the step.
	dsMasterBytes = 4
	dsGradBytes   = 4
	// dsSubGroupElems is ZeRO-3's default sub_group_size (zero/config.py).
	dsSubGroupElems = 1_000_000_000
)

// dsStepGradients is the step phase's gradients-and-temporaries per GPU
// under DeepSpeed, from the gradients component grads (per GPU, as
// applySharding left it) and the step temporaries temps (the whole model's,
// of trainable parameters): ZeRO-1's backward end or its partitioned step,
// whichever is larger; ZeRO-3's temporaries of one sub-group at most.
func dsStepGradients(r Request, grads, temps, trainable int64) int64 {
	st, n := r.Sharding.Strategy.Spec(), max(1, r.Sharding.GPUs)
	perGPU := stepTempPerGPU(r, temps)
	switch {
	case st.Shards == ShardOptimizer && n > 1:
		return max(grads, (grads+n-1)/n+perGPU)
	case st.Shards == ShardParameters && trainable > 0:
		perGPU = min(perGPU, temps/trainable*dsSubGroupElems)
	case dsBF16Stage0(r):
		perGPU = (temps + n - 1) / n // BF16_Optimizer steps its partition
	}
	return grads + perGPU
}

// assumptions are the request's assumption lines for the default estimator:
// those of the request as given (orig, normalized), and under DeepSpeed what
// deepspeedModule changed (r) and what its optimizer keeps, in the user's
// terms.
func (PhasePeak) assumptions(orig, r Request) []string {
	unconverted := orig.Method == QLoRA && r.Method == LoRA // unconvertedQLoRA
	if unconverted && !deepspeedZeRO(r) {
		// The request as given, and what it runs as.
		a := attentionAssumptions(requestAssumptionsWith(orig, "", lossAssumption(r)), r)
		return append(a, unconvertedAssumption(r))
	}
	if !deepspeedZeRO(r) {
		return attentionAssumptions(requestAssumptionsWith(r, qloraBaseAssumption(r), lossAssumption(r)), r)
	}
	shown := r
	shown.Precision = orig.Precision
	qlora := qloraBaseAssumption(shown)
	if r.Method == QLoRA && r.Precision != FP32 {
		qlora = fmt.Sprintf("%s base: only decoder Linear layers quantized; embeddings, lm_head and norms 16-bit: DeepSpeed's cast of the module undoes prepare_model_for_kbit_training's fp32 upcast", r.Quant)
	}
	a := attentionAssumptions(requestAssumptionsWith(shown, qlora, lossAssumption(r)), r)
	if r.Precision != FP32 {
		a = append(a, "DeepSpeed's mixed precision is not autocast: the engine casts the module to 16 bits, adapters too")
	}
	if unconverted {
		a = append(a, unconvertedAssumption(r))
	}
	switch {
	case dsBF16Stage0(r):
		a = append(a, "DeepSpeed's BF16_Optimizer divides fp32 master weights and states over the ranks and keeps a whole fp32 gradient buffer")
	case dsMasterCopy(r):
		a = append(a, "DeepSpeed's optimizer keeps fp32 master weights and fp32 states (of each rank's partition under ZeRO) and builds an fp32 gradient copy for the step")
	}
	return a
}

// attentionAssumptions adds the attention kernel's assumption lines for r
// (after deepspeedModule, whose 16-bit module takes flash).
func attentionAssumptions(a []string, r Request) []string {
	if sdpaMathFallback(r) {
		a = append(a, sdpaMathAssumption)
	}
	if sdpaWindowedGap(r) {
		a = append(a, sdpaWindowedAssumption)
	}
	return a
}
