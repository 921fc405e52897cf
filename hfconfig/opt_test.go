package hfconfig

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// OPT's published OPTForCausalLM totals (sum(p.numel() for p in
// model.parameters())): opt-125m 125,239,296 (testdata/opt.json, the Hub
// file); opt-350m 331,196,416, with its 512-wide embeddings, project_in and
// project_out, post-norm blocks and no final LayerNorm; opt-1.3b
// 1,315,758,080; opt-6.7b 6,658,473,984. The inline configs hold the keys
// the catalog's opt-350m, opt-1.3b and opt-6.7b files give for the
// dimensions (catalog/models/SOURCES.md names their source). Positions are
// max_position_embeddings + 2 rows; the lm_head is tied.
func TestOPT(t *testing.T) {
	b, err := os.ReadFile("testdata/opt.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		config string
		params int64
		layers int
		// headParams: project_in and project_out; finalNorm: the decoder's
		// final LayerNorm.
		headParams, finalNorm int64
	}{
		{"opt-125m", string(b), 125_239_296, 12, 0, 2 * 768},
		{"opt-350m", `{"model_type": "opt", "hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
			"vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 512, "do_layer_norm_before": false}`, 331_196_416, 24, 2 * 512 * 1024, 0},
		{"opt-1.3b", `{"model_type": "opt", "hidden_size": 2048, "ffn_dim": 8192, "num_hidden_layers": 24, "num_attention_heads": 32,
			"vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 2048, "do_layer_norm_before": true}`, 1_315_758_080, 24, 0, 2 * 2048},
		{"opt-6.7b", `{"model_type": "opt", "hidden_size": 4096, "ffn_dim": 16384, "num_hidden_layers": 32, "num_attention_heads": 32,
			"vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 4096, "_remove_final_layer_norm": false}`, 6_658_473_984, 32, 0, 2 * 4096},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := Parse([]byte(c.config))
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Params(); got != c.params {
				t.Errorf("parameters %d, want %d", got, c.params)
			}
			if !m.TiedEmbeddings || m.LMHeadParams != 0 || m.MLP != MLPClassic {
				t.Errorf("tied %v, lm_head %d, MLP %s: want a tied head and a two-matmul MLP", m.TiedEmbeddings, m.LMHeadParams, m.MLP)
			}
			if m.HeadParams != c.headParams || m.FinalNormParams != c.finalNorm {
				t.Errorf("project_in/out %d, final norm %d; want %d, %d", m.HeadParams, m.FinalNormParams, c.headParams, c.finalNorm)
			}
			if want := (m.MaxPositions + 2) * m.Hidden; m.PositionParams != want {
				t.Errorf("positions %d, want (max_position_embeddings + 2) × hidden = %d", m.PositionParams, want)
			}
			// PEFT's default LoRA targets for opt are q_proj and v_proj.
			for _, s := range []struct {
				spec []string
				want int
			}{{[]string{"q_proj", "v_proj"}, 2}, {[]string{"attention"}, 4}, {[]string{"mlp"}, 2}, {[]string{"all-linear"}, 6}, {[]string{"out_proj", "fc1"}, 2}} {
				lins, err := m.Targets(s.spec)
				if err != nil || len(lins) != s.want*c.layers {
					t.Errorf("targets %v: %d modules, %v; want %d", s.spec, len(lins), err, s.want*c.layers)
				}
			}
			projNote := slices.ContainsFunc(m.Notes, func(n string) bool { return strings.HasPrefix(n, "project_in and project_out") })
			if projNote != (c.headParams > 0) {
				t.Errorf("project_in/out note present %v, want %v: %q", projNote, c.headParams > 0, m.Notes)
			}
		})
	}
}

// TestOPTSwitches checks the OPTConfig switches that change the count:
// enable_bias false drops the six Linear biases of every block (12 × 6,912
// for opt-125m), layer_norm_elementwise_affine false leaves the LayerNorms
// without parameters, and an untied head adds a vocab × word_embed_proj_dim
// lm_head.
func TestOPTSwitches(t *testing.T) {
	b, err := os.ReadFile("testdata/opt.json")
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(strings.TrimSpace(string(b)), "}")
	for _, c := range []struct {
		extra string
		want  int64
	}{
		{`"enable_bias": false`, 125_239_296 - 12*(4*768+3072+768)},
		{`"layer_norm_elementwise_affine": false`, 125_239_296 - 12*4*768 - 2*768},
		{`"tie_word_embeddings": false`, 125_239_296 + 50272*768},
		{`"_remove_final_layer_norm": true`, 125_239_296 - 2*768},
	} {
		m, err := Parse([]byte(base + ", " + c.extra + "}"))
		if err != nil {
			t.Fatalf("%s: %v", c.extra, err)
		}
		if got := m.Params(); got != c.want {
			t.Errorf("%s: parameters %d, want %d", c.extra, got, c.want)
		}
	}
}
