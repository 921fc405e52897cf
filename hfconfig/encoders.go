package hfconfig

// Encoder-only models (BERT, RoBERTa): bidirectional blocks whose output feeds a task head
// (masked-LM or sequence classification) instead of a causal LM head. The
// blocks' shapes are read like a decoder's; Model.Encoder tells the
// estimators the logits follow the task (estimate.Task), not the vocabulary
// at every position of a causal LM.

// buildBERT covers bert and roberta (modeling_bert /
// modeling_roberta): per block attention.self.{query,key,value},
// attention.output.dense, intermediate.dense and output.dense, all biased,
// and two LayerNorms with bias; word, position and token-type embeddings with
// a LayerNorm; a pooler (dense h×h) for classification heads. The MLM head's
// decoder is tied to the word embeddings.
func buildBERT(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.need("intermediate_size"); err != nil {
		return err
	}
	positions, err := r.first(512, "max_position_embeddings")
	if err != nil {
		return err
	}
	types, err := r.first(2, "type_vocab_size")
	if err != nil {
		return err
	}
	m.TiedEmbeddings = true // the MLM decoder is the word embedding (tie_word_embeddings defaults to true)
	m.MLP = MLPClassic
	m.Encoder = true
	h := m.Hidden
	m.uniformLayers(4*h,
		lin("query", RoleAttention, h, h, true),
		lin("key", RoleAttention, h, h, true),
		lin("value", RoleAttention, h, h, true),
		lin("attention.output.dense", RoleAttention, h, h, true),
		lin("intermediate.dense", RoleMLP, h, m.Intermediate, true),
		lin("output.dense", RoleMLP, m.Intermediate, h, true),
	)
	m.setEmbeddings(false)
	m.PositionParams = (positions + types) * h
	m.FinalNormParams = 2 * h // the embeddings' LayerNorm
	m.HeadParams = h*h + h    // the pooler (classification) or the MLM transform's dense
	return nil
}

// buildDistilBERT covers distilbert (modeling_distilbert; DistilBertConfig
// names the width dim, the MLP hidden_dim, and n_layers and n_heads): per
// block attention.{q,k,v,out}_lin and ffn.lin1 and ffn.lin2, all biased, and
// two LayerNorms with bias (sa_layer_norm, output_layer_norm); word and
// position embeddings, no token types, with a LayerNorm. Its classification
// heads' pre_classifier, like the MLM head's vocab_transform, is a dense
// h×h; the MLM head's vocab_projector is tied to the word embeddings.
func buildDistilBERT(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.need("hidden_dim", "intermediate_size"); err != nil {
		return err
	}
	positions, err := r.first(512, "max_position_embeddings")
	if err != nil {
		return err
	}
	m.TiedEmbeddings = true
	m.MLP = MLPClassic
	m.Encoder = true
	h := m.Hidden
	m.uniformLayers(4*h,
		lin("q_lin", RoleAttention, h, h, true),
		lin("k_lin", RoleAttention, h, h, true),
		lin("v_lin", RoleAttention, h, h, true),
		lin("out_lin", RoleAttention, h, h, true),
		lin("lin1", RoleMLP, h, m.Intermediate, true),
		lin("lin2", RoleMLP, m.Intermediate, h, true),
	)
	m.setEmbeddings(false)
	m.PositionParams = positions * h
	m.FinalNormParams = 2 * h // the embeddings' LayerNorm
	m.HeadParams = h*h + h    // pre_classifier (classification) or vocab_transform (MLM)
	return nil
}
