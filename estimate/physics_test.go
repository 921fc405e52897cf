package estimate

import (
	"math"
	"testing"
)

// Hand computations for the terms the default estimator adds beyond seed
// 000's components. Each test states the mechanism and checks the bytes.

func est(t *testing.T, r Request) *Estimate {
	t.Helper()
	e, err := PhasePeak{Coef: DefaultCoefficients}.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// explained is the default estimator's explanation of r's estimate.
func explained(t *testing.T, r Request) Explanation {
	t.Helper()
	x, err := PhasePeak{Coef: DefaultCoefficients}.Explain(r, est(t, r))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// termsOf is the default estimator's terms for r.
func termsOf(t *testing.T, r Request) terms {
	t.Helper()
	tt, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

func component(e *Estimate, name ComponentID) int64 {
	b, _ := e.Component(name)
	return b
}

func ptr[T any](v T) *T { return &v }

// FSDP with use_orig_params allocates gradients for a unit's whole flat
// parameter; litgpt wraps Blocks holding LoRA and frozen weights together.
// Without accumulation the reduce-scatter shards them; with no_sync they
// stay unsharded until the update.
func TestFSDPWholeUnitAndNoSyncGradients(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	blocks := m.LinearParams() + m.NormParams() - m.FinalNormParams
	base := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj"},
		SeqLen: 1024, Batch: 1, GradCkpt: "full", Stack: "litgpt",
		Sharding: Sharding{Strategy: "fsdp_full_shard", GPUs: 2}}
	tb, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(base)
	if err != nil {
		t.Fatal(err)
	}
	if want := blocks * 2; tb.Grads != want {
		t.Errorf("litgpt FSDP LoRA gradients %d, want every block parameter in bf16: %d", tb.Grads, want)
	}
	one := est(t, base)
	acc := base
	acc.GradAccum = 4
	four := est(t, acc)
	// GA 1: the step phase holds the sharded gradients; GA 4: the forward
	// phase holds the unsharded ones (plus the activations).
	if got, want := one.Phases.Step, (tb.Grads+tb.OptTransient+1)/2; math.Abs(float64(got-want)) > float64(want)/1000 {
		t.Errorf("GA 1: step phase %d, want the gradients halved over 2 GPUs ≈ %d", got, want)
	}
	if got := component(four, CGradients); got != tb.Grads {
		t.Errorf("GA 4 under no_sync: gradients %d, want unsharded %d", got, tb.Grads)
	}
	if four.Phases.Forward < one.Phases.Forward+tb.Grads {
		t.Errorf("GA 4: forward phase %d does not carry the accumulated gradients (%d + %d)", four.Phases.Forward, one.Phases.Forward, tb.Grads)
	}
	// torchtune's loop does not enter no_sync: accumulated gradients stay sharded.
	tt := acc
	tt.Stack = "torchtune"
	if got := component(est(t, tt), CGradients); got > tb.Grads/2 {
		t.Errorf("torchtune GA 4: gradients %d, want them sharded (≤ %d)", got, tb.Grads/2)
	}
}

// With gradient accumulation the gradients of the earlier micro-batches are
// alive through the next forward: the forward phase grows by exactly them.
func TestAccumulatedGradientsResident(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	r := Request{Model: m, Method: Full, Precision: BF16True, SeqLen: 512, Batch: 1}
	one := est(t, r)
	r.GradAccum = 8
	eight := est(t, r)
	grads := m.Params() * 2
	if d := eight.Phases.Forward - one.Phases.Forward; math.Abs(float64(d-grads)) > 1 {
		t.Errorf("forward phase grew by %d with GA 8, want the bf16 gradients %d", d, grads)
	}
	if eight.Phases.Step != one.Phases.Step {
		t.Errorf("the optimizer-step phase changed with GA: %d vs %d", eight.Phases.Step, one.Phases.Step)
	}
}

// A LoRA dropout keeps its output and a 1-byte mask per input element each
// adapter reads; litgpt's fused qkv adapter reads one dropout for q and v.
func TestLoRADropoutActivations(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	c := PhasePeak{Coef: DefaultCoefficients}
	r := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj"},
		SeqLen: 1000, Batch: 2, Stack: "litgpt", LoRADropout: ptr(0.05)}
	tl, _, err := c.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	tokens := float64(r.SeqLen * r.Batch)
	if want := 3 * float64(m.Hidden*m.NumLayers) * tokens; tl.AdapterAct != want {
		t.Errorf("litgpt q,v with dropout: %g bytes, want one bf16 copy + mask of the layer input: %g", tl.AdapterAct, want)
	}
	r.Stack = "peft-accelerate" // fp32 adapters, one dropout per module
	r.Precision = BF16Mixed
	tp, _, _ := c.terms(r)
	if want := 2 * 3 * float64(m.Hidden*m.NumLayers) * tokens; tp.AdapterAct != want {
		t.Errorf("PEFT q,v with dropout under autocast: %g, want two (16-bit cast + mask) copies: %g", tp.AdapterAct, want)
	}
	r.LoRADropout = ptr(0.0)
	tz, _, _ := c.terms(r)
	if want := 2 * 2 * float64(m.Hidden*m.NumLayers) * tokens; tz.AdapterAct != want {
		t.Errorf("PEFT fp32 adapters without dropout: %g, want the 16-bit casts only: %g", tz.AdapterAct, want)
	}
	r.Stack, r.Precision = "litgpt", BF16True
	tn, _, _ := c.terms(r)
	if tn.AdapterAct != 0 {
		t.Errorf("16-bit adapters without dropout keep %g bytes, want 0", tn.AdapterAct)
	}
}

// Autocast caches casts only of leaves that require grad: a frozen fp32
// base (litgpt bf16-mixed) makes a 16-bit copy of every Linear weight that
// the matmul keeps for the backward.
func TestFrozenFP32WeightsCastPerMatmul(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	r := Request{Model: m, Method: LoRA, Precision: BF16Mixed, LoRARank: 8, SeqLen: 512, Batch: 1, Stack: "litgpt"}
	tm, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * float64(m.LinearParams()); tm.FrozenCast != want {
		t.Errorf("frozen casts %g, want 2 B per Linear weight %g", tm.FrozenCast, want)
	}
	r.Precision = BF16True
	tb, _, _ := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if tb.FrozenCast != 0 {
		t.Errorf("bf16-true has no casts, got %g", tb.FrozenCast)
	}
}

// litgpt quantizes the output layer too, and each lm_head chunk
// dequantizes it whole.
func TestLitGPTQuantizesOutputLayer(t *testing.T) {
	m := catalogModel(t, "google/gemma-2-9b")
	c := PhasePeak{Coef: DefaultCoefficients}
	r := Request{Model: m, Method: QLoRA, Precision: BF16True, Quant: "nf4", LoRARank: 16, SeqLen: 512, Batch: 1}
	hf, _, _ := c.terms(Request{Model: m, Method: QLoRA, Precision: BF16True, Quant: "nf4", LoRARank: 16, SeqLen: 512, Batch: 1, Stack: "torchtune"})
	r.Stack = "litgpt"
	lg, _, _ := c.terms(r)
	head := m.Vocab * m.Hidden
	if want := hf.Weights + head/2; lg.Weights != want {
		t.Errorf("litgpt QLoRA weights %d, want the tied-model figure %d + a 4-bit head %d", lg.Weights, hf.Weights, head/2)
	}
	if lg.Dequant != 2*head {
		t.Errorf("dequant workspace %d, want the whole head in bf16 %d", lg.Dequant, 2*head)
	}
}

// Gemma 2's final-logit soft-capping keeps a 16-bit tanh output and makes
// one more 16-bit gradient: 4 B per logit on the loss chain.
func TestLogitSoftcapping(t *testing.T) {
	m := catalogModel(t, "google/gemma-2-2b")
	if m.LogitSoftcap != 30 {
		t.Fatalf("final_logit_softcapping read as %g, want 30", m.LogitSoftcap)
	}
	r := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, SeqLen: 512, Batch: 1, Stack: "hf-trainer"}
	capped := est(t, r)
	plain := *m
	plain.LogitSoftcap = 0
	r.Model = &plain
	uncapped := est(t, r)
	want := int64(softcapLogitBytes * 512 * m.Vocab)
	if d := component(capped, CLogits) - component(uncapped, CLogits); math.Abs(float64(d-want)) > 1 {
		t.Errorf("soft-capping adds %d bytes to the loss chain, want %d", d, want)
	}
}

// Batches padded to their own longest sample change shapes between steps:
// the allocator keeps a multiple of the step's whole shape-dependent
// transient cached instead of a multiple of its largest tensor.
func TestDynamicShapesReserved(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	r := Request{Model: m, Method: LoRA, Precision: BF16Mixed, LoRARank: 8, SeqLen: 2048, Batch: 1, GradCkpt: "full", Stack: "hf-trainer"}
	fixed := est(t, r)
	r.DynamicShapes = true
	dyn := est(t, r)
	if fixed.Levels.Allocated != dyn.Levels.Allocated {
		t.Errorf("dynamic shapes changed the allocated level: %d vs %d", fixed.Levels.Allocated, dyn.Levels.Allocated)
	}
	k := DefaultCoefficients
	largest := 4 * 2048 * float64(m.Vocab) // fp32 logits of the stock loss
	// the forward phase holds the shape-dependent transient plus the
	// fixed-size fp32 head cast; nothing accumulates at GA 1.
	tr, _, _ := PhasePeak{Coef: k}.terms(r)
	transient := float64(dyn.Phases.Forward) - tr.HeadCast
	rn, _ := r.Normalize()
	coef := min(k.ReservedDynamic, dynamicCacheBound(tr, rn)) // the allocator model caps the fit
	want := int64(coef*transient) - int64(min(k.ReservedLargest*largest, transient))
	if d := dyn.Levels.Reserved - fixed.Levels.Reserved; math.Abs(float64(d-want)) > 4 {
		t.Errorf("dynamic shapes add %d reserved bytes, want %.3g × %.0f − %.3g × %.0f = %d", d, coef, transient, k.ReservedLargest, largest, want)
	}
}

// Under HF QLoRA the embeddings and norms are fp32 and Linear4bit returns
// its input's dtype: a checkpointed block keeps an fp32 input.
func TestQLoRAUpcastResidualStream(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	c := PhasePeak{Coef: DefaultCoefficients}
	r := Request{Model: m, Method: QLoRA, Precision: BF16Mixed, Quant: "nf4", LoRARank: 8, SeqLen: 1024, Batch: 1, GradCkpt: "full", Stack: "hf-trainer"}
	up, _, _ := c.terms(r)
	r.Stack = "torchtune" // embeddings and norms stay bf16
	r.UpcastFrozen = nil
	st, _ := StackByName("torchtune")
	st.Apply(&r)
	r.Precision = BF16Mixed
	bf, _, _ := c.terms(r)
	if up.CkptUnit != 2*bf.CkptUnit {
		t.Errorf("checkpointed inputs %g with fp32 norms, %g without: want twice", up.CkptUnit, bf.CkptUnit)
	}
}

// litgpt's converted checkpoints copy a tied embedding into a separate
// lm_head parameter (convert_hf_checkpoint: lm_head.weight = wte.weight).
func TestLitGPTUntiesTheHead(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-3.2-1B")
	if m.LMHeadParams != 0 {
		t.Fatalf("Llama 3.2 1B is tied in its config; LMHeadParams = %d", m.LMHeadParams)
	}
	c := PhasePeak{Coef: DefaultCoefficients}
	r := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, SeqLen: 512, Batch: 1, Stack: "litgpt"}
	lg, _, _ := c.terms(r)
	r.Stack = "torchtune"
	tt, _, _ := c.terms(r)
	if d := lg.Weights - tt.Weights; d != 2*m.Vocab*m.Hidden {
		t.Errorf("litgpt holds %d bytes more, want a bf16 head %d", d, 2*m.Vocab*m.Hidden)
	}
	r.Method, r.Stack, r.LoRARank = Full, "litgpt", 0
	full, _, _ := c.terms(r)
	if want := (m.Params() + m.Vocab*m.Hidden) * 2; full.Grads != want {
		t.Errorf("litgpt full fine-tuning gradients %d, want the untied head trained too: %d", full.Grads, want)
	}
}

// litgpt's fused qkv adapter reads one dropout whether q, k and v are named
// or selected by a scope.
func TestLitGPTSharedQKVDropoutByScope(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	c := PhasePeak{Coef: DefaultCoefficients}
	r := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, SeqLen: 100, Batch: 1, Stack: "litgpt", LoRADropout: ptr(0.05)}
	r.LoRATargets = []string{"attention"} // q, k, v, o
	scope, _, _ := c.terms(r)
	r.LoRATargets = []string{"q_proj", "o_proj"}
	named, _, _ := c.terms(r)
	if scope.AdapterAct != named.AdapterAct {
		t.Errorf("attention scope keeps %g bytes, q+o by name %g: want equal (one qkv dropout + o)", scope.AdapterAct, named.AdapterAct)
	}
}

// PEFT's kbit preparation leaves the output layer unquantized in fp32;
// autocast casts it to 16 bits for the logits matmul without caching (it is
// frozen) and the matmul keeps the copy for its backward — checkpointed or
// not, since the head sits outside the blocks.
func TestFrozenHeadCastUnderAutocast(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	c := PhasePeak{Coef: DefaultCoefficients}
	r := Request{Model: m, Method: QLoRA, Quant: "nf4", LoRARank: 8, SeqLen: 1024, Batch: 1, GradCkpt: "full", Stack: "hf-trainer"}
	st, _ := StackByName("hf-trainer")
	st.Apply(&r)
	tq, _, _ := c.terms(r)
	if want := 2 * float64(m.Vocab*m.Hidden); tq.HeadCast != want {
		t.Errorf("HF QLoRA head cast %g, want %g", tq.HeadCast, want)
	}
	with := est(t, r)
	r.Precision = BF16True // no autocast: no cast
	without := est(t, r)
	if tb, _, _ := c.terms(r); tb.HeadCast != 0 {
		t.Errorf("bf16-true has a head cast of %g", tb.HeadCast)
	}
	if with.Phases.Forward <= without.Phases.Forward {
		t.Errorf("the head cast did not reach the forward phase: %d vs %d", with.Phases.Forward, without.Phases.Forward)
	}
}

// When the optimizer step is the larger phase, the forward's released and
// cached blocks serve it: only the part of the cache the step does not
// reuse stays on top of its peak.
func TestStepPhaseReusesForwardCache(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	k := DefaultCoefficients
	// With dynamic shapes the forward's cache (ReservedDynamic × its
	// transient) outgrows the step's extra need, so part of it stays.
	r := Request{Model: m, Method: Full, Precision: BF16True, SeqLen: 512, Batch: 1, GradCkpt: "full", DynamicShapes: true}
	e := est(t, r)
	if e.Phases.Step <= e.Phases.Forward {
		t.Fatalf("want a step-dominated run; forward %d, step %d", e.Phases.Forward, e.Phases.Step)
	}
	needed := int64(float64(e.Levels.Allocated)*(1+k.ReservedFrac) + k.ReservedConstGiB*GiB)
	// GA 1, no fixed-size casts: the forward phase is the whole
	// shape-dependent transient.
	cached := int64(k.ReservedDynamic * float64(e.Phases.Forward))
	want := cached - (e.Phases.Step - e.Phases.Forward)
	if want <= 0 || want >= cached {
		t.Fatalf("configuration does not exercise the reuse: cached %d, step − forward %d", cached, e.Phases.Step-e.Phases.Forward)
	}
	if got := e.Levels.Reserved - needed; math.Abs(float64(got-want)) > 4 {
		t.Errorf("cached on top of the step peak %d, want %d (the forward's %d less what the step reuses)", got, want, cached)
	}
}

// Full fine-tuning keeps each trained Linear's input for its weight
// gradient; q/k/v and gate/up read one tensor each.
func TestTrainedLinearInputs(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	r := Request{Model: m, Method: Full, Precision: BF16True, SeqLen: 100, Batch: 2}
	tf, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	// per layer: the normed hidden (q,k,v), the attention output (o), the
	// normed hidden (gate,up), the MLP intermediate (down).
	perLayer := 3*m.Hidden + m.Intermediate
	if want := 2 * float64(perLayer*m.NumLayers) * 200; tf.TrainedInputs != want {
		t.Errorf("trained inputs %g bytes, want %g", tf.TrainedInputs, want)
	}
	r.Method, r.LoRARank = LoRA, 8
	tl, _, _ := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if tl.TrainedInputs != 0 {
		t.Errorf("a frozen base keeps %g bytes of trained inputs", tl.TrainedInputs)
	}
}

// fsdp_qlora's train.py keeps the model's output referenced through the
// backward: its fp32 logits (4 B a logit) sit beside the stock loss chain,
// which the Trainer's loop, dropping its outputs, does not have.
func TestHeldOutputLogits(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	base := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj"},
		SeqLen: 2048, Batch: 4, GradCkpt: "full", Stack: StackFSDPQLoRA, Sharding: Sharding{Strategy: "fsdp_full_shard", GPUs: 2}}
	te, rn, err := PhasePeak{Coef: DefaultCoefficients}.terms(base)
	if err != nil {
		t.Fatal(err)
	}
	logits := float64(rn.SeqLen * rn.Batch * m.Vocab)
	if got, want := heldLogitBytes(rn, te), 4*logits; got != want {
		t.Errorf("fsdp_qlora holds %.0f B of logits, want 4 B × %.0f logits = %.0f", got, logits, want)
	}
	e := est(t, base)
	_, logitsCoef := PhasePeak{Coef: DefaultCoefficients}.scales(rn, te.Loss)
	if got, want := component(e, CLogits), int64(logitsCoef*logits+4*logits); got != want {
		t.Errorf("loss chain %d B, want the stock chain and the held fp32 logits %d B", got, want)
	}
	hf := base
	hf.Stack, hf.Sharding = StackHFTrainer, Sharding{}
	th, rh, err := PhasePeak{Coef: DefaultCoefficients}.terms(hf)
	if err != nil {
		t.Fatal(err)
	}
	if got := heldLogitBytes(rh, th); got != 0 {
		t.Errorf("the Trainer drops its outputs before the backward, but %.0f B of logits are held", got)
	}
}

// A run whose tensors fit the card cannot reserve more than the card holds
// beside the context, whatever the fitted fragmentation allowance: the
// allocator releases its cached segments and retries before an OOM.
func TestReservedLevelWithinTheCard(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	r := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj"},
		SeqLen: 2048, Batch: 1, GradCkpt: "full", Stack: StackHFTrainer}
	k := DefaultCoefficients
	k.ReservedConstGiB = 40 // an allowance far past any card
	free, err := PhasePeak{Coef: k}.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	r.GPUTotal = 24 * GiB
	e, err := PhasePeak{Coef: k}.Estimate(r)
	if err != nil {
		t.Fatal(err)
	}
	ceiling := r.GPUTotal - int64(k.ContextGiB*GiB)
	if e.Levels.Allocated > ceiling {
		t.Fatalf("allocated %d past the card's %d: pick a smaller run", e.Levels.Allocated, ceiling)
	}
	if e.Levels.Reserved != ceiling {
		t.Errorf("reserved %d B on a 24 GiB card, want the card less the context, %d B", e.Levels.Reserved, ceiling)
	}
	if free.Levels.Reserved <= ceiling {
		t.Errorf("without a card the reserved level %d B should carry the whole allowance", free.Levels.Reserved)
	}
	if e.Verdict.Fit != FitNo {
		t.Errorf("verdict %s: the plan keeps the allowance, so it should not fit", e.Verdict.Fit)
	}
}

// A parallel block's first MLP saves nothing without checkpointing only
// while its first matmul has no adapter: an adapter on fc1 or
// dense_h_to_4h makes that matmul's output require grad, so the activation
// saves its input in the first block as in the others. An adapter on the
// second matmul alone keeps the first block's MLP free.
func TestFirstParallelMLPFollowsTheTargets(t *testing.T) {
	for _, tc := range []struct {
		id, in, out string
	}{{"microsoft/phi-2", "fc1", "fc2"}, {"EleutherAI/pythia-1b", "dense_h_to_4h", "dense_4h_to_h"}, {"tiiuae/falcon-7b", "dense_h_to_4h", "dense_4h_to_h"}} {
		m := catalogModel(t, tc.id)
		for _, c := range []struct {
			targets []string
			free    bool
		}{{[]string{"attention"}, true}, {[]string{tc.out}, true}, {[]string{tc.in}, false}, {[]string{"all-linear"}, false}} {
			for _, meth := range []Method{LoRA, QLoRA} {
				r, err := Request{Model: m, Method: meth, LoRARank: 8, LoRATargets: c.targets, SeqLen: 256, Batch: 1}.Normalize()
				if err != nil {
					t.Fatal(err)
				}
				if !hfExact(r) {
					t.Fatalf("%s %s: not on the transformers path", tc.id, meth)
				}
				if got := hfLayerSaved(r).FirstMLP > 0; got != c.free {
					t.Errorf("%s %s on %v: first block's MLP left out %v, want %v", tc.id, meth, c.targets, got, c.free)
				}
			}
		}
	}
}
