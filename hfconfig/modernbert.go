package hfconfig

import "fmt"

// buildModernBERT covers modernbert (modeling_modernbert): a pre-norm
// encoder whose blocks are attn.Wqkv (one fused h → 3h projection) and
// attn.Wo, then a GeGLU feed-forward, mlp.Wi (h → 2 × intermediate: input
// and gate) and mlp.Wo; biases follow attention_bias and mlp_bias, the
// LayerNorms have a bias only with norm_bias, and the first block has no
// attention norm (nn.Identity). Every global_attn_every_n_layers-th block
// (from the first) attends globally, the others within a local_attention
// window. RoPE: no position table. Outside the blocks: the token
// embeddings with their norm, a final norm, and the prediction head (dense
// h → h with classifier_bias, and a norm) the MLM and classification heads
// share; the MLM decoder is tied to the embeddings.
func buildModernBERT(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	f := &fieldReader{r: r}
	m.Intermediate = f.need("intermediate_size")
	attnBias := f.bool("attention_bias", false)
	mlpBias := f.bool("mlp_bias", false)
	normBias := f.bool("norm_bias", false)
	headBias := f.bool("classifier_bias", false)
	every := f.int(3, "global_attn_every_n_layers")
	window := f.int(128, "local_attention")
	if f.err != nil {
		return f.err
	}
	if every < 1 || every > maxLayers {
		return fmt.Errorf("%w: field %sglobal_attn_every_n_layers: %d (want 1..%d)", ErrMalformed, r.prefix, every, maxLayers)
	}
	if window > maxDim {
		return fmt.Errorf("%w: field %slocal_attention: %d (more than %d)", ErrMalformed, r.prefix, window, maxDim)
	}
	h, inter := m.Hidden, m.Intermediate
	norm := h
	if normBias {
		norm = 2 * h
	}
	m.TiedEmbeddings = true
	m.MLP = MLPGated
	m.Encoder = true
	m.SlidingWindow = window
	lins := []Linear{
		lin("Wqkv", RoleAttention, h, 3*h, attnBias),
		lin("attn.Wo", RoleAttention, h, h, attnBias),
		lin("Wi", RoleMLP, h, 2*inter, mlpBias),
		lin("mlp.Wo", RoleMLP, inter, h, mlpBias),
	}
	m.attentionNames = []string{"Wqkv", "attn.Wo"}
	m.mlpNames = []string{"Wi", "mlp.Wo"}
	for i := range m.NumLayers {
		kind := "sliding"
		if i%every == 0 {
			kind = "full"
		}
		norms := 2 * norm
		if i == 0 {
			norms = norm // the first block's attn_norm is nn.Identity
		}
		m.Layers = append(m.Layers, Layer{Attention: kind, NormParams: norms, FFNActive: inter, Linears: lins})
	}
	m.EmbeddingParams = m.Vocab * h
	m.FinalNormParams = 2 * norm // the embeddings' norm and final_norm
	m.HeadParams = h*h + norm    // the prediction head's dense and norm
	if headBias {
		m.HeadParams += h
	}
	m.Notes = append(m.Notes, fmt.Sprintf("ModernBERT: one block in %d (the first, then every so many) attends globally, the others within a %d-token window; GeGLU feed-forward", every, window))
	return nil
}
