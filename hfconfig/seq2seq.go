package hfconfig

import (
	"fmt"
	"strings"
)

// Encoder-decoder models (T5, mT5, BART): an encoder stack over
// the source and a decoder stack over the target whose blocks add a
// cross-attention over the encoder's output. Model.Layers holds the
// encoder's blocks first, then the decoder's; Model.Seq2Seq says where the
// stacks split, which the estimators need because the two stacks see
// different lengths (source and target).

// Seq2Seq is the encoder-decoder split of a model.
type Seq2Seq struct {
	// EncoderLayers and DecoderLayers split Model.Layers: the first
	// EncoderLayers are the encoder's.
	EncoderLayers, DecoderLayers int64
	// EncoderFFN and DecoderFFN are the stacks' feed-forward widths.
	EncoderFFN, DecoderFFN int64
	// Inner is the attention width heads × head_dim (T5's d_kv · num_heads,
	// which can differ from d_model: mt0-small 6 × 64 = 384 of 512).
	Inner int64
	// DecoderHeads is the decoder's head count (BART's can differ from the
	// encoder's, which Model.Heads holds).
	DecoderHeads int64
	// PositionBias: the attention adds a relative position bias to its
	// scores (T5). Under SDPA transformers passes it, merged with the
	// padding or causal mask, as the float attn_mask of each block's
	// attention (sdpa_attention.create_position_bias_mask), which the
	// memory-efficient kernel keeps for its backward; FlashAttention
	// cannot take it.
	PositionBias bool
	// Dropout is the probability of the dropouts on each sub-layer's
	// output and the embeddings (T5 dropout_rate, BART dropout); in
	// training each keeps a one-byte mask per element.
	Dropout float64
	// FFNDropout is the dropout inside the feed-forward, on its
	// intermediate (T5: dropout_rate; BART: activation_dropout): a mask
	// and a separate output, ffn wide.
	FFNDropout float64
}

// Encoder-decoder model types with a builder; the refusal map keeps the rest.
var seq2seqFamilies = map[string]familySpec{
	"t5":   {family: "t5", build: buildT5, tiedDefault: true},
	"mt5":  {family: "t5", build: buildT5, tiedDefault: false},
	"bart": {family: "bart", build: buildBART, tiedDefault: true},
}

// seq2seqNote is the assumption every encoder-decoder estimate rests on.
const seq2seqNote = "encoder-decoder: the encoder's blocks run over the source (--seq-len), the decoder's over the target (--target-len), each decoder block adds a cross-attention over the encoder output; the loss is over the target's tokens"

// buildT5 covers t5 and mt5 (modeling_t5 / modeling_mt5): blocks of SelfAttention.{q,k,v,o} (d_model → num_heads ×
// d_kv, no bias), a T5LayerNorm (weight only) before each sub-layer, in the
// decoder an EncDecAttention.{q,k,v,o} too; the feed-forward is wi/wo, or
// wi_0/wi_1/wo when feed_forward_proj is "gated-…"; a final norm per stack;
// one shared embedding; lm_head separate unless tie_word_embeddings (T5's
// default true, MT5Config's false). The relative position bias (num_buckets
// × heads) sits in the first block of each stack.
func buildT5(r raw, m *Model, s familySpec) error {
	f := &fieldReader{r: r}
	hidden := f.need("d_model")
	encLayers := f.need("num_layers")
	heads := f.need("num_heads")
	dkv := f.need("d_kv")
	ffn := f.need("d_ff")
	decLayers := f.int(encLayers, "num_decoder_layers")
	buckets := f.int(32, "relative_attention_num_buckets")
	if f.err != nil {
		return f.err
	}
	vocab, err := r.need("vocab_size")
	if err != nil {
		return noVocabError{err}
	}
	proj, err := r.str("feed_forward_proj", "relu")
	if err != nil {
		return err
	}
	dropout, err := r.floatField("dropout_rate", 0.1) // T5Config's default
	if err != nil {
		return err
	}
	if err := checkDims(r, []dim{{"d_model", hidden}, {"num_heads", heads}, {"d_kv", dkv}, {"d_ff", ffn}, {"vocab_size", vocab}, {"relative_attention_num_buckets", buckets}}, encLayers, decLayers); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	gated := strings.HasPrefix(proj, "gated-")
	m.Hidden, m.Heads, m.KVHeads, m.HeadDim, m.Intermediate, m.Vocab = hidden, heads, heads, dkv, ffn, vocab
	m.NumLayers = encLayers + decLayers
	inner := heads * dkv
	m.Seq2Seq = &Seq2Seq{EncoderLayers: encLayers, DecoderLayers: decLayers, EncoderFFN: ffn, DecoderFFN: ffn,
		Inner: inner, DecoderHeads: heads, PositionBias: true, Dropout: dropout, FFNDropout: dropout}
	attn := func() []Linear {
		return []Linear{
			lin("q", RoleAttention, hidden, inner, false), lin("k", RoleAttention, hidden, inner, false),
			lin("v", RoleAttention, hidden, inner, false), lin("o", RoleAttention, inner, hidden, false),
		}
	}
	var mlp []Linear
	if gated {
		m.MLP = MLPGated
		mlp = []Linear{lin("wi_0", RoleMLP, hidden, ffn, false), lin("wi_1", RoleMLP, hidden, ffn, false), lin("wo", RoleMLP, ffn, hidden, false)}
	} else {
		m.MLP = MLPClassic
		mlp = []Linear{lin("wi", RoleMLP, hidden, ffn, false), lin("wo", RoleMLP, ffn, hidden, false)}
	}
	m.attentionNames = []string{"q", "k", "v", "o"}
	for _, l := range mlp {
		m.mlpNames = append(m.mlpNames, l.Name)
	}
	bias := buckets * heads
	for i := range encLayers {
		norms := 2 * hidden
		if i == 0 {
			norms += bias // the bias table is an Embedding, frozen like the norms under LoRA
		}
		m.Layers = append(m.Layers, Layer{Attention: "full", NormParams: norms, FFNActive: ffn, Linears: append(attn(), mlp...)})
	}
	for i := range decLayers {
		norms := 3 * hidden
		if i == 0 {
			norms += bias
		}
		lins := append(append(attn(), attn()...), mlp...)
		m.Layers = append(m.Layers, Layer{Attention: "full", NormParams: norms, FFNActive: ffn, Linears: lins})
	}
	m.setEmbeddings(false)
	m.FinalNormParams = 2 * hidden // each stack's final_layer_norm
	if !m.TiedEmbeddings {
		m.Notes = append(m.Notes, fmt.Sprintf("lm_head counted apart from the shared embedding (%d parameters), as tie_word_embeddings false says and transformers 4.x holds it; transformers 5 ties them for T5 and mT5 whatever the config says (T5Config / MT5Config force tie_word_embeddings), which holds that much less", m.LMHeadParams))
	}
	m.Notes = append(m.Notes, seq2seqNote,
		fmt.Sprintf("T5 attention: a relative position bias (%d buckets × %d heads) is added to the scores: under SDPA each block keeps it, merged with the mask, as its attention bias; FlashAttention cannot take it", buckets, heads))
	return nil
}

// buildBART covers bart (modeling_bart): blocks of
// self_attn.{q,k,v,out}_proj (biased), in the decoder encoder_attn.{…} too,
// fc1/fc2 (biased), a LayerNorm with bias after each sub-layer; per stack a
// learned position table of max_position_embeddings + 2 rows and a
// layernorm_embedding; one shared embedding tied to lm_head (no bias; the
// final_logits_bias is a buffer, not a parameter).
func buildBART(r raw, m *Model, s familySpec) error {
	f := &fieldReader{r: r}
	hidden := f.need("d_model")
	encLayers := f.need("encoder_layers")
	decLayers := f.need("decoder_layers")
	encHeads := f.need("encoder_attention_heads")
	decHeads := f.need("decoder_attention_heads")
	encFFN := f.need("encoder_ffn_dim")
	decFFN := f.need("decoder_ffn_dim")
	positions := f.int(1024, "max_position_embeddings")
	if f.err != nil {
		return f.err
	}
	vocab, err := r.need("vocab_size")
	if err != nil {
		return noVocabError{err}
	}
	if err := checkDims(r, []dim{{"d_model", hidden}, {"encoder_attention_heads", encHeads}, {"decoder_attention_heads", decHeads},
		{"encoder_ffn_dim", encFFN}, {"decoder_ffn_dim", decFFN}, {"vocab_size", vocab}, {"max_position_embeddings", positions}}, encLayers, decLayers); err != nil {
		return err
	}
	if hidden%encHeads != 0 || hidden%decHeads != 0 {
		return fmt.Errorf("%w: field %sd_model: %d is not divisible by the attention heads (%d, %d)", ErrMalformed, r.prefix, hidden, encHeads, decHeads)
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	dropout, err := r.floatField("dropout", 0.1) // BartConfig's defaults
	if err != nil {
		return err
	}
	actDropout, err := r.floatField("activation_dropout", 0)
	if err != nil {
		return err
	}
	m.Hidden, m.Heads, m.KVHeads, m.HeadDim, m.Intermediate, m.Vocab = hidden, encHeads, encHeads, hidden/encHeads, max(encFFN, decFFN), vocab
	m.NumLayers = encLayers + decLayers
	m.MLP = MLPClassic
	m.Seq2Seq = &Seq2Seq{EncoderLayers: encLayers, DecoderLayers: decLayers, EncoderFFN: encFFN, DecoderFFN: decFFN,
		Inner: hidden, DecoderHeads: decHeads, Dropout: dropout, FFNDropout: actDropout}
	attn := []Linear{
		lin("q_proj", RoleAttention, hidden, hidden, true), lin("k_proj", RoleAttention, hidden, hidden, true),
		lin("v_proj", RoleAttention, hidden, hidden, true), lin("out_proj", RoleAttention, hidden, hidden, true),
	}
	m.attentionNames = []string{"q_proj", "k_proj", "v_proj", "out_proj"}
	m.mlpNames = []string{"fc1", "fc2"}
	ln := 2 * hidden // LayerNorm weight and bias
	for range encLayers {
		lins := append(append([]Linear{}, attn...), lin("fc1", RoleMLP, hidden, encFFN, true), lin("fc2", RoleMLP, encFFN, hidden, true))
		m.Layers = append(m.Layers, Layer{Attention: "full", NormParams: 2 * ln, FFNActive: encFFN, Linears: lins})
	}
	for range decLayers {
		lins := append(append(append([]Linear{}, attn...), attn...), lin("fc1", RoleMLP, hidden, decFFN, true), lin("fc2", RoleMLP, decFFN, hidden, true))
		m.Layers = append(m.Layers, Layer{Attention: "full", NormParams: 3 * ln, FFNActive: decFFN, Linears: lins})
	}
	m.setEmbeddings(false)
	m.PositionParams = 2 * (positions + 2) * hidden // BartLearnedPositionalEmbedding: offset 2, one per stack
	m.FinalNormParams = 2 * ln                      // layernorm_embedding of each stack
	m.Notes = append(m.Notes, seq2seqNote)
	return nil
}

// checkDims bounds a seq2seq config's dimensions as common bounds a
// decoder's, naming the first bad field.
func checkDims(r raw, dims []dim, enc, dec int64) error {
	for _, name := range []string{"num_layers", "encoder_layers"} {
		if r.has(name) && enc > maxLayers {
			return fmt.Errorf("%w: field %s%s: %d layers (more than %d)", ErrMalformed, r.prefix, name, enc, maxLayers)
		}
	}
	if dec > maxLayers || dec < 0 {
		return fmt.Errorf("%w: %d decoder layers (want 0..%d)", ErrMalformed, dec, maxLayers)
	}
	if enc < 1 {
		return fmt.Errorf("%w: no encoder layers", ErrMalformed)
	}
	for _, d := range dims {
		if d.v < 1 || d.v > maxDim {
			return fmt.Errorf("%w: field %s%s: %d (want 1..%d)", ErrMalformed, r.prefix, d.name, d.v, maxDim)
		}
	}
	return nil
}

// dim is one named dimension of a config, for checkDims.
type dim struct {
	name string
	v    int64
}

// need reads a required integer field (the first of keys present).
func (f *fieldReader) need(keys ...string) int64 {
	if f.err != nil {
		return 0
	}
	v, err := f.r.need(keys...)
	f.err = err
	return v
}
