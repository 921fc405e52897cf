package hfconfig

import (
	"slices"
	"testing"
)

// A Phi-3-family model llama-fied keeps its parameters and splits its fused
// projections; the copy is made once; other models are left as they are.
func TestLlamafied(t *testing.T) {
	m, err := Parse([]byte(`{"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192,
		"vocab_size": 32064, "max_position_embeddings": 131072, "sliding_window": 262144,
		"resid_pdrop": 0.0, "tie_word_embeddings": false}`))
	if err != nil {
		t.Fatal(err)
	}
	l := m.Llamafied()
	if l == m || l.ModelType != "llama" || l.SlidingWindow != 0 {
		t.Fatalf("llamafied: same %v, model_type %q, sliding window %d", l == m, l.ModelType, l.SlidingWindow)
	}
	if l.Params() != m.Params() || l.LinearParams() != m.LinearParams() {
		t.Errorf("params %d / linear %d, want %d / %d", l.Params(), l.LinearParams(), m.Params(), m.LinearParams())
	}
	var names []string
	for _, lin := range l.Layers[0].Linears {
		names = append(names, lin.Name)
	}
	if want := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}; !slices.Equal(names, want) {
		t.Errorf("modules %v, want %v", names, want)
	}
	if _, err := m.Targets([]string{"q_proj"}); err == nil {
		t.Error("the original model gained a q_proj")
	}
	// Seven adapters of rank 1: Σ (in + out) over the split modules.
	sum, err := l.AdapterSum([]string{"all-linear"})
	if err != nil {
		t.Fatal(err)
	}
	h, f := int64(3072), int64(8192)
	if want := 32 * (4*(h+h) + 2*(h+f) + (f + h)); sum != want {
		t.Errorf("all-linear adapter sum %d, want %d", sum, want)
	}
	// The original keeps its fused modules and its adapter sums.
	fused, err := m.AdapterSum([]string{"all-linear"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 32 * ((h + 3*h) + (h + h) + (h + 2*f) + (f + h)); fused != want {
		t.Errorf("the original's all-linear adapter sum %d, want %d", fused, want)
	}
	if l.LlamafiedFrom != "phi3" || m.LlamafiedFrom != "" {
		t.Errorf("llamafied from %q, original %q", l.LlamafiedFrom, m.LlamafiedFrom)
	}
	if l.Llamafied() != l {
		t.Error("a llama-fied model is llama-fied again")
	}
	q, err := Parse([]byte(`{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000}`))
	if err != nil {
		t.Fatal(err)
	}
	if q.Llamafied() != q {
		t.Error("a llama model was copied")
	}
}

// Unsloth llama-fies the checkpoints its loader maps to its own uploads,
// not every Phi-3-family model.
func TestUnslothLlamafies(t *testing.T) {
	for id, want := range map[string]bool{
		"microsoft/Phi-3.5-mini-instruct":        true,
		"unsloth/Phi-3.5-mini-instruct-bnb-4bit": true,
		"unsloth/phi-4-unsloth-bnb-4bit":         true,
		"microsoft/phi-4":                        true,
		"microsoft/Phi-3-mini-128k-instruct":     false,
		"someone/phi-3.5-mini-finetune":          false,
		"":                                       false,
	} {
		if got := UnslothLlamafies(id); got != want {
			t.Errorf("UnslothLlamafies(%q) = %v, want %v", id, got, want)
		}
	}
}
