package hfconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// An expert count of 0 is dense only where transformers says so (Qwen2-MoE,
// Qwen3-MoE); for the sparse-only families it is a broken config.
func TestZeroExperts(t *testing.T) {
	base := `"hidden_size":32,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":48,"vocab_size":10,"num_experts_per_tok":2`
	tests := []struct {
		name, cfg, wantErr string
		dense              bool
	}{
		{"mixtral 0", `{"model_type":"mixtral",` + base + `,"num_local_experts":0}`, "field num_local_experts: 0 experts", false},
		{"granitemoe 0", `{"model_type":"granitemoe",` + base + `,"num_local_experts":0}`, "field num_local_experts: 0 experts", false},
		{"olmoe 0", `{"model_type":"olmoe",` + base + `,"num_experts":0}`, "field num_experts: 0 experts", false},
		{"qwen2_moe 0 is dense", `{"model_type":"qwen2_moe",` + base + `,"num_experts":0}`, "", true},
		{"mixtral 4", `{"model_type":"mixtral",` + base + `,"num_local_experts":4}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.cfg))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrMalformed containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Experts == 0; got != tt.dense {
				t.Errorf("dense = %v (experts %d), want %v", got, m.Experts, tt.dense)
			}
		})
	}
}

func TestMaxPositions(t *testing.T) {
	for _, tt := range []struct {
		cfg  string
		want int64
	}{
		{`{"model_type":"llama","hidden_size":32,"num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":48,"vocab_size":10,"max_position_embeddings":4096}`, 4096},
		{`{"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":4,"vocab_size":10,"n_positions":1024}`, 1024},
		{`{"model_type":"llama","hidden_size":32,"num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":48,"vocab_size":10}`, 0},
	} {
		m, err := Parse([]byte(tt.cfg))
		if err != nil {
			t.Fatal(err)
		}
		if m.MaxPositions != tt.want {
			t.Errorf("%s: MaxPositions = %d, want %d", tt.cfg, m.MaxPositions, tt.want)
		}
	}
}

// A field the config leaves out takes the default of the type's
// transformers config class: MixtralConfig has num_local_experts=8 and
// num_experts_per_tok=2, so Mixtral-8x7B's config.json without them
// describes the same model as with them (its golden file), not a dense one.
func TestExpertDefaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "mixtral.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "num_local_experts")
	delete(cfg, "num_experts_per_tok")
	stripped, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(stripped)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(describe(m), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "golden", "mixtral.json"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)+"\n"); d != "" {
		t.Errorf("mixtral without num_local_experts / num_experts_per_tok (-golden +got):\n%s", d)
	}
}
