package hfconfig

import (
	"os"
	"testing"
)

// DistilBERT's config names its width dim and its MLP hidden_dim; its
// blocks are BERT's with q_lin, k_lin, v_lin, out_lin, lin1 and lin2, and no
// token-type embeddings. distilbert-base-uncased's DistilBertModel has
// 66,362,880 parameters (word and position embeddings with their LayerNorm,
// six blocks of 7,087,872); the task head's dense h×h comes on top.
func TestDistilBERT(t *testing.T) {
	b, err := os.ReadFile("testdata/distilbert.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Encoder || m.Hidden != 768 || m.Intermediate != 3072 || m.NumLayers != 6 || m.Heads != 12 {
		t.Fatalf("encoder %v, %d wide, MLP %d, %d layers, %d heads", m.Encoder, m.Hidden, m.Intermediate, m.NumLayers, m.Heads)
	}
	if got := m.Params() - m.HeadParams; got != 66_362_880 {
		t.Errorf("DistilBertModel parameters %d, want 66,362,880", got)
	}
	for _, c := range []struct {
		spec []string
		want int
	}{{[]string{"q_lin", "v_lin"}, 12}, {[]string{"attention"}, 24}, {[]string{"all-linear"}, 36}, {[]string{"mlp"}, 12}} {
		lins, err := m.Targets(c.spec)
		if err != nil || len(lins) != c.want {
			t.Errorf("targets %v: %d modules, %v; want %d", c.spec, len(lins), err, c.want)
		}
	}
}
