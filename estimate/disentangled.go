package estimate

// DeBERTa-v2's disentangled attention (hfconfig.Model.Disentangled):
// transformers' DisentangledSelfAttention computes
//
//	scores = q · (k / scale)ᵀ + c2p + p2c,  softmax, dropout, · v
//
// with c2p = gather(q · pos_keyᵀ) and p2c = gather(k · pos_queryᵀ)ᵀ over a
// relative-position index (modeling_deberta_v2: build_relative_position,
// disentangled_attention_bias). It has no SDPA path, so the softmax output,
// the dropout mask and the dropout output over the s² scores are kept
// whatever --attn says — Korthikanti's 5·a·s²·b, the eager term — and the
// key divided by scale is a new tensor the score matmul keeps, one inner
// width per token a block. The c2p and p2c products are gathered and
// added, which keeps nothing but the int64 relative-position index, s²
// elements built once per forward.

// disentangledTerms adds what DeBERTa's attention keeps beyond a BERT block.
func disentangledTerms(t *terms, r Request, act float64) {
	m := r.Model
	s, b := float64(r.SeqLen), float64(r.Batch)
	L := float64(m.NumLayers)
	// DeBERTa's attention is its own matmuls whatever attn_implementation
	// says: eager's scores.
	t.Eager = refEagerScoreCoef * float64(m.Heads) * s * s * b * act / 2
	t.BlockExtra += L*s*b*float64(m.Heads*m.HeadDim)*act + 8*s*s
}
