package estimate

import (
	"errors"
	"slices"
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
	mm := opPolicyMatmuls(m)
	want := []opPolicyMatmul{{4096, 4096}, {4096, 1024}, {4096, 1024}, {4096, 4096}, {4096, 14336}, {4096, 14336}, {14336, 4096}}
	if !slices.Equal(mm[:], want) {
		t.Fatalf("matmuls %v, want %v", mm, want)
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
// tokens (T = 65 536, L = T · 128 256 = 8 405 385 216 logits, hidden 4096,
// TD = T · 4096, VD = 128 256 · 4096), FSDP2 (16-bit hidden states):
//
//	chunked, compiled: 4·TD + 4L/8 + 6·VD = 8 428 453 888 (> 6·TD after the loop)
//	chunked, eager:    4·TD + 14L/8 + 6·VD = 18 935 185 408
//	whole, compiled:   4L = 33 621 540 864
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
		{"chunked compiled", LossChunked, true, false, 8428453888, true},
		{"chunked eager", LossChunked, false, false, 18935185408, true},
		{"chunked, eager loss", LossChunked, true, true, 18935185408, true},
		{"whole compiled", LossNone, true, false, 33621540864, true},
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

// Off its domain the per-op policy and the torchtitan stack are refused
// by the field to change, the stack's domain first.
func TestTorchtitanRefusals(t *testing.T) {
	base := func() Request { return torchtitanFull(t, "") }
	for _, tc := range []struct {
		name  string
		edit  func(*Request)
		field string
	}{
		{"moe model on the stack: the model first", func(q *Request) { q.Model = catalogModel(t, "Qwen/Qwen3-30B-A3B") }, "model"},
		{"deepspeed", func(q *Request) { q.Sharding = Sharding{Strategy: "zero3", GPUs: 8} }, "strategy"},
		{"liger loss", func(q *Request) { q.FusedCE = LossLiger }, "fused_ce"},
		{"kernels", func(q *Request) { q.Kernels = []Kernel{KernelLigerRMSNorm} }, "kernels"},
		{"unsloth checkpointing", func(q *Request) { q.GradCkpt = CkptUnsloth }, "grad_ckpt"},
		{"8-bit optimizer", func(q *Request) { q.Optimizer = PagedAdamW8bit }, "optimizer"},
	} {
		q := base()
		tc.edit(&q)
		_, err := q.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err %v, want a %s field error", tc.name, err, tc.field)
		}
	}
	// Without the stack, the policy alone: adapters and other blocks.
	for _, tc := range []struct {
		name string
		r    Request
	}{
		{"lora", Request{Model: catalogModel(t, "meta-llama/Llama-3.1-8B"), Method: LoRA, LoRARank: 16, SeqLen: 512, Batch: 1, GradCkpt: CkptSelectiveOp}},
		{"mistral", Request{Model: catalogModel(t, "mistralai/Mistral-7B-v0.1"), Method: Full, SeqLen: 512, Batch: 1, GradCkpt: CkptSelectiveOp}},
	} {
		_, err := tc.r.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "grad_ckpt" {
			t.Errorf("%s: err %v, want a grad_ckpt field error", tc.name, err)
		}
	}
}

// Against full checkpointing the per-op policy adds exactly its outputs
// over every block: one block's share is positive and below one block's
// recomputation, and (the loss chain, larger here than either
// recomputation, setting the transient in both) the allocated peaks differ
// by the policy's outputs alone.
func TestOpPolicyAddsItsOutputs(t *testing.T) {
	r, err := torchtitanFull(t, CkptSelectiveOp).Normalize()
	if err != nil {
		t.Fatal(err)
	}
	c := PhasePeak{Coef: DefaultCoefficients}
	tt := c.normalizedTerms(r)
	actCoef, _ := c.scales(r, tt.Loss)
	full := actCoef * tt.LayerUnit
	perBlock := tt.OpSaved / float64(r.Model.NumLayers)
	if perBlock <= 0 || perBlock >= full {
		t.Fatalf("policy per block %v against one block's recomputation %v: want 0 < policy < full", perBlock, full)
	}
	eOp, err := c.Estimate(torchtitanFull(t, CkptSelectiveOp))
	if err != nil {
		t.Fatal(err)
	}
	eFull, err := c.Estimate(torchtitanFull(t, CkptFull))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := float64(eOp.Levels.Allocated-eFull.Levels.Allocated), tt.OpSaved; got < want*0.99 || got > want*1.01 {
		t.Errorf("allocated op − full = %v, want the policy's outputs %v", got, want)
	}
}

// --eager-loss is read on the torchtitan stack with --compile; elsewhere
// a warning says it is not.
func TestEagerLossWarning(t *testing.T) {
	r := Request{Model: catalogModel(t, "meta-llama/Llama-3.1-8B"), Method: Full, SeqLen: 512, Batch: 1, EagerLoss: true}
	n, err := r.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range n.warnings() {
		found = found || strings.Contains(w, "--eager-loss is read on the torchtitan stack")
	}
	if !found {
		t.Errorf("no --eager-loss warning off the torchtitan stack: %v", n.warnings())
	}
}

// Where one recomputed block, not the loss chain, sets the transient (a
// fused loss that never materialises the logits), the per-op policy's
// recomputation regenerates only what it did not keep: against full
// checkpointing the allocated peak grows by its outputs over every block
// less one block's share, not by all of them. Plain SGD keeps the
// optimizer step below the forward phase in both; a stack off the
// transformers path (here torchtune's) keeps both on the fitted shape.
func TestOpPolicyRecomputesTheRest(t *testing.T) {
	c := PhasePeak{Coef: DefaultCoefficients}
	req := func(ck Checkpointing) Request {
		return Request{Model: catalogModel(t, "meta-llama/Llama-3.1-8B"), Method: Full, SeqLen: 8192, Batch: 8, GradAccum: 1,
			FusedCE: LossLiger, GradCkpt: ck, Optimizer: SGD, Stack: StackTorchtune}
	}
	op, err := c.Estimate(req(CkptSelectiveOp))
	if err != nil {
		t.Fatal(err)
	}
	full, err := c.Estimate(req(CkptFull))
	if err != nil {
		t.Fatal(err)
	}
	if !op.Phases.ForwardPeak || !full.Phases.ForwardPeak {
		t.Fatalf("forward peak: op %v, full %v; the test wants the forward phase to set both", op.Phases.ForwardPeak, full.Phases.ForwardPeak)
	}
	r, _ := req(CkptSelectiveOp).Normalize()
	tt := c.normalizedTerms(r)
	L := float64(r.Model.NumLayers)
	got, want := float64(op.Levels.Allocated-full.Levels.Allocated), tt.OpSaved*(1-1/L)
	if got < want*0.999 || got > want*1.001 {
		t.Errorf("allocated op − full = %.0f, want the policy's outputs less one block's share %.0f (all of them: %.0f)", got, want, tt.OpSaved)
	}
}
