package estimate

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

func catalogModel(t testing.TB, id string) *hfconfig.Model {
	t.Helper()
	e, err := catalog.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	m, err := hfconfig.Parse(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func near(t *testing.T, what string, gotBytes int64, wantGiB, tol float64) {
	t.Helper()
	got := float64(gotBytes) / GiB
	if math.Abs(got-wantGiB) > tol {
		t.Errorf("%s = %.3f GiB, want %.2f ± %.2f", what, got, wantGiB, tol)
	}
}

// The seed's own figures (seed 000 §1 and §6).
func TestReferenceFigures(t *testing.T) {
	q15 := catalogModel(t, "Qwen/Qwen2.5-1.5B")
	e, err := Reference{}.Estimate(Request{Model: q15, Method: QLoRA, Quant: "nf4-dq", SeqLen: 2048, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := e.Component(CWeights)
	// "Qwen2.5-1.5B (tied, vocab 151936) loads at 1.51 GiB (0.61 GiB packed
	// 4-bit + 0.87 GiB fp32 embedding)": the packed and fp32 parts, and the
	// load figure once the double-quant absmax metadata is added.
	near(t, "Qwen2.5-1.5B packed 4-bit Linear", q15.LinearParams()/2, 0.61, 0.005)
	near(t, "Qwen2.5-1.5B fp32 embedding", q15.EmbeddingLikeParams()*4, 0.87, 0.005)
	near(t, "Qwen2.5-1.5B QLoRA weights", w, 1.48, 0.01)
	meta := int64(float64(q15.LinearParams()) * quantMetaBytesPerParam("nf4-dq"))
	near(t, "Qwen2.5-1.5B QLoRA load (weights + absmax)", w+meta, 1.51, 0.02)

	q7 := catalogModel(t, "Qwen/Qwen2.5-7B")
	near(t, "Qwen2.5-7B fp32 embedding + lm_head", q7.EmbeddingLikeParams()*4, 4.06, 0.005)
	e7, err := Reference{}.Estimate(Request{Model: q7, Method: QLoRA, SeqLen: 2048, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	w7, _ := e7.Component(CWeights)
	near(t, "Qwen2.5-7B QLoRA weights (seed: loads at 7.2 GiB)", w7, 7.1, 0.1)
	l, _ := e7.Component(CLogits)
	near(t, "Qwen logits chain at seq 2048, batch 1", l, 4.1, 0.1)
}

// Every component against a hand computation on a small Llama.
func TestReferenceComponents(t *testing.T) {
	m, err := hfconfig.Parse([]byte(`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
		"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":false}`))
	if err != nil {
		t.Fatal(err)
	}
	P := m.Params()
	lin := m.LinearParams()
	const s, b = 100, 2
	adapters := int64(2 * 8 * (128 + 96 + 96 + 128)) // rank 8 on q,k,v,o of 2 layers
	gpuTotal := int64(24 * GiB)
	tests := []struct {
		name string
		req  Request
		want map[ComponentID]int64
	}{
		{"lora bf16 foreach adamw", Request{Method: LoRA, LoRARank: 8, SeqLen: s, Batch: b, GPUTotal: gpuTotal}, map[ComponentID]int64{
			CWeights:     P * 2,
			CAdapters:    adapters * 4,
			CGradients:   adapters * 4,
			COptimizer:   adapters * 12,
			CActivations: int64(2 * float64(s*b) * (9*64*2 + 4.5*128*2)),
			CLogits:      s * b * 1000 * 14,
			COverhead:    int64(float64(gpuTotal) * 0.08),
			CSafety:      int64(float64(gpuTotal) * 0.05),
		}},
		{"qlora nf4 fused, checkpointing", Request{Method: QLoRA, Quant: "nf4", LoRARank: 8, SeqLen: s, Batch: b, GradCkpt: "full", Optimizer: "adamw_torch_fused"}, map[ComponentID]int64{
			CWeights:       lin/2 + (P-lin)*4,
			CQuantOverhead: int64(float64(lin)*0.0625) + 2*64*128*2,
			CAdapters:      adapters * 4,
			CGradients:     adapters * 4,
			COptimizer:     adapters * 8,
			CActivations:   2*(2*s*b*64*2) + int64(float64(s*b)*(9*64*2+4.5*128*4)),
			CLogits:        s * b * 1000 * 14,
		}},
		{"full fp32 sgd eager fused-ce", Request{Method: Full, Precision: FP32, SeqLen: s, Batch: b, Optimizer: "sgd", Attn: "eager", FusedCE: "liger"}, map[ComponentID]int64{
			CWeights:     P * 4,
			CGradients:   P * 4,
			COptimizer:   0,
			CActivations: int64(2 * (float64(s*b)*(9*64*4+4.5*128*4) + 5*4*s*s*b)),
			CLogits:      0,
		}},
		{"full bf16 8-bit adam", Request{Method: Full, SeqLen: s, Batch: b, Optimizer: "paged_adamw_8bit"}, map[ComponentID]int64{
			CWeights:   P * 2,
			CGradients: P * 2,
			COptimizer: int64(float64(P) * 2.5),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Model = m
			e, err := Reference{}.Estimate(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, c := range e.Components {
				sum += c.Bytes
			}
			if sum != e.Total {
				t.Errorf("components sum to %d, total is %d", sum, e.Total)
			}
			for name, want := range tt.want {
				got, ok := e.Component(name)
				if !ok {
					t.Errorf("%s: missing", name)
					continue
				}
				if d := got - want; d < -1 || d > 1 {
					t.Errorf("%s = %d, want %d", name, got, want)
				}
			}
			safe, _ := e.Component(CSafety)
			if e.PlanningProxy != e.Total-safe {
				t.Errorf("planning proxy %d ≠ total %d − safety %d", e.PlanningProxy, e.Total, safe)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		total, budget int64
		want          Fit
	}{
		{85, 100, FitYes}, {86, 100, FitMarginal}, {97, 100, FitMarginal}, {98, 100, FitNo}, {1, 0, FitUnknown},
	} {
		if got := Classify(tt.total, tt.budget).Fit; got != tt.want {
			t.Errorf("Classify(%d, %d) = %s, want %s", tt.total, tt.budget, got, tt.want)
		}
	}
}

// Feasibility compares with free memory, while overheads follow the card's total.
func TestFreeMemoryVerdict(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	base := Request{Model: m, Method: LoRA, SeqLen: 512, Batch: 1, GPUTotal: 24 * GiB}
	full, err := Reference{}.Estimate(base)
	if err != nil {
		t.Fatal(err)
	}
	busy := base
	busy.Available = 4 * GiB
	part, err := Reference{}.Estimate(busy)
	if err != nil {
		t.Fatal(err)
	}
	if full.Total != part.Total {
		t.Errorf("free memory changed the estimate: %d vs %d (overheads must follow the total)", full.Total, part.Total)
	}
	if part.Verdict.Budget != 4*GiB || part.Verdict.BudgetSource != "free memory" || part.Verdict.Ratio <= full.Verdict.Ratio {
		t.Errorf("verdict with 4 GiB free = %+v, on the whole card %+v", part.Verdict, full.Verdict)
	}
}

func TestShardingDividesState(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	one, err := Reference{}.Estimate(Request{Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 512, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		strategy string
		divided  []ComponentID
		whole    []ComponentID
	}{
		{"zero1", []ComponentID{COptimizer}, []ComponentID{CWeights, CGradients}},
		{"zero2", []ComponentID{COptimizer, CGradients}, []ComponentID{CWeights}},
		{"fsdp_full_shard", []ComponentID{COptimizer, CGradients}, nil},
	} {
		e, err := Reference{}.Estimate(Request{Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 512, Batch: 1, Sharding: Sharding{Strategy: Strategy(tt.strategy), GPUs: 4}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range tt.divided {
			a, _ := one.Component(c)
			b, _ := e.Component(c)
			if b != (a+3)/4 {
				t.Errorf("%s: %s = %d, want %d / 4", tt.strategy, c, b, a)
			}
		}
		for _, c := range tt.whole {
			a, _ := one.Component(c)
			b, _ := e.Component(c)
			if a != b {
				t.Errorf("%s: %s = %d, want unchanged %d", tt.strategy, c, b, a)
			}
		}
	}
	// DeepSpeed's ZeRO-3 model-state formula (estimate_zero3_model_states_mem_needs,
	// largest layer aside): 18 bytes per parameter / N with fp32 Adam and
	// mixed precision. Ours: fp32 master 4 + fp32 grads 4 + fused Adam 8 = 16 /N.
	e, err := Reference{}.Estimate(Request{Model: m, Method: Full, Precision: BF16Mixed, Optimizer: "adamw_torch_fused", SeqLen: 512, Batch: 1, Sharding: Sharding{Strategy: "zero3", GPUs: 8}})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := e.Component(CWeights)
	g, _ := e.Component(CGradients)
	o, _ := e.Component(COptimizer)
	perParam := float64(w+g+o) / float64(m.Params()) * 8
	if perParam < 16 || perParam > 18.5 {
		t.Errorf("ZeRO-3 model states = %.2f B/param × N, want 16–18 (DeepSpeed's 18 includes fp16 params)", perParam)
	}
}

func TestNormalizeErrors(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	reqs := []Request{
		{Model: m, SeqLen: 0, Batch: 1},
		{Model: m, SeqLen: 10, Batch: -1},
		{Model: m, SeqLen: 10, Batch: 1, Optimizer: "adam9000"},
		{Model: m, SeqLen: 10, Batch: 1, Method: "dpo"},
		{Model: m, SeqLen: 10, Batch: 1, LoRATargets: []string{"c_attn"}},
		{Model: m, SeqLen: 10, Batch: 1, GPUTotal: GiB, Available: 2 * GiB},
		{Model: m, SeqLen: 10, Batch: 1, Method: Full, Quant: "nf4"},
		{SeqLen: 10, Batch: 1},
	}
	for _, r := range reqs {
		if _, err := (Reference{}).Estimate(r); err == nil {
			t.Errorf("request %+v accepted", r)
		}
	}
}

// Offloaded checkpointing (unsloth, offload) keeps one block's input on the
// GPU instead of every block's.
func TestOffloadedCheckpointing(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	est := PhasePeak{Coef: DefaultCoefficients}
	for _, tt := range []struct {
		stack StackName
		// perTokenHidden is what one block input costs per token per
		// hidden unit: the bf16 hidden state on transformers' spelled-out
		// layers, the fitted coefficient elsewhere.
		perTokenHidden float64
	}{
		{"", 2},
		{StackTorchtune, DefaultCoefficients.CkptPerLayer},
	} {
		base := Request{Model: m, Method: LoRA, SeqLen: 4096, Batch: 4, GradCkpt: "full", Stack: tt.stack}
		full, err := est.Estimate(base)
		if err != nil {
			t.Fatal(err)
		}
		off := base
		off.GradCkpt = "offload"
		o, err := est.Estimate(off)
		if err != nil {
			t.Fatal(err)
		}
		// The difference is (layers − 1) block inputs.
		want := int64(float64(m.NumLayers-1) * 4096 * 4 * float64(m.Hidden) * tt.perTokenHidden)
		if d := full.Levels.Allocated - o.Levels.Allocated; d < want-GiB/100 || d > want+GiB/100 {
			t.Errorf("stack %q: offloading saved %d bytes, want %d", tt.stack, d, want)
		}
	}
}

// The reserved level cannot exceed what the card leaves beside the CUDA
// context: with little headroom the allocator releases cached blocks.
func TestReservedCappedByCard(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	est := PhasePeak{Coef: DefaultCoefficients}
	req := Request{Model: m, Method: QLoRA, SeqLen: 2048, Batch: 6, GradCkpt: "full", DynamicShapes: true}
	roomy, err := est.Estimate(req)
	if err != nil {
		t.Fatal(err)
	}
	req.GPUTotal = 24 * GiB
	tight, err := est.Estimate(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx := int64(DefaultCoefficients.ContextGiB * GiB)
	if tight.Levels.Reserved > req.GPUTotal-ctx {
		t.Errorf("reserved %d exceeds the card minus the context (%d)", tight.Levels.Reserved, req.GPUTotal-ctx)
	}
	if roomy.Levels.Reserved <= tight.Levels.Reserved || roomy.Levels.Allocated != tight.Levels.Allocated {
		t.Errorf("without a card reserved is %d, on 24 GiB %d (want larger without); allocated %d vs %d (want equal)",
			roomy.Levels.Reserved, tight.Levels.Reserved, roomy.Levels.Allocated, tight.Levels.Allocated)
	}
}

// TestMoEQLoRAAssumption: a MoE QLoRA estimate says its routed experts are
// counted as 4-bit and how much more transformers 5's unquantized fused
// experts take; the figure follows from the config's expert widths
// (Mixtral-8x7B: 32 layers × 8 experts × 3 × 4096 × 14336 weights).
// A dense model and a LoRA request carry no such line.
func TestMoEQLoRAAssumption(t *testing.T) {
	m := catalogModel(t, "mistralai/Mixtral-8x7B-v0.1")
	const routed = int64(32 * 8 * 3 * 4096 * 14336)
	if got := m.RoutedExpertParams(); got != routed {
		t.Fatalf("Mixtral routed-expert params = %d, want %d", got, routed)
	}
	line := func(r Request) string {
		t.Helper()
		n, err := r.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		return moeQLoRAAssumption(n)
	}
	base := Request{Model: m, Method: QLoRA, SeqLen: 512, Batch: 1}
	fp32 := fmt.Sprintf("about %.1f GiB more", float64(routed*4-routed/2)/(1<<30))
	if got := line(base); !strings.Contains(got, fp32) || !strings.Contains(got, "fp32 after prepare_model_for_kbit_training") {
		t.Errorf("Mixtral QLoRA: %q, want it to say %q", got, fp32)
	}
	no := false
	kept := base
	kept.UpcastFrozen = &no
	bf16 := fmt.Sprintf("about %.1f GiB more", float64(routed*2-routed/2)/(1<<30))
	if got := line(kept); !strings.Contains(got, bf16) {
		t.Errorf("Mixtral QLoRA without the upcast: %q, want it to say %q", got, bf16)
	}
	lora := base
	lora.Method = LoRA
	if got := line(lora); got != "" {
		t.Errorf("Mixtral LoRA: %q, want no line", got)
	}
	dense := base
	dense.Model = catalogModel(t, "Qwen/Qwen2.5-7B")
	if got := line(dense); got != "" {
		t.Errorf("dense QLoRA: %q, want no line", got)
	}
}
