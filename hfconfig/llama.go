package hfconfig

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// buildLlama covers the Llama layout and its relatives: separate q/k/v/o,
// gated gate/up/down, RMSNorm; with each family's bias, norm and MoE
// variations as its familySpec gives them, and the per-layer shape fields of
// newer configs (layer_types, global_head_dim, num_global_key_value_heads,
// attention_k_eq_v, num_kv_shared_layers, use_double_wide_mlp,
// *_per_layer_input).
func buildLlama(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.first(0, "intermediate_size"); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPGated
	sh, err := readLlamaShape(r, m, s)
	if err != nil {
		return err
	}
	if sh.layerTypes != nil || sh.kvShared > 0 || sh.plHidden > 0 || sh.kEqV || sh.doubleWide {
		m.Notes = append(m.Notes, "per-layer shapes derived from layer_types / per-layer fields")
	}
	if s.slidingNote && m.SlidingWindow > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("sliding-window layers attend to %d tokens", m.SlidingWindow))
	}
	m.mlpNames = sh.expertNames()
	m.attentionNames = []string{"q_proj", "k_proj", "v_proj", "o_proj"}
	for i := range m.NumLayers {
		m.Layers = append(m.Layers, sh.layer(i))
	}
	m.setEmbeddings(false)
	m.FinalNormParams = sh.normWidth * m.Hidden
	if sh.plHidden > 0 {
		plVocab := cmp.Or(sh.plVocab, m.Vocab)
		// Per-layer-input embedding table and its projection from the residual.
		m.EmbeddingParams += plVocab*m.NumLayers*sh.plHidden + m.Hidden*m.NumLayers*sh.plHidden
		m.FinalNormParams += sh.plHidden
	}
	if sh.experts > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("MoE: %d experts, %d active per token", sh.experts, m.ExpertsPerToken))
	}
	return nil
}

// llamaShape is what a Llama-layout config says beyond the common
// dimensions, read once; layer builds each decoder layer from it.
type llamaShape struct {
	spec                     familySpec
	hidden, heads, kvHeads   int64
	headDim, numLayers       int64
	attnBias, oBias, mlpBias bool
	// blockNorms is a block's norm parameters, q/k norms included;
	// normWidth is 1 for RMSNorm, 2 for LayerNorm (weight and bias).
	blockNorms, normWidth int64

	experts, perToken, moeWidth, sharedWidth, denseWidth int64
	sparseStep                                           int64
	slidingPattern                                       int64 // Gemma 3's sliding_window_pattern
	mlpOnly, moeLayers                                   []int64

	layerTypes                  []string
	globalHeadDim, globalKV     int64
	kEqV, doubleWide            bool
	kvShared, plHidden, plVocab int64
}

// readLlamaShape reads the Llama-layout fields in a fixed order, so that of
// several bad fields the same one is reported every time.
func readLlamaShape(r raw, m *Model, s familySpec) (*llamaShape, error) {
	sh := &llamaShape{spec: s, hidden: m.Hidden, heads: m.Heads, kvHeads: m.KVHeads, headDim: m.HeadDim, numLayers: m.NumLayers}
	f := &fieldReader{r: r}
	sh.readAttention(f)
	sh.readMoE(f, m)
	if f.err != nil {
		return nil, f.err
	}
	if m.Intermediate == 0 && sh.experts == 0 {
		return nil, fmt.Errorf("%w: field %sintermediate_size: missing or zero", ErrMalformed, r.prefix)
	}
	sh.sparseStep = f.int(1, "decoder_sparse_step", "interleave_moe_layer_step")
	sh.mlpOnly = f.ints("mlp_only_layers")
	sh.moeLayers = f.ints("moe_layers")
	sh.layerTypes = f.strings("layer_types")
	if sh.spec.slidingPattern > 0 {
		sh.slidingPattern = f.int(sh.spec.slidingPattern, "sliding_window_pattern")
	}
	if f.err == nil && sh.spec.slidingPattern > 0 && sh.layerTypes == nil && sh.slidingPattern < 1 {
		// Gemma3TextConfig takes (i+1) % sliding_window_pattern: 0 divides by zero.
		return nil, fmt.Errorf("%w: field %ssliding_window_pattern: %d (want at least 1)", ErrMalformed, r.prefix, sh.slidingPattern)
	}
	if f.err != nil {
		return nil, f.err
	}
	if sh.layerTypes != nil && int64(len(sh.layerTypes)) != m.NumLayers {
		return nil, fmt.Errorf("%w: field %slayer_types: %d entries for %d layers", ErrMalformed, r.prefix, len(sh.layerTypes), m.NumLayers)
	}
	sh.globalHeadDim = f.int(m.HeadDim, "global_head_dim")
	sh.globalKV = f.int(m.KVHeads, "num_global_key_value_heads")
	sh.kEqV = f.bool("attention_k_eq_v", false)
	sh.kvShared = f.int(0, "num_kv_shared_layers")
	sh.doubleWide = f.bool("use_double_wide_mlp", false)
	sh.plHidden = f.int(0, "hidden_size_per_layer_input")
	sh.plVocab = f.int(0, "vocab_size_per_layer_input")
	return sh, f.err
}

// readAttention reads the bias switches and sizes the block's norms.
func (sh *llamaShape) readAttention(f *fieldReader) {
	s := sh.spec
	sh.attnBias = f.bool("attention_bias", s.attnBiasDefault)
	if s.qkvBiasKey != "" {
		sh.attnBias = f.bool(s.qkvBiasKey, false)
	}
	sh.mlpBias = f.bool("mlp_bias", false)
	sh.oBias = sh.attnBias && !s.noOutputBias

	sh.normWidth = 1
	if s.layerNorm {
		sh.normWidth = 2
	}
	sh.blockNorms = 2 * sh.normWidth * sh.hidden
	if s.sandwichNorms {
		sh.blockNorms = 4 * sh.hidden
	}
	if s.sinks {
		sh.blockNorms += sh.heads
	}
	switch s.qkNorm {
	case qkPerHead:
		sh.blockNorms += 2 * sh.headDim
	case qkWholeProjection:
		sh.blockNorms += (sh.heads + sh.kvHeads) * sh.headDim
	case qkLayerNormSwitch:
		if f.bool("qk_layernorm", false) {
			sh.blockNorms += 2 * sh.headDim * (sh.heads + sh.kvHeads)
		}
	}
}

// readMoE reads the expert count and widths.
func (sh *llamaShape) readMoE(f *fieldReader, m *Model) {
	sh.experts = f.int(sh.spec.expertsDefault, "num_local_experts", "num_experts", "n_routed_experts")
	m.Experts = sh.experts
	sh.perToken = f.int(sh.spec.perTokenDefault, "num_experts_per_tok", "moe_topk")
	m.ExpertsPerToken = sh.perToken
	sh.moeWidth = cmp.Or(f.int(0, "moe_intermediate_size"), m.Intermediate)
	m.NormTopK = f.bool("norm_topk_prob", false)
	sh.sharedWidth = f.int(0, "shared_expert_intermediate_size")
	sh.denseWidth = m.Intermediate
	if key := sh.spec.denseWidthKey; key != "" {
		sh.denseWidth = f.int(m.Intermediate, key)
		sh.sharedWidth = m.Intermediate
	}
}

// isMoE tells whether layer i routes its feed-forward through experts.
func (sh *llamaShape) isMoE(i int64) bool {
	switch {
	case sh.experts == 0:
		return false
	case sh.moeLayers != nil:
		return slices.Contains(sh.moeLayers, i)
	case slices.Contains(sh.mlpOnly, i):
		return false
	case sh.sparseStep <= 1:
		return true
	}
	return (i+1)%sh.sparseStep == 0
}

// expertNames is the MLP scope: the routed experts' projection names, which
// the dense projections share except where a family renames the experts.
func (sh *llamaShape) expertNames() []string {
	var names []string
	for _, p := range sh.spec.experts() {
		names = append(names, p.name)
	}
	return names
}

// layer builds decoder layer i.
func (sh *llamaShape) layer(i int64) Layer {
	kind := sh.attentionKind(i)
	sharedKV := sh.kvShared > 0 && i >= sh.numLayers-sh.kvShared
	L := Layer{Attention: kind, NormParams: sh.blockNorms, Linears: sh.attention(kind, sharedKV)}
	if sh.isMoE(i) {
		sh.addExperts(&L)
	} else {
		width := sh.denseWidth
		if sh.doubleWide && sharedKV {
			width *= 2 // double-wide MLP on KV-shared layers (seed 001's use_double_wide_mlp)
		}
		L.Linears = append(L.Linears, gatedMLP(RoleMLP, sh.hidden, width, sh.mlpBias)...)
		L.FFNActive = width
	}
	if sh.plHidden > 0 {
		L.Linears = append(L.Linears,
			lin("per_layer_input_gate", RoleOther, sh.hidden, sh.plHidden, false),
			lin("per_layer_projection", RoleOther, sh.plHidden, sh.hidden, false))
		L.NormParams += sh.hidden
	}
	return L
}

// attentionKind is "sliding" or "full": as layer_types says, or by the
// family's alternation when it is absent.
func (sh *llamaShape) attentionKind(i int64) string {
	if sh.layerTypes != nil {
		if strings.Contains(sh.layerTypes[i], "sliding") {
			return "sliding"
		}
		return "full"
	}
	if sh.spec.alternateSliding && i%2 == 0 {
		return "sliding" // Gemma 2 alternates, starting with a sliding layer
	}
	if p := sh.slidingPattern; p > 0 && (i+1)%p != 0 {
		return "sliding" // Gemma 3: five sliding layers, then a full one
	}
	return "full"
}

// attention is a layer's q/k/v/o. Full layers of a config with layer_types
// take the global head size and K/V heads; KV-shared layers reuse an earlier
// layer's k and v; attention_k_eq_v drops v.
func (sh *llamaShape) attention(kind string, sharedKV bool) []Linear {
	hd, kv := sh.headDim, sh.kvHeads
	if kind == "full" && sh.layerTypes != nil {
		hd, kv = sh.globalHeadDim, sh.globalKV
	}
	lins := []Linear{lin("q_proj", RoleAttention, sh.hidden, sh.heads*hd, sh.attnBias)}
	if !sharedKV {
		lins = append(lins, lin("k_proj", RoleAttention, sh.hidden, kv*hd, sh.attnBias))
		if !sh.kEqV {
			lins = append(lins, lin("v_proj", RoleAttention, sh.hidden, kv*hd, sh.attnBias))
		}
	}
	return append(lins, lin("o_proj", RoleAttention, sh.heads*hd, sh.hidden, sh.oBias))
}

// addExperts gives a layer its routed experts, router and shared expert.
func (sh *llamaShape) addExperts(L *Layer) {
	L.MoE = true
	for _, p := range sh.spec.experts() {
		in, out := sh.hidden, p.width*sh.moeWidth
		if p.down {
			in, out = sh.moeWidth, sh.hidden
		}
		L.Linears = append(L.Linears, Linear{Name: p.name, Role: RoleExpert, In: in, Out: out, Bias: sh.spec.expertBias, Copies: sh.experts})
	}
	L.Linears = append(L.Linears, lin(cmp.Or(sh.spec.routerName, "gate"), RoleRouter, sh.hidden, sh.experts, sh.spec.expertBias))
	L.FFNActive = sh.perToken * sh.moeWidth
	if sh.sharedWidth > 0 {
		L.Linears = append(L.Linears, gatedMLP(RoleSharedExpert, sh.hidden, sh.sharedWidth, false)...)
		if sh.spec.sharedExpertGate {
			L.Linears = append(L.Linears, lin("shared_expert_gate", RoleRouter, sh.hidden, 1, false))
		}
		L.FFNActive += sh.sharedWidth
	}
}

// experts is the family's routed-expert projections.
func (s familySpec) experts() []expertProj {
	if s.expertProjs == nil {
		return gluExperts
	}
	return s.expertProjs
}

// gatedMLP is gate_proj, up_proj and down_proj of the given width.
func gatedMLP(role Role, hidden, width int64, bias bool) []Linear {
	return []Linear{
		lin("gate_proj", role, hidden, width, bias),
		lin("up_proj", role, hidden, width, bias),
		lin("down_proj", role, width, hidden, bias),
	}
}

// fieldReader reads fields in order and keeps the first error: a builder
// reads a run of fields without a check after each, and once a read fails
// the later ones return zero values and err reports the first failure.
type fieldReader struct {
	r   raw
	err error
}

func (f *fieldReader) int(def int64, keys ...string) int64 {
	if f.err != nil {
		return 0
	}
	v, err := f.r.first(def, keys...)
	f.err = err
	return v
}

func (f *fieldReader) bool(key string, def bool) bool {
	if f.err != nil {
		return false
	}
	v, err := f.r.boolField(key, def)
	f.err = err
	return v
}

func (f *fieldReader) ints(key string) []int64 {
	if f.err != nil {
		return nil
	}
	v, err := f.r.ints(key)
	f.err = err
	return v
}

func (f *fieldReader) strings(key string) []string {
	if f.err != nil {
		return nil
	}
	v, err := f.r.strings(key)
	f.err = err
	return v
}
