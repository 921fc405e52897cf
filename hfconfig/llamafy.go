package hfconfig

import (
	"slices"
	"strings"
)

// unslothLlamafied are the checkpoints Unsloth's loader redirects to its
// llama-fied uploads (unsloth/models/mapper.py at unslothai/unsloth
// 015bdef0d9, 2026): the microsoft ids and Unsloth's own, without their
// -bnb-4bit suffixes. Its loader has no phi3 branch; another Phi-3-family
// checkpoint (Phi-3-mini-128k, a fine-tune, a local directory) is loaded
// by transformers with its fused modules. Phi-4-mini and the Phi-4
// reasoning uploads are mapped too, but whether they are llama-fied was not
// read, so they are not listed.
var unslothLlamafied = []string{
	"microsoft/phi-3-mini-4k-instruct", "unsloth/phi-3-mini-4k-instruct",
	"microsoft/phi-3-medium-4k-instruct", "unsloth/phi-3-medium-4k-instruct",
	"microsoft/phi-3.5-mini-instruct", "unsloth/phi-3.5-mini-instruct",
	"microsoft/phi-4", "unsloth/phi-4",
}

// UnslothLlamafies reports whether Unsloth trains the checkpoint of this id
// as its llama-fied upload.
func UnslothLlamafies(id string) bool {
	if base, ok := UnslothPackedBase(id); ok {
		id = base
	}
	return slices.Contains(unslothLlamafied, strings.ToLower(id))
}

// UnslothPackedBase is the unquantized upload an Unsloth 4-bit upload packs,
// and whether id is one: Unsloth publishes unsloth/<name>-bnb-4bit (and,
// with some layers left in 16 bits, -unsloth-bnb-4bit) beside
// unsloth/<name>, the same model with its decoder Linears stored as
// bitsandbytes nf4.
func UnslothPackedBase(id string) (string, bool) {
	org, rest, ok := strings.Cut(id, "/")
	if !ok || !strings.EqualFold(org, "unsloth") {
		return "", false
	}
	lower := strings.ToLower(rest)
	for _, suffix := range []string{"-unsloth-bnb-4bit", "-bnb-4bit"} {
		if strings.HasSuffix(lower, suffix) && len(rest) > len(suffix) {
			return org + "/" + rest[:len(rest)-len(suffix)], true
		}
	}
	return "", false
}

// Llamafied is a Phi-3-family model (Phi-3, Phi-3.5, Phi-4: fused qkv_proj
// and gate_up_proj) as Unsloth uploads and patches it: "llama-fied", with
// qkv_proj split into q_proj, k_proj and v_proj and gate_up_proj into
// gate_proj and up_proj (model_type llama), so that LoRA targets name the
// split projections and each gets its own adapter. The parameters are the
// same; Phi-3's dropouts and sliding window, which Unsloth's Llama training path
// does not apply (its attention is causal, dropout 0), are dropped. Any other model is returned as it is; the original is not
// changed.
func (m *Model) Llamafied() *Model {
	if m.ModelType != "phi3" {
		return m
	}
	c := *m
	c.LlamafiedFrom = m.ModelType
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
	c.scopeNames(c.Layers[0].Linears)
	c.index()
	return &c
}
