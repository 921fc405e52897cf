package estimate

import "github.com/canifinetune/canifinetune/hfconfig"

// hfMoETypes are the mixture-of-experts model types whose decoder layer
// hfLayerSaved spells out: the attention of the dense family they are
// built on (Mixtral's is Mistral's, Qwen2-MoE's Qwen2's, Qwen3-MoE's
// Qwen3's, GraniteMoE's Granite's) and a feed-forward that routes each token
// through transformers' grouped_mm experts (hfMoELayerSaved).
var hfMoETypes = map[string]bool{"mixtral": true, "qwen2_moe": true, "qwen3_moe": true, "granitemoe": true}

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
//     (Mixtral, Qwen2-MoE, Qwen3-MoE); GraniteMoE takes the top k of the
//     fp32 logits and keeps the softmax over those k; dividing the top k by
//     their sum (Mixtral; norm_topk_prob) keeps an fp32 clone of them and
//     the sum; Mixtral's weights stay fp32 (4 B a copy), the others cast
//     them to the activation dtype;
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
	if full {
		saved += k * A * (h + I)
	}
	t := r.Model.ModelType
	weights := A
	if t == "mixtral" {
		weights = 4
	}
	saved += k * weights
	switch t {
	case "granitemoe":
		saved += 4 * k
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
