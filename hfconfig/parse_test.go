package hfconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/internal/shareddata"
)

// Hand-computed shapes of small configs: every term written out.
func TestParseLlamaCounts(t *testing.T) {
	cfg := `{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
	"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":false}`
	m, err := Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	// head_dim 16; q 64×64, k 64×32, v 64×32, o 64×64; gate/up 64×128, down 128×64.
	perLayer := int64(64*64 + 64*32 + 64*32 + 64*64 + 3*64*128)
	if got, want := m.LinearParams(), 2*perLayer; got != want {
		t.Errorf("LinearParams = %d, want %d", got, want)
	}
	// 2 RMSNorms per layer + final norm.
	if got, want := m.NormParams(), int64(2*2*64+64); got != want {
		t.Errorf("NormParams = %d, want %d", got, want)
	}
	if got, want := m.EmbeddingLikeParams(), int64(2*1000*64); got != want {
		t.Errorf("EmbeddingLikeParams = %d, want %d (untied: embedding + lm_head)", got, want)
	}
	lins, err := m.Targets([]string{"attention"})
	if err != nil {
		t.Fatal(err)
	}
	var adapter int64
	for _, l := range lins {
		adapter += 8 * (l.In + l.Out)
	}
	// rank 8: q 8·128, k 8·96, v 8·96, o 8·128 per layer.
	if want := int64(2 * 8 * (128 + 96 + 96 + 128)); adapter != want {
		t.Errorf("rank-8 attention adapters = %d, want %d", adapter, want)
	}
}

func TestParseMoEAndMLA(t *testing.T) {
	mixtral := `{"model_type":"mixtral","hidden_size":32,"num_hidden_layers":1,"num_attention_heads":4,
	"num_key_value_heads":4,"intermediate_size":48,"vocab_size":10,"num_local_experts":4,"num_experts_per_tok":2}`
	m, err := Parse([]byte(mixtral))
	if err != nil {
		t.Fatal(err)
	}
	// attention 4·32·32, experts 4 × 3·32·48, router 32·4.
	if got, want := m.LinearParams(), int64(4*32*32+4*3*32*48+32*4); got != want {
		t.Errorf("mixtral LinearParams = %d, want %d", got, want)
	}
	if got := m.ActiveFFN(); got != 2*48 {
		t.Errorf("mixtral ActiveFFN = %d, want %d (experts per token × width)", got, 96)
	}
	ds := `{"model_type":"deepseek_v2","hidden_size":32,"num_hidden_layers":2,"num_attention_heads":2,
	"intermediate_size":64,"vocab_size":10,"q_lora_rank":null,"kv_lora_rank":8,"qk_nope_head_dim":4,
	"qk_rope_head_dim":2,"v_head_dim":4,"n_routed_experts":3,"moe_intermediate_size":16,"n_shared_experts":1,
	"num_experts_per_tok":2,"first_k_dense_replace":1}`
	m, err = Parse([]byte(ds))
	if err != nil {
		t.Fatal(err)
	}
	attn := int64(32*2*6 + 32*(8+2) + 8*2*(4+4) + 2*4*32)
	dense := int64(3 * 32 * 64)
	moe := int64(3*3*32*16 + 32*3 + 3*32*16)
	if got, want := m.LinearParams(), 2*attn+dense+moe; got != want {
		t.Errorf("deepseek LinearParams = %d, want %d", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"not json", `{"model_type":`, "invalid JSON"},
		{"array", `[1,2]`, "want an object"},
		{"null", `null`, "want an object"},
		{"no type", `{"hidden_size":4}`, "field model_type: missing"},
		{"string dim", `{"model_type":"llama","hidden_size":"4096","num_hidden_layers":2,"num_attention_heads":2,"intermediate_size":8,"vocab_size":4}`, `field hidden_size: value "4096" is not a number`},
		{"negative", `{"model_type":"llama","hidden_size":-64,"num_hidden_layers":2,"num_attention_heads":2,"intermediate_size":8,"vocab_size":4}`, "field hidden_size: value -64"},
		{"fraction", `{"model_type":"llama","hidden_size":64.5,"num_hidden_layers":2,"num_attention_heads":2,"intermediate_size":8,"vocab_size":4}`, "not a non-negative integer"},
		{"zero layers", `{"model_type":"llama","hidden_size":64,"num_hidden_layers":0,"num_attention_heads":2,"intermediate_size":8,"vocab_size":4}`, "num_hidden_layers"},
		{"kv not dividing", `{"model_type":"llama","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3,"intermediate_size":8,"vocab_size":4}`, "does not divide"},
		{"encoder", `{"model_type":"electra","hidden_size":64}`, "encoder-only"},
		{"unknown sparse", `{"model_type":"wizard","hidden_size":64}`, "not known"},
		{"bad layer_types", `{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,"intermediate_size":8,"vocab_size":4,"layer_types":["full_attention"]}`, "layer_types: 1 entries for 2 layers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) {
				t.Errorf("err %v wraps neither ErrMalformed nor ErrUnsupported", err)
			}
		})
	}
}

// TestParseAcceptsBOM: some Windows editors save config.json with a UTF-8
// byte order mark, which encoding/json refuses with "invalid character 'ï'",
// a character the user cannot see in the file. The mark carries no content,
// so the config must parse the same as without it.
func TestParseAcceptsBOM(t *testing.T) {
	const cfg = `{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":1000}`
	want, err := Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse([]byte("\uFEFF" + cfg))
	if err != nil {
		t.Fatalf("with a BOM: %v", err)
	}
	if got.Params() != want.Params() || got.ModelType != want.ModelType {
		t.Errorf("with a BOM: %s with %d params, want %s with %d", got.ModelType, got.Params(), want.ModelType, want.Params())
	}
	// Only one leading mark is the encoding's; a second is not JSON.
	if _, err := Parse([]byte("\uFEFF\uFEFF" + cfg)); !errors.Is(err, ErrMalformed) {
		t.Errorf("two BOMs: err = %v, want ErrMalformed", err)
	}
}

func TestGenericFallbackIsLabelled(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"newthing","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100}`))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Generic || len(m.Notes) == 0 || !strings.Contains(m.Notes[0], "not known") {
		t.Errorf("generic fallback not labelled: Generic=%v Notes=%v", m.Generic, m.Notes)
	}
}

func TestTargetsUnknownModule(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"llama","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Targets([]string{"q_proj", "c_attn"})
	if err == nil || !strings.Contains(err.Error(), "c_attn matches no module") || !strings.Contains(err.Error(), "q_proj, k_proj") {
		t.Errorf("err = %v", err)
	}
}

// sharedDir finds the shared model-config collection beside the repository;
// without it the test skips, or fails in CI (CI=true).
func sharedDir(t *testing.T) string {
	t.Helper()
	return shareddata.Dir(t, "models", "configs")
}

// Every real config.json parses, the encoder (BERT) among them.
func TestParseSharedConfigs(t *testing.T) {
	root := sharedDir(t)
	n := 0
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || filepath.Base(p) != "config.json" {
			return err
		}
		n++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m, err := Parse(b)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		if m.Params() <= 0 || m.Generic {
			t.Errorf("%s: params %d generic %v", p, m.Params(), m.Generic)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 40 {
		t.Errorf("walked %d configs, want the ≥ 40 shared ones", n)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100}`))
	f.Add([]byte(`{"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100,"kv_lora_rank":8,"q_lora_rank":16,"qk_nope_head_dim":8,"qk_rope_head_dim":8,"v_head_dim":8,"n_routed_experts":4,"moe_intermediate_size":16,"num_experts_per_tok":2}`))
	f.Add([]byte(`{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100,"head_dim":32},"vision_config":{"hidden_size":16,"num_hidden_layers":1,"intermediate_size":32,"patch_size":4,"image_size":16}}`))
	f.Add([]byte(`{"model_type":"gpt2","n_embd":64,"n_layer":2,"n_head":4,"vocab_size":100,"n_positions":32}`))
	f.Add([]byte(`{"model_type":"llama","hidden_size":1e12,"num_hidden_layers":1e12}`))
	f.Add([]byte(`{"model_type":"t5","is_encoder_decoder":true,"d_model":64,"d_kv":16,"d_ff":128,"num_layers":2,"num_decoder_layers":3,"num_heads":4,"vocab_size":100,"feed_forward_proj":"gated-gelu","tie_word_embeddings":false}`))
	f.Add([]byte(`{"model_type":"deberta-v2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100,"relative_attention":true,"position_buckets":-1,"max_relative_positions":-1,"pos_att_type":"p2c|c2p","conv_kernel_size":3,"embedding_size":32}`))
	f.Add([]byte(`{"model_type":"bart","is_encoder_decoder":true,"d_model":64,"encoder_layers":2,"decoder_layers":1,"encoder_attention_heads":4,"decoder_attention_heads":2,"encoder_ffn_dim":128,"decoder_ffn_dim":96,"vocab_size":100,"max_position_embeddings":32}`))
	// Parse itself rejects a model without layers or with a non-positive
	// count, so the target checks what Parse does not: one layer per
	// num_hidden_layers, cached sums equal to the layers' sums, and the
	// allocation-free adapter sums agreeing with Targets.
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		if int64(len(m.Layers)) != m.NumLayers {
			t.Errorf("%d layers for num_hidden_layers %d", len(m.Layers), m.NumLayers)
		}
		if ss := m.Seq2Seq; ss != nil && (ss.EncoderLayers < 1 || ss.DecoderLayers < 0 || ss.EncoderLayers+ss.DecoderLayers != m.NumLayers) {
			t.Errorf("encoder %d + decoder %d blocks for %d layers", ss.EncoderLayers, ss.DecoderLayers, m.NumLayers)
		}
		var lin, norm int64
		for _, l := range m.Layers {
			norm += l.NormParams
			for _, x := range l.Linears {
				lin += x.Params()
			}
		}
		if m.LinearParams() != lin || m.NormParams() != norm+m.FinalNormParams {
			t.Errorf("cached sums %d, %d; layers sum to %d, %d", m.LinearParams(), m.NormParams(), lin, norm+m.FinalNormParams)
		}
		checkAdapterSums(t, m, "fuzz input")
	})
}

// checkAdapterSums fails when AdapterSum or AdapterInputs disagrees with
// summing the Linears Targets selects, for each scope and a mixed list.
func checkAdapterSums(t *testing.T, m *Model, name string) {
	t.Helper()
	for _, spec := range [][]string{{"attention"}, {"all-linear"}, {"mlp"}, {"all-linear", "q_proj"}} {
		lins, err1 := m.Targets(spec)
		sum, err2 := m.AdapterSum(spec)
		inputs, err3 := m.AdapterInputs(spec)
		if (err1 == nil) != (err2 == nil) || (err1 == nil) != (err3 == nil) {
			t.Errorf("%s %v: Targets err %v, AdapterSum err %v, AdapterInputs err %v", name, spec, err1, err2, err3)
			continue
		}
		var wantSum, wantInputs int64
		for _, l := range lins {
			wantSum += (l.In + l.Out) * l.Copies
			wantInputs += l.In * m.visits(l)
		}
		if sum != wantSum || inputs != wantInputs {
			t.Errorf("%s %v: AdapterSum %d, AdapterInputs %d; Targets sum to %d, %d", name, spec, sum, inputs, wantSum, wantInputs)
		}
	}
}

// A scope keyword expands to the modules the model has: DeepSeek-V2-Lite has
// no q_lora_rank, so its attention scope is q_proj, kv_a_proj_with_mqa,
// kv_b_proj and o_proj.
func TestScopeSkipsAbsentModules(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"deepseek_v2","hidden_size":32,"num_hidden_layers":1,"num_attention_heads":2,
	"intermediate_size":64,"vocab_size":10,"q_lora_rank":null,"kv_lora_rank":8,"qk_nope_head_dim":4,
	"qk_rope_head_dim":2,"v_head_dim":4}`))
	if err != nil {
		t.Fatal(err)
	}
	lins, err := m.Targets([]string{"attention"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range lins {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, ","); got != "q_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj" {
		t.Errorf("attention scope = %s", got)
	}
	if _, err := m.Targets([]string{"q_a_proj"}); err == nil {
		t.Error("an explicit absent module was accepted")
	}
}

// AdapterSum and AdapterInputs agree with summing Targets on every shared
// config and scope.
func TestAdapterSumMatchesTargets(t *testing.T) {
	root := sharedDir(t)
	n := 0
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || filepath.Base(p) != "config.json" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m, err := Parse(b)
		if err != nil {
			return nil // TestParseSharedConfigs says which ought to parse
		}
		n++
		checkAdapterSums(t, m, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("no shared config parsed: nothing was compared")
	}
}
