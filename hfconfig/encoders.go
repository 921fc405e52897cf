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
	types, err := r.first(2, "type_vocab_size")
	if err != nil {
		return err
	}
	return bertEncoder(r, m, bertModules, types, "intermediate_size")
}

// buildDistilBERT covers distilbert (modeling_distilbert; DistilBertConfig
// names the width dim, the MLP hidden_dim, and n_layers and n_heads): BERT's
// block with attention.{q,k,v,out}_lin and ffn.lin1 and ffn.lin2, all
// biased, and two LayerNorms with bias (sa_layer_norm, output_layer_norm);
// word and position embeddings, no token types, with a LayerNorm. Its
// classification heads' pre_classifier, like the MLM head's vocab_transform,
// is a dense h×h; the MLM head's vocab_projector is tied to the word
// embeddings.
func buildDistilBERT(r raw, m *Model, s familySpec) error {
	return bertEncoder(r, m, distilbertModules, 0, "hidden_dim", "intermediate_size")
}

// bertNames are a BERT-layout block's module names: the attention's query,
// key, value and output, the MLP's two matmuls.
type bertNames struct{ q, k, v, o, up, down string }

var (
	bertModules       = bertNames{"query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"}
	distilbertModules = bertNames{"q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"}
)

// bertEncoder reads a BERT-layout encoder: biased attention and two-matmul
// MLP with the names n, two LayerNorms a block, word embeddings (tied to an
// MLM head's decoder), learned positions and tokenTypes token-type rows,
// the embeddings' LayerNorm, and a dense h×h head (the pooler, a
// classifier's pre_classifier or the MLM transform). The MLP's width is
// the first of ffnKeys present.
func bertEncoder(r raw, m *Model, n bertNames, tokenTypes int64, ffnKeys ...string) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.need(ffnKeys...); err != nil {
		return err
	}
	positions, err := r.first(512, "max_position_embeddings")
	if err != nil {
		return err
	}
	m.TiedEmbeddings = true // the MLM decoder is the word embedding (tie_word_embeddings defaults to true)
	m.MLP = MLPClassic
	m.Encoder = true
	h := m.Hidden
	m.uniformLayers(4*h,
		lin(n.q, RoleAttention, h, h, true),
		lin(n.k, RoleAttention, h, h, true),
		lin(n.v, RoleAttention, h, h, true),
		lin(n.o, RoleAttention, h, h, true),
		lin(n.up, RoleMLP, h, m.Intermediate, true),
		lin(n.down, RoleMLP, m.Intermediate, h, true),
	)
	m.setEmbeddings(false)
	m.PositionParams = (positions + tokenTypes) * h
	m.FinalNormParams = 2 * h // the embeddings' LayerNorm
	m.HeadParams = h*h + h
	return nil
}
