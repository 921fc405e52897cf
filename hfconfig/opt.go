package hfconfig

import "fmt"

// buildOPT covers opt (transformers' modeling_opt, OPTConfig's defaults):
// per block self_attn.{q_proj,k_proj,v_proj,out_proj} and fc1 (hidden →
// ffn_dim) and fc2, all biased under enable_bias (default true), a ReLU
// between them, and two LayerNorms (self_attn_layer_norm,
// final_layer_norm; weight and bias unless layer_norm_elementwise_affine is
// false). Outside the blocks: token embeddings of width word_embed_proj_dim
// (default hidden_size), learned positions of max_position_embeddings + 2
// rows (OPTLearnedPositionalEmbedding's offset 2) of width hidden_size, the
// decoder's final LayerNorm when do_layer_norm_before and not
// _remove_final_layer_norm, and an lm_head tied to the token embeddings
// (tie_word_embeddings defaults to true).
//
// Where word_embed_proj_dim differs from hidden_size (opt-350m: 512 against
// 1024) the decoder projects in and out with project_in and project_out,
// bias-free nn.Linear modules outside the blocks. They are counted with the
// dense layers outside the blocks (HeadParams), so they stay 16-bit under
// QLoRA here and no LoRA scope selects them, where bitsandbytes would
// quantize them and PEFT's all-linear would adapt them too; a note says so.
func buildOPT(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	f := &fieldReader{r: r}
	m.Intermediate = f.int(3072, "ffn_dim")
	proj := f.int(m.Hidden, "word_embed_proj_dim")
	positions := f.int(2048, "max_position_embeddings")
	bias := f.bool("enable_bias", true)
	affine := f.bool("layer_norm_elementwise_affine", true)
	preNorm := f.bool("do_layer_norm_before", true)
	noFinalNorm := f.bool("_remove_final_layer_norm", false)
	if f.err != nil {
		return f.err
	}
	for _, d := range []struct {
		key string
		v   int64
	}{{"ffn_dim", m.Intermediate}, {"word_embed_proj_dim", proj}, {"max_position_embeddings", positions}} {
		if d.v > maxDim {
			return fmt.Errorf("%w: field %s%s: %d (more than %d)", ErrMalformed, r.prefix, d.key, d.v, maxDim)
		}
	}
	if m.Intermediate == 0 || proj == 0 {
		return fmt.Errorf("%w: field %sffn_dim / word_embed_proj_dim: zero (a required dimension)", ErrMalformed, r.prefix)
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	// OPT's dropout falls on the attention output and fc2's output, as GPT-2's
	// resid_pdrop does; attention_dropout on the attention probabilities.
	var err error
	if m.ResidDropout, err = r.floatField("dropout", 0.1); err != nil {
		return err
	}
	if m.AttnDropout, err = r.floatField("attention_dropout", 0); err != nil {
		return err
	}
	m.MLP = MLPClassic
	h := m.Hidden
	var layerNorm int64 // one LayerNorm's parameters
	if affine {
		layerNorm = 2 * h
	}
	m.uniformLayers(2*layerNorm,
		lin("q_proj", RoleAttention, h, h, bias),
		lin("k_proj", RoleAttention, h, h, bias),
		lin("v_proj", RoleAttention, h, h, bias),
		lin("out_proj", RoleAttention, h, h, bias),
		lin("fc1", RoleMLP, h, m.Intermediate, bias),
		lin("fc2", RoleMLP, m.Intermediate, h, bias),
	)
	m.EmbeddingParams = m.Vocab * proj
	if !m.TiedEmbeddings {
		m.LMHeadParams = m.Vocab * proj // lm_head: word_embed_proj_dim → vocab, no bias
	}
	m.PositionParams = (positions + 2) * h
	if preNorm && !noFinalNorm {
		m.FinalNormParams = layerNorm
	}
	if !preNorm {
		m.Notes = append(m.Notes, "post-norm blocks (do_layer_norm_before false): each LayerNorm follows its sublayer's residual add, and the decoder has no final LayerNorm")
	}
	if proj != h {
		m.HeadParams = 2 * proj * h
		m.Notes = append(m.Notes, fmt.Sprintf("project_in and project_out (%d ↔ %d, %d parameters) are counted outside the blocks as 16-bit weights; PEFT's all-linear would adapt them too (%d adapter parameters per unit of rank) and bitsandbytes would quantize them, which this estimate leaves out", proj, h, 2*proj*h, 2*(proj+h)))
	}
	return nil
}
