package estimate

import (
	"fmt"
	"slices"
)

// applySharding turns single-GPU components into per-GPU ones for a
// data-parallel run. What each strategy divides by the world size N:
//
//	ddp, fsdp_no_shard: nothing; DDP's reducer keeps gradient buckets the size
//	  of the gradients (PyTorch DDP docs, gradient_as_bucket_view: "the saved
//	  memory size will be equal to the total gradients size").
//	zero0:              nothing, without DDP's buckets (DeepSpeed's stage 0).
//	zero1:              optimizer states (DeepSpeed ZeRO stage 1).
//	zero2, fsdp_shard_grad_op: gradients and optimizer states (ZeRO stage 2).
//	zero3, fsdp_full_shard, fsdp_hybrid_shard: weights, adapters, gradients and
//	  optimizer states (ZeRO stage 3), plus the gathered parameters of the
//	  layer being computed and the one prefetched.
//
// DeepSpeed's estimate_zero2_model_states_mem_needs / estimate_zero3_… use the
// same division: per GPU 2·P + 18·P/N for ZeRO-2 since v0.14.3 (16-bit
// params whole; 16-bit and fp32 grads, fp32 master weights and Adam states
// sharded), 18·P/N (+ largest layer) for ZeRO-3; DeepSpeed's mixed precision
// (a 16-bit module, fp32 master weights in the optimizer) is deepspeed.go's.
// CPU offload moves optimizer states (and, for "params", sharded weights) to
// host RAM, which HostOffload reports.
func applySharding(e *Estimate, r Request) {
	st, n := r.Sharding.Strategy, r.Sharding.GPUs
	if !shardedStrategy(st) {
		return
	}
	e.PerGPU = true
	w, _ := e.Component(CWeights)
	divided := dividedState(st)
	for i := range e.Components {
		c := &e.Components[i]
		if slices.Contains(divided, c.Name) {
			c.Bytes = (c.Bytes + n - 1) / n
		}
		if c.Name == CGradients && gradientBuckets(st) {
			c.Bytes *= 2
		}
		if c.Name == CWeights && gathersLayers(r) {
			// Two layers' unsharded parameters are live: the one computing and
			// the one prefetched (FSDP forward/backward prefetch, ZeRO-3 prefetch).
			// (In the stored dtype. Read as gatheredBytes, 16-bit for a
			// mixed-precision full fine-tune, the three liger rows fall
			// 2–3 points, two of them closer, and FSDP2's torchtitan rows
			// 1–2 points further under: FSDP2's all-gather buffer beside
			// the copied-out parameters, which this does not model, is a
			// candidate for the difference.)
			c.Bytes += 2 * w / int64(len(r.Model.Layers))
		}
	}
	off := r.Sharding.CPUOffload
	if offloadsOptimizer(off) {
		// ZeRO-Offload (DeepSpeed offload_optimizer) runs the optimizer on
		// the CPU: its states and temporaries live in host RAM, and for a
		// mixed-precision full fine-tune so do the fp32 master weights and
		// fp32 gradients (partitioned over the world); the GPU keeps the
		// 16-bit weights and a 16-bit gradient partition (whole for ZeRO-1).
		mixedFull := offloadsMasterWeights(r)
		p := r.Model.Params()
		for i := range e.Components {
			c := &e.Components[i]
			switch {
			case c.Name == COptimizer:
				e.HostOffload += c.Bytes
				c.Bytes = 0
			case mixedFull && c.Name == CWeights:
				c.Bytes /= 2
			case mixedFull && c.Name == CGradients:
				grads := 2 * p / n
				if st.Spec().Shards == ShardOptimizer {
					grads = 2 * p
				}
				c.Bytes = grads
			}
		}
		if mixedFull {
			e.HostOffload += 8 * p / n // fp32 master weights and fp32 gradients
		}
	}
	if offloadsParams(off) {
		layers := int64(len(r.Model.Layers))
		for i := range e.Components {
			if e.Components[i].Name != CWeights || layers == 0 {
				continue
			}
			if shardGradOpFSDP(r) {
				// Its gathered model and its shard are the phases'
				// (shardGradOpWeights): only the shard is in host RAM.
				e.HostOffload += (w + n - 1) / n
				continue
			}
			// The computing unit and the prefetched one, unsharded: two
			// layers of the whole model as gathered, not of a rank's shard.
			keep := min(e.Components[i].Bytes, 2*gatheredBytes(r, w)/layers)
			e.HostOffload += e.Components[i].Bytes - keep
			e.Components[i].Bytes = keep
		}
	}
}

// stepTempPerGPU is what an optimizer step's temporaries of b bytes (for
// one GPU's whole model) hold per GPU: a shard's worth where gradients are
// sharded, since the step runs on each rank's shards (FSDP's local
// parameters, torchao's DTensor states); nothing on the GPU when the
// optimizer runs on the CPU (ZeRO-Offload); the whole under DDP, whose
// buckets hold gradients, not step temporaries.
func stepTempPerGPU(r Request, b int64) int64 {
	st, n := r.Sharding.Strategy, r.Sharding.GPUs
	switch {
	case b == 0:
		return 0
	case shardedStrategy(st) && offloadsOptimizer(r.Sharding.CPUOffload):
		return 0
	case shardedStrategy(st) && slices.Contains(dividedState(st), CGradients) && n > 1:
		return (b + n - 1) / n
	case st.Spec().Family == FamilyDeepSpeed && st.Spec().Shards >= ShardOptimizer && n > 1:
		// ZeRO-1 divides the optimizer's partition too: each rank steps
		// only the fp32 partition it owns (stage_1_and_2.py).
		return (b + n - 1) / n
	}
	return b
}

// shardingNote says how applySharding changed a component, to follow the
// component's own source ("" when it did not). It reads the same
// predicates as applySharding, in the same order.
func shardingNote(r Request, id ComponentID) string {
	st, n := r.Sharding.Strategy, r.Sharding.GPUs
	if !shardedStrategy(st) {
		return ""
	}
	var note string
	if slices.Contains(dividedState(st), id) {
		note += fmt.Sprintf("; ÷ %d GPUs (%s)", n, st)
	}
	if id == CGradients && gradientBuckets(st) {
		note += "; ×2 for DDP gradient buckets"
	}
	if id == CWeights && gathersLayers(r) {
		note += "; + 2 gathered layers"
	}
	off := r.Sharding.CPUOffload
	if offloadsOptimizer(off) {
		mixedFull := offloadsMasterWeights(r)
		switch {
		case id == COptimizer:
			note += "; offloaded to CPU"
		case mixedFull && id == CWeights:
			note += "; 16-bit on the GPU, the fp32 master copy on the CPU"
		case mixedFull && id == CGradients:
			note += "; a 16-bit gradient partition on the GPU, fp32 gradients and the optimizer step on the CPU"
		}
	}
	if offloadsParams(off) && id == CWeights && len(r.Model.Layers) > 0 && !shardGradOpFSDP(r) {
		note += "; parameters offloaded to CPU, 2 layers resident"
	}
	return note
}

// replicaAssumption is what a multi-GPU run without a sharding strategy
// means for the per-GPU figures ("" for one GPU or a strategy).
func replicaAssumption(r Request) string {
	if n := r.Sharding.GPUs; !shardedStrategy(r.Sharding.Strategy) && n > 1 {
		return fmt.Sprintf("%d GPUs without a sharding strategy: each holds a full replica", n)
	}
	return ""
}

// shardedStrategy: the run is data-parallel under a strategy.
func shardedStrategy(st Strategy) bool { return st.Spec().DataParallel }

// The state each strategy divides by the world size.
var (
	zero1State = []ComponentID{COptimizer}
	zero2State = []ComponentID{CGradients, COptimizer}
	zero3State = []ComponentID{CWeights, CQuantOverhead, CAdapters, CGradients, COptimizer}
)

// dividedState is the state a strategy divides by the world size.
func dividedState(st Strategy) []ComponentID {
	switch st.Spec().Shards {
	case ShardOptimizer:
		return zero1State
	case ShardGradients:
		return zero2State
	case ShardParameters:
		return zero3State
	}
	return nil
}

// gradientBuckets: DDP's reducer keeps buckets the size of the gradients
// (a data-parallel strategy that shards nothing: ddp, fsdp_no_shard).
func gradientBuckets(st Strategy) bool {
	s := st.Spec()
	// DeepSpeed's stage 0 all-reduces through transient flat buckets of
	// allreduce_bucket_size elements (engine.py, allreduce_gradients →
	// buffered_allreduce_fallback), not a persistent copy of the gradients.
	return s.DataParallel && s.Shards == ShardNothing && s.Family != FamilyDeepSpeed
}

// shardGradOpFSDP: FSDP's SHARD_GRAD_OP, which unshards every unit before
// its forward and reshards only after the backward (torch's FSDP1:
// SHARD_GRAD_OP is among NO_RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES). Its
// all-gather destination (FlatParameter._full_param_padded, on the GPU, in
// the compute dtype) is a buffer apart from the rank's shard (_local_shard,
// in the stored dtype; on the CPU with parameter offload), so from the
// forward to the backward a rank holds the gathered model beside its shard,
// and only the shard in the optimizer step (_flat_param.py).
func shardGradOpFSDP(r Request) bool {
	s := r.Sharding.Strategy.Spec()
	return s.Family == FamilyFSDP && s.Shards == ShardGradients && r.Sharding.GPUs > 1
}

// shardGradOpWeights are, under shardGradOpFSDP, the rank's resident shard
// (none on the GPU with the parameters offloaded) and the gathered model the
// forward and backward hold beside it; w is the whole weights in the
// stored dtype, gathered as gatheredBytes says.
func shardGradOpWeights(r Request, w int64) (shard, gathered int64) {
	n := r.Sharding.GPUs
	if !offloadsParams(r.Sharding.CPUOffload) {
		shard = (w + n - 1) / n
	}
	return shard, gatheredBytes(r, w)
}

// gatheredBytes is what the whole model's weights w, in their stored dtype,
// weigh as FSDP or ZeRO-3 gathers them for compute. A full fine-tune's
// trained weights are gathered in the compute dtype residualBytes gives
// them (16-bit under FSDP's mixed precision, as accelerate sets param_dtype
// and Lightning Fabric does since 2.6.0; a policy that keeps param_dtype
// fp32 under autocast — Fabric's bf16-mixed before 2.6.0, or one written by
// hand — gathers 4 B and saves autocast's 16-bit cast of each weight, which
// this does not see); a frozen base is gathered as stored.
func gatheredBytes(r Request, w int64) int64 {
	if r.Method != Full {
		return w
	}
	return w * residualBytes(r) / max(1, r.paramBytes())
}

// gathersLayers: the parameters are sharded and gathered a unit at a time,
// the computing one and the prefetched one.
func gathersLayers(r Request) bool {
	return paramsSharded(r.Sharding.Strategy) && len(r.Model.Layers) > 0 && r.Sharding.GPUs > 1
}

func offloadsOptimizer(off Offload) bool { return off.Spec().Optimizer }

func offloadsParams(off Offload) bool { return off.Spec().Params }

// offloadsMasterWeights: optimizer offload of a mixed-precision full
// fine-tune under a sharding strategy also moves the fp32 master weights
// and gradients to the CPU.
func offloadsMasterWeights(r Request) bool {
	return r.Method == Full && r.Precision.mixed() && r.Sharding.Strategy.Spec().Shards != ShardNothing
}

// noSyncAccumulation reports whether a sharded run accumulates gradients
// unsharded between updates (the update itself reduce-scatters them, so the
// optimizer step sees shards). Under FSDP, no_sync() skips the reduce-scatter of the
// micro-batches that do not update, so every rank keeps the full, unsharded
// gradients until the update (PyTorch FSDP.no_sync docs: "gradients are
// accumulated in the unsharded flat parameter's gradient, which uses more
// memory"). Fabric's no_backward_sync (litgpt) and accelerate's accumulate()
// (transformers Trainer, TRL, axolotl) enter no_sync on the micro-batches
// that accumulate; torchtune's and fsdp_qlora's loops do not.
func noSyncAccumulation(r Request) bool {
	if r.GradAccum <= 1 || !fsdpSharded(r.Sharding.Strategy) {
		return false
	}
	return r.Stack == "" || r.Stack.Spec().NoSyncAccumulation
}

// fsdpSharded: an FSDP strategy that shards gradients (full, grad-op or
// hybrid shard; not no_shard).
func fsdpSharded(st Strategy) bool {
	s := st.Spec()
	return s.Family == FamilyFSDP && s.Shards >= ShardGradients
}

// paramsSharded: the strategy partitions the parameters themselves (ZeRO-3,
// FSDP full and hybrid shard) and gathers each unit for its compute.
func paramsSharded(st Strategy) bool { return st.Spec().Shards == ShardParameters }
