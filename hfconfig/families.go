package hfconfig

import (
	"cmp"
	"fmt"
	"strings"
)

// familySpec is what Parse knows about one model_type: the family it belongs
// to, the layout function that turns its config into layers, and the
// switches that set it apart from the other types sharing that layout. A
// switch's zero value is the Llama behaviour, so a Llama-layout entry names
// only its differences.
type familySpec struct {
	family string
	build  func(r raw, m *Model, s familySpec) error

	// tiedDefault is tie_word_embeddings' default in the type's
	// transformers config class.
	tiedDefault bool
	// note is an assumption every model of the type rests on.
	note string

	// Llama layout: attention.
	attnBiasDefault  bool       // attention_bias defaults to true (Qwen2 hard-codes q/k/v biases)
	qkvBiasKey       string     // q/k/v/o biases follow this key (default false) instead of attention_bias
	noOutputBias     bool       // o_proj has no bias whatever the switch says (modeling_qwen2)
	qkNorm           qkNormKind // norms on queries and keys
	alternateSliding bool       // without layer_types, even layers are sliding (Gemma 2)
	// slidingPattern: without layer_types, layer i is sliding unless
	// (i+1) % sliding_window_pattern == 0, this the default (Gemma 3:
	// Gemma3TextConfig's layer_types, five sliding layers to one full).
	slidingPattern int64
	slidingNote    bool // the notes give the sliding window

	// Llama layout: norms.
	layerNorm     bool // LayerNorm, weight and bias, instead of RMSNorm
	sandwichNorms bool // four norms per block: before and after attention and feed-forward

	// Llama layout: mixture of experts.
	expertProjs      []expertProj // a routed expert's projections; nil: gate_proj, up_proj, down_proj
	routerName       string       // the router Linear; "": gate
	sharedExpertGate bool         // the shared expert has its own one-output gate
	denseWidthKey    string       // dense layers are this wide, and the shared expert is intermediate_size
	// expertsDefault and perTokenDefault are the expert count and the
	// experts per token the type's transformers config class assumes when
	// config.json leaves them out (0: the type is dense without them).
	expertsDefault, perTokenDefault int64

	// expertBias: every routed expert's projections and the router carry a
	// bias (GPT-OSS: gate_up_proj_bias, down_proj_bias, router.bias).
	expertBias bool
	// sinks: each attention head has a learned sink logit (GPT-OSS's
	// self_attn.sinks), counted with the block's norms.
	sinks bool
	// expertParameters: the experts are 3-D parameters, not nn.Linear
	// modules (Model.ExpertParameters).
	expertParameters bool
	// expertTargets: PEFT adapts the routed experts when a target list
	// names them (Model.ExpertTargets).
	expertTargets bool

	// Other layouts.
	multiQuery    bool // multi_query (default true) leaves one K/V head
	fixedBias     bool // every Linear is biased; no attention_bias switch
	embeddingNorm bool // a LayerNorm after the token embeddings
}

// qkNormKind says which norms a Llama-layout block puts on queries and keys.
type qkNormKind int

const (
	qkNone            qkNormKind = iota
	qkPerHead                    // q_norm and k_norm of one head's width, shared by the heads (Qwen3, Gemma 3)
	qkWholeProjection            // q_norm and k_norm over the whole q and k projections (OLMo 2, OLMoE)
	qkLayerNormSwitch            // per-head LayerNorms with bias when qk_layernorm is true (StableLM)
)

// expertProj is one projection of a routed expert: from the hidden size to
// width times the expert width, or (down) from the expert width back.
type expertProj struct {
	name  string
	down  bool
	width int64
}

var (
	gluExperts     = []expertProj{{"gate_proj", false, 1}, {"up_proj", false, 1}, {"down_proj", true, 1}}
	mixtralExperts = []expertProj{{"w1", false, 1}, {"w2", true, 1}, {"w3", false, 1}}
	// Granite MoE fuses gate and up into input_linear.
	graniteMoEExperts = []expertProj{{"input_linear", false, 2}, {"output_linear", true, 1}}
	// GPT-OSS fuses gate and up into gate_up_proj (GptOssExperts).
	gptOSSExperts = []expertProj{{"gate_up_proj", false, 2}, {"down_proj", true, 1}}
)

// families maps model_type to its spec. Aliases of the same code path
// (Falcon's RefinedWeb names, Gemma 3's outer type) share a family.
var families = map[string]familySpec{
	"llama":   {family: "llama", build: buildLlama},
	"mistral": {family: "mistral", build: buildLlama},
	"qwen2":   {family: "qwen2", build: buildLlama, attnBiasDefault: true, noOutputBias: true},
	"qwen3":   {family: "qwen3", build: buildLlama, qkNorm: qkPerHead},
	"granite": {family: "granite", build: buildLlama},
	"olmo2":   {family: "olmo2", build: buildLlama, qkNorm: qkWholeProjection},
	// SmolLM3Config: LlamaDecoderLayer, every fourth layer without rotary
	// (no_rope_layers), tie_word_embeddings defaults to true.
	"smollm3": {family: "smollm3", build: buildLlama, tiedDefault: true},

	"gemma":       {family: "gemma", build: buildLlama, tiedDefault: true},
	"gemma2":      {family: "gemma", build: buildLlama, tiedDefault: true, sandwichNorms: true, alternateSliding: true, slidingNote: true},
	"gemma3_text": {family: "gemma", build: buildLlama, tiedDefault: true, sandwichNorms: true, qkNorm: qkPerHead, slidingNote: true, slidingPattern: 6},
	"gemma3":      {family: "gemma", build: buildLlama, tiedDefault: true, sandwichNorms: true, qkNorm: qkPerHead, slidingNote: true, slidingPattern: 6},

	"stablelm": {family: "stablelm", build: buildLlama, qkvBiasKey: "use_qkv_bias", layerNorm: true, qkNorm: qkLayerNormSwitch},

	// MixtralConfig: num_local_experts=8, num_experts_per_tok=2.
	"mixtral":    {family: "mixtral", build: buildLlama, expertProjs: mixtralExperts, expertsDefault: 8, perTokenDefault: 2, expertTargets: true},
	"qwen2_moe":  {family: "qwen2_moe", build: buildLlama, attnBiasDefault: true, noOutputBias: true, sharedExpertGate: true},
	"qwen3_moe":  {family: "qwen3_moe", build: buildLlama, qkNorm: qkPerHead, expertTargets: true},
	"olmoe":      {family: "olmoe", build: buildLlama, qkNorm: qkWholeProjection, expertTargets: true},
	"granitemoe": {family: "granitemoe", build: buildLlama, expertProjs: graniteMoEExperts, routerName: "router"},
	// GptOssConfig: attention_bias true, num_local_experts 128,
	// num_experts_per_tok 4 by default; layer_types alternate sliding and
	// full attention.
	"gpt_oss": {family: "gpt_oss", build: buildLlama, attnBiasDefault: true, expertProjs: gptOSSExperts, routerName: "router",
		expertBias: true, sinks: true, expertParameters: true, expertsDefault: 128, perTokenDefault: 4, slidingNote: true,
		note: "GPT-OSS experts are fused 3-D parameters (GptOssExperts), not nn.Linear modules: PEFT adapts them only through target_parameters, so no LoRA target list here reaches them"},
	"llama4_text": {family: "llama4", build: buildLlama, tiedDefault: true, denseWidthKey: "intermediate_size_mlp"},
	"llama4":      {family: "llama4", build: buildLlama, tiedDefault: true, denseWidthKey: "intermediate_size_mlp"},

	"deepseek_v2": {family: "deepseek", build: buildDeepSeek, expertTargets: true},
	"deepseek_v3": {family: "deepseek", build: buildDeepSeek, expertTargets: true},
	"baichuan":    {family: "baichuan", build: buildBaichuan},
	"phi":         {family: "phi", build: buildPhi},
	"phi3":        {family: "phi3", build: buildPhi3},
	"gpt2": {family: "gpt2", build: buildGPT2, tiedDefault: true,
		note: "GPT-2 uses Conv1D, which bitsandbytes does not quantize; QLoRA figures for it are an upper bound on savings"},
	"gpt_bigcode":     {family: "gpt_bigcode", build: buildGPT2, tiedDefault: true, multiQuery: true},
	"gpt_neox":        {family: "gpt_neox", build: buildNeoX},
	"gptj":            {family: "gptj", build: buildGPTJ},
	"opt":             {family: "opt", build: buildOPT, tiedDefault: true},
	"bloom":           {family: "bloom", build: buildNeoX, tiedDefault: true, fixedBias: true, embeddingNorm: true},
	"falcon":          {family: "falcon", build: buildFalcon, tiedDefault: true},
	"RefinedWeb":      {family: "falcon", build: buildFalcon, tiedDefault: true},
	"RefinedWebModel": {family: "falcon", build: buildFalcon, tiedDefault: true},
	"qwen":            {family: "qwen", build: buildQwenV1},
	"chatglm":         {family: "chatglm", build: buildChatGLM},

	"bert":    {family: "bert", build: buildBERT, note: "encoder-only: bidirectional attention; the loss follows the task head (sequence classification unless --task says otherwise)"},
	"roberta": {family: "bert", build: buildBERT, note: "encoder-only: bidirectional attention; the loss follows the task head (sequence classification unless --task says otherwise)"},
	// XLM-RoBERTa is RoBERTa's layout with a 250k vocabulary
	// (modeling_xlm_roberta copies modeling_roberta).
	"distilbert":  {family: "distilbert", build: buildDistilBERT, note: "encoder-only: bidirectional attention; the loss follows the task head (sequence classification unless --task says otherwise)"},
	"xlm-roberta": {family: "bert", build: buildBERT, note: "encoder-only: bidirectional attention; the loss follows the task head (sequence classification unless --task says otherwise)"},
	"modernbert":  {family: "modernbert", build: buildModernBERT, note: "encoder-only: bidirectional attention; the loss follows the task head (sequence classification unless --task says otherwise)"},
	"deberta-v2":  {family: "deberta", build: buildDeBERTaV2, note: "encoder-only: bidirectional attention; the loss follows the task head (sequence classification unless --task says otherwise)"},
}

// genericFamily reads an unknown model_type as a plain Llama.
var genericFamily = familySpec{family: "generic", build: buildLlama}

// buildModel fills m from the config r as the spec says.
func (s familySpec) buildModel(r raw, m *Model) error {
	m.Family = s.family
	m.ExpertParameters = s.expertParameters
	m.ExpertTargets = s.expertTargets
	if err := s.build(r, m, s); err != nil {
		return err
	}
	if m.Experts > 0 && !m.ExpertTargets {
		m.mlpNames = m.linearMLPNames()
	}
	if s.note != "" {
		m.Notes = append(m.Notes, s.note)
	}
	return nil
}

// buildDeepSeek: Multi-head Latent Attention (q_lora_rank, kv_lora_rank) and
// DeepSeekMoE (routed + shared experts, first_k_dense_replace dense layers).
func buildDeepSeek(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.need("intermediate_size"); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPGated
	d, err := readMLA(r, m)
	if err != nil {
		return err
	}
	m.attentionNames = []string{"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}
	m.mlpNames = []string{"gate_proj", "up_proj", "down_proj"}
	for i := range m.NumLayers {
		m.Layers = append(m.Layers, d.layer(m, i))
	}
	m.setEmbeddings(false)
	m.FinalNormParams = m.Hidden
	if n, err := r.first(0, "num_nextn_predict_layers"); err != nil {
		return err
	} else if n > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("the checkpoint's %d multi-token-prediction layer(s) are not loaded by transformers and are not counted", n))
	}
	m.Notes = append(m.Notes, fmt.Sprintf("MoE: %d routed experts (%d active per token), %d shared; first %d layers dense", d.experts, m.ExpertsPerToken, d.shared, d.firstDense))
	return nil
}

// mlaShape is a DeepSeek config's attention and expert dimensions.
type mlaShape struct {
	qLora, kvLora, nope, rope, vHead int64
	experts, moeWidth, shared        int64
	firstDense, freq                 int64
	noAuxBias                        bool // topk_method noaux_tc keeps a per-expert score-correction bias
}

// readMLA reads the DeepSeek fields in a fixed order, so that of several
// bad fields the same one is reported every time.
func readMLA(r raw, m *Model) (*mlaShape, error) {
	f := &fieldReader{r: r}
	d := &mlaShape{
		qLora: f.int(0, "q_lora_rank"), kvLora: f.int(0, "kv_lora_rank"),
		nope: f.int(0, "qk_nope_head_dim"), rope: f.int(0, "qk_rope_head_dim"), vHead: f.int(0, "v_head_dim"),
		experts: f.int(0, "n_routed_experts"), moeWidth: f.int(0, "moe_intermediate_size"), shared: f.int(0, "n_shared_experts"),
		firstDense: f.int(0, "first_k_dense_replace"), freq: f.int(0, "moe_layer_freq"),
	}
	if f.err != nil {
		return nil, f.err
	}
	if d.kvLora == 0 || d.nope+d.rope == 0 || d.vHead == 0 {
		return nil, fmt.Errorf("%w: DeepSeek MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim", ErrMalformed)
	}
	d.freq = cmp.Or(d.freq, 1)
	topk, err := r.str("topk_method", "")
	if err != nil {
		return nil, err
	}
	d.noAuxBias = topk == "noaux_tc"
	if m.ModelType == "deepseek_v3" {
		// DeepseekV3Config's norm_topk_prob (default true) divides the
		// top-k weights by their sum; DeepseekV2Config drops the field.
		if m.NormTopK, err = r.boolField("norm_topk_prob", true); err != nil {
			return nil, err
		}
	}
	m.Experts = d.experts
	if m.ExpertsPerToken, err = r.first(0, "num_experts_per_tok"); err != nil {
		return nil, err
	}
	return d, nil
}

// layer builds DeepSeek decoder layer i: MLA attention (a low-rank query
// when q_lora_rank is set), then dense or routed experts.
func (d *mlaShape) layer(m *Model, i int64) Layer {
	h := m.Hidden
	L := Layer{Attention: "full", NormParams: 2*h + d.kvLora}
	if d.qLora > 0 {
		L.Linears = append(L.Linears, lin("q_a_proj", RoleAttention, h, d.qLora, false), lin("q_b_proj", RoleAttention, d.qLora, m.Heads*(d.nope+d.rope), false))
		L.NormParams += d.qLora
	} else {
		L.Linears = append(L.Linears, lin("q_proj", RoleAttention, h, m.Heads*(d.nope+d.rope), false))
	}
	L.Linears = append(L.Linears,
		lin("kv_a_proj_with_mqa", RoleAttention, h, d.kvLora+d.rope, false),
		lin("kv_b_proj", RoleAttention, d.kvLora, m.Heads*(d.nope+d.vHead), false),
		lin("o_proj", RoleAttention, m.Heads*d.vHead, h, false))
	if d.experts == 0 || i < d.firstDense || i%d.freq != 0 {
		L.Linears = append(L.Linears, gatedMLP(RoleMLP, h, m.Intermediate, false)...)
		L.FFNActive = m.Intermediate
		return L
	}
	L.MoE = true
	L.Linears = append(L.Linears,
		Linear{Name: "gate_proj", Role: RoleExpert, In: h, Out: d.moeWidth, Copies: d.experts},
		Linear{Name: "up_proj", Role: RoleExpert, In: h, Out: d.moeWidth, Copies: d.experts},
		Linear{Name: "down_proj", Role: RoleExpert, In: d.moeWidth, Out: h, Copies: d.experts},
		lin("gate", RoleRouter, h, d.experts, false))
	if d.noAuxBias {
		L.NormParams += d.experts // e_score_correction_bias, a full-precision vector
	}
	L.FFNActive = m.ExpertsPerToken * d.moeWidth
	if d.shared > 0 {
		si := d.shared * d.moeWidth
		L.Linears = append(L.Linears, gatedMLP(RoleSharedExpert, h, si, false)...)
		L.FFNActive += si
	}
	return L
}

// buildPhi: Phi-1/1.5/2 — parallel attention and MLP under one LayerNorm,
// biased q/k/v/dense and fc1/fc2, an untied lm_head with bias.
func buildPhi(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.first(4*m.Hidden, "intermediate_size", "n_inner"); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPClassic
	h := m.Hidden
	qkln, err := r.boolField("qk_layernorm", false)
	if err != nil {
		return err
	}
	norms := 2 * h
	if qkln {
		norms += 4 * m.HeadDim
	}
	m.uniformLayers(norms,
		lin("q_proj", RoleAttention, h, m.Heads*m.HeadDim, true),
		lin("k_proj", RoleAttention, h, m.KVHeads*m.HeadDim, true),
		lin("v_proj", RoleAttention, h, m.KVHeads*m.HeadDim, true),
		lin("dense", RoleAttention, m.Heads*m.HeadDim, h, true),
		lin("fc1", RoleMLP, h, m.Intermediate, true),
		lin("fc2", RoleMLP, m.Intermediate, h, true),
	)
	m.setEmbeddings(true)
	m.FinalNormParams = 2 * h
	return nil
}

// buildGPTJ: GPT-J (modeling_gptj) — one ln_1 LayerNorm whose output both
// the attention and the MLP read (a parallel block), attn.{q_proj,k_proj,
// v_proj,out_proj} without biases, mlp.fc_in (n_embd → n_inner, or
// 4·n_embd when n_inner is null) and fc_out with biases and gelu_new
// between them, rotary on the first rotary_dim dimensions of each head (a
// buffer, no parameters), a final ln_f, and an untied lm_head with a bias
// (GPTJConfig's tie_word_embeddings defaults to false).
func buildGPTJ(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	if err := innerOr4h(r, m); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPClassic
	h := m.Hidden
	m.uniformLayers(2*h,
		lin("q_proj", RoleAttention, h, h, false),
		lin("k_proj", RoleAttention, h, h, false),
		lin("v_proj", RoleAttention, h, h, false),
		lin("out_proj", RoleAttention, h, h, false),
		lin("fc_in", RoleMLP, h, m.Intermediate, true),
		lin("fc_out", RoleMLP, m.Intermediate, h, true),
	)
	m.setEmbeddings(true)
	m.FinalNormParams = 2 * h
	return nil
}

// buildPhi3: Phi-3/3.5/4 — fused qkv_proj and gate_up_proj, RMSNorm.
func buildPhi3(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.need("intermediate_size"); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPGated
	h, hd := m.Hidden, m.HeadDim
	m.uniformLayers(2*h,
		lin("qkv_proj", RoleAttention, h, (m.Heads+2*m.KVHeads)*hd, false),
		lin("o_proj", RoleAttention, m.Heads*hd, h, false),
		lin("gate_up_proj", RoleMLP, h, 2*m.Intermediate, false),
		lin("down_proj", RoleMLP, m.Intermediate, h, false),
	)
	m.setEmbeddings(false)
	m.FinalNormParams = h
	return nil
}

// innerOr4h reads GPT-2's and GPT-J's MLP width: n_inner, or 4·n_embd when
// it is absent, null or 0 (GPT2Block, GPTJBlock).
func innerOr4h(r raw, m *Model) error {
	var err error
	if m.Intermediate, err = r.first(0, "n_inner"); err != nil {
		return err
	}
	if m.Intermediate == 0 {
		m.Intermediate = 4 * m.Hidden
	}
	return nil
}

// buildGPT2 covers gpt2 and gpt_bigcode: Conv1D/Linear c_attn (fused q/k/v;
// multi-query in bigcode), learned absolute positions, LayerNorm, tied head.
func buildGPT2(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	if err := innerOr4h(r, m); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	positions, err := r.need("n_positions", "max_position_embeddings")
	if err != nil {
		return err
	}
	m.MLP = MLPClassic
	h := m.Hidden
	qkv := 3 * h
	if s.multiQuery {
		mq, err := r.boolField("multi_query", true)
		if err != nil {
			return err
		}
		if mq {
			m.KVHeads = 1
			qkv = h + 2*m.HeadDim
		}
	}
	m.uniformLayers(4*h,
		lin("c_attn", RoleAttention, h, qkv, true),
		lin("c_proj", RoleAttention, h, h, true),
		lin("c_fc", RoleMLP, h, m.Intermediate, true),
		lin("c_proj", RoleMLP, m.Intermediate, h, true),
	)
	m.setEmbeddings(false)
	m.PositionParams = positions * h
	m.FinalNormParams = 2 * h
	return nil
}

// buildNeoX covers gpt_neox and bloom: fused query_key_value, dense,
// dense_h_to_4h, dense_4h_to_h, all biased; LayerNorm.
func buildNeoX(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.first(4*m.Hidden, "intermediate_size"); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPClassic
	h := m.Hidden
	bias := true
	if !s.fixedBias {
		if bias, err = r.boolField("attention_bias", true); err != nil {
			return err
		}
	}
	m.uniformLayers(4*h,
		lin("query_key_value", RoleAttention, h, 3*h, bias),
		lin("dense", RoleAttention, h, h, bias),
		lin("dense_h_to_4h", RoleMLP, h, m.Intermediate, true),
		lin("dense_4h_to_h", RoleMLP, m.Intermediate, h, true),
	)
	m.setEmbeddings(false)
	m.FinalNormParams = 2 * h
	if s.embeddingNorm {
		m.FinalNormParams += 2 * h // word_embeddings_layernorm
	}
	return nil
}

// buildFalcon: fused query_key_value with multi-query (7B) or grouped KV under
// new_decoder_architecture (40B/180B), parallel attention, no biases by default.
func buildFalcon(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.first(4*m.Hidden, "ffn_hidden_size"); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPClassic
	h, hd := m.Hidden, m.HeadDim
	newArch, err := r.boolField("new_decoder_architecture", false)
	if err != nil {
		return err
	}
	mq, err := r.boolField("multi_query", true)
	if err != nil {
		return err
	}
	parallel, err := r.boolField("parallel_attn", true)
	if err != nil {
		return err
	}
	bias, err := r.boolField("bias", false)
	if err != nil {
		return err
	}
	alibi, err := r.boolField("alibi", false)
	if err != nil {
		return err
	}
	// FalconDecoderLayer sets num_ln_in_parallel_attn to 2 when a new
	// decoder architecture's config leaves it null (Falcon-40B's predates
	// the field); Falcon2-11B's says 1: one input_layernorm for both.
	lns := int64(1)
	if newArch {
		if lns, err = r.intField("num_ln_in_parallel_attn", 2); err != nil {
			return err
		}
	}
	m.Falcon = &FalconLayout{NewDecoder: newArch, Parallel: parallel, Alibi: alibi, ParallelNorms: lns}
	switch {
	case newArch: // grouped K/V heads, as num_kv_heads says
	case mq:
		m.KVHeads = 1
	default:
		m.KVHeads = m.Heads
	}
	norms := 2 * h // one LayerNorm before parallel attention and MLP
	if (newArch && lns == 2) || !parallel {
		norms = 4 * h // ln_attn and ln_mlp, or a second norm before a sequential MLP
	}
	m.uniformLayers(norms,
		lin("query_key_value", RoleAttention, h, (m.Heads+2*m.KVHeads)*hd, bias),
		lin("dense", RoleAttention, h, h, bias),
		lin("dense_h_to_4h", RoleMLP, h, m.Intermediate, bias),
		lin("dense_4h_to_h", RoleMLP, m.Intermediate, h, bias),
	)
	m.setEmbeddings(false)
	m.FinalNormParams = 2 * h
	return nil
}

// buildQwenV1: the first Qwen (remote code): c_attn (q/k/v fused, biased),
// c_proj, and a SwiGLU of w1/w2 whose width is intermediate_size/2.
func buildQwenV1(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	inter, err := r.need("intermediate_size")
	if err != nil {
		return err
	}
	m.Intermediate = inter / 2 // modeling_qwen: ff_dim_in = intermediate_size // 2
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPGated
	h := m.Hidden
	m.uniformLayers(2*h,
		lin("c_attn", RoleAttention, h, 3*h, true),
		lin("c_proj", RoleAttention, h, h, false),
		lin("w1", RoleMLP, h, m.Intermediate, false),
		lin("w2", RoleMLP, h, m.Intermediate, false),
		lin("c_proj", RoleMLP, m.Intermediate, h, false),
	)
	m.setEmbeddings(false)
	m.FinalNormParams = h
	return nil
}

// buildChatGLM: ChatGLM2/3 (remote code): query_key_value with multi-query
// groups, dense, a SwiGLU dense_h_to_4h of twice ffn_hidden_size, RMSNorm,
// separate output_layer.
func buildChatGLM(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.need("ffn_hidden_size"); err != nil {
		return err
	}
	mq, err := r.boolField("multi_query_attention", false)
	if err != nil {
		return err
	}
	if !mq {
		m.KVHeads = m.Heads
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	qkvBias, err := r.boolField("add_qkv_bias", false)
	if err != nil {
		return err
	}
	linBias, err := r.boolField("add_bias_linear", false)
	if err != nil {
		return err
	}
	m.MLP = MLPGated
	h, hd := m.Hidden, m.HeadDim
	m.uniformLayers(2*h,
		lin("query_key_value", RoleAttention, h, m.Heads*hd+2*m.KVHeads*hd, qkvBias || linBias),
		lin("dense", RoleAttention, m.Heads*hd, h, linBias),
		lin("dense_h_to_4h", RoleMLP, h, 2*m.Intermediate, linBias),
		lin("dense_4h_to_h", RoleMLP, m.Intermediate, h, linBias),
	)
	m.setEmbeddings(false)
	m.FinalNormParams = h
	return nil
}

// buildBaichuan: Baichuan 2 (remote code): fused W_pack q/k/v, Llama MLP.
func buildBaichuan(r raw, m *Model, s familySpec) error {
	if err := common(r, m); err != nil {
		return err
	}
	var err error
	if m.Intermediate, err = r.need("intermediate_size"); err != nil {
		return err
	}
	if err := tied(r, m, s.tiedDefault); err != nil {
		return err
	}
	m.MLP = MLPGated
	h := m.Hidden
	m.uniformLayers(2*h,
		lin("W_pack", RoleAttention, h, 3*h, false),
		lin("o_proj", RoleAttention, h, h, false),
		lin("gate_proj", RoleMLP, h, m.Intermediate, false),
		lin("up_proj", RoleMLP, h, m.Intermediate, false),
		lin("down_proj", RoleMLP, m.Intermediate, h, false),
	)
	m.setEmbeddings(false)
	m.FinalNormParams = h
	return nil
}

// towerParams counts a multimodal checkpoint's vision tower (SigLIP/CLIP-style
// ViT from vision_config) and projector, frozen in text fine-tuning.
func towerParams(top raw) (int64, string, error) {
	v, ok, err := top.object("vision_config")
	if err != nil || !ok {
		return 0, "", err
	}
	var dims [6]int64
	for i, f := range []struct {
		key string
		def int64
	}{{"hidden_size", 0}, {"num_hidden_layers", 0}, {"intermediate_size", 0}, {"patch_size", 14}, {"image_size", 224}, {"num_channels", 3}} {
		if dims[i], err = v.first(f.def, f.key); err != nil {
			return 0, "", err
		}
		if dims[i] > maxDim {
			return 0, "", fmt.Errorf("%w: field vision_config.%s: %d (more than %d)", ErrMalformed, f.key, dims[i], maxDim)
		}
	}
	h, layers, inter, patch, img, ch := dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
	if h == 0 || layers == 0 || inter == 0 || patch == 0 {
		return 0, "vision_config present but incomplete: the vision tower is not counted", nil
	}
	// Counted in float64, which cannot wrap: products of in-range
	// dimensions can exceed int64. Every term is an integer below 2^53 when
	// the total is below maxParams, so the count is exact.
	hf, inf := float64(h), float64(inter)
	perLayer := 4*(hf*hf+hf) + 2*2*hf + (hf*inf + inf) + (inf*hf + hf)
	n := float64(ch)*float64(patch)*float64(patch)*hf + hf + float64((img/patch)*(img/patch))*hf + float64(layers)*perLayer + 2*hf
	if t, ok, _ := top.object("text_config"); ok {
		th, err := t.first(0, "hidden_size")
		if err != nil {
			return 0, "", err
		}
		n += hf*float64(th) + hf // projector to the text width and its norm
	}
	if n > maxParams {
		return 0, "", fmt.Errorf("%w: vision_config implies %.3g parameters (more than 10^15)", ErrMalformed, n)
	}
	vt, _ := v.str("model_type", "vision")
	return int64(n), fmt.Sprintf("vision tower (%s, %d layers) counted as %.2fB frozen parameters; LoRA is not inferred for it", strings.TrimSuffix(vt, "_model"), layers, n/1e9), nil
}

// preQuant reads a checkpoint's own quantization_config.
func preQuant(top raw) (*PreQuant, error) {
	q, ok, err := top.object("quantization_config")
	if err != nil || !ok {
		return nil, err
	}
	method, err := q.str("quant_method", "")
	if err != nil {
		return nil, err
	}
	pq := &PreQuant{Method: method}
	switch strings.ToLower(method) {
	case "bitsandbytes":
		four, err := q.boolField("load_in_4bit", false)
		if err != nil {
			return nil, err
		}
		eight, err := q.boolField("load_in_8bit", false)
		if err != nil {
			return nil, err
		}
		if pq.DoubleQuant, err = q.boolField("bnb_4bit_use_double_quant", false); err != nil {
			return nil, err
		}
		if pq.SkipModules, err = q.strings("llm_int8_skip_modules"); err != nil {
			return nil, err
		}
		switch {
		case four:
			pq.Bits = 4
		case eight:
			pq.Bits = 8
		}
		pq.Note = fmt.Sprintf("checkpoint is pre-quantized with bitsandbytes %d-bit (double quant %v); modules kept in 16-bit: %v", pq.Bits, pq.DoubleQuant, pq.SkipModules)
	case "gptq", "awq":
		if pq.Bits, err = q.first(4, "bits", "w_bit"); err != nil {
			return nil, err
		}
		pq.Note = fmt.Sprintf("checkpoint is %s %d-bit: LoRA trains on it as a frozen packed base; estimated as packed %d-bit Linear weights with no bnb absmax overhead", strings.ToUpper(method), pq.Bits, pq.Bits)
	case "mxfp4":
		// MXFP4: 4-bit E2M1 values with one 8-bit scale per 32, on the
		// routed experts only (modules_to_not_convert keeps attention,
		// router, embeddings and lm_head in bf16).
		pq.Bits = 4
		if pq.SkipModules, err = q.strings("modules_to_not_convert"); err != nil {
			return nil, err
		}
		pq.Note = "checkpoint stores its routed experts in MXFP4 (4.25 bits a weight); training dequantizes them to bf16 on load (transformers' Mxfp4Config(dequantize=True), which fine-tuning recipes for it use and which is the only path without the triton MXFP4 kernels), so every weight is counted at the training precision: the 4-bit size is the download, not the training footprint"
	case "fp8":
		pq.Bits = 8
		pq.Note = "checkpoint stores FP8 weights; fine-tuning stacks dequantize to bf16 on load, and the estimate assumes that"
	default:
		pq.Note = fmt.Sprintf("quantization_config with quant_method %q is not modelled: weights are estimated unquantized", method)
	}
	return pq, nil
}

// uniformLayers appends NumLayers identical full-attention blocks with the
// given norm parameters and Linear modules (the layers share the slice,
// which nothing modifies after parsing). The LoRA scopes are the modules'
// names by role, in order: every module of such a block exists in every
// layer, so the attention and MLP scopes need no separate list to drift from.
func (m *Model) uniformLayers(norms int64, lins ...Linear) {
	m.scopeNames(lins)
	for range m.NumLayers {
		m.Layers = append(m.Layers, Layer{Attention: "full", NormParams: norms, FFNActive: m.Intermediate, Linears: lins})
	}
}

// scopeNames adds a block's Linear names to the attention and MLP scopes.
func (m *Model) scopeNames(lins []Linear) {
	for _, l := range lins {
		switch l.Role {
		case RoleAttention:
			m.attentionNames = append(m.attentionNames, l.Name)
		case RoleMLP:
			m.mlpNames = append(m.mlpNames, l.Name)
		}
	}
}
