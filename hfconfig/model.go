package hfconfig

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Role is what a Linear module does in its layer.
type Role string

// Roles of Linear modules. LoRA scopes select by role.
const (
	RoleAttention    Role = "attention"     // q/k/v/o projections, fused or not
	RoleMLP          Role = "mlp"           // dense feed-forward projections
	RoleExpert       Role = "expert"        // one projection, replicated per routed expert (a LoRA target only where Model.ExpertTargets)
	RoleSharedExpert Role = "shared_expert" // the always-active expert of Qwen2-MoE / DeepSeek
	RoleRouter       Role = "router"        // the expert-choice gate
	RoleOther        Role = "other"         // per-layer-input projections and the like
)

// Linear is one Linear (or Conv1D) module of a decoder layer, named as the
// model names it so a LoRA target list resolves against it.
type Linear struct {
	Name   string
	Role   Role
	In     int64
	Out    int64
	Bias   bool
	Copies int64 // routed experts replicate a projection; 1 otherwise
}

// Params is the module's parameter count over all its copies.
func (l Linear) Params() int64 {
	p := l.In * l.Out
	if l.Bias {
		p += l.Out
	}
	return p * l.Copies
}

// Layer is one decoder block.
type Layer struct {
	Linears []Linear
	// NormParams counts the block's norm weights (and biases for LayerNorm).
	NormParams int64
	// MoE is true when the block's feed-forward is a routed mixture of experts.
	MoE bool
	// Attention is "full" or "sliding"; sliding layers keep a bounded window.
	Attention string
	// FFNActive is the feed-forward width one token passes through (for MoE:
	// the active experts' widths plus the shared expert), used for activations.
	FFNActive int64
}

// MLPKind tells gated (SwiGLU / GeGLU: three matrices, an extra intermediate
// tensor) from classic two-matmul feed-forwards; activation memory differs.
type MLPKind string

// MLP kinds.
const (
	MLPGated   MLPKind = "gated"
	MLPClassic MLPKind = "classic"
)

// Model is the parsed shape of a decoder-only language model.
type Model struct {
	// Name is the id the model was asked for (a catalog or Hub id) when the
	// caller sets it; "" for a local directory or an unnamed config.
	// Unsloth's llama-fied uploads are recognised by it (UnslothLlamafies).
	Name string
	// LlamafiedFrom is the model_type a Llamafied copy was made from ("").
	LlamafiedFrom string
	// ModelType is the text model's model_type ("llama", "qwen2", …).
	ModelType string
	// Outer is the top-level model_type when the text model sits in text_config.
	Outer string
	// Family groups model types that share module names and defaults.
	Family string

	Hidden, NumLayers, Heads, KVHeads, HeadDim, Intermediate, Vocab int64
	// Experts and ExpertsPerToken are 0 for dense models.
	Experts, ExpertsPerToken int64
	// NormTopK is norm_topk_prob (Qwen2-MoE, Qwen3-MoE): the router divides
	// the chosen experts' probabilities by their sum (Mixtral's always does).
	NormTopK       bool
	MLP            MLPKind
	TiedEmbeddings bool
	// SlidingWindow is the window of sliding-attention layers (0: none).
	SlidingWindow int64
	// Falcon is how a Falcon config lays its blocks out (nil for other
	// families): the estimator spells out only the layouts it has read.
	Falcon *FalconLayout
	// LogitSoftcap is final_logit_softcapping (Gemma 2): the logits pass
	// through tanh(x/cap)·cap before the loss (0: none).
	LogitSoftcap float64
	// AttnSoftcap is attn_logit_softcapping (Gemma 2): eager attention's
	// scores pass through tanh(x/cap)·cap before the softmax (0: none).
	AttnSoftcap float64
	// ResidDropout is resid_pdrop (Phi, GPT-2; OPT's dropout): the dropout
	// on each block's attention and MLP outputs while training (0: none).
	ResidDropout float64
	// AttnDropout is attn_pdrop (GPT-2, GPT-BigCode; OPT's
	// attention_dropout): the dropout on eager attention's probabilities
	// while training (0: none).
	AttnDropout float64
	// MaxPositions is the context the checkpoint was built for
	// (max_position_embeddings, n_positions or seq_length; 0: not stated).
	// A longer sequence still costs what its shapes cost, but positions
	// past it were never trained.
	MaxPositions int64

	Layers []Layer

	// EmbeddingParams: token embeddings (and per-layer-input embeddings).
	EmbeddingParams int64
	// PositionParams: learned absolute position embeddings (gpt2, bigcode, opt).
	PositionParams int64
	// LMHeadParams: a separate output matrix (0 when tied), with bias if any.
	LMHeadParams int64
	// FinalNormParams: the norm after the last block (plus embedding norms).
	FinalNormParams int64
	// HeadParams: dense layers outside the blocks that are neither
	// embeddings nor the LM head: an encoder's (the pooler of a
	// classification head, the MLM head's transform) and OPT-350m's
	// project_in and project_out.
	HeadParams int64
	// Encoder: a bidirectional encoder-only model (BERT, RoBERTa,
	// ModernBERT): its loss follows the task head, not a causal LM head.
	Encoder bool
	// Disentangled: DeBERTa's relative attention, which transformers runs
	// eagerly (the scores are kept whatever attention implementation is
	// asked for) and which keeps a scaled copy of the keys a block.
	Disentangled bool
	// ExpertParameters: the routed experts are 3-D nn.Parameters, not
	// nn.Linear modules (GPT-OSS's GptOssExperts): bitsandbytes does not
	// quantize them, so a QLoRA base would keep them in 16 bits.
	ExpertParameters bool
	// ExpertTargets: PEFT adapts the routed experts when a LoRA target list
	// names them. transformers 5 (which the oracle pins) keeps every MoE
	// family's routed experts as 3-D parameters, which target_modules cannot
	// reach; PEFT (0.21) maps transformers 4's expert names onto them as
	// target_parameters for the types transformers converts checkpoints of
	// (Mixtral's w1/w2/w3; Qwen3-MoE's, OLMoE's and DeepSeek-V2/V3's
	// gate_proj/up_proj/down_proj), so there the mlp and all-linear scopes
	// reach the experts. Elsewhere (Qwen2-MoE, GraniteMoE, GPT-OSS, Llama 4)
	// no target list does (linearMLPNames).
	ExpertTargets bool
	// Seq2Seq is set for an encoder-decoder model (T5, BART): Layers holds
	// the encoder's blocks, then the decoder's (seq2seq.go).
	Seq2Seq *Seq2Seq
	// FrozenTowerParams: a vision/audio tower of a multimodal checkpoint,
	// counted as frozen weights; LoRA targets are never inferred for it.
	FrozenTowerParams int64

	// PreQuantized describes a quantization_config the checkpoint ships with.
	PreQuantized *PreQuant
	// Generic is true when model_type was not recognised and the standard
	// Llama-style fields were used; estimates on it get low confidence.
	Generic bool
	// Notes are assumptions the shapes rest on, for the estimate's report.
	Notes []string
	// ExactParams is the parameter count read from the checkpoint's
	// safetensors headers; when set it replaces the config-derived count in
	// Params (0: not read).
	ExactParams int64

	attentionNames []string
	mlpNames       []string
	aggs           []moduleAgg
	// Cached sums, filled by index() once the layers are final.
	indexed        bool
	normSum, ffnAv int64
	lin            linearStats
}

// linearStats are what one pass over the decoder layers' Linear modules
// gives; index keeps them for a parsed model.
type linearStats struct {
	params    int64 // every weight and bias (LinearParams)
	narrowest int64 // the smallest min(in, out), routers aside (NarrowestLinear)
	largest   int64 // the largest in · out · copies (LargestTensor)
	widest    int64 // the largest in or out (WidestSide)
}

// linears is the model's linearStats: index's, or one pass now.
func (m *Model) linears() linearStats {
	if m.indexed {
		return m.lin
	}
	s := linearStats{narrowest: math.MaxInt64}
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			s.params += lin.Params()
			if lin.Role != RoleRouter {
				s.narrowest = min(s.narrowest, lin.In, lin.Out)
			}
			s.largest = max(s.largest, lin.In*lin.Out*lin.Copies)
			s.widest = max(s.widest, lin.In, lin.Out)
		}
	}
	return s
}

// PreQuant is a checkpoint's own quantization_config.
type PreQuant struct {
	Method      string // bitsandbytes, gptq, awq, fp8, …
	Bits        int64
	DoubleQuant bool
	SkipModules []string
	Note        string
}

// LinearParams counts every Linear weight and bias in the decoder layers: what
// bitsandbytes quantizes under QLoRA (seed 000 §1).
func (m *Model) LinearParams() int64 { return m.linears().params }

// RoutedExpertParams counts the routed experts' weights: the Linears a MoE
// block replicates per expert (Copies > 1). Shared experts and routers are
// not counted.
func (m *Model) RoutedExpertParams() int64 {
	var n int64
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			if lin.Copies > 1 {
				n += lin.Params()
			}
		}
	}
	return n
}

// NormParams counts all norm weights, in blocks and after them.
func (m *Model) NormParams() int64 {
	if m.indexed {
		return m.normSum
	}
	n := m.FinalNormParams
	for _, l := range m.Layers {
		n += l.NormParams
	}
	return n
}

// EmbeddingLikeParams counts the matrices that stay full precision under QLoRA:
// input embedding, learned positions and a separate lm_head.
func (m *Model) EmbeddingLikeParams() int64 {
	return m.EmbeddingParams + m.PositionParams + m.LMHeadParams
}

// TextParams is the parameter count of the language model.
func (m *Model) TextParams() int64 {
	return m.LinearParams() + m.NormParams() + m.EmbeddingLikeParams() + m.HeadParams
}

// Params is the checkpoint's parameter count, frozen towers included: the
// exact count from safetensors headers when known, else the config-derived one.
func (m *Model) Params() int64 {
	if m.ExactParams > 0 {
		return m.ExactParams
	}
	return m.ConfigParams()
}

// ConfigParams is the parameter count the config's shapes imply.
func (m *Model) ConfigParams() int64 { return m.TextParams() + m.FrozenTowerParams }

// ActiveFFN is the mean per-token feed-forward width over layers.
func (m *Model) ActiveFFN() int64 {
	if m.indexed {
		return m.ffnAv
	}
	if len(m.Layers) == 0 {
		return m.Intermediate
	}
	var s int64
	for _, l := range m.Layers {
		s += l.FFNActive
	}
	return s / int64(len(m.Layers))
}

// Scope names accepted by Targets besides explicit module names.
const (
	ScopeAttention = "attention"
	ScopeAllLinear = "all-linear"
	ScopeMLP       = "mlp"
)

// AttentionTargets is the family's attention scope (seed 000's table).
func (m *Model) AttentionTargets() []string { return slices.Clone(m.attentionNames) }

// AllLinearTargets is the family's all-linear scope: attention plus the MLP
// projections that are nn.Linear modules. Routers are left out, as in seed
// 000's table, and so are routed experts (linearMLPNames).
func (m *Model) AllLinearTargets() []string {
	return append(slices.Clone(m.attentionNames), m.mlpNames...)
}

// Targets resolves a LoRA target list (scope keywords and/or module names as the
// model names them) to the selected Linear modules of every layer. A name that
// matches no module is an error listing the names the model has.
func (m *Model) Targets(spec []string) ([]Linear, error) {
	// Scope keywords expand to the family's names that this model has (a
	// DeepSeek without q_lora_rank has q_proj, not q_a_proj/q_b_proj);
	// explicit names must all exist.
	wantAttn, wantMLP := map[string]bool{}, map[string]bool{}
	explicit := map[string]bool{}
	named := false
	for _, s := range spec {
		named = named || strings.TrimSpace(s) != ""
		attn, mlp, name := m.scope(s)
		for _, n := range attn {
			wantAttn[n] = true
		}
		for _, n := range mlp {
			wantMLP[n] = true
		}
		if name != "" {
			explicit[name] = true
		}
	}
	if !named {
		return nil, fmt.Errorf("empty LoRA target list")
	}
	found := map[string]bool{}
	var out []Linear
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			if (explicit[lin.Name] && m.anyRole(lin.Role)) || (wantAttn[lin.Name] && attentionScoped(lin.Role)) || (wantMLP[lin.Name] && m.mlpScoped(lin.Role)) {
				found[lin.Name] = true
				out = append(out, lin)
			}
		}
	}
	var missing []string
	for n := range explicit {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		for _, n := range missing {
			if m.routedOnly(n) {
				return nil, fmt.Errorf("LoRA target %s names the routed experts of this %s model, 3-D parameters that PEFT's target_modules cannot adapt; its nn.Linear modules are %s",
					n, m.ModelType, strings.Join(m.linearModuleNames(), ", "))
			}
		}
		return nil, fmt.Errorf("LoRA target %s matches no module of this %s model; its modules are %s",
			strings.Join(missing, ", "), m.ModelType, strings.Join(m.moduleNames(), ", "))
	}
	if len(out) == 0 {
		if m.Experts > 0 && !m.ExpertTargets {
			return nil, fmt.Errorf("LoRA targets %v match no nn.Linear module of this %s model (its routed experts are 3-D parameters that PEFT's target_modules cannot adapt); its nn.Linear modules are %s", spec, m.ModelType, strings.Join(m.linearModuleNames(), ", "))
		}
		return nil, fmt.Errorf("LoRA targets %v match no module of this %s model; its modules are %s", spec, m.ModelType, strings.Join(m.moduleNames(), ", "))
	}
	return out, nil
}

// attentionScoped and mlpScoped say whether a module of a role is one the
// attention or the MLP scope selects by its name: a name both share (GPT-2's
// and GPT-BigCode's c_proj, attn.c_proj and mlp.c_proj) is adapted where
// its scope is, as PEFT's module paths (attn.c_proj) select it; an explicit
// name selects every module of that name (anyRole), as a PEFT suffix does.
func attentionScoped(r Role) bool {
	return r != RoleMLP && r != RoleExpert && r != RoleSharedExpert
}

func (m *Model) mlpScoped(r Role) bool { return r != RoleAttention && m.reachable(r) }

// anyRole selects an explicitly named module whatever its role, routed
// experts aside where no target list reaches them (ExpertTargets).
func (m *Model) anyRole(r Role) bool { return m.reachable(r) }

func (m *Model) reachable(r Role) bool { return r != RoleExpert || m.ExpertTargets }

// linearMLPNames is the MLP scope of a mixture of experts whose routed
// experts no target list reaches (ExpertTargets false): the names of the
// feed-forward modules that are nn.Linear in transformers 5 (which the
// oracle pins): dense blocks' and shared experts' projections, and
// Qwen2-MoE's one-output shared_expert_gate. Its routed experts are 3-D
// nn.Parameters (gate_up_proj and down_proj of a *Experts module), which
// PEFT's target_modules cannot adapt and PEFT does not map transformers 4's
// names onto: PEFT's all-linear adapts the attention and these, and a scope
// that leaves nothing (mlp on GraniteMoE) selects no module.
func (m *Model) linearMLPNames() []string {
	var names []string
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			ok := lin.Role == RoleMLP || lin.Role == RoleSharedExpert || lin.Name == "shared_expert_gate"
			if ok && !slices.Contains(names, lin.Name) {
				names = append(names, lin.Name)
			}
		}
	}
	return names
}

// routedOnly reports whether name is a routed expert's and no other
// module's: a target list naming it reaches nothing.
func (m *Model) routedOnly(name string) bool {
	expert := false
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			if lin.Name == name {
				if lin.Role != RoleExpert {
					return false
				}
				expert = true
			}
		}
	}
	return expert
}

// scope expands one entry of a LoRA target list, as Targets and sumTargets
// both read it: a scope keyword gives the family's attention and/or MLP names;
// anything else, trimmed, is one explicit module name; a blank entry gives
// nothing.
func (m *Model) scope(s string) (attn, mlp []string, name string) {
	switch ScopeOf(s) {
	case ScopeAttention:
		return m.attentionNames, nil, ""
	case ScopeAllLinear:
		return m.attentionNames, m.mlpNames, ""
	case ScopeMLP:
		return nil, m.mlpNames, ""
	}
	return nil, nil, strings.TrimSpace(s)
}

// ScopeOf is the scope keyword a LoRA target entry names (ScopeAttention,
// ScopeAllLinear with its aliases all_linear and all, ScopeMLP), case and
// surrounding space ignored; "" for a module name.
func ScopeOf(s string) string {
	switch t := strings.ToLower(strings.TrimSpace(s)); t {
	case ScopeAttention, ScopeMLP:
		return t
	case ScopeAllLinear, "all_linear", "all":
		return ScopeAllLinear
	}
	return ""
}

// linearModuleNames is a mixture of experts' moduleNames without the routed
// experts and the routers (a parameter of the router's own module in the
// pinned transformers, Llama 4's nn.Linear router aside), the
// shared_expert_gate kept.
func (m *Model) linearModuleNames() []string {
	var names []string
	for _, n := range m.moduleNames() {
		router := (n == "gate" || n == "router") && !strings.HasPrefix(m.ModelType, "llama4")
		if !m.routedOnly(n) && !router {
			names = append(names, n)
		}
	}
	return names
}

func (m *Model) moduleNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			if !seen[lin.Name] {
				seen[lin.Name] = true
				names = append(names, lin.Name)
			}
		}
	}
	return names
}

// FalconLayout is a Falcon block as its config.json describes it
// (transformers' FalconDecoderLayer).
type FalconLayout struct {
	// NewDecoder is new_decoder_architecture (Falcon-40B, 180B, Falcon2):
	// grouped key/value heads (num_kv_heads) instead of multi-query.
	NewDecoder bool
	// Parallel is parallel_attn: attention and MLP read the block input
	// side by side rather than one after the other.
	Parallel bool
	// Alibi is alibi: ALiBi position biases instead of rotary embeddings.
	Alibi bool
	// ParallelNorms is how many LayerNorms a parallel block runs on its
	// input: 2 (ln_attn and ln_mlp) under the new decoder architecture
	// unless num_ln_in_parallel_attn says 1, else 1 (input_layernorm).
	ParallelNorms int64
}
