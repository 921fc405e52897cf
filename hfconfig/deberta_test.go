package hfconfig

import (
	"os"
	"testing"
)

// TestEncoderCounts checks DeBERTa-v2, XLM-RoBERTa and ModernBERT against the modules
// transformers builds for them, term by term.
func TestEncoderCounts(t *testing.T) {
	type want struct {
		embed, positions, linear, norms, head, params int64
		disentangled                                  bool
	}
	// deberta-v2-xxlarge: 48 blocks of 1536 (24 heads × 64), 6144 wide,
	// vocab 128100, no absolute positions (position_biased_input false),
	// 2 × 256 relative-position rows, shared attention keys (no
	// pos_key_proj / pos_query_proj), a 3-wide Conv1d with its LayerNorm,
	// the rel_embeddings LayerNorm and a 1536 pooler.
	dLin := int64(48 * (4*(1536*1536+1536) + 1536*6144 + 6144 + 6144*1536 + 1536))
	dNorm := int64(48*4*1536 + 2*1536 + 2*1536 + 2*1536)
	dHead := int64(1536*1536 + 1536 + 1536*1536*3 + 1536)
	dEmb, dPos := int64(128100*1536), int64(2*256*1536)
	// xlm-roberta-base: RoBERTa's layout, 12 blocks of 768, vocab 250002,
	// 514 positions and one token type, the pooler.
	xLin := int64(12 * (4*(768*768+768) + 768*3072 + 3072 + 3072*768 + 768))
	xNorm := int64(12*4*768 + 2*768)
	xHead := int64(768*768 + 768)
	xEmb, xPos := int64(250002*768), int64((514+1)*768)
	// ModernBERT-large: 28 pre-norm blocks of 1024 with a fused Wqkv, a
	// GeGLU Wi of 2 × 2624, no biases (attention_bias, mlp_bias,
	// norm_bias false: norms are weights only), no attention norm in the
	// first block, RoPE (no position table), the embeddings' and the final
	// norm, the prediction head's dense and norm.
	mLin := int64(28 * (1024*3*1024 + 1024*1024 + 1024*2*2624 + 2624*1024))
	mNorm := int64(1024 + 27*2*1024 + 2*1024)
	mHead := int64(1024*1024 + 1024)
	mEmb := int64(50368 * 1024)
	for _, tc := range []struct {
		file string
		want want
	}{
		{"modernbert.json", want{mEmb, 0, mLin, mNorm, mHead, mEmb + mLin + mNorm + mHead, false}},
		{"deberta-v2.json", want{dEmb, dPos, dLin, dNorm, dHead, dEmb + dPos + dLin + dNorm + dHead, true}},
		{"xlm-roberta.json", want{xEmb, xPos, xLin, xNorm, xHead, xEmb + xPos + xLin + xNorm + xHead, false}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			got := want{m.EmbeddingParams, m.PositionParams, m.LinearParams(), m.NormParams(), m.HeadParams, m.Params(), m.Disentangled}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if !m.Encoder {
				t.Error("not an encoder")
			}
		})
	}
}

// TestDeBERTaSeparateKeys: without share_att_key each block has its own
// c2p and p2c projections, and pos_att_type may be a "p2c|c2p" string.
func TestDeBERTaSeparateKeys(t *testing.T) {
	cfg := `{"model_type":"deberta-v2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100,
		"relative_attention":true,"position_buckets":8,"share_att_key":false,"pos_att_type":"p2c|c2p"}`
	m, err := Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	lins, err := m.Targets([]string{"pos_key_proj", "pos_query_proj"})
	if err != nil || len(lins) != 4 {
		t.Fatalf("pos projections: %d modules, %v; want 2 per block", len(lins), err)
	}
	// Absolute positions are on by default (position_biased_input true),
	// type_vocab_size defaults to 0; the relative table is 2 × 8 rows.
	if want := int64(512*64 + 2*8*64); m.PositionParams != want {
		t.Errorf("PositionParams %d, want %d", m.PositionParams, want)
	}
}

// TestModernBERTLayers: global attention every third block from the first,
// a local window elsewhere; "Wo" is two modules, told apart by their parent.
func TestModernBERTLayers(t *testing.T) {
	b, err := os.ReadFile("testdata/modernbert.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		want := "sliding"
		if i%3 == 0 {
			want = "full"
		}
		if l.Attention != want {
			t.Errorf("block %d: %s attention, want %s", i, l.Attention, want)
		}
	}
	if m.SlidingWindow != 128 || m.MLP != MLPGated {
		t.Errorf("window %d, MLP %s; want 128, gated", m.SlidingWindow, m.MLP)
	}
	lins, err := m.Targets([]string{"attention"})
	if err != nil || len(lins) != 2*28 {
		t.Errorf("attention scope: %d modules, %v; want Wqkv and attn.Wo of 28 blocks", len(lins), err)
	}
}
