package plan

import (
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// Shape is what the FLOPs of a training step depend on, read once from a
// model: every count is per token.
type Shape struct {
	// LayerMatmul is Σ in·out over the decoder layers' Linear modules, each
	// counted as often as a token passes through it (a routed expert
	// projection: experts-per-token of its copies, not all of them): the
	// active matmul parameters of the layers.
	LayerMatmul float64
	// HeadMatmul is hidden × vocab: the output projection, a matmul whether
	// or not it is tied to the input embedding.
	HeadMatmul float64
	// AttnWidth is heads × head_dim summed over layers, split by layers that
	// attend over the whole sequence and sliding-window layers.
	AttnWidthFull, AttnWidthSliding float64
	// Window is the sliding window (0: none).
	Window int64
	// Hidden and Vocab size an adapter on the output layer.
	Hidden, Vocab float64
	// LayerWeights is Σ in·out over every copy of the decoder layers'
	// Linear modules: the weights a 4-bit base holds and dequantizes.
	LayerWeights float64
}

// ShapeOf reads the matmul and attention widths of a model.
func ShapeOf(m *hfconfig.Model) Shape {
	s := Shape{HeadMatmul: float64(m.Hidden) * float64(m.Vocab), Window: m.SlidingWindow, Hidden: float64(m.Hidden), Vocab: float64(m.Vocab)}
	width := float64(m.Heads) * float64(m.HeadDim)
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			s.LayerMatmul += float64(lin.In) * float64(lin.Out) * float64(visits(m, lin))
			s.LayerWeights += float64(lin.In) * float64(lin.Out) * float64(max(lin.Copies, 1))
		}
		if l.Attention == "sliding" && m.SlidingWindow > 0 {
			s.AttnWidthSliding += width
		} else {
			s.AttnWidthFull += width
		}
	}
	return s
}

// visits is how many copies of a Linear one token passes through: a routed
// expert's experts-per-token, else all of them (1 for a plain module).
func visits(m *hfconfig.Model, l hfconfig.Linear) int64 {
	if l.Copies > 1 && m.ExpertsPerToken > 0 {
		return min(l.Copies, m.ExpertsPerToken)
	}
	return max(l.Copies, 1)
}

// AdapterWidth is Σ (in + out) · visits over the decoder-layer modules a
// LoRA target list selects: a rank-r adapter pair on a module costs
// 2·r·(in+out) FLOPs per token forward.
func AdapterWidth(m *hfconfig.Model, targets []string) (float64, error) {
	lins, err := m.Targets(targets)
	if err != nil {
		return 0, err
	}
	var w float64
	for _, l := range lins {
		w += float64(l.In+l.Out) * float64(visits(m, l))
	}
	return w, nil
}

// FLOPs are one token's floating-point operations in a training step, split
// into what the step needs (Train: forward and backward, the figure MFU
// is quoted against) and what activation checkpointing adds (Recompute).
type FLOPs struct {
	Train, Recompute float64
	// DequantBytes is the memory traffic of QLoRA's dequantization per
	// micro-batch (DequantBytes; 0 for other methods).
	DequantBytes float64
}

// TokenFLOPs counts one token's training FLOPs for a normalized request
// whose adapter width (AdapterWidth of its targets, 0 for a full fine-tune)
// is given. Conventions, each from its source:
//
//   - A matmul of an input with a weight of in×out costs 2·in·out FLOPs per
//     token forward (a multiply and an add), and its backward twice that:
//     the gradient with respect to the input and the one with respect to
//     the weight, 2·in·out each (Kaplan et al. 2020, "Scaling Laws for
//     Neural Language Models" §2.1: C ≈ 6N per token for training).
//   - Attention adds, per layer and token, 2·a·d for the scores QKᵀ and
//     2·a·d for the weighted values, d = heads × head_dim and a the keys
//     the token attends to, and three times that with the backward: 12·a·d
//     per layer in training (the s/6h term of Narayanan et al. 2021,
//     "Efficient Large-Scale Language Model Training on GPU Clusters", with
//     a = s). Under a causal mask token i attends to i keys: a kernel that
//     skips the masked blocks (FlashAttention-2, and SDPA's flash and
//     memory-efficient kernels, which the causal path of SDPA and flex
//     attention take) does half the full count, a = s/2 on average (Dao
//     2023, "FlashAttention-2", §4.1: "With causal mask, we divide this
//     number by 2"); on a sliding-window layer it does min(i, w), on
//     average w − w²/2s for w < s. Eager attention computes the whole
//     s × s score matrix and masks it afterwards: a = s on every layer.
//   - A frozen weight (the base of LoRA and QLoRA) needs no weight gradient,
//     only the input gradient that carries the backward on: 2N forward +
//     2N backward = 4N instead of 6N. A rank-r adapter pair (A: in→r,
//     B: r→out) is trained: 6·r·(in+out) per token. An output layer trained
//     in full beside the adapters (--extra-trainable lm_head) adds its
//     weight gradient, 2·hidden·vocab.
//   - Full activation checkpointing recomputes each layer's forward during
//     the backward: one more forward of the decoder layers (2N of their
//     matmuls, the attention's 4·s·d per layer, the adapters' 2·r·(in+out)),
//     not of the output layer and loss (Korthikanti et al. 2022, "Reducing
//     Activation Recomputation in Large Transformer Models" §5: full
//     recomputation costs a fourth forward-equivalent, ~33 % more). The
//     unsloth and offload variants recompute the same forward.
//   - Norms, activations, residual adds, softmax and the optimizer step are
//     left out, as MFU counts leave them out.
//   - QLoRA's base holds 4-bit weights that are dequantized before each
//     matmul; the matmuls are the same, so the FLOPs are LoRA's and the
//     dequantization is charged as memory traffic (see DequantBytes).
func TokenFLOPs(s Shape, r estimate.Request, adapterWidth float64) FLOPs {
	full, slide := AttendedKeys(s, r)
	attnFwd := 4 * (full*s.AttnWidthFull + slide*s.AttnWidthSliding)
	var f FLOPs
	if r.Method == estimate.Full {
		f.Train = 6*(s.LayerMatmul+s.HeadMatmul) + 3*attnFwd
	} else {
		rank := float64(r.LoRARank)
		f.Train = 4*(s.LayerMatmul+s.HeadMatmul) + 3*attnFwd + 6*rank*adapterWidth
		if trainsHead(r) {
			f.Train += 2 * s.HeadMatmul
		}
		if r.ExtraLoRAOnHead {
			f.Train += 6 * rank * (s.Hidden + s.Vocab)
		}
	}
	f.DequantBytes = DequantBytes(s, r)
	if r.GradCkpt.Spec().OpPolicy && r.Model != nil {
		// torchtitan's per-op policy runs again only the matmuls it does
		// not keep; it keeps attention's output.
		f.Recompute = 2 * s.LayerMatmul * estimate.OpPolicyRecomputedShare(r.Model)
	} else if r.GradCkpt != "none" && r.GradCkpt != "" {
		f.Recompute = 2*s.LayerMatmul + attnFwd
		if r.Method != estimate.Full {
			f.Recompute += 2 * float64(r.LoRARank) * adapterWidth
		}
	}
	return f
}

// AttendedKeys is the keys a token attends to on average, on a layer that
// attends over the whole sequence and on a sliding-window layer, as the
// request's attention computes them (see TokenFLOPs).
func AttendedKeys(s Shape, r estimate.Request) (full, sliding float64) {
	seq := float64(r.SeqLen)
	if r.Attn.Spec().KeepsScores() {
		// Eager attention and SDPA's math kernel multiply every query by
		// every key and mask afterwards.
		return seq, seq
	}
	full, sliding = seq/2, seq/2
	if w := float64(s.Window); w > 0 && w < seq {
		sliding = w - w*w/(2*seq)
	}
	return full, sliding
}

// trainsHead reports whether a LoRA run trains its output layer in full.
func trainsHead(r estimate.Request) bool {
	for _, n := range r.ExtraTrainable {
		switch n {
		case "lm_head", "output_layer", "embed_out":
			return true
		}
	}
	return false
}

// DequantBytes is the memory traffic QLoRA's dequantization adds to one
// micro-batch on one GPU. bitsandbytes' 4-bit matmul for inputs of more
// than one token (MatMul4Bit in bitsandbytes/autograd/_functions.py)
// dequantizes the whole weight to the 16-bit compute dtype and runs a dense
// matmul, in the forward and again in the backward for the input gradient;
// checkpointing adds the recomputed forward. Each dequantization reads the
// 4-bit codes (half a byte a weight) and writes the 16-bit copy (2 bytes),
// a memory-bound kernel; the matmul that reads the copy afterwards is the
// one LoRA's base runs anyway. The per-block scales (one per 64 weights,
// themselves 8-bit under double quantization) are left out. Every rank
// dequantizes every layer, sharded or not: FSDP gathers the 4-bit shards.
func DequantBytes(s Shape, r estimate.Request) float64 {
	if r.Method != estimate.QLoRA {
		return 0
	}
	passes := 2.0
	if r.GradCkpt != "none" && r.GradCkpt != "" {
		passes = 3
	}
	return passes * s.LayerWeights * (0.5 + 2)
}
