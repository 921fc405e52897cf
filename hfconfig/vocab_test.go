package hfconfig

import (
	"errors"
	"testing"
)

// A config without vocab_size names the field and wraps ErrNoVocab; an
// override completes it, in the text model's object when the config nests
// one (Gemma 3, Llama 4 and other multimodal wrappers).
func TestVocabOverride(t *testing.T) {
	const flat = `{"model_type":"llama","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":512}`
	const nested = `{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":64,"intermediate_size":512}}`
	for _, c := range []struct{ name, cfg string }{{"flat", flat}, {"text_config", nested}} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.cfg))
			if !errors.Is(err, ErrNoVocab) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse: want ErrNoVocab and ErrMalformed, got %v", err)
			}
			m, err := ParseWith([]byte(c.cfg), ParseOptions{Vocab: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if m.Vocab != 1000 {
				t.Errorf("vocab %d, want the override 1000", m.Vocab)
			}
			if len(m.Notes) == 0 {
				t.Error("the override is not noted")
			}
		})
	}
	// An override replaces a config's own value.
	m, err := ParseWith([]byte(`{"model_type":"llama","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":512,"vocab_size":32000}`), ParseOptions{Vocab: 32768})
	if err != nil || m.Vocab != 32768 {
		t.Errorf("override of a present vocab_size: %v, %v", m, err)
	}
}
