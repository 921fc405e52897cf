package hfconfig

import (
	"strings"
	"testing"
)

// Hand-computed shapes of the architectures issue 4 lists beyond the shared
// configs: every term written out on tiny configs.
func TestMoreArchitectures(t *testing.T) {
	tests := []struct {
		name   string
		cfg    string
		linear int64 // Σ Linear params over layers
		total  int64
		check  func(t *testing.T, m *Model)
	}{
		{
			// Llama 4 text model: MoE on the layers moe_layers names, a shared
			// expert of intermediate_size, dense layers of intermediate_size_mlp;
			// tied by default in Llama4TextConfig... here explicitly untied.
			name: "llama4 moe_layers",
			cfg: `{"model_type":"llama4","text_config":{"model_type":"llama4_text","hidden_size":8,"num_hidden_layers":2,
			"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,"intermediate_size":4,"intermediate_size_mlp":16,
			"num_local_experts":3,"num_experts_per_tok":1,"moe_layers":[1],"vocab_size":10,"tie_word_embeddings":false}}`,
			// attention per layer: q 8·8 + k 8·4 + v 8·4 + o 8·8 = 192.
			// layer 0 dense: 3·8·16 = 384. layer 1: experts 3·3·8·4 = 288, router 8·3 = 24, shared 3·8·4 = 96.
			linear: 2*192 + 384 + 288 + 24 + 96,
			// norms 2·8 per layer + final 8; embeddings 10·8 + lm_head 10·8.
			total: 2*192 + 384 + 288 + 24 + 96 + 2*16 + 8 + 160,
			check: func(t *testing.T, m *Model) {
				if !m.Layers[1].MoE || m.Layers[0].MoE {
					t.Errorf("MoE layers = %v,%v, want false,true", m.Layers[0].MoE, m.Layers[1].MoE)
				}
				if m.Outer != "llama4" {
					t.Errorf("outer model type %q", m.Outer)
				}
			},
		},
		{
			// OLMoE: q_norm over all heads, k_norm over the KV projection.
			name: "olmoe",
			cfg: `{"model_type":"olmoe","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,
			"intermediate_size":4,"num_experts":4,"num_experts_per_tok":2,"vocab_size":10,"tie_word_embeddings":false}`,
			// attention 4·8·8 = 256; experts 4·3·8·4 = 384; router 8·4 = 32.
			linear: 256 + 384 + 32,
			// norms: 2·8 + q_norm 8 + k_norm 8, final 8; embeddings 2·80.
			total: 256 + 384 + 32 + 16 + 16 + 8 + 160,
		},
		{
			// Granite MoE: fused input_linear (2·I) and output_linear per expert.
			name: "granitemoe",
			cfg: `{"model_type":"granitemoe","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":4,
			"num_local_experts":2,"num_experts_per_tok":1,"vocab_size":10,"tie_word_embeddings":true}`,
			// attention 256; experts 2·(8·8 + 4·8) = 192; router 8·2 = 16.
			linear: 256 + 192 + 16,
			total:  256 + 192 + 16 + 16 + 8 + 80,
			check: func(t *testing.T, m *Model) {
				// The experts are GraniteMoeExperts' 3-D parameters.
				if _, err := m.Targets([]string{"input_linear"}); err == nil || !strings.Contains(err.Error(), "3-D parameters") {
					t.Errorf("input_linear as a target: %v", err)
				}
			},
		},
		{
			// Qwen2-MoE: routed experts, a shared expert and its sigmoid gate.
			name: "qwen2_moe shared expert",
			cfg: `{"model_type":"qwen2_moe","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,
			"intermediate_size":32,"moe_intermediate_size":4,"shared_expert_intermediate_size":6,"num_experts":2,
			"num_experts_per_tok":1,"vocab_size":10,"tie_word_embeddings":false}`,
			// attention 256 + q,k,v biases 24; experts 2·3·8·4 = 192; router 16; shared 3·8·6 = 144; shared gate 8.
			linear: 256 + 24 + 192 + 16 + 144 + 8,
			total:  256 + 24 + 192 + 16 + 144 + 8 + 16 + 8 + 160,
			check: func(t *testing.T, m *Model) {
				if got := m.Layers[0].FFNActive; got != 4+6 {
					t.Errorf("active FFN = %d, want one expert (4) + shared (6)", got)
				}
			},
		},
		{
			// Gemma 3 multimodal: the text model from text_config, a SigLIP
			// tower from vision_config counted as frozen weights.
			name: "gemma3 with vision tower",
			cfg: `{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":8,"num_hidden_layers":1,
			"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,"intermediate_size":16,"vocab_size":10},
			"vision_config":{"model_type":"siglip_vision_model","hidden_size":4,"num_hidden_layers":1,"intermediate_size":8,"patch_size":2,"image_size":4}}`,
			// attention q 8·8 + k 8·4 + v 8·4 + o 8·8 = 192; MLP 3·8·16 = 384.
			linear: 192 + 384,
			// norms 4·8 + q/k norm 2·4, final 8; tied embedding 80;
			// tower: patch 3·2·2·4 + 4, positions 4·4, layer 4(16+4) + 2·2·4 + (32+8) + (32+4), post-norm 8, projector 4·8 + 4.
			total: 192 + 384 + 32 + 8 + 8 + 80 + (48 + 4 + 16 + 80 + 16 + 40 + 36 + 8 + 36),
			check: func(t *testing.T, m *Model) {
				if m.FrozenTowerParams != 48+4+16+80+16+40+36+8+36 {
					t.Errorf("tower = %d", m.FrozenTowerParams)
				}
				if lins, _ := m.Targets([]string{"all-linear"}); len(lins) != 7 {
					t.Errorf("all-linear selected %d modules, want the text model's 7 (no vision modules)", len(lins))
				}
			},
		},
		{
			// Falcon-7B style multi-query attention: one shared K/V head.
			name: "falcon multi_query",
			cfg: `{"model_type":"falcon","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"multi_query":true,
			"new_decoder_architecture":false,"parallel_attn":true,"vocab_size":10}`,
			// query_key_value 8·(2+2)·4 = 128, dense 64, 4h MLP 2·8·32 = 512.
			linear: 128 + 64 + 512,
			total:  128 + 64 + 512 + 16 + 16 + 80,
		},
		{
			// Falcon-40B style: new decoder architecture, grouped K/V,
			// ln_attn and ln_mlp (num_ln_in_parallel_attn defaults to 2).
			name: "falcon new decoder, two norms",
			cfg: `{"model_type":"falcon","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"num_kv_heads":1,
			"new_decoder_architecture":true,"parallel_attn":true,"vocab_size":10}`,
			linear: 128 + 64 + 512,
			total:  128 + 64 + 512 + 32 + 16 + 80,
			check: func(t *testing.T, m *Model) {
				if f := m.Falcon; f == nil || !f.NewDecoder || !f.Parallel || f.Alibi || f.ParallelNorms != 2 {
					t.Errorf("Falcon layout %+v, want new decoder, parallel, rotary, two norms", f)
				}
			},
		},
		{
			// Falcon2-11B style: the new decoder architecture with one
			// input_layernorm for attention and MLP (num_ln_in_parallel_attn 1).
			name: "falcon new decoder, one norm",
			cfg: `{"model_type":"falcon","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"num_kv_heads":1,
			"new_decoder_architecture":true,"parallel_attn":true,"num_ln_in_parallel_attn":1,"vocab_size":10}`,
			linear: 128 + 64 + 512,
			total:  128 + 64 + 512 + 16 + 16 + 80,
			check: func(t *testing.T, m *Model) {
				if f := m.Falcon; f == nil || f.ParallelNorms != 1 {
					t.Errorf("Falcon layout %+v, want one parallel norm", f)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.cfg))
			if err != nil {
				t.Fatal(err)
			}
			if got := m.LinearParams(); got != tt.linear {
				t.Errorf("LinearParams = %d, want %d", got, tt.linear)
			}
			if got := m.Params(); got != tt.total {
				t.Errorf("Params = %d, want %d", got, tt.total)
			}
			if tt.check != nil {
				tt.check(t, m)
			}
		})
	}
}

func TestPreQuantizedConfigs(t *testing.T) {
	base := `"model_type":"llama","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"vocab_size":10`
	for _, tt := range []struct{ q, method, want string }{
		{`{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_use_double_quant":true,"llm_int8_skip_modules":["lm_head"]}`, "bitsandbytes", "bitsandbytes 4-bit (double quant true)"},
		{`{"quant_method":"gptq","bits":4}`, "gptq", "GPTQ 4-bit"},
		{`{"quant_method":"fp8"}`, "fp8", "dequantize to bf16"},
		{`{"quant_method":"hqq"}`, "hqq", "not modelled"},
	} {
		m, err := Parse([]byte(`{` + base + `,"quantization_config":` + tt.q + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if m.PreQuantized == nil || m.PreQuantized.Method != tt.method || !strings.Contains(strings.Join(m.Notes, ";"), tt.want) {
			t.Errorf("%s: PreQuantized %+v, notes %v; want a note with %q", tt.q, m.PreQuantized, m.Notes, tt.want)
		}
	}
}
