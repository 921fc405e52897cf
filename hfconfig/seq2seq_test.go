package hfconfig

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestSeq2SeqCounts parses the real T5, mT5 and BART configs in testdata and
// checks each parameter group against the modules transformers builds for
// them (modeling_t5 / modeling_bart), written out term by term.
func TestSeq2SeqCounts(t *testing.T) {
	type want struct {
		linear, norms, embed, positions, head, params int64
		enc, dec                                      int64
		tied                                          bool
		mlp                                           MLPKind
	}
	// t5-small: d_model 512, 8 heads × d_kv 64, d_ff 2048 (relu: wi, wo),
	// 6 + 6 blocks, vocab 32128, tied; bias table 32 × 8 in each stack's
	// first block.
	t5Lin := int64(6*(4*512*512+2*512*2048) + 6*(8*512*512+2*512*2048))
	t5Norm := int64(6*2*512 + 6*3*512 + 2*512 + 2*32*8)
	// mt0-small (mt5): d_model 512, 6 heads × d_kv 64 = 384 inner, d_ff
	// 1024 gated (wi_0, wi_1, wo), 8 + 8 blocks, vocab 250112, untied.
	mt5Attn := int64(3*512*384 + 384*512)
	mt5MLP := int64(3 * 512 * 1024)
	mt5Lin := 8*(mt5Attn+mt5MLP) + 8*(2*mt5Attn+mt5MLP)
	mt5Norm := int64(8*2*512 + 8*3*512 + 2*512 + 2*32*6)
	// bart (bart-base shapes, vocab resized to 51201): d_model 768, 12
	// heads, ffn 3072, 6 + 6 blocks, every Linear biased, LayerNorms with
	// bias, learned positions (1024 + 2) per stack, tied.
	bAttn := int64(4 * (768*768 + 768))
	bMLP := int64(768*3072 + 3072 + 3072*768 + 768)
	bartLin := 6*(bAttn+bMLP) + 6*(2*bAttn+bMLP)
	bartNorm := int64(6*2*2*768 + 6*3*2*768 + 2*2*768)
	for _, tc := range []struct {
		file string
		want want
	}{
		{"t5.json", want{t5Lin, t5Norm, 32128 * 512, 0, 0, t5Lin + t5Norm + 32128*512, 6, 6, true, MLPClassic}},
		{"mt5.json", want{mt5Lin, mt5Norm, 250112 * 512, 0, 250112 * 512, mt5Lin + mt5Norm + 2*250112*512, 8, 8, false, MLPGated}},
		{"bart.json", want{bartLin, bartNorm, 51201 * 768, 2 * 1026 * 768, 0, bartLin + bartNorm + 51201*768 + 2*1026*768, 6, 6, true, MLPClassic}},
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
			got := want{m.LinearParams(), m.NormParams(), m.EmbeddingParams, m.PositionParams, m.LMHeadParams, m.Params(),
				m.Seq2Seq.EncoderLayers, m.Seq2Seq.DecoderLayers, m.TiedEmbeddings, m.MLP}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestSeq2SeqTargets: PEFT matches a target by its last name, so "q"
// adapts the self-attention and the cross-attention of a decoder block.
func TestSeq2SeqTargets(t *testing.T) {
	b, err := os.ReadFile("testdata/t5.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	lins, err := m.Targets([]string{"q", "v"})
	if err != nil {
		t.Fatal(err)
	}
	// 6 encoder blocks × 2 + 6 decoder blocks × 4.
	if len(lins) != 36 {
		t.Errorf("q,v select %d modules, want 36", len(lins))
	}
	if _, err := m.Targets([]string{"q_proj"}); err == nil || !strings.Contains(err.Error(), "q, k, v, o") {
		t.Errorf("q_proj on T5: %v, want an error listing T5's module names", err)
	}
}

// TestSeq2SeqRefusals: a missing field is named; a vocabulary can be given;
// encoder-decoder types without a builder are refused by name.
func TestSeq2SeqRefusals(t *testing.T) {
	_, err := Parse([]byte(`{"model_type":"t5","d_model":64,"d_kv":16,"num_layers":2,"num_heads":4,"vocab_size":100}`))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "d_ff") {
		t.Errorf("t5 without d_ff: %v", err)
	}
	noVocab := []byte(`{"model_type":"bart","d_model":64,"encoder_layers":2,"decoder_layers":1,"encoder_attention_heads":4,"decoder_attention_heads":4,"encoder_ffn_dim":128,"decoder_ffn_dim":128}`)
	if _, err := Parse(noVocab); !errors.Is(err, ErrNoVocab) {
		t.Errorf("bart without vocab_size: %v, want ErrNoVocab", err)
	}
	m, err := ParseWith(noVocab, ParseOptions{Vocab: 1000})
	if err != nil || m.Vocab != 1000 {
		t.Fatalf("bart with a vocabulary override: %v", err)
	}
	_, err = Parse([]byte(`{"model_type":"pegasus","is_encoder_decoder":true,"d_model":64}`))
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("pegasus: %v, want ErrUnsupported", err)
	}
	_, err = Parse([]byte(`{"model_type":"my_seq2seq","is_encoder_decoder":true,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100}`))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "bart, mt5, t5") {
		t.Errorf("unknown encoder-decoder: %v, want ErrUnsupported listing bart, mt5, t5", err)
	}
}
