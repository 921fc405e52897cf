package estimate

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/hfconfig"
)

func testdataModel(t *testing.T, file string) *hfconfig.Model {
	t.Helper()
	b, err := os.ReadFile("../hfconfig/testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := hfconfig.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSeq2SeqTerms checks the length-dependent terms of a t5-small LoRA run
// against the formulas of docs/memory-model.md written out with t5-small's
// numbers: d_model 512, inner 8 × 64 = 512, d_ff 2048 (relu, classic MLP
// 2.8), 6 + 6 blocks, vocab 32128; bf16 (2-byte activations), source 512,
// target 128, batch 2.
func TestSeq2SeqTerms(t *testing.T) {
	m := testdataModel(t, "t5.json")
	req := Request{Model: m, Method: LoRA, SeqLen: 512, TargetLen: 128, Batch: 2}
	tm, r, err := PhasePeak{Coef: DefaultCoefficients}.terms(req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Task != TaskSeq2SeqLM {
		t.Errorf("default task %s, want %s", r.Task, TaskSeq2SeqLM)
	}
	const (
		S, T, b, h, ffn, inner = 512.0, 128.0, 2.0, 512.0, 2048.0, 512.0
		act, heads, vocab      = 2.0, 8.0, 32128.0
	)
	enc := S * b * (9*h*act + 2.8*ffn*act)
	cross := b * act * (9*T*h + 2*(S-T)*inner)
	dec := T*b*(9*h*act+2.8*ffn*act) + cross
	if want := 6*enc + 6*dec + S*b*h*act; tm.ActUnit != want {
		t.Errorf("ActUnit %.0f, want %.0f", tm.ActUnit, want)
	}
	if want := max(enc, dec); tm.LayerUnit != want {
		t.Errorf("LayerUnit %.0f, want %.0f", tm.LayerUnit, want)
	}
	if want := T * b * vocab; tm.LogitUnit != want {
		t.Errorf("LogitUnit %.0f, want %.0f (target × batch × vocab)", tm.LogitUnit, want)
	}
	// The largest transient: the 16-bit logits (T5's loss does not upcast).
	if want := act * T * b * vocab; tm.Largest != want {
		t.Errorf("Largest %.0f, want %.0f", tm.Largest, want)
	}
	// Under SDPA no scores are kept; each block keeps its float bias mask
	// (padded batch: b·heads·S² per encoder block, heads·T² + b·heads·T·S
	// per decoder block), and T5's dropout 0.1 keeps one-byte masks of
	// the residual dropouts (2 per encoder block, 3 per decoder block, one
	// per stack's embeddings) and the feed-forward's inner mask and output.
	if tm.Eager != 0 {
		t.Errorf("Eager %.0f under sdpa, want 0", tm.Eager)
	}
	bias := act * (6*b*heads*S*S + 6*(heads*T*T+b*heads*T*S))
	drop := b * h * (2*6*S + 3*6*T + S + T)
	ffnDrop := b * (act + 1) * (6*S*ffn + 6*T*ffn)
	if want := bias + drop + ffnDrop; tm.BlockExtra != want {
		t.Errorf("BlockExtra %.0f, want %.0f", tm.BlockExtra, want)
	}
	// Eager attention keeps Korthikanti's 5·heads·q·k per block instead
	// of the bias masks.
	req.Attn = Eager
	tm, _, err = PhasePeak{Coef: DefaultCoefficients}.terms(req)
	if err != nil {
		t.Fatal(err)
	}
	scores := 5 * heads * (6*S*S + 6*(T*T+T*S)) * b * act / 2
	if want := scores / 12; tm.Eager != want {
		t.Errorf("eager: Eager %.0f per block, want %.0f", tm.Eager, want)
	}
	if want := drop + ffnDrop; tm.BlockExtra != want {
		t.Errorf("eager: BlockExtra %.0f, want %.0f (no bias masks)", tm.BlockExtra, want)
	}
	req.Attn = ""

	// Checkpointing keeps each block's input at its stack's length and
	// the encoder output once.
	req.GradCkpt = CkptFull
	tm, _, err = PhasePeak{Coef: DefaultCoefficients}.terms(req)
	if err != nil {
		t.Fatal(err)
	}
	if want := (6*S + 6*T + S) * b * h * act / 2; tm.CkptUnit != want {
		t.Errorf("CkptUnit %.0f, want %.0f", tm.CkptUnit, want)
	}
}

// TestSeq2SeqLogitBytes: T5's loss is CrossEntropyLoss on 16-bit logits
// (no fp32 upcast): 3 × 2 bytes a logit in bf16; under autocast the fitted
// decoder chain applies.
func TestSeq2SeqLogitBytes(t *testing.T) {
	m := testdataModel(t, "t5.json")
	est := PhasePeak{Coef: DefaultCoefficients}
	for _, tc := range []struct {
		p    Precision
		want float64
	}{{BF16True, 6}, {BF16Mixed, DefaultCoefficients.Logits}, {FP32, DefaultCoefficients.Logits}} {
		r, err := Request{Model: m, Method: Full, Precision: tc.p, SeqLen: 512, Batch: 1}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if _, got := est.scales(r, "full"); got != tc.want {
			t.Errorf("%s: %v bytes a logit, want %v", tc.p, got, tc.want)
		}
	}
	// A decoder keeps the fitted chain in bf16.
	r, err := Request{Model: catalogModel(t, "Qwen/Qwen2.5-0.5B"), Method: Full, SeqLen: 512, Batch: 1}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if _, got := est.scales(r, "full"); got != DefaultCoefficients.Logits {
		t.Errorf("decoder: %v bytes a logit, want the fitted %v", got, DefaultCoefficients.Logits)
	}
}

// TestSeq2SeqTargetLength: a shorter target lowers the estimate; the
// default target is the source length, and the assumptions say so.
func TestSeq2SeqTargetLength(t *testing.T) {
	m := testdataModel(t, "mt5.json")
	est := PhasePeak{Coef: DefaultCoefficients}
	short, err := est.Estimate(Request{Model: m, Method: Full, SeqLen: 1024, TargetLen: 64, Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	dflt := Request{Model: m, Method: Full, SeqLen: 1024, Batch: 4}
	same, err := est.Estimate(dflt)
	if err != nil {
		t.Fatal(err)
	}
	explicit, err := est.Estimate(Request{Model: m, Method: Full, SeqLen: 1024, TargetLen: 1024, Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if short.Levels.Allocated >= same.Levels.Allocated {
		t.Errorf("target 64: allocated %d, not below target = source's %d", short.Levels.Allocated, same.Levels.Allocated)
	}
	if same.Levels != explicit.Levels {
		t.Errorf("no --target-len: %+v, want the same as target 1024: %+v", same.Levels, explicit.Levels)
	}
	x, err := est.Explain(dflt, same)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(x.Assumptions, "\n"), "target 1024 tokens × 8 decoder blocks (target length not given") {
		t.Errorf("assumptions do not say the target length was assumed:\n%s", strings.Join(x.Assumptions, "\n"))
	}
}

// TestSeq2SeqRefusals: settings without an encoder-decoder meaning are
// refused by field name.
func TestSeq2SeqRefusals(t *testing.T) {
	t5 := testdataModel(t, "t5.json")
	qwen := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	for _, tc := range []struct {
		name  string
		req   Request
		field string
	}{
		{"target_len on a decoder", Request{Model: qwen, SeqLen: 512, TargetLen: 128, Batch: 1}, "target_len"},
		{"flash attention on T5", Request{Model: t5, SeqLen: 512, Batch: 1, Attn: FlashAttention2}, "attn"},
		{"causal-lm on T5", Request{Model: t5, SeqLen: 512, Batch: 1, Task: TaskCausalLM}, "task"},
		{"seq2seq-lm on a decoder", Request{Model: qwen, SeqLen: 512, Batch: 1, Task: TaskSeq2SeqLM}, "task"},
		{"liger on T5", Request{Model: t5, SeqLen: 512, Batch: 1, Kernels: []Kernel{Kernels[0].Name}}, "kernels"},
		{"target_len out of range", Request{Model: t5, SeqLen: 512, TargetLen: -1, Batch: 1}, "target_len"},
	} {
		_, err := tc.req.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want a FieldError on %s", tc.name, err, tc.field)
		}
	}
	for _, name := range []string{"seed000", "unsloth"} {
		est, err := ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := est.Estimate(Request{Model: t5, SeqLen: 512, Batch: 1}); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "encoder-decoder") {
			t.Errorf("%s on T5: %v, want a refusal naming encoder-decoder", name, err)
		}
	}
}
