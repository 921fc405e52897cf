package hfconfig

import (
	"slices"
	"sync"
)

// llamafied caches Llamafied's copies, one per parsed model.
var llamafied sync.Map // *Model → *Model

// Llamafied is a Phi-3-family model (Phi-3, Phi-3.5, Phi-4: fused qkv_proj
// and gate_up_proj) as Unsloth uploads and patches it: "llama-fied", with
// qkv_proj split into q_proj, k_proj and v_proj and gate_up_proj into
// gate_proj and up_proj (model_type llama), so that LoRA targets name the
// split projections and each gets its own adapter. The parameters are the
// same; Phi-3's dropouts and sliding window, which Llama's code has not, are
// dropped. Any other model is returned as it is. The copy is made once per
// model and shared.
func (m *Model) Llamafied() *Model {
	if m.ModelType != "phi3" {
		return m
	}
	if c, ok := llamafied.Load(m); ok {
		return c.(*Model)
	}
	c := *m
	c.ModelType, c.Family = "llama", "llama"
	c.ResidDropout, c.AttnDropout, c.SlidingWindow = 0, 0, 0
	c.Notes = append(slices.Clone(m.Notes), "llama-fied as Unsloth uploads Phi-3-family checkpoints: qkv_proj split into q_proj/k_proj/v_proj, gate_up_proj into gate_proj/up_proj")
	c.attentionNames, c.mlpNames, c.aggs, c.Layers = nil, nil, nil, nil
	hd := m.HeadDim
	split := func(l Linear) []Linear {
		switch l.Name {
		case "qkv_proj":
			q, kv := m.Heads*hd, m.KVHeads*hd
			return []Linear{{"q_proj", l.Role, l.In, q, l.Bias, l.Copies}, {"k_proj", l.Role, l.In, kv, l.Bias, l.Copies}, {"v_proj", l.Role, l.In, kv, l.Bias, l.Copies}}
		case "gate_up_proj":
			return []Linear{{"gate_proj", l.Role, l.In, l.Out / 2, l.Bias, l.Copies}, {"up_proj", l.Role, l.In, l.Out / 2, l.Bias, l.Copies}}
		}
		return []Linear{l}
	}
	for _, l := range m.Layers {
		var lins []Linear
		for _, lin := range l.Linears {
			lins = append(lins, split(lin)...)
		}
		nl := l
		nl.Linears = lins
		nl.Attention = "full"
		c.Layers = append(c.Layers, nl)
	}
	for _, lin := range c.Layers[0].Linears {
		switch lin.Role {
		case RoleAttention:
			c.attentionNames = append(c.attentionNames, lin.Name)
		case RoleMLP:
			c.mlpNames = append(c.mlpNames, lin.Name)
		}
	}
	c.index()
	v, _ := llamafied.LoadOrStore(m, &c)
	return v.(*Model)
}
