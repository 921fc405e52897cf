package estimate

import "fmt"

// applySharding turns single-GPU components into per-GPU ones for a
// data-parallel run. What each strategy divides by the world size N:
//
//	ddp, fsdp_no_shard: nothing; DDP's reducer keeps gradient buckets the size
//	  of the gradients (PyTorch DDP docs, gradient_as_bucket_view: "the saved
//	  memory size will be equal to the total gradients size").
//	zero1:              optimizer states (DeepSpeed ZeRO stage 1).
//	zero2, fsdp_shard_grad_op: gradients and optimizer states (ZeRO stage 2).
//	zero3, fsdp_full_shard, fsdp_hybrid_shard: weights, adapters, gradients and
//	  optimizer states (ZeRO stage 3), plus the gathered parameters of the
//	  layer being computed and the one prefetched.
//
// DeepSpeed's estimate_zero2_model_states_mem_needs / estimate_zero3_… use the
// same division: per GPU 2·P + 16·P/N for ZeRO-2 (fp16 params, fp32 grads,
// Adam states and master weights), 18·P/N (+ largest layer) for ZeRO-3.
// CPU offload moves optimizer states (and, for "params", sharded weights) to
// host RAM, which HostOffload reports.
func applySharding(e *Estimate, r Request) {
	st, n := r.Sharding.Strategy, r.Sharding.GPUs
	spec := st.Spec()
	note := func(c *Component, s string) {
		if !r.Terse {
			c.Source += s
		}
	}
	if !spec.DataParallel {
		if n > 1 {
			e.Assumptions = append(e.Assumptions, fmt.Sprintf("%d GPUs without a sharding strategy: each holds a full replica", n))
		}
		return
	}
	e.PerGPU = true
	div := func(names ...string) {
		for i := range e.Components {
			for _, nm := range names {
				if e.Components[i].Name == nm {
					e.Components[i].Bytes = (e.Components[i].Bytes + n - 1) / n
					note(&e.Components[i], fmt.Sprintf("; ÷ %d GPUs (%s)", n, st))
				}
			}
		}
	}
	switch spec.Shards {
	case ShardNothing:
		for i := range e.Components {
			if e.Components[i].Name == CGradients {
				e.Components[i].Bytes *= 2
				note(&e.Components[i], "; ×2 for DDP gradient buckets")
			}
		}
	case ShardOptimizer:
		div(COptimizer)
	case ShardGradients:
		div(CGradients, COptimizer)
	case ShardParameters:
		w, _ := e.Component(CWeights)
		layers := int64(len(r.Model.Layers))
		div(CWeights, CQuantOverhead, CAdapters, CGradients, COptimizer)
		if layers > 0 && n > 1 {
			// Two layers' unsharded parameters are live: the one computing and
			// the one prefetched (FSDP forward/backward prefetch, ZeRO-3 prefetch).
			gathered := 2 * w / layers
			for i := range e.Components {
				if e.Components[i].Name == CWeights {
					e.Components[i].Bytes += gathered
					note(&e.Components[i], "; + 2 gathered layers")
				}
			}
		}
	}
	off := r.Sharding.CPUOffload.Spec()
	if off.Optimizer {
		// ZeRO-Offload (DeepSpeed offload_optimizer) runs the optimizer on
		// the CPU: its states and temporaries live in host RAM, and for a
		// mixed-precision full fine-tune so do the fp32 master weights and
		// fp32 gradients (partitioned over the world); the GPU keeps the
		// 16-bit weights and a 16-bit gradient partition (whole for ZeRO-1).
		mixedFull := r.Method == Full && r.Precision.mixed() && spec.Shards != ShardNothing
		p := r.Model.Params()
		for i := range e.Components {
			c := &e.Components[i]
			switch {
			case c.Name == COptimizer:
				e.HostOffload += c.Bytes
				c.Bytes = 0
				note(c, "; offloaded to CPU")
			case mixedFull && c.Name == CWeights:
				c.Bytes /= 2
				note(c, "; 16-bit on the GPU, the fp32 master copy on the CPU")
			case mixedFull && c.Name == CGradients:
				grads := 2 * p / n
				if spec.Shards == ShardOptimizer {
					grads = 2 * p
				}
				c.Bytes = grads
				note(c, "; a 16-bit gradient partition on the GPU, fp32 gradients and the optimizer step on the CPU")
			}
		}
		if mixedFull {
			e.HostOffload += 8 * p / n // fp32 master weights and fp32 gradients
		}
	}
	if off.Params {
		layers := int64(len(r.Model.Layers))
		for i := range e.Components {
			if e.Components[i].Name == CWeights && layers > 0 {
				keep := 2 * e.Components[i].Bytes / layers
				e.HostOffload += e.Components[i].Bytes - keep
				e.Components[i].Bytes = keep
				note(&e.Components[i], "; parameters offloaded to CPU, 2 layers resident")
			}
		}
	}
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
