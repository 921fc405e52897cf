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

// opPolicyMatmul is one matmul of a dense block: its weight's in × out.
type opPolicyMatmul struct{ in, out int64 }

// opPolicyMatmuls lists the matmuls a block of torchtitan's Llama or Qwen3
// calls (checkOpPolicy refuses other blocks), in order: the attention's q,
// k, v and output projections, then the MLP's gate (w1), up (w3) and down
// (w2) projections. The policy keeps the outputs of the even indices (the
// 1st, 3rd, … call) and computes the odd ones again.
func opPolicyMatmuls(m *hfconfig.Model) [7]opPolicyMatmul {
	q, kv := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	h, ffn := m.Hidden, m.ActiveFFN()
	return [7]opPolicyMatmul{{h, q}, {h, kv}, {h, kv}, {q, h}, {h, ffn}, {h, ffn}, {ffn, h}}
}

// OpPolicyRecomputedShare is the share of a dense block's matmul weights
// whose products the per-op policy computes again in the backward: the
// 2nd, 4th, … matmul (torchtitan's Llama block: wk, wo and w3). The
// attention kernel's output is kept, so attention is not recomputed.
func OpPolicyRecomputedShare(m *hfconfig.Model) float64 {
	var all, again int64
	for i, x := range opPolicyMatmuls(m) {
		all += x.in * x.out
		if i%2 == 1 {
			again += x.in * x.out
		}
	}
	return float64(again) / float64(all)
}

// opPolicySaved is what the per-op policy keeps per token in one block
// beyond the block's input, in bytes: the outputs of the matmuls it keeps
// and the attention output, act bytes each, and attention's fp32
// logsumexp per head.
func opPolicySaved(m *hfconfig.Model, act float64) float64 {
	mm := opPolicyMatmuls(m)
	var kept int64
	for i := 0; i < len(mm); i += 2 {
		kept += mm[i].out
	}
	return act*float64(kept+m.Heads*m.HeadDim) + 4*float64(m.Heads)
}

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
	case !slices.Contains(torchtitanModelTypes, m.ModelType):
		// Elsewhere the count lands on other matmuls: fused qkv or Conv1D
		// projections, biased Linears (addmm, which the 2024 policy did
		// not save).
		return fieldErr("grad_ckpt", r.GradCkpt, "full or none for this %s model: the per-op policy is read over torchtitan's own %s blocks", m.ModelType, strings.Join(torchtitanModelTypes, " and "))
	}
	return nil
}
