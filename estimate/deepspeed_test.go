package estimate

import (
	"strings"
	"testing"
)

// TestDeepSpeedModelStates holds the model states of a DeepSpeed ZeRO-2
// full fine-tune in bf16 to DeepSpeed's own accounting,
// estimate_zero2_model_states_mem_needs without offload (stage_1_and_2.py
// at 38327e07f6): 2 B per parameter of 16-bit weights on every GPU, and
// 18 B ÷ N of 16-bit and fp32 gradients, fp32 master weights and two fp32
// Adam states. The optimizer is fused (DeepSpeed's FusedAdam has no
// tensor-sized step buffer), and the sequence short, so that the step is
// the peak phase and its parts are the model states.
func TestDeepSpeedModelStates(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	P := m.Params()
	for _, n := range []int64{2, 8, 64} {
		r := Request{Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 128, Batch: 1,
			Optimizer: AdamWTorchFused, GradCkpt: CkptFull, Sharding: Sharding{Strategy: ZeRO2, GPUs: n}}
		e, err := defaultEstimator(t).Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		if e.Phases.ForwardPeak {
			t.Fatalf("N=%d: the forward phase is the peak; the test wants the step's", n)
		}
		var states int64
		for _, id := range []ComponentID{CWeights, COptimizer, CGradients} {
			b, _ := e.Component(id)
			states += b
		}
		want := 2*P + 18*P/n
		if d := states - want; d < -3*n || d > 3*n { // ceil divisions of three components
			t.Errorf("N=%d: model states %d B, DeepSpeed's estimate %d B (off by %d)", n, states, want, d)
		}
		w, _ := e.Component(CWeights)
		if w != 2*P {
			t.Errorf("N=%d: weights %d B, want the 16-bit module's %d", n, w, 2*P)
		}
	}
}

// TestDeepSpeedNoAutocast: DeepSpeed's -mixed precision trains the 16-bit
// module its engine casts, so activations and every other shape term are
// those of bf16-true; only the optimizer's fp32 partitions differ. FSDP and
// DDP keep autocast's reading of -mixed, and so do the reference
// estimators.
func TestDeepSpeedNoAutocast(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	base := Request{Model: m, Method: Full, SeqLen: 4096, Batch: 4, Optimizer: AdamWTorchFused, Sharding: Sharding{Strategy: ZeRO3, GPUs: 8}}
	mixed, pure := base, base
	mixed.Precision, pure.Precision = BF16Mixed, BF16True
	est := defaultEstimator(t)
	em, err := est.Estimate(mixed)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := est.Estimate(pure)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []ComponentID{CActivations, CLogits, CWeights} {
		a, _ := em.Component(id)
		b, _ := ep.Component(id)
		if a != b {
			t.Errorf("%s: %d B under DeepSpeed bf16-mixed, %d under bf16-true; the module is the same", id, a, b)
		}
	}
	om, _ := em.Component(COptimizer)
	op, _ := ep.Component(COptimizer)
	P := m.Params()
	if want := (12*P + 7) / 8; om != want {
		t.Errorf("optimizer_states %d B, want fp32 master + two fp32 states ÷ 8 = %d", om, want)
	}
	if op >= om {
		t.Errorf("bf16-true states %d B should be below the fp32 partitions %d", op, om)
	}
	x, err := est.Explain(mixed, em)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(x.Assumptions, "\n"), "not autocast") || !strings.Contains(x.Sources[CWeights], "DeepSpeed casts the module to bf16") {
		t.Errorf("the explanation does not say how DeepSpeed trains: %q / %q", x.Assumptions, x.Sources[CWeights])
	}
	// FSDP's mixed precision keeps fp32 sharded parameters.
	fsdp := mixed
	fsdp.Sharding.Strategy = FSDPFullShard
	ef, err := est.Estimate(fsdp)
	if err != nil {
		t.Fatal(err)
	}
	wf, _ := ef.Component(CWeights)
	wm, _ := em.Component(CWeights)
	if wf <= wm {
		t.Errorf("FSDP bf16-mixed weights %d B should hold the fp32 shards, above DeepSpeed's 16-bit %d", wf, wm)
	}
	// The frozen reference estimator reads -mixed as it always has.
	ref, err := ByName("seed000")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := ref.Estimate(mixed)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := ref.Estimate(pure)
	if err != nil {
		t.Fatal(err)
	}
	if rm.Total == rp.Total {
		t.Errorf("seed000 gives bf16-mixed and bf16-true the same total %d; its reading changed", rm.Total)
	}
}

func defaultEstimator(t *testing.T) Estimator {
	t.Helper()
	e, err := ByName(Default)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
