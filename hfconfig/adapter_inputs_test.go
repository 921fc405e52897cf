package hfconfig

import (
	"errors"
	"strings"
	"testing"
)

// AdapterInputs counts, per token, the input elements the selected adapters
// read: a routed expert is visited by experts-per-token of its copies.
func TestAdapterInputs(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"olmoe","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,
		"intermediate_size":4,"num_experts":4,"num_experts_per_tok":2,"vocab_size":10,"tie_word_embeddings":false}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec []string
		want int64
	}{
		{[]string{"q_proj", "v_proj"}, 8 + 8},
		// o_proj reads the attention output (2 heads · 4 = 8).
		{[]string{"attention"}, 4 * 8},
		// gate and up read the hidden state (8), down the intermediate (4);
		// each token visits 2 of the 4 experts.
		{[]string{"gate_proj", "up_proj", "down_proj"}, 2 * (8 + 8 + 4)},
	} {
		got, err := m.AdapterInputs(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("AdapterInputs(%v) = %d, want %d", tc.spec, got, tc.want)
		}
	}
	if _, err := m.AdapterInputs([]string{"nope"}); err == nil {
		t.Error("an unknown target gave no error")
	}
	// Counted once per group of modules that read one tensor: q, k and v
	// read the normed hidden state (8), gate and up another one (8 per
	// visited expert); o (8) and down (4 per visited expert) stand alone.
	for _, tc := range []struct {
		spec   []string
		groups [][]string
		want   int64
	}{
		{[]string{"q_proj", "v_proj"}, [][]string{QKV}, 8},
		{[]string{"q_proj", "v_proj"}, nil, 16},
		{[]string{"all-linear"}, SharedInputs, 8 + 8 + 2*(8+4)},
	} {
		got, err := m.DistinctInputs(tc.spec, tc.groups)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("DistinctInputs(%v, %v) = %d, want %d", tc.spec, tc.groups, got, tc.want)
		}
	}
}

func TestLogitSoftcapParsed(t *testing.T) {
	base := `"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"vocab_size":10`
	for _, tc := range []struct {
		cfg     string
		want    float64
		wantErr bool
	}{
		{`{"model_type":"gemma2",` + base + `,"final_logit_softcapping":30.0}`, 30, false},
		{`{"model_type":"gemma2",` + base + `,"final_logit_softcapping":null}`, 0, false},
		{`{"model_type":"llama",` + base + `}`, 0, false},
		{`{"model_type":"gemma2",` + base + `,"final_logit_softcapping":"30"}`, 0, true},
	} {
		m, err := Parse([]byte(tc.cfg))
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error for a string soft-cap", tc.cfg)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.LogitSoftcap != tc.want {
			t.Errorf("%s: soft-cap %g, want %g", tc.cfg, m.LogitSoftcap, tc.want)
		}
	}
}

// Out-of-range dimensions and fields of the wrong type are refused with the
// field named, before they can wrap the int64 sums, make Parse build
// millions of layers, or fall back silently to a default.
func TestParseRefusesOutOfRange(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{`{"model_type":"llama","hidden_size":1099511627776,"num_hidden_layers":2,"num_attention_heads":1,"intermediate_size":64,"vocab_size":10}`, "field hidden_size: 1099511627776"},
		{`{"model_type":"llama","hidden_size":64,"num_hidden_layers":100000000,"num_attention_heads":1,"intermediate_size":128,"vocab_size":100}`, "field num_hidden_layers: 100000000 layers"},
		// Each dimension in range, their product not: caught by the float64 recount.
		{`{"model_type":"mixtral","hidden_size":16777216,"num_hidden_layers":65536,"num_attention_heads":1,"intermediate_size":1099511627776,"num_local_experts":1099511627776,"num_experts_per_tok":1,"vocab_size":100}`, "parameters (more than 10^15)"},
		{`{"model_type":"llava","text_config":{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":1,"intermediate_size":128,"vocab_size":100},"vision_config":{"hidden_size":16777216,"num_hidden_layers":65536,"intermediate_size":16777216}}`, "vision_config implies"},
		// A field of the wrong type is an error, not a silent default.
		{`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":1,"intermediate_size":128,"vocab_size":100,"is_encoder_decoder":"no"}`, "field is_encoder_decoder"},
		{`{"model_type":"falcon","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":1,"vocab_size":100,"multi_query":"yes"}`, "field multi_query"},
		{`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":1,"intermediate_size":128,"vocab_size":100,"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":1}}`, "field quantization_config.load_in_4bit"},
	} {
		_, err := Parse([]byte(tc.cfg))
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s): %v, want ErrMalformed naming %q", tc.cfg, err, tc.want)
		}
	}
}

// NarrowestLinear is the smallest min(in, out) over the projections, the
// router aside (its output is the expert count), both as precomputed at
// Parse and as walked on a Model built by hand.
func TestNarrowestLinear(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"olmoe","hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":2,
		"intermediate_size":6,"num_experts":2,"num_experts_per_tok":1,"vocab_size":10,"tie_word_embeddings":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.NarrowestLinear(); got != 6 {
		t.Errorf("parsed: NarrowestLinear() = %d, want 6 (the experts' intermediate width; the router's 2 outputs aside)", got)
	}
	hand := &Model{Layers: []Layer{{Linears: []Linear{
		{Name: "q_proj", In: 16, Out: 12},
		{Name: "gate", Role: RoleRouter, In: 16, Out: 3},
	}}}}
	if got := hand.NarrowestLinear(); got != 12 {
		t.Errorf("hand-built: NarrowestLinear() = %d, want 12", got)
	}
}

// Where no target list reaches the routed experts (Qwen2-MoE: 3-D
// parameters PEFT does not map transformers 4's names onto), the MLP scope
// is the shared expert and its one-output gate, and a name only the routed
// experts carry is an error.
func TestUnreachableExperts(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"qwen2_moe","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,
		"intermediate_size":32,"moe_intermediate_size":4,"shared_expert_intermediate_size":6,"num_experts":2,
		"num_experts_per_tok":1,"vocab_size":10,"tie_word_embeddings":false}`))
	if err != nil {
		t.Fatal(err)
	}
	// gate and up read the hidden state (8 each), down the shared width
	// (6), shared_expert_gate the hidden state (8); once per tensor, gate,
	// up and shared_expert_gate read one.
	if got, err := m.AdapterInputs([]string{"mlp"}); err != nil || got != 8+8+6+8 {
		t.Errorf("AdapterInputs(mlp) = %d, %v; want 30", got, err)
	}
	if got, err := m.DistinctInputs([]string{"mlp"}, SharedInputs); err != nil || got != 8+6 {
		t.Errorf("DistinctInputs(mlp) = %d, %v; want 14", got, err)
	}
	// r·(in + out): 8+6, 8+6, 6+8 and 8+1.
	if got, err := m.AdapterSum([]string{"gate_proj", "up_proj", "down_proj"}); err != nil || got != 14+14+14 {
		t.Errorf("AdapterSum(gate_proj, up_proj, down_proj) = %d, %v; want 42 (the shared expert's only)", got, err)
	}
	m2, err := Parse([]byte(`{"model_type":"granitemoe","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":4,
		"num_local_experts":2,"num_experts_per_tok":1,"vocab_size":10,"tie_word_embeddings":true}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range [][]string{{"mlp"}, {"input_linear"}, {"q_proj", "output_linear"}} {
		if _, err := m2.AdapterSum(spec); err == nil || !strings.Contains(err.Error(), "3-D parameters") {
			t.Errorf("GraniteMoE %v: %v, want an error naming 3-D parameters", spec, err)
		}
	}
	if got, err := m2.AdapterSum([]string{"all-linear"}); err != nil || got != 4*16 {
		t.Errorf("GraniteMoE all-linear: %d, %v; want the attention's 64", got, err)
	}
}

// Gemma 3 without layer_types: five sliding layers, then a full one
// (Gemma3TextConfig: layer i slides unless (i+1) % sliding_window_pattern
// == 0, the pattern 6 by default); layer_types, where given, decides.
func TestGemma3SlidingPattern(t *testing.T) {
	base := `"model_type":"gemma3_text","hidden_size":8,"num_hidden_layers":12,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,"intermediate_size":16,"vocab_size":10,"sliding_window":4`
	kinds := func(cfg string) string {
		m, err := Parse([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, l := range m.Layers {
			b.WriteByte(l.Attention[0])
		}
		return b.String()
	}
	for _, tc := range []struct{ cfg, want string }{
		{`{` + base + `}`, "sssssfsssssf"},
		{`{` + base + `,"sliding_window_pattern":3}`, "ssfssfssfssf"},
		{`{` + base + `,"layer_types":["full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention"]}`, "fsfsfsfsfsfs"},
	} {
		if got := kinds(tc.cfg); got != tc.want {
			t.Errorf("%s: layers %s, want %s", tc.cfg, got, tc.want)
		}
	}
	for _, bad := range []string{`0`, `-6`, `"6"`, `6.5`} {
		cfg := `{` + base + `,"sliding_window_pattern":` + bad + `}`
		if _, err := Parse([]byte(cfg)); err == nil || !strings.Contains(err.Error(), "sliding_window_pattern") {
			t.Errorf("sliding_window_pattern %s: error %v, want one naming the field", bad, err)
		}
	}
	// The multimodal wrapper's text_config without its own model_type reads the same.
	m, err := Parse([]byte(`{"model_type":"gemma3","text_config":{` + strings.Replace(base, `"model_type":"gemma3_text",`, "", 1) + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Layers[5].Attention != "full" || m.Layers[4].Attention != "sliding" {
		t.Errorf("gemma3 text_config: layers 4, 5 are %s, %s; want sliding, full", m.Layers[4].Attention, m.Layers[5].Attention)
	}
}
