package estimate

// torchtitan's loss, where it differs from the transformers chain the
// default shape was measured on (docs/memory-model.md#torchtitans-loss).
// Read in pytorch/torchtitan: train.py and torchtitan/components/loss.py
// at bbb1b616e (2025-04-02) and ChunkedLossWrapper at 786e26f8e
// (2026-04-27) and main (2026-08).

// torchtitanLossChunks is ChunkedLossWrapper's num_chunks default.
const torchtitanLossChunks = 8

// torchtitanLossCompiled reports whether torchtitan's loss function runs
// compiled: build_cross_entropy_loss wraps it in torch.compile when
// training.compile is on (since bbb1b616e, 2025-04-02; from 2024-12-18 to
// then only the blocks were compiled: Request.EagerLoss).
func torchtitanLossCompiled(r Request) bool {
	return r.Stack == StackTorchtitan && r.Compile && !r.EagerLoss && r.Task.Spec().VocabLogits
}

// torchtitanLossBytes is what torchtitan's loss holds at its peak over
// s·b·vocab logits (logitUnit); ok is false where the stock chain applies
// (not the torchtitan stack, or its loss eager and whole).
//
// Whole (cross_entropy(pred.flatten(0, 1).float(), labels); pred deleted
// before the backward), compiled: Inductor's partitioner saves the 16-bit
// logits, the graph's input, rather than the fp32 log-softmax, and the
// backward writes the 16-bit gradient into that donated buffer, as for
// torchtune's compiled chunks (torchtuneChunkedLossBytes): 2 B per logit.
//
// Chunked (ChunkedLossWrapper, --fused-ce chunked): the final hidden
// states are detached and split into 8 contiguous chunks (16-bit, one
// copy of s·b·hidden); for each chunk the output layer runs, its loss,
// and at once its backward, whose hidden-state gradient is copied into an
// fp32 s·b·hidden buffer (GradAccumulator), before the decoder's backward
// takes it. The output layer stays unsharded across the chunks with its
// gradient sync off until the last, so a trained head's gradient
// accumulates unsharded in the fp32 reduce dtype (vocab · hidden · 4 B).
// A chunk's own chain is the chunk's 16-bit logits beside, eager, the
// stock chain (12 B per logit: fp32 log-softmax and the two fp32
// gradients) or, compiled, its 16-bit gradient in the donated buffer.
func torchtitanLossBytes(r Request, logitUnit float64) (bytes float64, ok bool) {
	if r.Stack != StackTorchtitan || !r.Task.Spec().VocabLogits {
		return 0, false
	}
	compiled := torchtitanLossCompiled(r)
	switch lossPath(r) {
	case "full":
		if !compiled {
			return 0, false
		}
		return 2 * logitUnit, true
	case "chunked":
		m := r.Model
		chain := 2 + 12.0
		if compiled {
			chain = 2
		}
		tokens := float64(r.SeqLen * r.Batch)
		hidden := tokens * float64(m.Hidden) * (float64(residualBytes(r)) + 4)
		head := 0.0
		if r.Method == Full {
			head = 4 * float64(m.Vocab*m.Hidden)
		}
		return chain*logitUnit/torchtitanLossChunks + hidden + head, true
	}
	return 0, false
}
