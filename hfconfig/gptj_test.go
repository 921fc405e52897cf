package hfconfig

import (
	"os"
	"testing"
)

// EleutherAI/gpt-j-6b's GPTJForCausalLM has 6,050,882,784 parameters: 28
// parallel blocks of 201,355,264 (one ln_1, bias-free q/k/v/out_proj,
// biased fc_in 4096 → 16384 and fc_out), the 50400 × 4096 token embeddings,
// ln_f, and an untied lm_head with its bias. Rotary positions are a buffer.
func TestGPTJ(t *testing.T) {
	b, err := os.ReadFile("testdata/gptj.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Params(); got != 6_050_882_784 {
		t.Errorf("parameters %d, want 6,050,882,784", got)
	}
	if m.Intermediate != 16384 || m.HeadDim != 256 || m.TiedEmbeddings || m.PositionParams != 0 || m.MLP != MLPClassic {
		t.Errorf("MLP width %d, head dim %d, tied %v, positions %d, MLP %s", m.Intermediate, m.HeadDim, m.TiedEmbeddings, m.PositionParams, m.MLP)
	}
	if m.LMHeadParams != 50400*4096+50400 {
		t.Errorf("lm_head %d, want weight and bias %d", m.LMHeadParams, 50400*4096+50400)
	}
	if got := m.Layers[0].NormParams; got != 2*4096 {
		t.Errorf("block norms %d, want ln_1 alone (%d)", got, 2*4096)
	}
	// PEFT's default LoRA targets for gptj are q_proj and v_proj.
	for _, c := range []struct {
		spec []string
		want int
	}{{[]string{"q_proj", "v_proj"}, 56}, {[]string{"attention"}, 112}, {[]string{"mlp"}, 56}, {[]string{"all-linear"}, 168}} {
		lins, err := m.Targets(c.spec)
		if err != nil || len(lins) != c.want {
			t.Errorf("targets %v: %d modules, %v; want %d", c.spec, len(lins), err, c.want)
		}
	}
	// n_inner, when set, is the MLP width.
	m, err = Parse([]byte(`{"model_type": "gptj", "n_embd": 256, "n_layer": 2, "n_head": 4, "n_inner": 512, "vocab_size": 1000}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Intermediate != 512 {
		t.Errorf("n_inner 512 read as %d", m.Intermediate)
	}
}
