package estimate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// Qwen2.5-7B: hidden 3584, 28 layers, 4 KV heads of 128 (k_proj and v_proj
// are 3584 → 512), MLP 18944, vocabulary 152064 (its config.json).
func pagedBase(t *testing.T, opt Optimizer, rank int64, targets ...string) Request {
	t.Helper()
	return Request{Model: catalogModel(t, "Qwen/Qwen2.5-7B"), Method: LoRA, Precision: BF16True,
		LoRARank: rank, LoRATargets: targets, SeqLen: 1024, Batch: 1, GradCkpt: CkptFull,
		Optimizer: opt, Stack: StackHFTrainer}
}

// bitsandbytes pages the states of a tensor of 1e5 elements or more: at
// rank 16 every factor of the attention is smaller (16 × 3584 = 57,344), at
// rank 64 only k_proj's and v_proj's lora_B (512 × 64) are.
func TestPagedSplit(t *testing.T) {
	const layers, h, kv, ffn = 28, 3584, 512, 18944
	for _, tt := range []struct {
		name          string
		rank          int64
		targets       []string
		device, paged int64
	}{
		{"rank 16 attention", 16, []string{"q_proj", "k_proj", "v_proj", "o_proj"},
			layers * 16 * (h + h + h + kv + h + kv + h + h), 0},
		{"rank 64 all-linear", 64, []string{"all-linear"},
			layers * 64 * (kv + kv),
			layers * 64 * ((h + h) + h + h + (h + h) + (h + ffn) + (h + ffn) + (ffn + h))}, // q, k's and v's lora_A, o, the MLP
	} {
		r, err := pagedBase(t, PagedAdamW32bit, tt.rank, tt.targets...).Normalize()
		if err != nil {
			t.Fatal(err)
		}
		dev, _, pg := trainableSplit(r, pagedMinNumel, pagedMinNumel)
		if dev != tt.device || pg != tt.paged {
			t.Errorf("%s: split at %d elements = %d device, %d paged elements; want %d, %d", tt.name, pagedMinNumel, dev, pg, tt.device, tt.paged)
		}
		if dev+pg != adapterParams(r) {
			t.Errorf("%s: the split covers %d elements, the adapters are %d", tt.name, dev+pg, adapterParams(r))
		}
	}
}

// The paged part leaves the allocator's levels and the total, and stays in
// the process level: against fused AdamW with the same fp32 states (which
// has no step temporary either), allocated drops by exactly the paged
// states, reserved by no more than that, and the process level holds them.
func TestPagedOptimizerLevels(t *testing.T) {
	paged := est(t, pagedBase(t, PagedAdamW32bit, 64, "all-linear"))
	fused := pagedBase(t, AdamWTorchFused, 64, "all-linear")
	fused.OptimizerStateDtype = DtypeFP32
	plain := est(t, fused)
	const layers, h, kv, ffn = 28, 3584, 512, 18944
	want := int64(8 * layers * 64 * ((h + h) + h + h + (h + h) + 2*(h+ffn) + ffn + h))
	if paged.PagedOptimizer != want {
		t.Fatalf("PagedOptimizer = %d, want %d (8 B per paged element)", paged.PagedOptimizer, want)
	}
	if d := plain.Levels.Allocated - paged.Levels.Allocated; d != want {
		t.Errorf("allocated: fused AdamW − paged = %d, want the paged states %d", d, want)
	}
	if d := plain.Total - paged.Total; d != want {
		t.Errorf("total: fused AdamW − paged = %d, want %d", d, want)
	}
	ctx := int64(DefaultCoefficients.ContextGiB * GiB)
	if got := paged.Levels.Process - paged.Levels.Reserved - ctx; got != want {
		t.Errorf("process − reserved − context = %d, want the paged states %d", got, want)
	}
	if plain.PagedOptimizer != 0 {
		t.Errorf("fused AdamW: PagedOptimizer = %d, want 0", plain.PagedOptimizer)
	}
}

// The 8-bit paged optimizer pages its uint8 states and keeps every block's
// fp32 absmax on the device. Qwen2.5-7B at rank 64 on all-linear (as
// TestPagedSplit): 28 × 64 × 1024 = 1,835,008 elements on the device (k's
// and v's lora_B) and 28 × 64 × (9 × 3584 + 3 × 18944) = 159,645,696 paged;
// none under min_8bit_size. Device: two uint8 states of the first,
// 3,670,016 B, and two fp32 absmax per 256 elements of all, 5,046,272 B.
func TestPaged8bitAbsmaxOnDevice(t *testing.T) {
	r, err := pagedBase(t, PagedAdamW8bit, 64, "all-linear").Normalize()
	if err != nil {
		t.Fatal(err)
	}
	d, p := pagedStates(r, r.Optimizer.Spec(), 4)
	if d != 8_716_288 || p != 319_291_392 {
		t.Errorf("paged 8-bit states: %d B on the device, %d paged; want 8,716,288 and 319,291,392", d, p)
	}
}

// A full fine-tune pages every weight matrix and keeps the norms' states on
// the device; a strategy that shards the optimizer tests the threshold on
// the whole tensor still (FSDP's ranks see whole tensors or flat shards)
// and divides the paged part, and CPU offload of the optimizer moves it to
// host RAM.
func TestPagedFullAndSharded(t *testing.T) {
	base := pagedBase(t, PagedAdamW32bit, 0)
	base.Method, base.LoRARank, base.LoRATargets = Full, 0, nil
	r, err := base.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	m := r.Model
	dev, _, pg := trainableSplit(r, pagedMinNumel, pagedMinNumel)
	if dev+pg != m.Params() {
		t.Errorf("full: split covers %d of %d parameters", dev+pg, m.Params())
	}
	var biases int64
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			if lin.Bias {
				biases += lin.Out * lin.Copies
			}
		}
	}
	if want := m.NormParams() + biases; dev != want {
		t.Errorf("full: device elements = %d, want the norms and biases %d", dev, want)
	}

	sharded := base
	sharded.Sharding = Sharding{Strategy: "fsdp_full_shard", GPUs: 64}
	s, err := sharded.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	sdev, _, spg := trainableSplit(s, pagedMinNumel, pagedMinNumel)
	if sdev != dev || spg != pg {
		t.Errorf("64-way shards: %d device, %d paged; want the unsharded split %d, %d", sdev, spg, dev, pg)
	}
	e := est(t, sharded)
	if want := (spg*8 + 63) / 64; e.PagedOptimizer != want {
		t.Errorf("64-way shards: PagedOptimizer = %d, want %d", e.PagedOptimizer, want)
	}
	off := sharded
	off.Sharding.CPUOffload = "params+optimizer"
	eo := est(t, off)
	unpaged := off
	unpaged.Optimizer = AdamWTorchFused
	unpaged.OptimizerStateDtype = DtypeFP32
	eu := est(t, unpaged)
	if eo.PagedOptimizer != 0 || eo.HostOffload != eu.HostOffload {
		t.Errorf("optimizer offload: PagedOptimizer %d, host %d; want 0 and fused AdamW's host RAM %d (every state there, paged or not)", eo.PagedOptimizer, eo.HostOffload, eu.HostOffload)
	}
}

// A warning says when the paged states do not fit beside the run.
func TestPagedOverflowWarning(t *testing.T) {
	r := pagedBase(t, PagedAdamW32bit, 0)
	r.Method, r.LoRARank, r.LoRATargets = Full, 0, nil
	r.GPUTotal = 80 * GiB
	has := func(e *Estimate) bool {
		for _, w := range e.Warnings {
			if strings.Contains(w, "paged optimizer") {
				return true
			}
		}
		return false
	}
	e := est(t, r)
	if over := e.Total+e.PagedOptimizer > e.Verdict.Budget; over != has(e) {
		t.Errorf("full fine-tune on 80 GiB: total %d + paged %d vs budget %d, warning %v", e.Total, e.PagedOptimizer, e.Verdict.Budget, has(e))
	}
	if !has(e) {
		t.Errorf("Qwen2.5-7B full with 8 B of paged state per parameter on 80 GiB: want the overflow warning")
	}
	small := pagedBase(t, PagedAdamW32bit, 16, "q_proj", "v_proj")
	small.GPUTotal = 80 * GiB
	if has(est(t, small)) {
		t.Errorf("rank-16 LoRA: nothing paged, want no warning")
	}
}

// DeepSpeed's ZeRO optimizer hands bitsandbytes its flat fp32 partitions,
// each far above 1e5 elements: every state is paged, a rank's share of
// them per GPU, while the fp32 master copy stays an ordinary tensor (in
// the optimizer-states component) — against the unpaged 8-bit AdamW, the
// component drops by exactly the uint8 states.
func TestPagedDeepSpeedPartitions(t *testing.T) {
	const n = 4
	base := pagedBase(t, PagedAdamW8bit, 0)
	base.Method, base.LoRARank, base.LoRATargets = Full, 0, nil
	base.Sharding = Sharding{Strategy: "zero2", GPUs: n}
	paged := est(t, base)
	plain := base
	plain.Optimizer = AdamW8bit
	unpaged := est(t, plain)
	p := paged.TrainableParams
	if want := (2*p + n - 1) / n; paged.PagedOptimizer != want {
		t.Errorf("ZeRO-2 × %d: PagedOptimizer = %d, want the two uint8 states of %d parameters per GPU, %d", n, paged.PagedOptimizer, p, want)
	}
	if unpaged.PagedOptimizer != 0 {
		t.Errorf("adamw_8bit under ZeRO-2: PagedOptimizer = %d, want 0", unpaged.PagedOptimizer)
	}
	d := component(unpaged, COptimizer) - component(paged, COptimizer)
	if want := 2 * p / n; d < want-1 || d > want+1 {
		t.Errorf("optimizer states: adamw_8bit − paged = %d, want the uint8 states per GPU, %d", d, want)
	}
	// The explanation says the partitions' states are paged, not the
	// single-GPU rule of tensors under 1e5 elements.
	x, err := PhasePeak{Coef: DefaultCoefficients}.Explain(base, paged)
	if err != nil {
		t.Fatal(err)
	}
	if src := x.Sources[COptimizer]; !strings.Contains(src, "flat partitions") || strings.Contains(src, "under 100000 elements") {
		t.Errorf("ZeRO-2 paged optimizer source %q: want DeepSpeed's flat partitions paged whole", src)
	}
}

// The process level holds the resident paged states, but nvidia-smi cannot
// show more than the card: beyond it they wait in host RAM, and the
// warning says how much.
func TestPagedProcessAtMostTheCard(t *testing.T) {
	r := pagedBase(t, PagedAdamW32bit, 0)
	r.Model = catalogModel(t, "Qwen/Qwen2.5-14B")
	r.Method, r.LoRARank, r.LoRATargets = Full, 0, nil
	r.GPUTotal = 80 * GiB
	e := est(t, r)
	if e.PagedOptimizer <= r.GPUTotal-e.Levels.Reserved {
		t.Fatalf("paged %d B beside reserved %d on %d: the case should overflow the card", e.PagedOptimizer, e.Levels.Reserved, r.GPUTotal)
	}
	if e.Levels.Process != r.GPUTotal {
		t.Errorf("process level %d, want the card's %d", e.Levels.Process, r.GPUTotal)
	}
	// What spills is what the card cannot hold beside the total: less
	// than all of the states here.
	spill := e.Total + e.PagedOptimizer - r.GPUTotal
	if spill <= 0 || spill >= e.PagedOptimizer {
		t.Fatalf("spill %d of %d paged: the case should spill part of the states", spill, e.PagedOptimizer)
	}
	want := fmt.Sprintf("about %.2f GiB of them in host RAM", float64(spill)/GiB)
	warned := false
	for _, w := range e.Warnings {
		warned = warned || strings.Contains(w, want)
	}
	if !warned {
		t.Errorf("no warning saying %q: %q", want, e.Warnings)
	}
}

// bitsandbytes keeps fp32 states, and no absmax, for a tensor under
// min_8bit_size (4096 elements). SmolLM2-135M (hidden 576, three key/value
// heads of 64: k_proj and v_proj are 576 → 192) at rank 8 on q, k, v and o:
// every lora_A (8 × 576 = 4608) and q's and o's lora_B (576 × 8) are
// quantized, k's and v's lora_B (192 × 8 = 1536) are not; 30 layers.
func TestEightBitMinSize(t *testing.T) {
	r := Request{Model: catalogModel(t, "HuggingFaceTB/SmolLM2-135M"), Method: LoRA, Precision: BF16True,
		LoRARank: 8, LoRATargets: []string{"q_proj", "k_proj", "v_proj", "o_proj"}, SeqLen: 512, Batch: 1,
		Optimizer: AdamW8bit, Stack: StackHFTrainer}
	const layers = 30
	const quantized, small = layers * 6 * 4608, layers * 2 * 1536
	want := int64(quantized*2 + quantized*2*4/256 + small*2*4)
	for _, opt := range []Optimizer{AdamW8bit, PagedAdamW8bit} {
		r.Optimizer = opt
		te := termsOf(t, r)
		if te.Trainable != quantized+small {
			t.Fatalf("%s: %d trainable, want %d", opt, te.Trainable, quantized+small)
		}
		if te.OptStates != want || te.PagedStates != 0 {
			t.Errorf("%s: states %d B on the device, %d paged; want %d (uint8 and a 4-byte absmax per 256 for the large factors, two fp32 states for k's and v's lora_B), none paged", opt, te.OptStates, te.PagedStates, want)
		}
	}
	// torchao's AdamW8bit has no such rule here (its small tensors are norms).
	r.Optimizer = AOAdamW8bit
	te := termsOf(t, r)
	if all := int64(quantized + small); te.OptStates != all*2+all*2*4/256 {
		t.Errorf("torchao: states %d B, want %d", te.OptStates, all*2+all*2*4/256)
	}
}

// Data parallelism replicates the optimizer: each GPU pages the whole
// model's states, as one GPU alone does.
func TestPagedDataParallelNotDivided(t *testing.T) {
	one := pagedBase(t, PagedAdamW32bit, 64, "all-linear")
	ddp := one
	ddp.Sharding = Sharding{Strategy: "ddp", GPUs: 4}
	a, b := est(t, one), est(t, ddp)
	if a.PagedOptimizer == 0 || b.PagedOptimizer != a.PagedOptimizer {
		t.Errorf("PagedOptimizer: one GPU %d, DDP over 4 %d; want the same, non-zero", a.PagedOptimizer, b.PagedOptimizer)
	}
}

// DeepSpeed stage 0 in bf16 (BF16_Optimizer) partitions its flat groups
// over the ranks as ZeRO-1 does: the paged states per GPU are ZeRO-1's.
// The step's fp32 gradient partition stays in ZeRO-2's figures.
func TestPagedDeepSpeedStage0AndStep(t *testing.T) {
	base := pagedBase(t, PagedAdamW32bit, 0)
	base.Method, base.LoRARank, base.LoRATargets = Full, 0, nil
	z0, z1 := base, base
	z0.Sharding = Sharding{Strategy: "zero0", GPUs: 4}
	z1.Sharding = Sharding{Strategy: "zero1", GPUs: 4}
	e0, e1 := est(t, z0), est(t, z1)
	if e0.PagedOptimizer == 0 || e0.PagedOptimizer != e1.PagedOptimizer {
		t.Errorf("paged per GPU: zero0 %d, zero1 %d; want the same, non-zero", e0.PagedOptimizer, e1.PagedOptimizer)
	}
	z2 := base
	z2.Sharding = Sharding{Strategy: "zero2", GPUs: 4}
	tt := termsOf(t, z2)
	// Qwen2.5-7B's 7,615,616,512 parameters, 4 B each (whole-model:
	// applySharding divides it over the ranks).
	if want := int64(4 * 7_615_616_512); tt.OptTransient != want {
		t.Errorf("ZeRO-2 step transient %d B, want the fp32 gradient partition's %d", tt.OptTransient, want)
	}
}

// everyTensorAtLeast is the shortcut eightBitStates takes around the
// tensor-by-tensor walk: wherever it says every trained tensor has at
// least n elements, the walk finds none under n, for every catalog model,
// LoRA at ranks 1 to 64 on attention and all-linear targets.
func TestEveryTensorAtLeastAgreesWithTheWalk(t *testing.T) {
	const n = 4096 // bitsandbytes' min_8bit_size
	shortcuts := 0
	for _, e := range catalog.All() {
		m, err := hfconfig.Parse(e.Config)
		if err != nil {
			continue // a config the estimator refuses is not this test's
		}
		for _, rank := range []int64{1, 8, 16, 64} {
			for _, targets := range []string{"attention", "all-linear"} {
				r, err := (Request{Model: m, Method: LoRA, LoRARank: rank, LoRATargets: []string{targets}, SeqLen: 512, Batch: 1}).Normalize()
				if err != nil || !everyTensorAtLeast(r, n) {
					continue
				}
				shortcuts++
				if small, _, _ := trainableSplit(r, n, n); small != 0 {
					t.Errorf("%s rank %d %s: shortcut says every tensor ≥ %d, the walk finds %d elements below", e.ID, rank, targets, n, small)
				}
			}
		}
	}
	if shortcuts == 0 {
		t.Fatal("the shortcut never applied: the test checks nothing")
	}
	t.Logf("%d requests took the shortcut", shortcuts)
}
