package estimate

import "slices"

// bitsandbytes' paged optimizers (PagedAdamW, PagedAdamW8bit, …) allocate a
// parameter's state buffers with F.get_paged — cudaMallocManaged, CUDA
// unified memory — when the parameter has at least 1e5 elements
// (Optimizer8bit.get_state_buffer in bitsandbytes/optim/optimizer.py; a
// smaller parameter's state is an ordinary torch.zeros_like on its device).
// Unified memory is not the caching allocator's: torch.cuda.max_memory_allocated
// and max_memory_reserved never count it, while nvidia-smi shows the pages
// resident on the card. Under memory pressure the driver evicts them to host
// RAM and pages them back for each step, so they slow a run down instead of
// failing it: a paged state is not part of what must fit. The 8-bit
// optimizers' quantization maps and per-block absmax stay ordinary device
// tensors (Optimizer2State.init_state: torch.zeros on p.device).

// pagedMinNumel is get_state_buffer's threshold, in elements.
const pagedMinNumel = 100_000

// trainableSplit counts the trainable elements, tensor by tensor, in
// tensors of fewer than lo elements (small), of lo up to hi (mid) and of
// hi or more (large), in one pass.
func trainableSplit(r Request, lo, hi int64) (small, mid, large int64) {
	put := func(numel, copies int64) {
		switch {
		case numel <= 0 || copies <= 0:
		case numel < lo:
			small += numel * copies
		case numel < hi:
			mid += numel * copies
		default:
			large += numel * copies
		}
	}
	m := r.Model
	if r.Method == Full {
		eachFullTensor(r, put)
		return small, mid, large
	}
	if a, ok := litgptAdapters(r); ok && r.Stack == StackLitGPT {
		f := litgptAdapterShapes(r, a)
		for _, n := range f.Block[:f.N] {
			put(n, m.NumLayers)
		}
		for _, n := range f.Head[:f.H] {
			put(n, 1)
		}
		return small, mid, large
	}
	rank := r.LoRARank
	lins, err := m.Targets(r.LoRATargets)
	if err != nil {
		return 0, 0, 0 // Normalize has already rejected unresolvable targets
	}
	for _, l := range lins {
		put(rank*l.In, l.Copies)  // lora_A
		put(l.Out*rank, l.Copies) // lora_B
	}
	if r.ExtraLoRAOnHead {
		put(rank*m.Hidden, 1)
		put(m.Vocab*rank, 1)
	}
	for _, name := range r.ExtraTrainable {
		switch {
		case isOutputLayer(name) && m.LMHeadParams > 0:
			put(m.LMHeadParams, 1)
		case isOutputLayer(name), isInputEmbedding(name):
			put(m.EmbeddingParams, 1)
		}
	}
	return small, mid, large
}

// eachFullTensor calls put with each parameter tensor of a full fine-tune
// (its elements, and how many such tensors): every Linear's weight and bias
// per copy, the norms of a layer as one group (each norm is a vector of the
// hidden size), the embeddings and a separate output layer; weights outside
// the text model (a frozen tower) as one large tensor.
func eachFullTensor(r Request, put func(numel, copies int64)) {
	m := r.Model
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			put(lin.In*lin.Out, lin.Copies)
			if lin.Bias {
				put(lin.Out, lin.Copies)
			}
		}
		put(l.NormParams, 1)
	}
	put(m.FinalNormParams, 1)
	put(m.EmbeddingParams, 1)
	put(m.PositionParams, 1)
	put(m.LMHeadParams, 1)
	put(m.HeadParams, 1)
	if r.Stack == StackLitGPT && m.LMHeadParams == 0 {
		put(m.Vocab*m.Hidden, 1) // litgpt's untied copy of a tied head
	}
	rest := m.Params() - m.TextParams()
	put(rest, 1)
}

// optimizerShards is how many ranks divide the optimizer's states: the
// GPUs of a strategy that shards them (applySharding), or of DeepSpeed's
// stage 0 in bf16, whose BF16_Optimizer partitions its flat groups over the
// ranks as ZeRO-1 does (deepspeed.go); else 1.
func optimizerShards(r Request) int64 {
	st := r.Sharding.Strategy
	if r.Sharding.GPUs > 1 && (dsBF16Stage0(r) || shardedStrategy(st) && slices.Contains(dividedState(st), COptimizer)) {
		return r.Sharding.GPUs
	}
	return 1
}

// pagedStates is what a paged optimizer keeps on the device and in unified
// memory, in bytes over the whole model: the states of tensors under
// pagedMinNumel on the device, the rest in unified memory (and, for an
// 8-bit optimizer with a min_8bit_size, the tensors under it apart). The
// threshold is tested on the whole tensor also where a strategy shards the
// optimizer, an approximation: under FSDP1 with use_orig_params each
// rank's optimizer sees its contiguous slice of the flat parameter, so a
// tensor is whole on one or two ranks and empty on the others
// (_use_sharded_views in torch/distributed/fsdp/_flat_param.py); without
// use_orig_params it sees one flat shard, paged whole; FSDP2's DTensor
// shards are not supported by bitsandbytes. Both counts stay whole-model,
// as the other states are before applySharding divides them. (DeepSpeed's
// flat partitions are pagedFlat's.)
func pagedStates(r Request, opt OptimizerSpec, stateBytes int64) (device, paged int64) {
	var lo int64
	if opt.EightBit {
		lo = opt.Min8bitNumel
	}
	small, mid, large := trainableSplit(r, lo, pagedMinNumel)
	return stateBytesSplit(small, mid, large, opt, stateBytes)
}

// eightBitStates is an unpaged 8-bit optimizer's states, all on the
// device; flat (DeepSpeed's ZeRO optimizer, which steps flat partitions:
// pagedFlat) leaves no tensor under min_8bit_size.
func eightBitStates(r Request, opt OptimizerSpec, trainable int64, flat bool) int64 {
	var small int64
	if opt.Min8bitNumel > 0 && !flat && !everyTensorAtLeast(r, opt.Min8bitNumel) {
		small, _, _ = trainableSplit(r, opt.Min8bitNumel, opt.Min8bitNumel)
		small = min(small, trainable)
	}
	device, _ := stateBytesSplit(small, trainable-small, 0, opt, 0)
	return device
}

// everyTensorAtLeast reports, without resolving the targets tensor by
// tensor (trainableSplit; an estimate asks on every request), that each
// tensor a LoRA run trains has at least n elements: an adapter matrix is
// the rank times one side of its Linear, and the model's narrowest Linear
// bounds every side of a dense model's modules (NarrowestLinear leaves
// routers out, so a mixture of experts is walked); a LoRA head and extra
// trained embeddings or heads are wider still. LitGPT's adapters split the
// fused qkv by slice, narrower than any HF module: they are walked too
// (cheaply, from their shapes).
func everyTensorAtLeast(r Request, n int64) bool {
	m := r.Model
	return r.Method != Full && r.Stack != StackLitGPT && m.Experts == 0 && r.LoRARank*m.NarrowestLinear() >= n
}

// pagedFlat is pagedStates under DeepSpeed's ZeRO optimizer, which hands
// the client optimizer its flat fp32 partitions (one per parameter group
// and rank, single_partition_of_fp32_groups in ZeRO-1/2, the flat
// sub-groups of ZeRO-3, BF16_Optimizer's flat groups), each far above
// pagedMinNumel: every state is paged.
func pagedFlat(trainable int64, opt OptimizerSpec, stateBytes int64) (device, paged int64) {
	return stateBytesSplit(0, 0, trainable, opt, stateBytes)
}

// stateBytesSplit is the optimizer's state bytes on the device and in
// unified memory for small elements (tensors under min_8bit_size: fp32
// states, no absmax, on the device), device elements and paged ones: for
// an 8-bit optimizer one byte a state plus every quantized block's fp32
// absmax, on the device; else stateBytes a state.
func stateBytesSplit(small, dev, pg int64, opt OptimizerSpec, stateBytes int64) (device, paged int64) {
	if !opt.EightBit {
		return (small + dev) * opt.States * stateBytes, pg * opt.States * stateBytes
	}
	q := dev + pg
	return small*opt.States*4 + dev*opt.States + q*opt.States*4/opt.AbsmaxBlock, pg * opt.States
}
