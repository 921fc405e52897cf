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
	if op != om || em.Total != ep.Total {
		t.Errorf("bf16-true under DeepSpeed: states %d B, total %d; want bf16-mixed's %d, %d (the ZeRO optimizer clones an fp32 partition whatever the module's dtype)", op, ep.Total, om, em.Total)
	}
	x, err := est.Explain(mixed, em)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(x.Assumptions, "\n"), "not autocast") || !strings.Contains(x.Sources[CWeights], "DeepSpeed casts the module to bf16") {
		t.Errorf("the explanation does not say how DeepSpeed trains: %q / %q", x.Assumptions, x.Sources[CWeights])
	}
	if !strings.HasPrefix(x.Assumptions[0], "full, bf16-mixed,") {
		t.Errorf("the first assumption %q should name the precision asked for", x.Assumptions[0])
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

// TestDeepSpeedAdapters: under DeepSpeed a LoRA run's adapters are 16-bit
// like the rest of the module, and so is what they save for the backward:
// the run is the bf16-true run of the same stack (where the stack keeps
// 16-bit adapters), plus the optimizer's fp32 partitions. QLoRA's norms are
// 16-bit, whatever prepare_model_for_kbit_training did, and the explanation
// says why.
func TestDeepSpeedAdapters(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	est := defaultEstimator(t)
	for _, method := range []Method{LoRA, QLoRA} {
		r := Request{Model: m, Method: method, LoRATargets: []string{"all-linear"}, Precision: BF16Mixed, SeqLen: 2048, Batch: 1,
			Sharding: Sharding{Strategy: ZeRO2, GPUs: 8}}
		ds, err := est.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		// The same module without DeepSpeed: bf16-true with PEFT's fp32
		// adapters (no --stack), whose inputs are cast to fp32 for them.
		pure := r
		pure.Precision, pure.Sharding = BF16True, Sharding{}
		pure.UpcastFrozen = ptrBool(false)
		ref, err := est.Estimate(pure)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := ds.Component(CActivations)
		b, _ := ref.Component(CActivations)
		if a >= b {
			t.Errorf("%s: activations %d B under DeepSpeed, not below the fp32-adapter run's %d: fp32 adapter copies counted?", method, a, b)
		}
		ad, _ := ds.Component(CAdapters)
		if want := 2 * ds.TrainableParams; ad != want {
			t.Errorf("%s: adapters %d B, want 16-bit, replicated under zero2: %d", method, ad, want)
		}
		if method == QLoRA {
			x, err := est.Explain(r, ds)
			if err != nil {
				t.Fatal(err)
			}
			if all := strings.Join(x.Assumptions, "\n"); !strings.Contains(all, "undoes prepare_model_for_kbit_training") || strings.Contains(all, "( does not") {
				t.Errorf("QLoRA under DeepSpeed: assumptions %q", x.Assumptions)
			}
		}
	}
}

// TestDeepSpeedStepSchedules: ZeRO-1 frees all but its partition of the
// reduced 16-bit gradients before the step builds the fp32 one, and
// accumulates the whole 16-bit gradients between updates; ZeRO-3 steps one
// sub-group of 1e9 elements at a time.
func TestDeepSpeedStepSchedules(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	P := m.Params()
	est := defaultEstimator(t)
	r := Request{Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 128, Batch: 1, Optimizer: AdamWTorch, GradCkpt: CkptFull,
		Sharding: Sharding{Strategy: ZeRO1, GPUs: 8}}
	e, err := est.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	// max(whole 16-bit gradients 2P, partition 2P/8 + fp32 4P/8 + foreach 4P/8) = 2P.
	if g, _ := e.Component(CGradients); e.Phases.ForwardPeak || g != 2*P {
		t.Errorf("zero1 step gradients %d B (forward peak %v), want the backward end's whole 16-bit gradients %d", g, e.Phases.ForwardPeak, 2*P)
	}
	r.GradAccum, r.SeqLen, r.Batch = 4, 4096, 4
	e, err = est.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := e.Component(CGradients); e.Phases.ForwardPeak && g != 2*P {
		t.Errorf("zero1 accumulating: gradients %d B in the forward, want the whole 16-bit gradients %d", g, 2*P)
	} else if !e.Phases.ForwardPeak {
		t.Errorf("zero1 accumulating at 4 × 4096 tokens: the step is the peak; the test wants the forward's")
	}

	big := catalogModel(t, "meta-llama/Llama-3.1-70B")
	r3 := Request{Model: big, Method: Full, Precision: BF16Mixed, SeqLen: 128, Batch: 1, Optimizer: AdamWTorch, GradCkpt: CkptFull,
		Sharding: Sharding{Strategy: ZeRO3, GPUs: 8}}
	e, err = est.Estimate(r3)
	if err != nil {
		t.Fatal(err)
	}
	bp := big.Params()
	// 16-bit gradient partition + one sub-group's fp32 gradient and foreach buffer.
	want := (2*bp+7)/8 + (4+4)*dsSubGroupElems
	if g, _ := e.Component(CGradients); e.Phases.ForwardPeak || g != want {
		t.Errorf("zero3 step gradients %d B, want the 16-bit partition + one sub-group's fp32 temporaries %d", g, want)
	}
}

func TestDeepSpeedRefusesOptimizerInBackward(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	r := Request{Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 128, Batch: 1, OptimizerInBackward: true, Sharding: Sharding{Strategy: ZeRO2, GPUs: 2}}
	if _, err := defaultEstimator(t).Estimate(r); err == nil || !strings.Contains(err.Error(), "optimizer_in_backward") {
		t.Errorf("optimizer-in-backward under zero2: %v, want a refusal naming the field", err)
	}
}

func ptrBool(b bool) *bool { return &b }

// TestDeepSpeedStageZero: DeepSpeed without partitioning keeps a full
// replica like DDP, all-reduces through transient buckets, not DDP's
// persistent copy of the gradients, and has no CPU offload; its optimizer
// follows the precision (engine.py _do_optimizer_sanity_check):
// FP16_Optimizer keeps the whole fp32 master copy and states and builds an
// fp32 gradient copy for the step; BF16_Optimizer divides master weights
// and states over the ranks and keeps a whole fp32 gradient buffer,
// resident in the forward too; fp32 runs the plain optimizer.
func TestDeepSpeedStageZero(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	P := m.Params()
	est := defaultEstimator(t)
	for _, tt := range []struct {
		prec         Precision
		weights, opt int64
		step         int64 // gradients in the step phase (0: not checked)
		fwdGrads     int64 // gradients resident in the forward
	}{
		{FP16Mixed, 2 * P, 12 * P, 6 * P, 0},
		{BF16Mixed, 2 * P, (12*P + 7) / 8, 0, 4 * P},
		{FP32, 4 * P, 8 * P, 0, 0},
	} {
		r := Request{Model: m, Method: Full, Precision: tt.prec, SeqLen: 128, Batch: 1, Optimizer: AdamWTorchFused, Sharding: Sharding{Strategy: ZeRO0, GPUs: 8}}
		e, err := est.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := e.Component(CWeights)
		o, _ := e.Component(COptimizer)
		if w != tt.weights || o != tt.opt {
			t.Errorf("%s: weights %d B, optimizer states %d B; want %d, %d", tt.prec, w, o, tt.weights, tt.opt)
		}
		x, err := est.Explain(r, e)
		if err != nil {
			t.Fatal(err)
		}
		if says := strings.Contains(x.Sources[COptimizer], "master weights"); says != (tt.prec != FP32) {
			t.Errorf("%s: optimizer_states source %q: master weights said %v, want %v", tt.prec, x.Sources[COptimizer], says, tt.prec != FP32)
		}
		g, _ := e.Component(CGradients)
		switch {
		case tt.step > 0 && (e.Phases.ForwardPeak || g != tt.step):
			t.Errorf("%s: step gradients %d B (forward peak %v), want %d with no DDP bucket copy", tt.prec, g, e.Phases.ForwardPeak, tt.step)
		case tt.fwdGrads > 0 && e.Phases.ForwardPeak && g != tt.fwdGrads:
			t.Errorf("%s: forward gradients %d B, want the resident fp32 buffer %d", tt.prec, g, tt.fwdGrads)
		case tt.fwdGrads > 0 && !e.Phases.ForwardPeak && g < tt.fwdGrads:
			t.Errorf("%s: step gradients %d B, want at least the fp32 buffer %d", tt.prec, g, tt.fwdGrads)
		}
	}
	r := Request{Model: m, Method: Full, Precision: FP16Mixed, SeqLen: 128, Batch: 1, Sharding: Sharding{Strategy: ZeRO0, GPUs: 4, CPUOffload: OffloadOptimizer}}
	if _, err := est.Estimate(r); err == nil || !strings.Contains(err.Error(), "ZeRO stage 1 or more") {
		t.Errorf("zero0 with optimizer offload: error %v, want a refusal naming the stages that offload", err)
	}
	if st, err := ParseStrategy("zero-0"); err != nil || st != ZeRO0 {
		t.Errorf("ParseStrategy(zero-0) = %q, %v", st, err)
	}
}
