package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
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

// smallLlama is a Llama config small enough to count by hand: hidden 64, 2
// layers, 4 heads of 16 (2 KV heads), intermediate 128, vocabulary 1000.
func smallLlama(t testing.TB) *hfconfig.Model {
	t.Helper()
	m, err := hfconfig.Parse([]byte(`{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
		"tie_word_embeddings": false, "max_position_embeddings": 4096}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTokenFLOPsByHand checks the FLOPs formula against a count done by
// hand for the small Llama above.
func TestTokenFLOPsByHand(t *testing.T) {
	m := smallLlama(t)
	// Per layer: q 64×64, k 64×32, v 64×32, o 64×64, gate/up 64×128 each,
	// down 128×64: 4096+2048+2048+4096+8192+8192+8192 = 36864 weights.
	// Two layers: 73728. Output layer 64×1000 = 64000.
	const layer, head = 2 * 36864.0, 64000.0
	const seq, dAttn = 512.0, 64.0 // 4 heads × 16
	// Two layers × (2·a·d scores + 2·a·d values); under a causal mask with
	// SDPA (the default) a token attends to a = s/2 keys on average.
	attnFwd := 2 * 4 * (seq / 2) * dAttn
	s := ShapeOf(m)
	if s.LayerMatmul != layer || s.HeadMatmul != head || s.AttnWidthFull != 2*dAttn {
		t.Fatalf("shape %+v, want layer matmuls %v, head %v, attention width %v", s, layer, head, 2*dAttn)
	}
	full := estimate.Request{Model: m, Method: estimate.Full, SeqLen: 512, GradCkpt: "none"}
	if got, want := TokenFLOPs(s, full, 0), (FLOPs{Train: 6*(layer+head) + 3*attnFwd}); got != want {
		t.Errorf("full: %+v, want %+v", got, want)
	}
	full.GradCkpt = "full"
	if got, want := TokenFLOPs(s, full, 0), (FLOPs{Train: 6*(layer+head) + 3*attnFwd, Recompute: 2*layer + attnFwd}); got != want {
		t.Errorf("full, checkpointed: %+v, want %+v", got, want)
	}
	// LoRA rank 8 on q and v: (64+64) + (64+32) = 224 per layer, 448 in all.
	w, err := AdapterWidth(m, []string{"q_proj", "v_proj"})
	if err != nil || w != 448 {
		t.Fatalf("adapter width %v (%v), want 448", w, err)
	}
	lora := estimate.Request{Model: m, Method: estimate.LoRA, LoRARank: 8, SeqLen: 512, GradCkpt: "full"}
	want := FLOPs{Train: 4*(layer+head) + 3*attnFwd + 6*8*448, Recompute: 2*layer + attnFwd + 2*8*448}
	if got := TokenFLOPs(s, lora, w); got != want {
		t.Errorf("lora: %+v, want %+v", got, want)
	}
	// Eager attention computes the whole score matrix: a = s.
	eager := full
	eager.Attn = estimate.Eager
	if got, want := TokenFLOPs(s, eager, 0), (FLOPs{Train: 6*(layer+head) + 3*2*attnFwd, Recompute: 2*layer + 2*attnFwd}); got != want {
		t.Errorf("eager, checkpointed: %+v, want %+v", got, want)
	}
	// QLoRA: the same FLOPs as LoRA, and 2.5 bytes of dequantization
	// traffic per base weight in the forward, the recomputed forward and
	// the backward.
	qlora := lora
	qlora.Method = estimate.QLoRA
	want.DequantBytes = 3 * 2.5 * layer
	if got := TokenFLOPs(s, qlora, w); got != want {
		t.Errorf("qlora: %+v, want %+v", got, want)
	}
	// The frozen base's backward skips the weight gradients: a LoRA step
	// costs about two thirds of a full one on the matmuls.
	if r := (4 * (layer + head)) / (6 * (layer + head)); math.Abs(r-2.0/3) > 1e-12 {
		t.Errorf("frozen/trained matmul ratio %v", r)
	}
}

// TestTokenFLOPsMoE counts the active experts, not all of them.
func TestTokenFLOPsMoE(t *testing.T) {
	m := catalogModel(t, "mistralai/Mixtral-8x7B-v0.1")
	s := ShapeOf(m)
	// 2 of 8 experts: the active matmuls are far fewer than the weights.
	all := float64(m.LinearParams())
	if !(s.LayerMatmul < 0.4*all && s.LayerMatmul > 0.2*all) {
		t.Errorf("active layer matmuls %.3g of %.3g weights: want about 2/8 of the expert weights plus attention", s.LayerMatmul, all)
	}
}

func searchOptions(t testing.TB, id string, gpuGiB float64, perNode, nodes, effective int64) Options {
	t.Helper()
	est, err := estimate.ByName("")
	if err != nil {
		t.Fatal(err)
	}
	intra, _ := LinkFor(NVLink, "Ampere", perNode)
	inter, _ := LinkFor(InfiniBand, "Ampere", perNode)
	host, _ := LinkFor(PCIe, "Ampere", perNode)
	return Options{
		Estimator: est,
		Request:   estimate.Request{Model: catalogModel(t, id), Method: estimate.LoRA, SeqLen: 2048, Batch: 1, GPUTotal: int64(gpuGiB * estimate.GiB)},
		Goal:      Goal{DatasetTokens: 1e8, Epochs: 1, EffectiveBatch: effective, PricePerGPUHour: 2},
		Space:     Space{GPUsPerNode: perNode, Nodes: nodes, ShorterSeqs: true},
		Hardware:  Hardware{PeakTFLOPs: 312, Intra: intra, Inter: inter, Host: host},
	}
}

// TestSearchKeepsEffectiveBatchAndRanks: every plan fits, keeps the
// effective batch, and the list is in Compare's order.
func TestSearchKeepsEffectiveBatchAndRanks(t *testing.T) {
	o := searchOptions(t, "Qwen/Qwen2.5-7B", 24, 4, 1, 16)
	res, err := Search(o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fits == 0 || res.Candidates < 1000 {
		t.Fatalf("fits %d of %d candidates", res.Fits, res.Candidates)
	}
	for i, p := range res.Plans {
		if got := p.MicroBatch * p.GradAccum * p.World; got != 16 {
			t.Fatalf("plan %d: %d × %d × %d GPUs = %d sequences per update, want 16", i, p.MicroBatch, p.GradAccum, p.World, got)
		}
		if p.Request.Batch != p.MicroBatch || p.Request.GradAccum != p.GradAccum {
			t.Fatalf("plan %d: the request says batch %d × %d, the plan %d × %d", i, p.Request.Batch, p.Request.GradAccum, p.MicroBatch, p.GradAccum)
		}
		if p.Estimate.Verdict.Fit != estimate.FitYes {
			t.Fatalf("plan %d does not fit: %+v", i, p.Estimate.Verdict)
		}
		if i > 0 && Compare(res.Plans[i-1], p) > 0 {
			t.Fatalf("plans %d and %d are out of order", i-1, i)
		}
	}
	best := res.Plans[0]
	if best.ChangesResult || !best.Time.Known {
		t.Errorf("best plan changes the result or has no time: %+v", res.Trades(best))
	}
	// Ranked by time: the best is no slower than any plan that keeps the result.
	for _, p := range res.Plans {
		if !p.ChangesResult && p.Time.Total < best.Time.Total {
			t.Errorf("a plan keeping the result is faster (%v s) than the first (%v s)", p.Time.Total, best.Time.Total)
		}
	}
	// A plan that changes the method says so.
	var sawMethod bool
	for _, p := range res.Plans {
		if p.Request.Method == estimate.QLoRA {
			sawMethod = true
			if !p.ChangesResult || !strings.Contains(strings.Join(res.Trades(p), ";"), "changes the result: qlora") {
				t.Errorf("a qlora plan does not say it changes the result: %q", res.Trades(p))
			}
		}
	}
	if !sawMethod {
		t.Error("no qlora plan among those that fit")
	}
	// Cost is time × price × GPUs.
	if got, want := best.Cost, best.Time.Total/3600*2*float64(best.World); math.Abs(got-want) > 1e-9*want {
		t.Errorf("cost %v, want %v", got, want)
	}
}

// TestCompareOrder pins the ranking keys: result kept, time, cost,
// accumulation, headroom.
func TestCompareOrder(t *testing.T) {
	mk := func(changes bool, total, cost float64, accum int64, ratio float64) Plan {
		return Plan{ChangesResult: changes, Time: Time{Known: true, Total: total}, Cost: cost, GradAccum: accum,
			Estimate: &estimate.Estimate{Verdict: estimate.Verdict{Ratio: ratio}}}
	}
	for _, c := range []struct {
		name string
		a, b Plan
	}{
		{"result first", mk(false, 100, 9, 9, 0.8), mk(true, 1, 1, 1, 0.1)},
		{"time", mk(false, 1, 9, 9, 0.8), mk(false, 2, 1, 1, 0.1)},
		{"cost", mk(false, 1, 1, 9, 0.8), mk(false, 1, 2, 1, 0.1)},
		{"accumulation", mk(false, 1, 1, 1, 0.8), mk(false, 1, 1, 2, 0.1)},
		{"headroom", mk(false, 1, 1, 1, 0.1), mk(false, 1, 1, 1, 0.8)},
	} {
		if Compare(c.a, c.b) >= 0 || Compare(c.b, c.a) <= 0 {
			t.Errorf("%s: a should rank first", c.name)
		}
	}
	unknown := mk(false, 0, 0, 1, 0.1)
	unknown.Time.Known = false
	if Compare(mk(false, 1e9, 1, 1, 0.8), unknown) >= 0 {
		t.Error("a plan with a known time should rank before one without")
	}
}

// TestBisect finds the boundary: the value fits and the next does not.
func TestBisect(t *testing.T) {
	for _, b := range []int64{1, 2, 3, 100, 4095, 4096, 1 << 24} {
		calls := 0
		got := Bisect(1, 1<<24, func(v int64) bool { calls++; return v <= b })
		if got != b {
			t.Errorf("boundary %d: got %d", b, got)
		}
		if calls > 26 {
			t.Errorf("boundary %d: %d calls", b, calls)
		}
	}
	if got := Bisect(5, 10, func(int64) bool { return false }); got != 4 {
		t.Errorf("nothing fits: got %d, want lo-1 = 4", got)
	}
}

// TestMaximizeSeqLen: the longest sequence that fits a 24 GiB card fits,
// and one token more does not. (A 16 GiB card fits no batch at 2048
// tokens: bf16-true QLoRA's fp32 attention runs SDPA's math kernel, whose
// s² scores the recomputed block holds.)
func TestMaximizeSeqLen(t *testing.T) {
	o := searchOptions(t, "Qwen/Qwen2.5-7B", 24, 1, 1, 16)
	o.Request.Method = estimate.QLoRA
	o.Request.GradCkpt = "full"
	o.Request.FusedCE = "liger"
	for _, q := range []Quantity{MaxSeqLen, MaxBatch, MaxRank} {
		m, err := Maximize(o, q)
		if err != nil {
			t.Fatal(err)
		}
		if m.Plan == nil || m.Value < 1 {
			t.Fatalf("%s: nothing fits", q)
		}
		if m.Plan.Estimate.Verdict.Fit != estimate.FitYes {
			t.Errorf("%s %d: verdict %s", q, m.Value, m.Plan.Estimate.Verdict.Fit)
		}
		if m.Value >= m.Bound {
			continue
		}
		next := m.Plan.Request
		switch q {
		case MaxSeqLen:
			next.SeqLen++
		case MaxBatch:
			next.Batch++
		case MaxRank:
			next.LoRARank++
		}
		e, err := o.Estimator.Estimate(next)
		if err == nil && e.Verdict.Fit == estimate.FitYes {
			t.Errorf("%s: %d fits but so does %d", q, m.Value, m.Value+1)
		}
	}
}

// TestNoPlan: a 70B on one 16 GiB card fits in no configuration; the
// result says memory binds and how far off the nearest plan is.
func TestNoPlan(t *testing.T) {
	o := searchOptions(t, "meta-llama/Llama-3.1-70B", 16, 1, 1, 16)
	res, err := Search(o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fits != 0 || res.Nearest == nil {
		t.Fatalf("fits %d, nearest %v", res.Fits, res.Nearest)
	}
	if !strings.HasPrefix(res.Binding, "GPU memory") || res.Nearest.Estimate.Verdict.Ratio <= estimate.YesRatio {
		t.Errorf("binding %q, nearest ratio %v", res.Binding, res.Nearest.Estimate.Verdict.Ratio)
	}
	o = searchOptions(t, "Qwen/Qwen2.5-7B", 80, 3, 1, 7)
	o.Space.GPUsPerNode = 3
	res, err = Search(o)
	if err != nil {
		t.Fatal(err)
	}
	// 7 sequences split over 1 GPU only (7 is prime), and that fits.
	if res.Fits == 0 {
		t.Errorf("7 sequences on one GPU: no plan (%s)", res.Binding)
	}
	// 3 sequences: 1 GPU × (1×3 or 3×1), 3 GPUs × 1×1; 16 GPUs cannot.
	if got := Layouts(Space{GPUsPerNode: 8, Nodes: 2}, 3); len(got) != 3 {
		t.Errorf("layouts of 3 sequences over 2 × 8 GPUs: %+v, want 3", got)
	}
}

// TestLayouts: every layout keeps the batch and no GPU count that does not
// divide it appears.
func TestLayouts(t *testing.T) {
	got := Layouts(Space{GPUsPerNode: 8, Nodes: 2}, 16)
	seen := map[int64]bool{}
	for _, l := range got {
		if l.World*l.MicroBatch*l.GradAccum != 16 {
			t.Errorf("%+v does not keep 16", l)
		}
		seen[l.World] = true
	}
	for _, w := range []int64{1, 2, 4, 8, 16} {
		if !seen[w] {
			t.Errorf("no layout over %d GPUs", w)
		}
	}
	for _, w := range []int64{3, 5, 6, 7} {
		if seen[w] {
			t.Errorf("a layout over %d GPUs cannot keep 16 sequences", w)
		}
	}
}

// TestStepTime checks the time arithmetic on a case computed by hand.
func TestStepTime(t *testing.T) {
	m := smallLlama(t)
	r, err := estimate.Request{Model: m, Method: estimate.Full, SeqLen: 1000, Batch: 2, GradAccum: 3, GradCkpt: "full",
		Sharding: estimate.Sharding{Strategy: "ddp", GPUs: 4}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	e := &estimate.Estimate{TrainableParams: 1e6}
	f := FLOPs{Train: 1e9, Recompute: 3e8}
	hw := Hardware{PeakTFLOPs: 100, MFU: 0.5, Intra: Link{BytesPerSec: 1e9}}
	got := StepTime(hw, r, e, f, 2e6, layout{world: 4, perNode: 4, nodes: 1, micro: 2, accum: 3})
	// 6000 tokens per GPU × 1e9 / (100e12 × 0.5) = 0.12 s; recompute 0.036 s.
	// DDP all-reduce of 1e6 × 2 bytes over 4: 2 × 2e6 × 3/4 / 1e9 = 0.003 s, hidden.
	want := Time{Known: true, MFU: 0.5, Compute: 0.12, Recompute: 0.036, Communication: 0.003, Step: 0.156}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"compute", got.Compute, want.Compute}, {"recompute", got.Recompute, want.Recompute},
		{"communication", got.Communication, want.Communication}, {"exposed", got.CommExposed, 0}, {"step", got.Step, want.Step}} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	// A paged optimizer's 3e9 B of states beside a 78e9 B total on an 80e9 B
	// budget: 1e9 B cannot stay resident and crosses a 1e10 B/s host link
	// twice, 0.2 s; resident ones cost nothing.
	hw.Host = Link{BytesPerSec: 1e10}
	paged := &estimate.Estimate{TrainableParams: 1e6, Total: 78e9, PagedOptimizer: 3e9, Verdict: estimate.Verdict{Budget: 80e9}}
	if got := StepTime(hw, r, paged, f, 2e6, layout{world: 4, perNode: 4, nodes: 1, micro: 2, accum: 3}); math.Abs(got.Offload-0.2) > 1e-12 || math.Abs(got.Step-0.356) > 1e-12 {
		t.Errorf("paged spill: offload %v, step %v; want 0.2 and 0.356", got.Offload, got.Step)
	}
	paged.Total = 70e9
	if got := StepTime(hw, r, paged, f, 2e6, layout{world: 4, perNode: 4, nodes: 1, micro: 2, accum: 3}); got.Offload != 0 {
		t.Errorf("paged states that stay resident: offload %v, want 0", got.Offload)
	}
	hw.PeakTFLOPs = 0
	if got := StepTime(hw, r, e, f, 2e6, layout{world: 4, perNode: 4, nodes: 1, micro: 2, accum: 3}); got.Known || got.Why == "" {
		t.Errorf("no peak: %+v", got)
	}
}
