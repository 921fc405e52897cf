package estimate

import (
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// Per-op selective activation checkpointing (CkptSelectiveOp) is
// torchtitan's "selective" mode with selective_ac_option "op"
// (torchtitan/parallelisms/parallelize_llama.py at 9dec370, 2024-12;
// torchtitan/distributed/activation_checkpoint.py SelectiveAC since). Each
// transformer block runs under torch.utils.checkpoint with a
// create_selective_checkpoint_contexts policy that sees every aten op of
// the block's forward:
//
//   - the outputs of aten.mm (and aten.linear) are MUST_SAVE, except every
//     second one: a per-forward counter is bumped on each matmul and an
//     even count is recomputed, so a block keeps its 1st, 3rd, 5th, …
//     matmul's output in the order the block calls them;
//   - the attention kernel's outputs are MUST_SAVE
//     (_scaled_dot_product_flash_attention / _efficient_attention: the
//     output and its fp32 logsumexp per head and token);
//   - everything else (norms, RoPE, SiLU, the products, the residual adds)
//     is recomputed in the backward, one block at a time.
//
// torchtitan's Llama block (models/llama/model.py) calls wq, wk, wv, wo,
// then the feed-forward's w1, w3, w2 (w2(silu(w1(x)) · w3(x))): it keeps
// q, v, w1's output and w2's output. checkpoint itself keeps the block's
// input, as in full checkpointing (the fitted ckpt_bytes_per_token_hidden).

// opPolicyMatmuls is the output width of each matmul a dense block calls,
// in torchtitan's order: the attention's q, k, v and output projections,
// then the MLP's gate (w1), up (w3) and down (w2) projections, or a
// classic MLP's two.
func opPolicyMatmuls(m *hfconfig.Model) []int64 {
	q, kv := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	if m.KVHeads == 0 {
		kv = q
	}
	mm := []int64{q, kv, kv, m.Hidden}
	if m.MLP == hfconfig.MLPGated {
		return append(mm, m.ActiveFFN(), m.ActiveFFN(), m.Hidden)
	}
	return append(mm, m.ActiveFFN(), m.Hidden)
}

// OpPolicyRecomputedShare is the share of a dense block's matmul weights
// whose products the per-op policy computes again in the backward: the
// 2nd, 4th, … matmul (torchtitan's Llama block: wk, wo and w3). The
// attention kernel's output is kept, so attention is not recomputed.
func OpPolicyRecomputedShare(m *hfconfig.Model) float64 {
	q, kv := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	if m.KVHeads == 0 {
		kv = q
	}
	h, ffn := m.Hidden, m.ActiveFFN()
	weights := []int64{h * q, h * kv, h * kv, q * h}
	if m.MLP == hfconfig.MLPGated {
		weights = append(weights, h*ffn, h*ffn, ffn*h)
	} else {
		weights = append(weights, h*ffn, ffn*h)
	}
	var all, again int64
	for i, w := range weights {
		all += w
		if i%2 == 1 {
			again += w
		}
	}
	return float64(again) / float64(all)
}

// opPolicySaved is what the per-op policy keeps per token in one block
// beyond the block's input, in bytes: every other matmul's output (the
// first, third, …) in the activation dtype, the attention output in the
// activation dtype and its fp32 logsumexp per head.
func opPolicySaved(m *hfconfig.Model, act float64) float64 {
	var kept int64
	for i, w := range opPolicyMatmuls(m) {
		if i%2 == 0 {
			kept += w
		}
	}
	return act*float64(kept+m.Heads*m.HeadDim) + 4*float64(m.Heads)
}

// opPolicyTypes are the model types whose blocks the per-op policy is read
// over: torchtitan's own dense Llama and Qwen3 blocks (bias-free q, k, v,
// o and gated MLP Linears, called in that order). Elsewhere the count
// lands on other matmuls: fused qkv or Conv1D projections, biased Linears
// (addmm, which the 2024 policy did not save), adapters' matmuls.
var opPolicyTypes = []string{"llama", "qwen3"}

// checkOpPolicy refuses the per-op policy where the block it is read from
// is not the run's: full training of a dense torchtitan decoder.
func checkOpPolicy(r Request) error {
	if !r.GradCkpt.Spec().OpPolicy {
		return nil
	}
	m := r.Model
	switch {
	case m.Experts > 0:
		return fieldErr("grad_ckpt", r.GradCkpt, "full or none: the per-op policy is read over a dense block's matmuls, and this %s model routes its MLP through %d experts", m.ModelType, m.Experts)
	case m.Encoder || m.Seq2Seq != nil:
		return fieldErr("grad_ckpt", r.GradCkpt, "full or none: the per-op policy is read over a decoder block, and this %s model is not decoder-only", m.ModelType)
	case r.Method != Full:
		return fieldErr("grad_ckpt", r.GradCkpt, "full or none under %s: the per-op policy is read over a fully trained block, and adapters' matmuls would move its every-other count", r.Method)
	case !slices.Contains(opPolicyTypes, m.ModelType):
		return fieldErr("grad_ckpt", r.GradCkpt, "full or none for this %s model: the per-op policy is read over torchtitan's own %s blocks", m.ModelType, strings.Join(opPolicyTypes, " and "))
	}
	return nil
}

// computeBytes is the dtype size the matmuls run in: 4 under fp32, else
// the 16-bit precision's 2 (autocast or 16-bit weights).
func computeBytes(r Request) int64 {
	if r.Precision == FP32 {
		return 4
	}
	return 2
}
