package hfconfig

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/internal/checked"
)

// builder turns a config into layers for one family of model types.
type builder func(r raw, m *Model) error

// families maps model_type to its builder and family name. Aliases of the same
// code path (Falcon's RefinedWeb names) share an entry.
var families = map[string]struct {
	family string
	build  builder
}{
	"llama":           {"llama", buildLlama},
	"mistral":         {"mistral", buildLlama},
	"qwen2":           {"qwen2", buildLlama},
	"qwen3":           {"qwen3", buildLlama},
	"granite":         {"granite", buildLlama},
	"olmo2":           {"olmo2", buildLlama},
	"gemma":           {"gemma", buildLlama},
	"gemma2":          {"gemma", buildLlama},
	"gemma3_text":     {"gemma", buildLlama},
	"gemma3":          {"gemma", buildLlama},
	"stablelm":        {"stablelm", buildLlama},
	"baichuan":        {"baichuan", buildBaichuan},
	"mixtral":         {"mixtral", buildLlama},
	"qwen2_moe":       {"qwen2_moe", buildLlama},
	"qwen3_moe":       {"qwen3_moe", buildLlama},
	"olmoe":           {"olmoe", buildLlama},
	"granitemoe":      {"granitemoe", buildLlama},
	"llama4_text":     {"llama4", buildLlama},
	"llama4":          {"llama4", buildLlama},
	"deepseek_v2":     {"deepseek", buildDeepSeek},
	"deepseek_v3":     {"deepseek", buildDeepSeek},
	"phi":             {"phi", buildPhi},
	"phi3":            {"phi3", buildPhi3},
	"gpt2":            {"gpt2", buildGPT2},
	"gpt_bigcode":     {"gpt_bigcode", buildGPT2},
	"gpt_neox":        {"gpt_neox", buildNeoX},
	"falcon":          {"falcon", buildFalcon},
	"RefinedWeb":      {"falcon", buildFalcon},
	"RefinedWebModel": {"falcon", buildFalcon},
	"bloom":           {"bloom", buildNeoX},
	"qwen":            {"qwen", buildQwenV1},
	"chatglm":         {"chatglm", buildChatGLM},
}

// encoders are refused: the memory model is for causal decoders.
var encoders = map[string]string{
	"bert": "encoder-only", "roberta": "encoder-only", "deberta": "encoder-only", "deberta-v2": "encoder-only",
	"distilbert": "encoder-only", "electra": "encoder-only", "xlm-roberta": "encoder-only", "modernbert": "encoder-only",
	"t5": "encoder-decoder", "mt5": "encoder-decoder", "bart": "encoder-decoder", "mbart": "encoder-decoder",
	"pegasus": "encoder-decoder", "whisper": "encoder-decoder", "umt5": "encoder-decoder", "marian": "encoder-decoder",
}

// SupportedTypes lists the model_type values with a dedicated builder.
func SupportedTypes() []string {
	return slices.Sorted(maps.Keys(families))
}

// Parse reads a config.json. A multimodal checkpoint's text model is read from
// text_config (llm_config, language_config); its vision tower is counted as
// frozen weights. A leading UTF-8 byte order mark, which some Windows editors
// write and encoding/json refuses, is skipped.
func Parse(b []byte) (*Model, error) {
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
	if mt == "" {
		return nil, fmt.Errorf("%w: field model_type: missing (every transformers config.json has one)", ErrMalformed)
	}
	if kind, ok := encoders[mt]; ok {
		return nil, fmt.Errorf("%w: model_type %q is %s; canifinetune models causal decoder LMs (their logits chain, KV layout and LoRA defaults differ)", ErrUnsupported, mt, kind)
	}
	if enc, err := top.boolField("is_encoder_decoder", false); err != nil {
		return nil, err
	} else if enc {
		return nil, fmt.Errorf("%w: model_type %q is encoder-decoder (is_encoder_decoder: true)", ErrUnsupported, mt)
	}
	m.ModelType = mt
	fam, ok := families[mt]
	if !ok {
		// A generic fallback only when the Llama-style fields are all there.
		if !(r.has("hidden_size") && r.has("num_hidden_layers") && r.has("num_attention_heads") && r.has("intermediate_size") && r.has("vocab_size")) {
			return nil, fmt.Errorf("%w: model_type %q is not known and its config lacks the Llama-style fields a generic estimate needs; known types: %s",
				ErrUnsupported, mt, strings.Join(SupportedTypes(), ", "))
		}
		m.Generic = true
		m.Notes = append(m.Notes, fmt.Sprintf("model_type %q is not known: shapes assume a Llama-style decoder (q/k/v/o, gate/up/down, RMSNorm); low confidence", mt))
		fam.family, fam.build = "generic", buildLlama
	}
	m.Family = fam.family
	if err := fam.build(r, m); err != nil {
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
	"olmoe": "num_experts", "deepseek_v2": "n_routed_experts", "deepseek_v3": "n_routed_experts",
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
	if m.Hidden, err = r.need("hidden_size", "n_embd", "d_model", "n_embed"); err != nil {
		return err
	}
	if m.NumLayers, err = r.need("num_hidden_layers", "n_layer", "num_layers", "n_layers"); err != nil {
		return err
	}
	if m.Heads, err = r.need("num_attention_heads", "n_head", "n_heads"); err != nil {
		return err
	}
	if m.Vocab, err = r.need("vocab_size", "padded_vocab_size"); err != nil {
		return err
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
	if m.LogitSoftcap, err = r.floatField("final_logit_softcapping", 0); err != nil {
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

// buildLlama covers the Llama layout and its relatives: separate q/k/v/o,
// gated gate/up/down, RMSNorm; with each family's bias, norm and MoE variations,
// and the per-layer shape fields of newer configs (layer_types, global_head_dim,
// num_global_key_value_heads, attention_k_eq_v, num_kv_shared_layers,
// use_double_wide_mlp, *_per_layer_input).
func buildLlama(r raw, m *Model) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.first(0, "intermediate_size"); err != nil {
		return err
	}
	gemma, llama4 := m.Family == "gemma", m.Family == "llama4"
	qwen2 := m.ModelType == "qwen2" || m.ModelType == "qwen2_moe"
	if err := tied(r, m, gemma || llama4); err != nil {
		return err
	}
	m.MLP = MLPGated
	h, hd := m.Hidden, m.HeadDim
	attnBias, err := r.boolField("attention_bias", qwen2)
	if err != nil {
		return err
	}
	if m.ModelType == "stablelm" {
		if attnBias, err = r.boolField("use_qkv_bias", false); err != nil {
			return err
		}
	}
	mlpBias, err := r.boolField("mlp_bias", false)
	if err != nil {
		return err
	}
	// Qwen2 hard-codes biases on q/k/v but not o (modeling_qwen2); others use
	// attention_bias for all four.
	oBias := attnBias && !qwen2

	// Norm sizes per block: RMSNorm is H weights, LayerNorm (stablelm) 2H.
	normW := int64(1)
	if m.ModelType == "stablelm" {
		normW = 2
	}
	blockNorms := 2 * normW * h
	switch m.ModelType {
	case "gemma2", "gemma3", "gemma3_text":
		blockNorms = 4 * h // input, post-attention, pre- and post-feedforward
	}
	qkNorm := int64(0)
	switch m.ModelType {
	case "qwen3", "qwen3_moe", "gemma3", "gemma3_text":
		qkNorm = 2 * hd // per-head q_norm and k_norm
	case "olmo2", "olmoe":
		qkNorm = m.Heads*hd + m.KVHeads*hd // q_norm and k_norm over the whole projection
	}
	if m.ModelType == "stablelm" {
		if qkln, err := r.boolField("qk_layernorm", false); err != nil {
			return err
		} else if qkln {
			qkNorm = 2 * hd * (m.Heads + m.KVHeads) // per-head LayerNorms with bias
		}
	}

	// MoE shape.
	experts, err := r.first(0, "num_local_experts", "num_experts", "n_routed_experts")
	if err != nil {
		return err
	}
	m.Experts = experts
	if m.ExpertsPerToken, err = r.first(0, "num_experts_per_tok", "moe_topk"); err != nil {
		return err
	}
	moeInter, err := r.first(0, "moe_intermediate_size")
	if err != nil {
		return err
	}
	if moeInter == 0 {
		moeInter = m.Intermediate
	}
	sharedInter, err := r.first(0, "shared_expert_intermediate_size")
	if err != nil {
		return err
	}
	denseInter := m.Intermediate
	if llama4 {
		// Llama 4: intermediate_size is the expert width, intermediate_size_mlp the dense one.
		if denseInter, err = r.first(m.Intermediate, "intermediate_size_mlp"); err != nil {
			return err
		}
		sharedInter = m.Intermediate
	}
	if m.Intermediate == 0 && experts == 0 {
		return fmt.Errorf("%w: field %sintermediate_size: missing or zero", ErrMalformed, r.prefix)
	}
	sparseStep, err := r.first(1, "decoder_sparse_step", "interleave_moe_layer_step")
	if err != nil {
		return err
	}
	mlpOnly, err := r.ints("mlp_only_layers")
	if err != nil {
		return err
	}
	moeLayers, err := r.ints("moe_layers")
	if err != nil {
		return err
	}
	isMoE := func(i int64) bool {
		if experts == 0 {
			return false
		}
		if moeLayers != nil {
			return slices.Contains(moeLayers, i)
		}
		if slices.Contains(mlpOnly, i) {
			return false
		}
		if sparseStep <= 1 {
			return true
		}
		return (i+1)%sparseStep == 0
	}

	// Per-layer shape fields.
	layerTypes, err := r.strings("layer_types")
	if err != nil {
		return err
	}
	if layerTypes != nil && int64(len(layerTypes)) != m.NumLayers {
		return fmt.Errorf("%w: field %slayer_types: %d entries for %d layers", ErrMalformed, r.prefix, len(layerTypes), m.NumLayers)
	}
	globalHD, err := r.first(hd, "global_head_dim")
	if err != nil {
		return err
	}
	globalKV, err := r.first(m.KVHeads, "num_global_key_value_heads")
	if err != nil {
		return err
	}
	kEqV, err := r.boolField("attention_k_eq_v", false)
	if err != nil {
		return err
	}
	kvShared, err := r.first(0, "num_kv_shared_layers")
	if err != nil {
		return err
	}
	doubleWide, err := r.boolField("use_double_wide_mlp", false)
	if err != nil {
		return err
	}
	plHidden, err := r.first(0, "hidden_size_per_layer_input")
	if err != nil {
		return err
	}
	plVocab, err := r.first(0, "vocab_size_per_layer_input")
	if err != nil {
		return err
	}
	if layerTypes != nil || kvShared > 0 || plHidden > 0 || kEqV || doubleWide {
		m.Notes = append(m.Notes, "per-layer shapes derived from layer_types / per-layer fields")
	}
	if gemma && m.ModelType != "gemma" && m.SlidingWindow > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("sliding-window layers attend to %d tokens", m.SlidingWindow))
	}

	// The routed experts' projections (the same in every MoE layer), the
	// router's name, and the MLP scope, which names the expert projections.
	var expertLins []Linear
	routerName := "gate"
	switch m.ModelType {
	case "mixtral":
		expertLins = []Linear{
			{Name: "w1", Role: RoleExpert, In: h, Out: moeInter, Copies: experts},
			{Name: "w2", Role: RoleExpert, In: moeInter, Out: h, Copies: experts},
			{Name: "w3", Role: RoleExpert, In: h, Out: moeInter, Copies: experts}}
		m.mlpNames = []string{"w1", "w2", "w3"}
	case "granitemoe":
		expertLins = []Linear{
			{Name: "input_linear", Role: RoleExpert, In: h, Out: 2 * moeInter, Copies: experts},
			{Name: "output_linear", Role: RoleExpert, In: moeInter, Out: h, Copies: experts}}
		routerName = "router"
		m.mlpNames = []string{"input_linear", "output_linear"}
	default:
		expertLins = []Linear{
			{Name: "gate_proj", Role: RoleExpert, In: h, Out: moeInter, Copies: experts},
			{Name: "up_proj", Role: RoleExpert, In: h, Out: moeInter, Copies: experts},
			{Name: "down_proj", Role: RoleExpert, In: moeInter, Out: h, Copies: experts}}
		m.mlpNames = []string{"gate_proj", "up_proj", "down_proj"}
	}
	m.attentionNames = []string{"q_proj", "k_proj", "v_proj", "o_proj"}

	for i := int64(0); i < m.NumLayers; i++ {
		kind := "full"
		if layerTypes != nil && strings.Contains(layerTypes[i], "sliding") {
			kind = "sliding"
		} else if layerTypes == nil && m.ModelType == "gemma2" && i%2 == 0 {
			kind = "sliding" // Gemma 2 alternates, starting with a sliding layer
		}
		lhd, lkv := hd, m.KVHeads
		if kind == "full" && layerTypes != nil {
			lhd, lkv = globalHD, globalKV
		}
		L := Layer{Attention: kind, NormParams: blockNorms + qkNorm}
		L.Linears = append(L.Linears, lin("q_proj", RoleAttention, h, m.Heads*lhd, attnBias))
		sharedKV := kvShared > 0 && i >= m.NumLayers-kvShared
		if !sharedKV {
			L.Linears = append(L.Linears, lin("k_proj", RoleAttention, h, lkv*lhd, attnBias))
			if !kEqV {
				L.Linears = append(L.Linears, lin("v_proj", RoleAttention, h, lkv*lhd, attnBias))
			}
		}
		L.Linears = append(L.Linears, lin("o_proj", RoleAttention, m.Heads*lhd, h, oBias))
		if isMoE(i) {
			L.MoE = true
			L.Linears = append(L.Linears, expertLins...)
			L.Linears = append(L.Linears, lin(routerName, RoleRouter, h, experts, false))
			L.FFNActive = m.ExpertsPerToken * moeInter
			if sharedInter > 0 {
				L.Linears = append(L.Linears,
					lin("gate_proj", RoleSharedExpert, h, sharedInter, false),
					lin("up_proj", RoleSharedExpert, h, sharedInter, false),
					lin("down_proj", RoleSharedExpert, sharedInter, h, false))
				if m.ModelType == "qwen2_moe" {
					L.Linears = append(L.Linears, lin("shared_expert_gate", RoleRouter, h, 1, false))
				}
				L.FFNActive += sharedInter
			}
		} else {
			inter := denseInter
			if doubleWide && sharedKV {
				inter *= 2 // double-wide MLP on KV-shared layers (seed 001's use_double_wide_mlp)
			}
			L.Linears = append(L.Linears,
				lin("gate_proj", RoleMLP, h, inter, mlpBias),
				lin("up_proj", RoleMLP, h, inter, mlpBias),
				lin("down_proj", RoleMLP, inter, h, mlpBias))
			L.FFNActive = inter
		}
		if plHidden > 0 {
			L.Linears = append(L.Linears,
				lin("per_layer_input_gate", RoleOther, h, plHidden, false),
				lin("per_layer_projection", RoleOther, plHidden, h, false))
			L.NormParams += h
		}
		m.Layers = append(m.Layers, L)
	}
	m.setEmbeddings(false)
	m.FinalNormParams = normW * h
	if plHidden > 0 {
		if plVocab == 0 {
			plVocab = m.Vocab
		}
		// Per-layer-input embedding table and its projection from the residual.
		m.EmbeddingParams += plVocab*m.NumLayers*plHidden + h*m.NumLayers*plHidden
		m.FinalNormParams += plHidden
	}
	if experts > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("MoE: %d experts, %d active per token", experts, m.ExpertsPerToken))
	}
	return nil
}
