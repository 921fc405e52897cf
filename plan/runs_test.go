package plan

import (
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// TestSearchPlansRunAsEngines: the search estimates each plan as its engine
// runs it. Under ZeRO a bf16-true request trains bf16-mixed (DeepSpeed's
// fp32 master weights), no plan offloads the step of an optimizer with no
// CPU version, and a QLoRA base that FSDP or ZeRO-3 shards stores its packed
// weights in bf16.
func TestSearchPlansRunAsEngines(t *testing.T) {
	o := searchOptions(t, "meta-llama/Llama-3.1-70B", 80, 8, 1, 16)
	o.Request.Method = estimate.Full
	res, err := Search(o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Base.Precision != estimate.BF16True {
		t.Fatalf("base precision %s: the test wants the bf16-true default", res.Base.Precision)
	}
	var zero, fsdp, shardedQLoRA int
	for _, p := range res.Plans {
		q := p.Request
		family := q.Sharding.Strategy.Spec().Family
		switch {
		case family == estimate.FamilyDeepSpeed:
			zero++
			if q.Precision != estimate.BF16Mixed {
				t.Errorf("%s plan in %s: DeepSpeed runs bf16 as bf16-mixed", q.Sharding.Strategy, q.Precision)
			}
		case q.Precision != estimate.BF16True:
			t.Errorf("%s plan in %s: only DeepSpeed changes the precision", q.Sharding.Strategy, q.Precision)
		default:
			fsdp++
		}
		if q.Sharding.CPUOffload.Spec().Optimizer && !OffloadRuns(q.Optimizer) {
			t.Errorf("%s with %s offload and %s: no CPU step for that optimizer", q.Sharding.Strategy, q.Sharding.CPUOffload, q.Optimizer)
		}
		if q.Method == estimate.QLoRA && q.Sharding.Strategy.Spec().Shards == estimate.ShardParameters {
			shardedQLoRA++
			if q.QuantStorage != estimate.DtypeBF16 {
				t.Errorf("qlora under %s stores 4-bit weights as %s, want bf16", q.Sharding.Strategy, q.QuantStorage)
			}
		}
	}
	if zero == 0 || fsdp == 0 || shardedQLoRA == 0 {
		t.Fatalf("%d ZeRO, %d other, %d sharded QLoRA plans: the test needs each", zero, fsdp, shardedQLoRA)
	}
}

// TestSearchRanksRefusedLast: a plan Refuse names ranks after every plan it
// does not, keeps the reason, and the reason is among its trades.
func TestSearchRanksRefusedLast(t *testing.T) {
	o := searchOptions(t, "Qwen/Qwen2.5-7B", 24, 1, 1, 16)
	o.Refuse = func(p Plan) string {
		if p.Request.Optimizer == estimate.PagedAdamW8bit {
			return "optimizer paged_adamw_8bit"
		}
		return ""
	}
	res, err := Search(o)
	if err != nil {
		t.Fatal(err)
	}
	seenRefused, refused := false, 0
	for i, p := range res.Plans {
		if (p.Refused != "") != (p.Request.Optimizer == estimate.PagedAdamW8bit) {
			t.Fatalf("plan %d: optimizer %s, refused %q", i+1, p.Request.Optimizer, p.Refused)
		}
		if p.Refused == "" && seenRefused {
			t.Fatalf("plan %d runs but ranks after a refused plan", i+1)
		}
		if p.Refused != "" {
			seenRefused = true
			refused++
			tr := res.Trades(p)
			if got := tr[len(tr)-1]; got != "no supported stack runs it as estimated: optimizer paged_adamw_8bit" {
				t.Errorf("plan %d's last trade %q", i+1, got)
			}
		}
	}
	if refused == 0 || refused == len(res.Plans) {
		t.Fatalf("%d of %d plans refused: the test needs both kinds", refused, len(res.Plans))
	}
}

// TestSearchTorchtitanRuns: on the torchtitan stack the search keeps what
// torchtitan runs: full training, torch's optimizers, no DeepSpeed, no
// Liger loss, FSDP2's CPU offload of parameters and optimizer or none.
func TestSearchTorchtitanRuns(t *testing.T) {
	o := searchOptions(t, "meta-llama/Llama-3.1-8B", 80, 8, 1, 16)
	o.Request.Method, o.Request.SeqLen = estimate.Full, 8192
	estimate.StackTorchtitan.Spec().Apply(&o.Request)
	res, err := Search(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plans) == 0 {
		t.Fatal("no plan")
	}
	ops := map[estimate.Checkpointing]bool{}
	for _, p := range res.Plans {
		q := p.Request
		ops[q.GradCkpt] = true
		switch {
		case q.Method != estimate.Full:
			t.Errorf("plan with method %s on torchtitan", q.Method)
		case !torchOptimizer(q.Optimizer):
			t.Errorf("plan with optimizer %s on torchtitan", q.Optimizer)
		case q.Sharding.Strategy.Spec().Family == estimate.FamilyDeepSpeed:
			t.Errorf("plan with %s on torchtitan", q.Sharding.Strategy)
		case q.FusedCE != estimate.LossChunked && q.FusedCE != estimate.LossNone:
			t.Errorf("plan with loss %s on torchtitan", q.FusedCE)
		case q.Sharding.CPUOffload != estimate.OffloadNone && q.Sharding.CPUOffload != estimate.OffloadParamsOptimizer:
			t.Errorf("plan with offload %s on torchtitan", q.Sharding.CPUOffload)
		}
	}
	if !ops[estimate.CkptSelectiveOp] {
		t.Error("no plan keeps the stack's per-op checkpointing")
	}
}

// The per-op policy recomputes fewer FLOPs than full checkpointing: for
// Llama 3.1 8B the matmuls it runs again (wk, wo, w3) are 19456/53248 of
// the block's weights, and attention is not recomputed.
func TestOpPolicyRecomputeFLOPs(t *testing.T) {
	o := searchOptions(t, "meta-llama/Llama-3.1-8B", 80, 8, 1, 16)
	r := o.Request
	r.Method, r.SeqLen = estimate.Full, 8192
	if got, want := estimate.OpPolicyRecomputedShare(r.Model), 19456.0/53248; got != want {
		t.Errorf("recomputed share %v, want %v", got, want)
	}
	s := ShapeOf(r.Model)
	r.GradCkpt = estimate.CkptSelectiveOp
	op := TokenFLOPs(s, r, 4096)
	r.GradCkpt = estimate.CkptFull
	full := TokenFLOPs(s, r, 4096)
	if !(op.Recompute > 0 && op.Recompute < full.Recompute) {
		t.Errorf("recompute per token: op %v, full %v", op.Recompute, full.Recompute)
	}
}
