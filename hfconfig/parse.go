package hfconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/canifinetune/canifinetune/internal/checked"
)

// encoders are refused: the memory model is for causal decoders.
var encoders = map[string]string{
	"deberta": "encoder-only",
	"electra": "encoder-only",
	"mbart":   "encoder-decoder", "pegasus": "encoder-decoder", "whisper": "encoder-decoder", "umt5": "encoder-decoder", "marian": "encoder-decoder",
}

// SupportedTypes lists the model_type values with a dedicated builder.
func SupportedTypes() []string {
	return slices.Sorted(maps.Keys(mergeFamilies()))
}

// mergeFamilies is every model_type with a builder.
func mergeFamilies() map[string]familySpec {
	all := maps.Clone(families)
	maps.Copy(all, seq2seqFamilies)
	return all
}

// Parse reads a config.json. A multimodal checkpoint's text model is read from
// text_config (llm_config, language_config); its vision tower is counted as
// frozen weights. A leading UTF-8 byte order mark, which some Windows editors
// write and encoding/json refuses, is skipped.
func Parse(b []byte) (*Model, error) { return ParseWith(b, ParseOptions{}) }

// ParseOptions are values the caller knows that a config.json may lack.
type ParseOptions struct {
	// Vocab, when above 0, is the vocabulary size: it replaces the
	// config's vocab_size (or stands in for a missing one) and the model
	// notes it.
	Vocab int64
}

// ErrNoVocab is wrapped (beside ErrMalformed) when a config has no
// vocabulary size: a caller can ask for it by name (ParseOptions.Vocab).
var ErrNoVocab = errors.New("no vocabulary size")

// noVocabError is a missing vocab_size: ErrMalformed naming the field, and
// ErrNoVocab.
type noVocabError struct{ err error }

func (e noVocabError) Error() string {
	return e.err.Error() + "; give the vocabulary size as an override"
}

func (e noVocabError) Unwrap() []error { return []error{e.err, ErrNoVocab} }

// ParseWith is Parse with values that override or complete the config.
func ParseWith(b []byte, o ParseOptions) (*Model, error) {
	top, err := parseRaw(bytes.TrimPrefix(b, utf8BOM), "")
	if err != nil {
		return nil, err
	}
	outer, err := top.str("model_type", "")
	if err != nil {
		return nil, err
	}
	r := top
	m := &Model{}
	for _, key := range []string{"text_config", "llm_config", "language_config"} {
		sub, ok, err := top.object(key)
		if err != nil {
			return nil, err
		}
		if ok {
			r = sub
			m.Outer = outer
			tower, note, err := towerParams(top)
			if err != nil {
				return nil, err
			}
			m.FrozenTowerParams = tower
			if note != "" {
				m.Notes = append(m.Notes, note)
			}
			break
		}
	}
	mt, err := r.str("model_type", "")
	if err != nil {
		return nil, err
	}
	if mt == "" {
		mt = outer
	}
	if o.Vocab > 0 {
		// The text model's own object: where transformers reads vocab_size.
		r.m["vocab_size"] = json.RawMessage(strconv.FormatInt(o.Vocab, 10))
		delete(r.m, "padded_vocab_size")
		m.Notes = append(m.Notes, fmt.Sprintf("vocabulary size %d given as an override, not read from config.json", o.Vocab))
	}
	if mt == "" {
		return nil, fmt.Errorf("%w: field model_type: missing (every transformers config.json has one)", ErrMalformed)
	}
	if kind, ok := encoders[mt]; ok {
		return nil, fmt.Errorf("%w: model_type %q is %s; canifinetune models causal decoder LMs (their logits chain, KV layout and LoRA defaults differ)", ErrUnsupported, mt, kind)
	}
	_, seq2seq := seq2seqFamilies[mt]
	if enc, err := top.boolField("is_encoder_decoder", false); err != nil {
		return nil, err
	} else if enc && !seq2seq {
		return nil, fmt.Errorf("%w: model_type %q is encoder-decoder (is_encoder_decoder: true); the encoder-decoder types modelled are %s", ErrUnsupported, mt, strings.Join(slices.Sorted(maps.Keys(seq2seqFamilies)), ", "))
	}
	m.ModelType = mt
	fam, ok := families[mt]
	if seq2seq {
		fam, ok = seq2seqFamilies[mt], true
	}
	if !ok {
		// A generic fallback only when the Llama-style fields are all there.
		if !(r.has("hidden_size") && r.has("num_hidden_layers") && r.has("num_attention_heads") && r.has("intermediate_size") && r.has("vocab_size")) {
			return nil, fmt.Errorf("%w: model_type %q is not known and its config lacks the Llama-style fields a generic estimate needs; known types: %s",
				ErrUnsupported, mt, strings.Join(SupportedTypes(), ", "))
		}
		m.Generic = true
		m.Notes = append(m.Notes, fmt.Sprintf("model_type %q is not known: shapes assume a Llama-style decoder (q/k/v/o, gate/up/down, RMSNorm); low confidence", mt))
		fam = genericFamily
	}
	if err := fam.buildModel(r, m); err != nil {
		return nil, err
	}
	if err := checkExperts(r, mt); err != nil {
		return nil, err
	}
	if m.MaxPositions, err = r.first(0, "max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"); err != nil {
		return nil, err
	}
	if pq, err := preQuant(top); err != nil {
		return nil, err
	} else if pq != nil {
		m.PreQuantized = pq
		m.Notes = append(m.Notes, pq.Note)
	}
	if len(m.Layers) == 0 {
		return nil, fmt.Errorf("%w: no decoder layers (num_hidden_layers is 0)", ErrMalformed)
	}
	if err := checkSize(m); err != nil {
		return nil, err
	}
	m.index()
	return m, nil
}

// sparseOnly maps the model types whose transformers implementation builds
// every sparse layer's feed-forward from its routed experts, with no dense
// fallback, to the field that counts them: 0 there is a broken config (the
// router would pick top-k of nothing), not a dense model. Qwen2-MoE and
// Qwen3-MoE are absent on purpose: their decoder layers use a dense MLP when
// num_experts is 0 (modeling_qwen2_moe: "config.num_experts > 0 and …").
var sparseOnly = map[string]string{
	"mixtral": "num_local_experts", "granitemoe": "num_local_experts",
	"llama4": "num_local_experts", "llama4_text": "num_local_experts",
	"olmoe": "num_experts", "gpt_oss": "num_local_experts", "deepseek_v2": "n_routed_experts", "deepseek_v3": "n_routed_experts",
}

// checkExperts refuses an expert count below 1 where the model type has no
// dense reading of it.
func checkExperts(r raw, mt string) error {
	key, ok := sparseOnly[mt]
	if !ok || !r.has(key) {
		return nil
	}
	n, err := r.intField(key, 0)
	if err != nil {
		return err
	}
	if n < 1 {
		return r.errf(key, "%d experts (a %s model routes each token to its experts: at least 1; transformers has no dense fallback for it)", n, mt)
	}
	return nil
}

// utf8BOM is the byte order mark U+FEFF in UTF-8.
var utf8BOM = []byte("\uFEFF")

// maxParams bounds the parameter count a config may imply: the bound every
// parameter count shares (checked.MaxParameters, 10^15). Beyond it a
// dimension is out of range, and the int64 sums could have wrapped.
const maxParams = checked.MaxParameters

// checkSize recomputes the parameter count in float64, which cannot wrap,
// and refuses a config that implies more than maxParams.
func checkSize(m *Model) error {
	total := float64(m.EmbeddingParams) + float64(m.PositionParams) + float64(m.LMHeadParams) +
		float64(m.FinalNormParams) + float64(m.FrozenTowerParams)
	for _, l := range m.Layers {
		total += float64(l.NormParams)
		for _, lin := range l.Linears {
			total += (float64(lin.In) + b2f(lin.Bias)) * float64(lin.Out) * float64(lin.Copies)
		}
	}
	if total > maxParams || m.Params() <= 0 {
		return fmt.Errorf("%w: the config implies %.3g parameters (more than 10^15): a dimension is out of range", ErrMalformed, total)
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Bounds on the dimensions common reads, far above any published decoder
// and low enough that products of two of them cannot overflow int64 and
// that building the layers cannot exhaust memory.
const (
	maxLayers = 1 << 16
	maxDim    = 1 << 24
)

// common reads the dimensions every decoder has, under their usual names.
func common(r raw, m *Model) error {
	var err error
	if m.Hidden, err = r.need("hidden_size", "n_embd", "d_model", "n_embed", "dim"); err != nil {
		return err
	}
	if m.NumLayers, err = r.need("num_hidden_layers", "n_layer", "num_layers", "n_layers"); err != nil {
		return err
	}
	if m.Heads, err = r.need("num_attention_heads", "n_head", "n_heads"); err != nil {
		return err
	}
	if m.Vocab, err = r.need("vocab_size", "padded_vocab_size"); err != nil {
		return noVocabError{err}
	}
	if m.KVHeads, err = r.first(m.Heads, "num_key_value_heads", "num_kv_heads", "multi_query_group_num"); err != nil {
		return err
	}
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.HeadDim, err = r.first(0, "head_dim", "kv_channels"); err != nil {
		return err
	}
	if m.NumLayers > maxLayers {
		return fmt.Errorf("%w: field %snum_hidden_layers: %d layers (more than %d)", ErrMalformed, r.prefix, m.NumLayers, maxLayers)
	}
	for _, d := range []struct {
		name string
		v    int64
	}{{"hidden_size", m.Hidden}, {"num_attention_heads", m.Heads}, {"num_key_value_heads", m.KVHeads}, {"head_dim", m.HeadDim}, {"vocab_size", m.Vocab}} {
		if d.v > maxDim {
			return fmt.Errorf("%w: field %s%s: %d (more than %d)", ErrMalformed, r.prefix, d.name, d.v, maxDim)
		}
	}
	if m.HeadDim == 0 {
		if m.Hidden%m.Heads != 0 {
			return fmt.Errorf("%w: hidden size %d is not divisible by %d attention heads and head_dim is absent", ErrMalformed, m.Hidden, m.Heads)
		}
		m.HeadDim = m.Hidden / m.Heads
	}
	if m.Heads%m.KVHeads != 0 {
		return fmt.Errorf("%w: field %snum_key_value_heads: %d does not divide %d attention heads", ErrMalformed, r.prefix, m.KVHeads, m.Heads)
	}
	if m.SlidingWindow, err = r.first(0, "sliding_window"); err != nil {
		return err
	}
	// Qwen2's family configs carry a window with use_sliding_window false
	// (Qwen2.5's 131072 or 32768, R1-Distill-Qwen's 4096): transformers then
	// sets no window at all (Qwen2Config: sliding_window if
	// use_sliding_window else None).
	// With it true, only the layers from max_window_layers on slide
	// (Qwen2Attention: use_sliding_window and layer_idx >=
	// max_window_layers): none when that is every layer.
	if use, err := r.boolField("use_sliding_window", true); err != nil {
		return err
	} else if !use {
		m.SlidingWindow = 0
	} else if r.has("max_window_layers") {
		from, err := r.first(0, "max_window_layers")
		if err != nil {
			return err
		}
		if from >= m.NumLayers {
			m.SlidingWindow = 0
		}
	}
	if m.LogitSoftcap, err = r.floatField("final_logit_softcapping", 0); err != nil {
		return err
	}
	if m.AttnSoftcap, err = r.floatField("attn_logit_softcapping", 0); err != nil {
		return err
	}
	if m.ResidDropout, err = r.floatField("resid_pdrop", 0); err != nil {
		return err
	}
	if m.AttnDropout, err = r.floatField("attn_pdrop", 0); err != nil {
		return err
	}
	return nil
}

// tied reads tie_word_embeddings with the family's transformers default.
func tied(r raw, m *Model, def bool) error {
	t, err := r.boolField("tie_word_embeddings", def)
	m.TiedEmbeddings = t
	return err
}

func (m *Model) setEmbeddings(extraLMHeadBias bool) {
	m.EmbeddingParams += m.Vocab * m.Hidden
	if !m.TiedEmbeddings {
		m.LMHeadParams = m.Vocab * m.Hidden
		if extraLMHeadBias {
			m.LMHeadParams += m.Vocab
		}
	}
}

func lin(name string, role Role, in, out int64, bias bool) Linear {
	return Linear{Name: name, Role: role, In: in, Out: out, Bias: bias, Copies: 1}
}
