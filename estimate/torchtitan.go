package estimate

// torchtitan's loss, where it differs from the transformers chain the
// default shape was measured on (docs/memory-model.md#torchtitans-loss).
// Read in pytorch/torchtitan: train.py and torchtitan/components/loss.py
// at bbb1b616e (2025-04-02) and ChunkedLossWrapper at 786e26f8e
// (2026-04-27) and main (2026-08).

// torchtitanLossChunks is ChunkedLossWrapper's num_chunks default.
const torchtitanLossChunks = 8

// torchtitanModelTypes are the dense decoders torchtitan implements itself
// that the preset and its per-op policy are read over: Llama 3
// (torchtitan/models/llama3) and Qwen3 (torchtitan/models/qwen3), with
// bias-free q, k, v, o and gated MLP Linears called in that order.
var torchtitanModelTypes = []string{"llama", "qwen3"}

// torchtitanLossBytes is what torchtitan's loss holds at its peak over
// s·b·vocab logits (logitUnit); ok is false where the stock chain applies
// (not the torchtitan stack, or its loss eager and whole).
//
// Whole (cross_entropy(pred.flatten(0, 1).float(), labels); pred deleted
// before the backward), compiled: Inductor's partitioner saves the 16-bit
// logits, the graph's input, rather than the fp32 log-softmax, and the
// backward writes a new 16-bit gradient beside them: AOTAutograd donates
// to the backward only saved tensors that do not alias a forward input
// (torch/_functorch/_aot_autograd, collect_fw_donated_buffer_idxs), and
// these are the input. 4 B per logit.
//
// Chunked (ChunkedLossWrapper, --fused-ce chunked): the final hidden
// states are split into 8 chunks along the tokens (views of the
// contiguous s·b·hidden tensor), detached; for each chunk the output layer
// runs, its loss, and at once its backward, whose hidden-state gradient is
// copied into an fp32 s·b·hidden buffer (GradAccumulator). The output
// layer stays unsharded across the chunks with its gradient sync off until
// the last, so a trained head's gradient accumulates unsharded in the fp32
// reduce dtype (vocab · hidden · 4 B) beside each chunk's 16-bit one (2 B).
// A chunk's own chain is its 16-bit logits beside, eager, the stock chain
// (12 B per logit: fp32 log-softmax and the two fp32 gradients) or,
// compiled, their 16-bit gradient (2 B). After the last chunk the buffer
// is cast to the hidden states' dtype for the decoder's backward, the two
// side by side.
func torchtitanLossBytes(r Request, logitUnit float64) (bytes float64, ok bool) {
	if r.Stack != StackTorchtitan || !r.Task.Spec().VocabLogits {
		return 0, false
	}
	// build_cross_entropy_loss wraps the loss in torch.compile when
	// training.compile is on (since bbb1b616e, 2025-04-02; from 2024-12-18
	// to then only the blocks were compiled: Request.EagerLoss).
	compiled := r.Compile && !r.EagerLoss
	switch lossPath(r) {
	case "full":
		if !compiled {
			return 0, false
		}
		return 4 * logitUnit, true
	case "chunked":
		m := r.Model
		chain := 2 + 12.0
		if compiled {
			chain = 2 + 2
		}
		td := float64(r.SeqLen*r.Batch) * float64(m.Hidden)
		head := 0.0
		if r.Method == Full {
			head = (4 + 2) * float64(m.Vocab*m.Hidden)
		}
		during := 4*td + chain*logitUnit/torchtitanLossChunks + head
		after := (4 + float64(residualBytes(r))) * td
		return max(during, after), true
	}
	return 0, false
}

// checkTorchtitan refuses, by field, what torchtitan does not run: it
// shards with FSDP2 (or replicates with DDP), never DeepSpeed; its losses
// are its own cross-entropy, whole or chunked; it applies no Liger or
// fused-kernel bundle; it checkpoints blocks fully or per op, offloading
// nothing but FSDP2's parameters and optimizer; and it builds torch.optim
// optimizers.
func checkTorchtitan(r Request) error {
	switch {
	case r.Sharding.Strategy.Spec().Family == FamilyDeepSpeed:
		return fieldErr("strategy", r.Sharding.Strategy, "fsdp_full_shard, fsdp_shard_grad_op, ddp or none under --stack torchtitan, which shards with FSDP2 only")
	case r.FusedCE != LossNone && r.FusedCE != LossChunked:
		return fieldErr("fused_ce", r.FusedCE, "none or chunked under --stack torchtitan (its own cross-entropy, whole or in ChunkedLossWrapper)")
	case len(r.Kernels) > 0:
		return fieldErr("kernels", r.Kernels[0], "none under --stack torchtitan, which applies no Liger or fused-kernel bundle")
	case r.GradCkpt.Spec().OffloadsInputs:
		return fieldErr("grad_ckpt", r.GradCkpt, "none, full or selective-op under --stack torchtitan")
	case r.Optimizer != AdamWTorch && r.Optimizer != AdamWTorchFused && r.Optimizer != SGD:
		return fieldErr("optimizer", r.Optimizer, "adamw_torch_fused, adamw_torch or sgd under --stack torchtitan, which builds torch.optim optimizers")
	case r.Sharding.CPUOffload != OffloadNone && r.Sharding.CPUOffload != OffloadParamsOptimizer:
		return fieldErr("cpu_offload", r.Sharding.CPUOffload, "none or params+optimizer under --stack torchtitan (FSDP2's CPUOffloadPolicy)")
	}
	return nil
}
