package estimate

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestPreparedMatchesEstimate: for random variants of several prepared
// requests (full, LoRA and QLoRA bases; HF, litgpt and torchtune stacks;
// mixed precision; eager attention; a length distribution; dropout and an
// extra trained head), an Evaluator gives every field of the estimate
// Estimate gives for the request the variant stands for, and the same
// error for an invalid variant. Each evaluator is reused over the sample,
// so a cached term carried into a variant it does not belong to differs.
func TestPreparedMatchesEstimate(t *testing.T) {
	m8 := catalogModel(t, "meta-llama/Llama-3.1-8B")
	qwen := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	bert := catalogModel(t, "google-bert/bert-large-uncased")
	lengths, err := LengthsMedianMax(300, 1500)
	if err != nil {
		t.Fatal(err)
	}
	gpu := int64(80 * GiB)
	for _, c := range []struct {
		name  string
		est   string
		bases []Request
	}{
		{"hf-three-methods", Default, []Request{
			{Model: m8, Method: Full, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: LoRA, LoRARank: 16, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: QLoRA, LoRARank: 16, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
		}},
		// bf16-mixed on the transformers path: its autocast terms hold on
		// one GPU and under DDP, not under FSDP or DeepSpeed, so a cached
		// term read for another strategy differs here.
		{"mixed-precision-full", Default, []Request{
			{Model: qwen, Method: Full, Precision: BF16Mixed, SeqLen: 1024, Batch: 2, GPUTotal: 24 * GiB, Available: 20 * GiB},
			{Model: qwen, Method: LoRA, Precision: BF16Mixed, SeqLen: 1024, Batch: 2, GPUTotal: 24 * GiB},
		}},
		{"litgpt-lora-dropout", Default, []Request{
			{Model: m8, Method: LoRA, LoRARank: 8, LoRATargets: []string{"q_proj", "v_proj", "lm_head"}, Stack: StackLitGPT, Precision: BF16Mixed, LoRADropout: ptr(0.05), SeqLen: 1024, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: QLoRA, LoRARank: 8, Stack: StackLitGPT, Precision: BF16True, SeqLen: 1024, Batch: 1, GPUTotal: gpu},
		}},
		{"torchtune-eager-extra-head", Default, []Request{
			{Model: qwen, Method: LoRA, LoRARank: 32, Stack: StackTorchtune, Attn: "eager", ExtraTrainable: []string{"lm_head"}, SeqLen: 4096, Batch: 1, GPUTotal: 16 * GiB, SafetyFraction: 0.1},
		}},
		// A plain loop's own loss: 16-bit and fp32 logits, held or freed.
		{"pytorch-own-loss", Default, []Request{
			{Model: qwen, Method: LoRA, Stack: StackPyTorch, SeqLen: 2048, Batch: 2, GPUTotal: gpu},
			{Model: qwen, Method: Full, Stack: StackPyTorch, FreesLogits: true, SeqLen: 2048, Batch: 2, GPUTotal: gpu},
			{Model: qwen, Method: QLoRA, Stack: StackPyTorch, SeqLen: 2048, Batch: 2, GPUTotal: gpu},
			{Model: m8, Method: LoRA, Stack: StackPyTorch, Precision: BF16Mixed, SeqLen: 1024, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: Full, Stack: StackPyTorch, Precision: BF16Mixed, FreesLogits: true, SeqLen: 1024, Batch: 1, GPUTotal: gpu},
		}},
		// Windowed models with fp32 grouped heads: the variants' lengths
		// cross the window (Gemma 3's full layers on SDPA's math kernel,
		// Mistral masked throughout), so every term that reads it is keyed.
		{"windowed-fp32-attention", Default, []Request{
			{Model: catalogModel(t, "google/gemma-3-1b-pt"), Method: QLoRA, Precision: BF16True, SeqLen: 512, Batch: 2, GPUTotal: gpu},
			{Model: catalogModel(t, "google/gemma-3-1b-pt"), Method: LoRA, Precision: FP32, SeqLen: 1024, Batch: 1, GPUTotal: gpu},
		}},
		{"windowed-mistral", Default, []Request{
			{Model: catalogModel(t, "mistralai/Mistral-7B-v0.1"), Method: QLoRA, Precision: BF16True, SeqLen: 4096, Batch: 1, GPUTotal: gpu},
		}},
		{"length-distribution", Default, []Request{
			{Model: qwen, Method: LoRA, SeqLen: 2048, Batch: 4, Lengths: &lengths, GPUTotal: 24 * GiB},
		}},
		// Fused kernels, torch.compile, optimizer-in-backward (which
		// refuses accumulation: a variant's grad_accum makes it invalid),
		// GPTQ under foak's fused LoRA, and an encoder's classifier head.
		{"kernels-compile-in-backward", Default, []Request{
			{Model: m8, Method: Full, Kernels: []Kernel{KernelLigerRMSNorm, KernelLigerSwiGLU}, Compile: true, OptimizerInBackward: true, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: QLoRA, Quant: GPTQ4, Kernels: []Kernel{KernelFOAK}, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: LoRA, Kernels: []Kernel{"fused-ops-and-kernels"}, ExtraTrainable: []string{"lm_head"}, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
		}},
		{"encoder-classifier", Default, []Request{
			{Model: bert, Method: Full, SeqLen: 512, Batch: 8, GPUTotal: 16 * GiB},
			{Model: bert, Method: LoRA, Task: TaskMaskedLM, SeqLen: 512, Batch: 8, GPUTotal: 16 * GiB},
		}},
		// One method in three precisions and storages, as a search
		// prepares it for the engines' rules (plan/runs.go): a term
		// cached for one base and read for another differs here.
		{"qlora-precision-storage", Default, []Request{
			{Model: m8, Method: QLoRA, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: QLoRA, LoRATargets: []string{"all-linear"}, Precision: BF16Mixed, QuantStorage: DtypeBF16, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: QLoRA, LoRATargets: []string{"all-linear"}, QuantStorage: DtypeBF16, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: Full, Precision: FP16Mixed, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
			{Model: m8, Method: Full, Precision: FP16True, SeqLen: 2048, Batch: 1, GPUTotal: gpu},
		}},
		{"reference-estimator", "seed000", []Request{
			{Model: qwen, Method: Full, SeqLen: 1024, Batch: 1, GPUTotal: 24 * GiB},
			{Model: qwen, Method: QLoRA, SeqLen: 1024, Batch: 1, GPUTotal: 24 * GiB},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			est, err := ByName(c.est)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Prepare(est, c.bases...)
			if err != nil {
				t.Fatal(err)
			}
			var norms []Request
			for _, b := range c.bases {
				norms = append(norms, must(b.Normalize()))
			}
			ev := p.NewEvaluator()
			rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			var e Estimate
			compared, failed := 0, 0
			for i := range 3000 {
				v := randomVariant(rng, norms)
				want, wantErr := est.Estimate(must(p.Request(v)))
				gotErr := ev.Estimate(v, &e)
				if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
					t.Fatalf("variant %d %+v: error %v, Estimate's %v", i, v, gotErr, wantErr)
				}
				if wantErr != nil {
					failed++
					continue
				}
				compared++
				if d := cmp.Diff(want, &e, cmpopts.IgnoreUnexported(Estimate{})); d != "" {
					t.Fatalf("variant %d %+v differs from Estimate (-Estimate +Evaluator):\n%s", i, v, d)
				}
			}
			if compared < 1000 || failed == 0 {
				t.Errorf("compared %d estimates and %d errors: the sample misses valid or invalid variants", compared, failed)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// randomVariant draws a base (normalized: what a variant selects it by)
// and the levers a search changes, now and then an invalid value (an
// unknown option, an offload the strategy lacks, a number out of range) so
// that the errors are compared too.
func randomVariant(rng *rand.Rand, bases []Request) Variant {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	b := bases[rng.IntN(len(bases))]
	v := Variant{
		Method: b.Method, Precision: b.Precision, QuantStorage: b.QuantStorage,
		SeqLen:    []int64{256, 512, 1024, 2048, 4096, 8192, 131072}[rng.IntN(7)],
		Batch:     []int64{1, 2, 3, 4, 8, 16}[rng.IntN(6)],
		GradAccum: []int64{0, 1, 2, 4, 16}[rng.IntN(5)],
		GradCkpt:  Checkpointing(pick("none", "full", "unsloth")),
		FusedCE:   LossKernel(pick("none", "liger", "chunked", "cut_cross_entropy")),
		Optimizer: Optimizer(pick("adamw_torch", "adamw_torch_fused", "paged_adamw_8bit", "adafactor", "sgd")),
		Sharding: Sharding{
			Strategy:   Strategy(pick("none", "ddp", "zero0", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid_shard", "fsdp_no_shard")),
			CPUOffload: Offload(pick("none", "none", "optimizer", "params+optimizer")),
			GPUs:       []int64{1, 2, 8, 64}[rng.IntN(4)],
		},
	}
	if v.Sharding.Strategy == NoSharding {
		v.Sharding.GPUs = 1
	}
	switch rng.IntN(40) {
	case 0:
		v.Optimizer = "adamw" // an alias: Normalize canonicalises it, the fast path must not pass it as is
	case 1:
		v.GradCkpt = "sometimes"
	case 2:
		v.Batch = MaxBatch + 1
	case 3:
		v.Sharding.GPUs = 0
	case 4:
		v.SeqLen = 0
	}
	return v
}

// TestPreparedRefusesMissingMethod: a variant of a method, precision or
// 4-bit storage without a prepared base is an error, not another base's
// estimate.
func TestPreparedRefusesMissingMethod(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	est, _ := ByName(Default)
	p, err := Prepare(est, Request{Model: m, Method: LoRA, SeqLen: 512, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	var e Estimate
	for _, v := range []Variant{
		{Method: Full, Precision: BF16True, QuantStorage: DtypeUint8},
		{Method: LoRA, Precision: BF16Mixed, QuantStorage: DtypeUint8}, // the base's method in another precision
		{Method: LoRA, Precision: BF16True, QuantStorage: DtypeBF16},
		{Method: LoRA}, // unset: the base is bf16-true, uint8
	} {
		v.SeqLen, v.Batch = 512, 1
		v.Sharding = Sharding{Strategy: NoSharding, GPUs: 1, CPUOffload: OffloadNone}
		if err := p.NewEvaluator().Estimate(v, &e); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s in %q with storage %q: got %v, want an invalid request", v.Method, v.Precision, v.QuantStorage, err)
		}
	}
	v := Variant{Method: LoRA, Precision: BF16True, QuantStorage: DtypeUint8, SeqLen: 512, Batch: 1,
		Sharding: Sharding{Strategy: NoSharding, GPUs: 1, CPUOffload: OffloadNone}}
	if err := p.NewEvaluator().Estimate(v, &e); err != nil {
		t.Errorf("the base's own method, precision and storage: %v", err)
	}
	if _, err := Prepare(est, Request{Model: m, Method: LoRA, SeqLen: 512, Batch: 1}, Request{Model: m, Method: "lora", SeqLen: 1024, Batch: 1}); err == nil {
		t.Error("two bases of one method prepared")
	}
}

// BenchmarkPrepared measures the fast path on one core: the variants of a
// search over a prepared request, numbers only (the goal is ≤ 1 µs each).
func BenchmarkPrepared(b *testing.B) {
	m := catalogModel(b, "meta-llama/Llama-3.1-8B")
	est, _ := ByName(Default)
	p, err := Prepare(est,
		Request{Model: m, Method: Full, SeqLen: 2048, Batch: 1, GPUTotal: 80 * GiB},
		Request{Model: m, Method: LoRA, LoRARank: 16, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 1, GPUTotal: 80 * GiB})
	if err != nil {
		b.Fatal(err)
	}
	var vs []Variant
	for _, meth := range []Method{Full, LoRA} {
		for _, st := range []Strategy{ZeRO2, ZeRO3, FSDPFullShard} {
			for _, mb := range []int64{1, 2, 4, 8} {
				vs = append(vs, Variant{Method: meth, Precision: BF16True, QuantStorage: DtypeUint8, SeqLen: 2048, Batch: mb, GradAccum: 8 / mb, GradCkpt: CkptFull, FusedCE: LossNone,
					Optimizer: AdamWTorch, Sharding: Sharding{Strategy: st, GPUs: 8, CPUOffload: OffloadNone}})
			}
		}
	}
	ev := p.NewEvaluator()
	var e Estimate
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := ev.Estimate(vs[i%len(vs)], &e); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "estimates/s")
}
