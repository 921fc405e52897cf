package estimate

import "github.com/canifinetune/canifinetune/hfconfig"

// hfMoETypes are the mixture-of-experts model types whose decoder layer
// hfLayerSaved spells out: the attention of the dense family they are
// built on (Mixtral's is Mistral's, Qwen2-MoE's Qwen2's, Qwen3-MoE's
// Qwen3's, OLMoE's OLMo's q/k norms over the whole projection,
// GraniteMoE's Granite's; DeepSeek-V2's and V3's multi-head latent
// attention, hfMLA; GPT-OSS's eager attention with sinks, LoRA only) and a
// feed-forward that routes each token through transformers' grouped_mm
// experts (hfMoELayerSaved).
var hfMoETypes = map[string]bool{"mixtral": true, "qwen2_moe": true, "qwen3_moe": true, "granitemoe": true, "deepseek_v2": true, "olmoe": true, "deepseek_v3": true, "gpt_oss": true}

// hfAdaptsRoutedExperts reports whether a LoRA request's targets include
// routed experts. transformers keeps them as 3-D parameters, not nn.Linear
// modules; where a target list reaches them at all
// (hfconfig.Model.ExpertTargets), PEFT adapts them through
// target_parameters, a parametrization (ParamWrapper) that adds the
// low-rank product to each expert's weight, which the oracle does not run
// on fake tensors: what it saves is not read, and such a request keeps the
// fitted activation shape.
func hfAdaptsRoutedExperts(r Request) bool {
	if r.Model.Experts == 0 || !r.Model.ExpertTargets {
		return false
	}
	lins, err := r.Model.Targets(r.LoRATargets)
	if err != nil {
		return false
	}
	for _, l := range lins {
		if l.Role == hfconfig.RoleExpert {
			return true
		}
	}
	return false
}

// moeLayer is one MoE block's shape: routed experts of width I (E of them,
// k a token), and a shared expert of width Shared (0: none).
type moeLayer struct {
	E, k, I, Shared int64
	// SharedGate: the shared expert's output is scaled by a one-output
	// gate through a sigmoid (Qwen2-MoE's shared_expert_gate).
	SharedGate bool
}

// moeShape reads a block's experts from its Linears: the routed down
// projection (RoleExpert, out = hidden) gives the expert width and count,
// the shared expert's down projection its width.
func moeShape(m *hfconfig.Model, l hfconfig.Layer) moeLayer {
	s := moeLayer{k: m.ExpertsPerToken}
	for _, lin := range l.Linears {
		switch {
		case lin.Role == hfconfig.RoleExpert && lin.Out == m.Hidden:
			s.I, s.E = lin.In, lin.Copies
		case lin.Role == hfconfig.RoleSharedExpert && lin.Out == m.Hidden:
			s.Shared = lin.In
		case lin.Role == hfconfig.RoleRouter && lin.Out == 1:
			s.SharedGate = true
		}
	}
	return s
}

// hfMoELayerSaved is what one MoE block's feed-forward keeps for the
// backward, per token, as the oracle's census shows it for transformers'
// grouped_mm experts (integrations/moe.py, grouped_mm_experts_forward),
// with S = tokens·k token copies:
//
//   - the sort by expert id keeps its permutation (int64, S), the gather
//     hidden_states[perm // k] its index (int64, S), the restore
//     weighted_out[inv_perm] its inverse permutation (int64, S), and the
//     router's topk its indices (int64, S): 32 B per copy;
//   - the up projection's grouped_mm output (S × 2I: gate and up, which
//     silu and the product read as chunks of it), silu's output (S × I),
//     the down projection's output (S × h), which the multiply by the
//     routing weights saves, and the gathered routing weights (S);
//   - trained experts (full fine-tuning) also keep the grouped_mm inputs
//     for the weight gradients: the gathered token copies (S × h) and the
//     gated product (S × I). Frozen ones (LoRA) keep neither: grouped_mm
//     saves an input only for the other operand's gradient;
//   - the router: a softmax over all E experts in fp32 keeps its output
//     (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2), DeepSeek-V3's
//     sigmoid too (its group-limited choice saves nothing); GraniteMoE
//     takes the top k of the fp32 logits and keeps the softmax over those
//     k, GPT-OSS the softmax over its top k logits in the activation
//     dtype; dividing the top k by their sum (Mixtral; norm_topk_prob)
//     keeps an fp32 clone of them and the sum; Mixtral's and DeepSeek's
//     weights stay fp32 (4 B a copy), the others cast them to the
//     activation dtype;
//   - a shared expert is a gated MLP (gate, up, silu's output; trained, the
//     product), and Qwen2-MoE's shared_expert_gate keeps its sigmoid and the
//     shared expert's output for the multiply.
//
// The sizes do not depend on how the router spreads the tokens: grouped_mm
// takes every copy in one tensor and the experts' split only sets its
// offsets. (The per-layer offsets, 4·E bytes, are left out.)
func hfMoELayerSaved(r Request, s moeLayer, A float64) float64 {
	h := float64(r.Model.Hidden)
	k, I, E := float64(s.k), float64(s.I), float64(s.E)
	full := r.Method == Full
	saved := k * (32 + A*(2*I+I+h))
	if r.Model.ModelType == "gpt_oss" {
		// GptOssExperts._apply_gate on the strided gate and up halves:
		// clamp's output and sigmoid's (gate · sigmoid(α·gate)), their
		// product and up + 1 (the product (up + 1) · glu saves both),
		// three more S × I tensors than silu's one.
		saved += k * A * 3 * I
	}
	if full {
		saved += k * A * (h + I)
	}
	t := r.Model.ModelType
	weights := A
	deepseek := t == "deepseek_v2" || t == "deepseek_v3"
	if t == "mixtral" || deepseek {
		weights = 4
	}
	if deepseek && full {
		// DeepseekV2TopkRouter multiplies in fp32: F.linear(hidden_states
		// .type(torch.float32), self.weight.type(torch.float32)) keeps the
		// fp32 copy of its input for the trained weight's gradient. (The
		// fp32 copy of the router weight, E·h·4 bytes a layer whatever the
		// batch, is left out.)
		saved += 4 * h
	}
	saved += k * weights
	switch t {
	case "granitemoe":
		saved += 4 * k
	case "gpt_oss":
		saved += A * k // the softmax over the top k logits, in the activation dtype
	default:
		saved += 4 * E
	}
	if t == "mixtral" || r.Model.NormTopK {
		saved += 4*k + 4
	}
	if s.Shared > 0 {
		f := float64(s.Shared)
		saved += 3 * A * f
		if full {
			saved += A * f
		}
		if s.SharedGate {
			saved += A*h + A
		}
	}
	return saved
}

// hfMLPSaved is, per token, what the feed-forward of the model's average
// block keeps for the backward: a dense block's is dense(its width), an MoE
// block's hfMoELayerSaved.
func hfMLPSaved(r Request, A float64, dense func(f float64) float64) float64 {
	m := r.Model
	if len(m.Layers) == 0 {
		return dense(float64(m.ActiveFFN()))
	}
	sum := 0.0
	for _, l := range m.Layers {
		if l.MoE {
			sum += hfMoELayerSaved(r, moeShape(m, l), A)
		} else {
			sum += dense(float64(l.FFNActive))
		}
	}
	return sum / float64(len(m.Layers))
}

// hfMoEBackward is, per token, what the backward of the largest MoE block
// holds at its peak beyond the block's saved tensors, as the oracle shows
// it: the backward of the gated product act(gate)·up, with the gradient
// of the product (down grouped_mm's input gradient, S × I) and the two
// multiplies' gradients (S × I each) live, the down projection's output
// (S × h) already freed by the routing-weight multiply's backward, and the
// gradient flowing into the block (h). Trained experts have freed the
// product they saved for the down projection's weight gradient by then. A
// shared expert's backward is the same with k = 1 and its own width, at
// another moment: the larger of the two counts.
func hfMoEBackward(r Request, A float64) float64 {
	m := r.Model
	h, k := float64(m.Hidden), float64(m.ExpertsPerToken)
	live := 3.0
	if r.Method == Full {
		live = 2
	}
	worst := 0.0
	for _, l := range m.Layers {
		if !l.MoE {
			continue
		}
		s := moeShape(m, l)
		routed := k * A * (live*float64(s.I) - h)
		shared := A * (live*float64(s.Shared) - h) * b2f(s.Shared > 0)
		worst = max(worst, routed, shared)
	}
	return worst + A*h
}

// hfMLA is DeepSeek-V2's multi-head latent attention (DeepseekV2Attention),
// its widths read from the layer's projections: nh heads, query/key heads
// of qk = nope + rope, value heads of v, the key/value latent of c
// (kv_a_layernorm's width) and, when q_lora_rank is set, the query latent
// of qc (q_a_layernorm's).
type hfMLA struct {
	nh, qk, kvb, v, c, qc float64
}

// hfMLAShape reads a DeepSeek-V2 model's attention widths (nil for other
// types): q_proj (or q_b_proj) gives nh·qk, kv_b_proj c and nh·(nope + v),
// o_proj nh·v.
func hfMLAShape(m *hfconfig.Model) *hfMLA {
	if m.ModelType != "deepseek_v2" && m.ModelType != "deepseek_v3" || len(m.Layers) == 0 {
		return nil
	}
	a := &hfMLA{nh: float64(m.Heads)}
	for _, l := range m.Layers[0].Linears {
		switch l.Name {
		case "q_proj", "q_b_proj":
			a.qk = float64(l.Out) / a.nh
		case "q_a_proj":
			a.qc = float64(l.Out)
		case "kv_b_proj":
			a.c, a.kvb = float64(l.In), float64(l.Out)
		case "o_proj":
			a.v = float64(l.In) / a.nh
		}
	}
	return a
}

// norms is what kv_a_layernorm (and q_a_layernorm) keep beyond the two
// block norms, per token: the fp32 input, and trained, the cast back and
// the normalised product kv_b_proj (q_b_proj) reads, as Llama's norms.
func (a *hfMLA) norms(A float64, full bool) float64 {
	n := 4 * (a.c + a.qc)
	if full {
		n += 2 * A * (a.c + a.qc)
	}
	return n
}

// sdpa is what the attention keeps under SDPA, per token: the query
// torch.cat((q_nope, q_pe)) and the key expand_kv writes into new_empty
// (nh·qk each), the value, a slice of kv_b_proj's output, which keeps the
// whole output alive (nh·(nope + v)), and the output (nh·v) with its fp32
// logsumexp. Query/key heads wider than the value heads leave the flash
// kernel for the memory-efficient one, which takes them as they are.
func (a *hfMLA) sdpa(A float64) float64 {
	return A*(2*a.nh*a.qk+a.kvb+a.nh*a.v) + 4*a.nh
}

// eager is what eager_attention_forward keeps beside the scores, per
// token: the query and key (nh·qk each) the scores' matmul saves, the
// value the probabilities' matmul saves (torch.matmul reshapes the
// non-contiguous slice of kv_b_proj's output into a copy, nh·v, and the
// output itself is then saved by nothing), and, trained, the contiguous
// output o_proj reads.
func (a *hfMLA) eager(A float64, full bool) float64 {
	e := A * (2*a.nh*a.qk + a.nh*a.v)
	if full {
		e += A * a.nh * a.v
	}
	return e
}
