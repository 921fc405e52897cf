package estimate

// torchtune's own training loop and model code, where they differ from the
// transformers path the fitted shape was measured on: the chunked output
// projection and loss, the gradient of the output layer those chunks
// accumulate, and the tied embedding's gradient at the end of the backward
// (docs/memory-model.md#torchtunes-own-code-path). Read at pytorch/torchtune
// commit 1814feb17 (2024-11-18, the README's optimization-flags table).

// torchtuneOutputChunks is CEWithChunkedOutputLoss's num_output_chunks
// default (torchtune/modules/loss/ce_chunked_output_loss.py); the recipes
// pass it to the model (full_finetune_single_device.py,
// lora_finetune_single_device.py: model.set_num_output_chunks(
// loss_fn.num_output_chunks)), whose chunked_output applies the output
// projection to each of that many slices of the sequence
// (torchtune/modules/transformer.py, TransformerDecoder and
// TiedEmbeddingTransformerDecoder.chunked_output).
const torchtuneOutputChunks = 8

// torchtuneChunkedLoss reports whether a request runs torchtune's chunked
// output and CEWithChunkedOutputLoss (the torchtune stack with the chunked
// loss kernel).
func torchtuneChunkedLoss(r Request) bool {
	return r.Stack == StackTorchtune && lossPath(r) == "chunked" && r.Task.Spec().VocabLogits && r.Model.Seq2Seq == nil
}

// torchtuneChunkedLossBytes is what torchtune's chunked loss chain holds at
// its peak, early in the backward, over s·b·vocab logits (logitUnit).
//
// The forward leaves each chunk's saved tensors: compute_cross_entropy
// upcasts the chunk (logits.float()) and calls F.cross_entropy. Eager,
// log_softmax saves its fp32 output (4 B per logit); compiled (the recipe's
// training.compile_loss compiles compute_cross_entropy when compile=True),
// Inductor's partitioner saves the smaller 16-bit input and recomputes the
// softmax in the backward (2 B; torch/_functorch/partitioners.py,
// min_cut_rematerialization_partition). The 16-bit chunks are otherwise
// freed after the loss (_loss_step: del logits).
//
// The backward then runs in two passes, because chunked_output computes every
// chunk's projection before the loss computes any chunk's cross-entropy, and
// autograd's engine runs the ready node created last first
// (torch/csrc/autograd/engine.cpp, ReadyQueue ordered by sequence number):
//
//   - every chunk's cross-entropy backward, each replacing its saved tensors
//     with the 16-bit gradient of its logits (2 B per logit once all are done).
//     Eager, the chunk being differentiated holds its saved log-softmax beside
//     nll_loss's and log_softmax's fp32 gradients (8 B over one chunk's share),
//     so this pass peaks at its first chunk. Compiled, the saved tensor is
//     the compiled function's input, the 16-bit chunk, which AOTAutograd
//     does not donate to the backward (collect_fw_donated_buffer_idxs
//     skips saved tensors aliasing a forward input), so the chunk's new
//     16-bit gradient sits beside it: 2 B over one chunk's share. (An
//     earlier reading had the gradient written into a donated buffer; the
//     compiled QLoRA row torchtune-flags-010, where nothing else competes
//     with the chain, is +7.9 % with the extra 2 B and +2.6 % without.)
//   - every chunk's projection backward, each consuming its chunk's gradient.
//     A trained output layer (full fine-tuning) gets a whole vocab × hidden
//     weight gradient from each, which autograd sums into the one held in the
//     weight's input buffer in place (torch/csrc/autograd/input_buffer.cpp,
//     accumulate): from the second chunk on two such tensors coexist, beside
//     the gradients of the chunks not yet consumed.
func torchtuneChunkedLossBytes(r Request, logitUnit float64) float64 {
	saved, chunk := 4.0, 8.0
	if r.Compile {
		saved, chunk = 2, 2
	}
	n := float64(torchtuneOutputChunks)
	head := 0.0
	if r.Method == Full {
		head = headGrad(r)
	}
	const gradBytes = 2 // the 16-bit gradient of each chunk's logits
	lossPass := saved*logitUnit + chunk*logitUnit/n
	firstMatmul := gradBytes*logitUnit + head
	secondMatmul := gradBytes*logitUnit*(n-1)/n + 2*head
	return max(lossPass, firstMatmul, secondMatmul)
}

// headGrad is one gradient of the output layer's weight (vocab × hidden, in
// the gradient dtype): tied or not, the output projection's weight is a
// trained vocab × hidden matrix under full fine-tuning.
func headGrad(r Request) float64 {
	m := r.Model
	return float64(m.Vocab*m.Hidden) * float64(r.paramBytes())
}

// tiedBackwardEnd is what the end of a full fine-tune's backward holds
// beyond every gradient when the output layer is tied to the embedding, on
// one GPU without a step inside the backward (whose other gradients are gone
// by then; combine counts that phase); 0 otherwise. Without ties the
// embedding's gradient is the last one, taken as .grad directly.
//
// torchtune (TiedEmbeddingTransformerDecoder, Llama 3.2's TiedLinear): the
// output layer's contribution waits in the shared weight's input buffer
// until the embedding's backward, the last node, returns its own vocab ×
// hidden gradient, which is summed into it in place; only then does
// AccumulateGrad take the sum as .grad: one vocab × hidden gradient more
// than the gradients alone, which its development row supports
// (torchtune-flags-005: −0.9 % with one, +2.0 % with two).
//
// The transformers path, where lm_head.weight is the embedding's Parameter,
// holds two: the embedding's gradient and its sum with the output layer's
// (the oracle's SGD runs of Qwen2.5-0.5B, 256 tokens: parameters +
// gradients + 2 × 151,936 × 896 × 2 B in bf16, × 4 B in fp32; the untied
// Qwen2.5-7B: nothing; the H200 probe of Llama-3.2-3B with fused AdamW: 1.53
// GiB beyond weights, gradients and states, against 2 × 128,256 × 3,072 × 2
// B = 1.47 GiB). Read without accumulation only: a later micro-batch's
// gradients add into the last ones, with transients of their own (the
// oracle: about three vocab × hidden), not modelled. LitGPT unties (its
// checkpoints copy the embedding into lm_head).
func tiedBackwardEnd(r Request) float64 {
	m := r.Model
	if r.Method != Full || !m.TiedEmbeddings || r.OptimizerInBackward || r.Sharding.GPUs > 1 {
		return 0
	}
	switch {
	case r.Stack == StackTorchtune:
		return headGrad(r)
	case r.Stack == StackLitGPT || r.GradAccum > 1 || !r.Task.Spec().VocabLogits:
		return 0
	}
	return 2 * headGrad(r)
}
