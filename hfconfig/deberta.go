package hfconfig

import (
	"fmt"
	"strings"
)

// buildDeBERTaV2 covers deberta-v2 (DeBERTa-v2 and -v3, modeling_deberta_v2):
// BERT-shaped blocks whose attention is disentangled — content-to-position
// and position-to-content scores from a shared relative-position table —
// named attention.self.{query_proj,key_proj,value_proj},
// attention.output.dense, intermediate.dense and output.dense (all biased),
// two LayerNorms with bias a block; without share_att_key each block has
// its own pos_key_proj / pos_query_proj for the c2p / p2c terms. Outside
// the blocks: word embeddings (embedding_size wide, projected by embed_proj
// when that differs from hidden_size), absolute positions only when
// position_biased_input, the relative-position table (2 × position_buckets
// rows, or 2 × max_relative_positions) with its LayerNorm, the optional
// convolution of the first block (conv_kernel_size) and the pooler.
func buildDeBERTaV2(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	f := &fieldReader{r: r}
	m.Intermediate = f.need("intermediate_size")
	emb := f.int(m.Hidden, "embedding_size")
	positions := f.int(512, "max_position_embeddings")
	types := f.int(0, "type_vocab_size") // DebertaV2Config's default
	biasedInput := f.bool("position_biased_input", true)
	relative := f.bool("relative_attention", false)
	shareKey := f.bool("share_att_key", false)
	headSize := f.int(m.Hidden/m.Heads, "attention_head_size")
	conv := f.int(0, "conv_kernel_size")
	pooler := f.int(m.Hidden, "pooler_hidden_size")
	if f.err != nil {
		return f.err
	}
	// position_buckets and max_relative_positions use -1 for "none".
	bucketsF, err := r.floatField("position_buckets", -1)
	if err != nil {
		return err
	}
	maxRelF, err := r.floatField("max_relative_positions", -1)
	if err != nil {
		return err
	}
	if bucketsF > maxDim || maxRelF > maxDim || bucketsF != float64(int64(bucketsF)) || maxRelF != float64(int64(maxRelF)) {
		return fmt.Errorf("%w: field %sposition_buckets or max_relative_positions: %v, %v (want integers up to %d)", ErrMalformed, r.prefix, bucketsF, maxRelF, maxDim)
	}
	buckets, maxRel := int64(bucketsF), int64(maxRelF)
	posAtt, err := posAttTypes(r)
	if err != nil {
		return err
	}
	normRel, err := r.str("norm_rel_ebd", "none")
	if err != nil {
		return err
	}
	for _, d := range []dim{{"embedding_size", emb}, {"max_position_embeddings", positions}, {"attention_head_size", headSize}, {"pooler_hidden_size", pooler}} {
		if d.v < 1 || d.v > maxDim {
			return fmt.Errorf("%w: field %s%s: %d (want 1..%d)", ErrMalformed, r.prefix, d.name, d.v, maxDim)
		}
	}
	if types > maxDim || conv > 64 {
		return fmt.Errorf("%w: field %stype_vocab_size or conv_kernel_size out of range (%d, %d)", ErrMalformed, r.prefix, types, conv)
	}
	h := m.Hidden
	inner := m.Heads * headSize
	m.HeadDim = headSize
	m.TiedEmbeddings = true // DebertaV2ForMaskedLM ties its decoder to the word embeddings
	m.MLP = MLPClassic
	m.Encoder = true
	lins := []Linear{
		lin("query_proj", RoleAttention, h, inner, true),
		lin("key_proj", RoleAttention, h, inner, true),
		lin("value_proj", RoleAttention, h, inner, true),
	}
	if relative && !shareKey {
		if posAtt["c2p"] {
			lins = append(lins, lin("pos_key_proj", RoleAttention, h, inner, true))
		}
		if posAtt["p2c"] {
			lins = append(lins, lin("pos_query_proj", RoleAttention, h, inner, true))
		}
	}
	lins = append(lins,
		lin("attention.output.dense", RoleAttention, h, h, true),
		lin("intermediate.dense", RoleMLP, h, m.Intermediate, true),
		lin("output.dense", RoleMLP, m.Intermediate, h, true),
	)
	m.uniformLayers(4*h, lins...)
	m.EmbeddingParams = m.Vocab * emb
	if emb != h {
		m.EmbeddingParams += emb * h // embed_proj, no bias
	}
	m.PositionParams = types * emb
	if biasedInput {
		m.PositionParams += positions * emb
	}
	m.FinalNormParams = 2 * emb // the embeddings' LayerNorm
	if relative {
		span := buckets
		if span < 1 {
			span = maxRel
			if span < 1 {
				span = positions
			}
		}
		m.PositionParams += 2 * span * h // encoder.rel_embeddings
		if strings.Contains(normRel, "layer_norm") {
			m.FinalNormParams += 2 * h
		}
		m.Disentangled = true
	}
	m.HeadParams = pooler*h + pooler // the classification pooler's dense
	if conv > 0 {
		m.HeadParams += h*h*conv + h // the first block's Conv1d (conv_groups 1)
		m.FinalNormParams += 2 * h   // and its LayerNorm
	}
	m.Notes = append(m.Notes, "DeBERTa-v2 attention is eager in transformers (no SDPA path): each block keeps its softmax and dropout over the s² scores whatever --attn says, plus the key scaled for the disentangled terms")
	return nil
}

// posAttTypes reads pos_att_type, which configs write as a list
// (["p2c", "c2p"]) or a string ("p2c|c2p").
func posAttTypes(r raw) (map[string]bool, error) {
	out := map[string]bool{}
	if !r.has("pos_att_type") {
		return out, nil
	}
	list, err := r.strings("pos_att_type")
	if err != nil {
		s, serr := r.str("pos_att_type", "")
		if serr != nil {
			return nil, err
		}
		list = strings.Split(s, "|")
	}
	for _, p := range list {
		out[strings.ToLower(strings.TrimSpace(p))] = true
	}
	return out, nil
}
