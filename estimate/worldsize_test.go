package estimate

import (
	"errors"
	"strings"
	"testing"
)

// TestShardingNeedsWorldSize: ZeRO and FSDP divide state by the world size,
// so a request that names one without a GPU count is refused by the field's
// name instead of estimated as one GPU; a replica strategy needs none.
func TestShardingNeedsWorldSize(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	for _, st := range []Strategy{ZeRO1, ZeRO2, ZeRO3, FSDPFullShard, FSDPShardGradOp} {
		_, err := Request{Model: m, Method: Full, SeqLen: 512, Batch: 1, Sharding: Sharding{Strategy: st}}.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "num_gpus" || !strings.Contains(err.Error(), "world size") {
			t.Errorf("%q without GPUs: %v, want a FieldError on num_gpus naming the world size", st, err)
		}
	}
	for _, st := range []Strategy{NoSharding, "ddp"} {
		r, err := Request{Model: m, Method: Full, SeqLen: 512, Batch: 1, Sharding: Sharding{Strategy: st}}.Normalize()
		if err != nil || r.Sharding.GPUs != 1 {
			t.Errorf("%s without GPUs: %v, %d GPUs; want one replica", st, err, r.Sharding.GPUs)
		}
	}
}

// TestPreparedRefusesLikeEstimate: a search's fast path gives the refusal
// Normalize gives for an encoder-decoder model's loss kernel, not an
// estimate.
func TestPreparedRefusesLikeEstimate(t *testing.T) {
	m := catalogModel(t, "google-t5/t5-small")
	p, err := Prepare(PhasePeak{Coef: DefaultCoefficients}, Request{Model: m, Method: LoRA, SeqLen: 512, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	v := Variant{Method: LoRA, Precision: BF16True, QuantStorage: DtypeUint8, SeqLen: 512, Batch: 1, FusedCE: LossLiger, GradCkpt: CkptNone, Optimizer: AdamWTorch,
		Sharding: Sharding{Strategy: NoSharding, GPUs: 1, CPUOffload: OffloadNone}}
	var e Estimate
	err = p.NewEvaluator().Estimate(v, &e)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "fused_ce" {
		t.Errorf("liger loss on T5: %v, want a FieldError on fused_ce", err)
	}
}
