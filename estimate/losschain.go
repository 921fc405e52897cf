package estimate

// lossChain is the order in which a loss path allocates and frees its
// logit-sized tensors over one step, forward and backward, as the caching
// allocator sees it: Bytes[i] is tensor i's size in bytes per logit, and
// Ops lists the events in order, +(i+1) allocating tensor i and -(i+1)
// freeing it (0 ends the list). It is comparable, so that a replay keyed by
// it can be cached.
type lossChain struct {
	Bytes [lossChainTensors]int8
	Ops   [2 * lossChainTensors]int8
}

// lossChainTensors bounds how many logit-sized tensors a chain names.
const lossChainTensors = 12

// peak is the most bytes per logit the chain holds at once.
func (c lossChain) peak() int64 {
	var live, most int64
	for _, op := range c.Ops {
		switch {
		case op > 0:
			live += int64(c.Bytes[op-1])
		case op < 0:
			live -= int64(c.Bytes[-op-1])
		}
		most = max(most, live)
	}
	return most
}

// genericChain is the estimator's default shape of the stock loss chain in
// the replay: the fp32 logits and their fp32 gradient, each 4 B a logit.
var genericChain = lossChain{Bytes: [lossChainTensors]int8{4, 4}, Ops: [2 * lossChainTensors]int8{1, 2, -1, -2}}

// remoteCodeChains are the loss chains of the model types whose modelling
// code ships with the checkpoint (trust_remote_code) rather than with
// transformers, read from that code as it was in late 2023, under the HF
// Trainer's bf16 autocast (torch.autocast runs cross_entropy in fp32,
// casting a 16-bit input first) and a compute_loss that keeps the model's
// output until it returns, before the backward (transformers Trainer
// compute_loss; ms-swift 1.5's Seq2SeqTrainer.compute_loss at 4312aeb28
// also takes the argmax of the logits there, a [batch, seq] index tensor).
// In the backward, nll_loss's gradient (zeros the size of its input, 4 B)
// and log_softmax's (4 B) coexist with the saved log-softmax; the cast back
// to the logits' dtype and the slice's backward (zeros the size of the
// unshifted logits, copied into) each make one more logits-sized tensor.
var remoteCodeChains = map[string]lossChain{
	// Qwen (v1) modeling_qwen.py, QWenLMHeadModel.forward (the December
	// 2023 file, as ms-swift holds it at cb89d9191, modeling_qwen.py):
	// lm_logits = lm_head(h) in bf16 with no fp32 upcast (0),
	// shift_logits = lm_logits[..., :-1, :].contiguous() (1), autocast's
	// fp32 cast inside cross_entropy (2) and its log-softmax (3), saved;
	// the cast and shift_logits go when the forward returns, lm_logits when
	// compute_loss does. Backward: nll grad (4), log-softmax grad (5), bf16
	// cast back (6), the slice's zeros (7).
	"qwen": {
		Bytes: [lossChainTensors]int8{2, 2, 4, 4, 4, 4, 2, 2},
		Ops:   [2 * lossChainTensors]int8{1, 2, 3, 4, -3, -2, -1, 5, 6, -5, -4, 7, -6, 8, -7, -8},
	},
	// ChatGLM3 modeling_chatglm.py, ChatGLMForConditionalGeneration.forward
	// (THUDM/chatglm3-6b's file; read at czk1997/chatglm3-copy 00f2a120):
	// output_layer in bf16 [s, b, V] (0), .transpose(0, 1).contiguous()
	// (1), .to(torch.float32) (2), the fp32 shift_logits .contiguous() (3),
	// log-softmax (4, no autocast cast: already fp32), then lm_logits cast
	// back to bf16 for the output (5) while the fp32 copy and shift_logits
	// are still referenced. Backward: nll grad (6), log-softmax grad (7),
	// the fp32 slice's zeros (8), the cast back to bf16 (9).
	"chatglm": {
		Bytes: [lossChainTensors]int8{2, 2, 4, 4, 4, 2, 4, 4, 4, 2},
		Ops:   [2 * lossChainTensors]int8{1, 2, -1, 3, -2, 4, 5, 6, -3, -4, -6, 7, 8, -7, -5, 9, -8, 10, -9, -10},
	},
	// Baichuan2 modeling_baichuan.py, BaichuanForCausalLM.forward (read at
	// jrd77/Baichuan2-13B-Chat a56c793e; the 7B file's loss is the same):
	// bf16 logits from NormHead (0), shift_logits .contiguous() (1), the
	// z-loss's max over the vocabulary (indices only, small), autocast's
	// fp32 cast in cross_entropy (2) and its log-softmax (3). Backward: nll
	// grad (4), log-softmax grad (5), bf16 cast back (6), max's backward
	// (zeros the size of shift_logits, 7, summed into 6), the slice's
	// zeros (8).
	"baichuan": {
		Bytes: [lossChainTensors]int8{2, 2, 4, 4, 4, 4, 2, 2, 2},
		Ops:   [2 * lossChainTensors]int8{1, 2, 3, 4, -3, -2, -1, 5, 6, -5, -4, 7, -6, 8, -8, 9, -7, -9},
	},
}

// ownLossChain16 is the chain of a loop that computes the loss itself
// (Stack.OwnLoss) on 16-bit logits with no autocast: the model called
// without labels returns its 16-bit logits (0) and F.cross_entropy's
// log_softmax keeps its 16-bit output for the backward (1), all in the
// logits' dtype; nothing saves the logits themselves (log_softmax's
// backward reads its output, the output layer's matmul its input), so they
// go when the loop lets them go — when its loss function returns, or, in
// the inline loop, after the step (heldLogitBytes counts them beside the
// chain then). Backward: nll_loss's gradient (zeros
// the size of its input, 2) and log_softmax's (3), which is the logits'
// gradient the output layer's backward reads. Its peak is 6 B per logit,
// half transformers' upcast chain (hfLogitBytes).
var ownLossChain16 = lossChain{
	Bytes: [lossChainTensors]int8{2, 2, 2, 2},
	Ops:   [2 * lossChainTensors]int8{1, 2, -1, 3, 4, -3, -2, -4},
}

// ownLoss16 reports whether a request's loss is the loop's own
// cross-entropy on 16-bit logits: a stack that computes it itself, no
// autocast (which would run cross_entropy in fp32, as transformers' loss
// does), and logits that come out of the model in 16 bits — not a QLoRA
// base whose output layer prepare_model_for_kbit_training made fp32, nor an
// fp32 model.
func ownLoss16(r Request) bool {
	return r.Stack.Spec().OwnLoss && !r.Precision.mixed() && residualBytes(r) == 2
}

// lossChainOf is the chain a request's stock loss runs: the loop's own on
// 16-bit logits (ownLoss16), else its model type's remote code where that
// is known, else the generic one.
func lossChainOf(r Request) (lossChain, bool) {
	if ownLoss16(r) {
		return ownLossChain16, true
	}
	if r.Model != nil && r.Stack != StackLitGPT {
		if c, ok := remoteCodeChains[r.Model.ModelType]; ok {
			return c, true
		}
	}
	return genericChain, false
}
