package estimate

import (
	"errors"
	"strings"
	"testing"
)

// torchtitan's per-op policy over Llama 3.1 8B's block (selectiveac.go), by
// hand: the matmuls wq 4096, wk 1024, wv 1024, wo 4096, w1 14336, w3 14336,
// w2 4096 wide; the 1st, 3rd, 5th and 7th kept (4096 + 1024 + 14336 + 4096),
// the attention output (4096) in bf16 and its fp32 logsumexp for 32 heads:
// 2 · 27648 + 4 · 32 = 55 424 B per token and block.
func TestOpPolicySavedByHand(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-3.1-8B")
	got := opPolicyMatmuls(m)
	want := []int64{4096, 1024, 1024, 4096, 14336, 14336, 4096}
	if len(got) != len(want) {
		t.Fatalf("matmuls %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("matmuls %v, want %v", got, want)
		}
	}
	if s := opPolicySaved(m, 2); s != 55424 {
		t.Errorf("saved per token and block = %v B, want 55424", s)
	}
}

// torchtitanFull is the December 2024 benchmark's configuration: Llama 3.1
// 8B trained in full on 2 × 8192 packed tokens per GPU, FSDP2 over 8 GPUs.
func torchtitanFull(t *testing.T, ck Checkpointing) Request {
	t.Helper()
	r := Request{Model: catalogModel(t, "meta-llama/Llama-3.1-8B"), Method: Full, SeqLen: 8192, Batch: 2, GradAccum: 1,
		GradCkpt: ck, Sharding: Sharding{Strategy: FSDPFullShard, GPUs: 8}}
	StackTorchtitan.Spec().Apply(&r)
	return r
}

// The policy keeps more than full checkpointing and less than no
// checkpointing: its activations are the block inputs of full
// checkpointing plus exactly the policy's outputs over every block.
func TestOpPolicyBetweenFullAndNone(t *testing.T) {
	est := func(ck Checkpointing) *Estimate {
		e, err := PhasePeak{Coef: DefaultCoefficients}.Estimate(torchtitanFull(t, ck))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	none, op, full := est(CkptNone), est(CkptSelectiveOp), est(CkptFull)
	if !(full.Levels.Allocated < op.Levels.Allocated && op.Levels.Allocated < none.Levels.Allocated) {
		t.Fatalf("allocated full %d, op %d, none %d: want full < op < none", full.Levels.Allocated, op.Levels.Allocated, none.Levels.Allocated)
	}
	r, _ := torchtitanFull(t, CkptSelectiveOp).Normalize()
	tt := PhasePeak{Coef: DefaultCoefficients}.normalizedTerms(r)
	if want := 32 * 8192 * 2 * 55424.0; tt.OpSaved != want {
		t.Errorf("OpSaved = %v, want %v (32 blocks × 16384 tokens × 55424 B)", tt.OpSaved, want)
	}
}

// The stack's defaults are torchtitan's, and what it does not run is
// refused by name.
func TestTorchtitanStack(t *testing.T) {
	r, err := torchtitanFull(t, "").Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if r.GradCkpt != CkptSelectiveOp || r.Precision != BF16Mixed || r.Optimizer != AdamWTorchFused || r.FusedCE != LossChunked {
		t.Errorf("defaults: ckpt %s, precision %s, optimizer %s, loss %s", r.GradCkpt, r.Precision, r.Optimizer, r.FusedCE)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Request)
		field string
	}{
		{"lora", func(q *Request) { q.Method, q.LoRARank = LoRA, 16 }, "method"},
		{"qlora", func(q *Request) { q.Method, q.LoRARank = QLoRA, 16 }, "method"},
		{"not its model", func(q *Request) { q.Model = catalogModel(t, "mistralai/Mistral-7B-v0.1") }, "model"},
	} {
		q := torchtitanFull(t, "")
		tc.edit(&q)
		_, err := q.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err %v, want a %s field error", tc.name, err, tc.field)
		}
	}
}

// The per-op policy is read over a dense decoder's block: a mixture of
// experts and an encoder are refused, naming the mode.
func TestOpPolicyRefused(t *testing.T) {
	for _, id := range []string{"Qwen/Qwen3-30B-A3B", "google-bert/bert-large-uncased"} {
		r := Request{Model: catalogModel(t, id), Method: Full, SeqLen: 512, Batch: 1, GradCkpt: CkptSelectiveOp}
		_, err := r.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "grad_ckpt" || !strings.Contains(err.Error(), "selective-op") {
			t.Errorf("%s: err %v, want a grad_ckpt field error naming selective-op", id, err)
		}
	}
}

// torchtitan's loss (torchtitan.go) by hand for Llama 3.1 8B at 32 × 2048
// tokens (T = 65 536, L = T · 128 256 = 8 405 385 216 logits, hidden 4096):
//
//	chunked, compiled: 2L/8 + T·4096·(2+4) + 128256·4096·4 = 5 813 305 344
//	chunked, eager:    14L/8 + T·4096·6 + 128256·4096·4   = 18 421 383 168
//	whole, compiled:   2L = 16 810 770 432
//	whole, eager:      the stock chain (not torchtitan's own)
func TestTorchtitanLossByHand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ce      LossKernel
		compile bool
		eager   bool
		want    float64
		ok      bool
	}{
		{"chunked compiled", LossChunked, true, false, 5813305344, true},
		{"chunked eager", LossChunked, false, false, 18421383168, true},
		{"chunked, eager loss", LossChunked, true, true, 18421383168, true},
		{"whole compiled", LossNone, true, false, 16810770432, true},
		{"whole eager", LossNone, false, false, 0, false},
		{"whole, eager loss", LossNone, true, true, 0, false},
	} {
		q := Request{Model: catalogModel(t, "meta-llama/Llama-3.1-8B"), Method: Full, SeqLen: 2048, Batch: 32,
			FusedCE: tc.ce, Compile: tc.compile, EagerLoss: tc.eager, Sharding: Sharding{Strategy: FSDPFullShard, GPUs: 4}}
		StackTorchtitan.Spec().Apply(&q)
		r, err := q.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := torchtitanLossBytes(r, float64(r.SeqLen*r.Batch*r.Model.Vocab))
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
