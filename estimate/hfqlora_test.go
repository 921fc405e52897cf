package estimate

import (
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// A one-layer model with one 128 x 256 Linear: 32,768 weights in 512 blocks
// of 64, counted by hand from bitsandbytes' quantize_4bit.
func TestBnb4bitStorage(t *testing.T) {
	m := &hfconfig.Model{ModelType: "llama", NumLayers: 1, Layers: []hfconfig.Layer{{Linears: []hfconfig.Linear{{Name: "q_proj", In: 256, Out: 128, Copies: 1}}}}}
	for _, tt := range []struct {
		quant        Quant
		packed, meta int64
	}{
		// 16,384 packed bytes; nf4: 512 fp32 absmax (2,048 B) and the 64-byte code (one 512-byte block).
		{NF4, 16384, 2048 + 512},
		// nf4-dq: 512 uint8 absmax, 2 fp32 second-level absmax, the 1 KiB dynamic code, the
		// offset scalar and the 4-bit code: one 512-byte block each but the code's two.
		{NF4DQ, 16384, 512 + 512 + 1024 + 512 + 512},
		{FP4, 16384, 2048 + 512},
	} {
		packed, meta, n := bnb4bitStorage(Request{Model: m, Quant: tt.quant})
		if packed != tt.packed || meta != tt.meta || n != 128*256 {
			t.Errorf("%s: packed %d, state %d, weights %d; want %d, %d, %d", tt.quant, packed, meta, n, tt.packed, tt.meta, 128*256)
		}
	}
}

func TestHFQLoRAScope(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	base := Request{Model: m, Method: QLoRA, Precision: BF16True, LoRARank: 16, LoRATargets: []string{"attention"}, SeqLen: 1024, Batch: 2}
	// Each request must normalize (must panics otherwise): one Normalize
	// refuses would pass the checks without reaching hfExact.
	if !hfExact(must(base.Normalize())) {
		t.Fatal("nf4-dq QLoRA in bf16-true is not on the transformers path")
	}
	moe := base
	moe.Model = catalogModel(t, "Qwen/Qwen1.5-MoE-A2.7B")
	if hfExact(must(moe.Normalize())) {
		t.Error("MoE QLoRA on the transformers path, which the oracle grid does not hold it to")
	}
	mixed := base
	mixed.Precision = BF16Mixed
	if q := must(mixed.Normalize()); !hfExact(q) || !hfAutocastQLoRA(q) {
		t.Error("nf4-dq QLoRA under bf16 autocast with SDPA is not on the transformers path")
	}
	mixedEager := mixed
	mixedEager.Attn = Eager
	if q := must(mixedEager.Normalize()); !hfExact(q) || !hfAutocastQLoRA(q) {
		t.Error("nf4-dq QLoRA under bf16 autocast with eager attention is not on the transformers path")
	}
	for name, mod := range map[string]func(*Request){
		"bf16-mixed, flash":  func(r *Request) { r.Precision, r.Attn = BF16Mixed, FlashAttention2 },
		"bf16-mixed, FSDP":   func(r *Request) { r.Precision, r.Sharding = BF16Mixed, Sharding{Strategy: FSDPFullShard, GPUs: 2} },
		"fp16-mixed":         func(r *Request) { r.Precision = FP16Mixed },
		"int8 base":          func(r *Request) { r.Quant = Int8 },
		"bf16 quant storage": func(r *Request) { r.QuantStorage = DtypeBF16 },
		"no kbit upcast":     func(r *Request) { no := false; r.UpcastFrozen = &no },
	} {
		q := base
		mod(&q)
		if q, err := q.Normalize(); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if hfExact(q) {
			t.Errorf("%s: on the transformers path, which the oracle does not imitate", name)
		}
	}
	falcon := mixed
	falcon.Model = catalogModel(t, "tiiuae/falcon-7b")
	if hfAutocastQLoRA(asRun(must(falcon.Normalize()))) {
		t.Error("falcon's unquantized Linears under autocast read as the Linear4bit path")
	}
}

// What one Llama-3.2-1B layer saves per token under autocast over a QLoRA
// base (all-linear, r16, SDPA, no checkpointing), as the oracle's census
// breaks it down by operator (oracle.fakestep --census, 1024 × 8 tokens):
// the two norms' fp32 inputs and the fp32 gate and up (add.Tensor, 81,920
// B), SiLU's fp32 output (32,768 B), the bf16 casts lora_A saves for q, k,
// v, gate, up and down and SDPA's casts of q, k and v (43,008 B of the
// _to_copy bf16 a layer; the rest is the output layer's cast and the
// adapters' weights, once), the flash output and logsumexp (4,096 + 128
// B) and lora_A's bf16 outputs (224 B). o_proj's lora_A reads SDPA's
// output, a view: nothing of its own.
func TestAutocastQLoRALayerSaved(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-3.2-1B")
	r := must(Request{Model: m, Method: QLoRA, Precision: BF16Mixed, Stack: StackHFTrainer, LoRARank: 16,
		LoRATargets: []string{"all-linear"}, SeqLen: 1024, Batch: 8, Attn: SDPA, GradCkpt: CkptNone}.Normalize())
	if !hfAutocastQLoRA(r) {
		t.Fatal("not the autocast QLoRA path")
	}
	const want = 81920 + 32768 + 43008 + 4096 + 128 + 224
	if got := hfLayerSaved(r).Layer; got != want {
		t.Errorf("layer saves %.0f B per token, want %d (the oracle's census)", got, want)
	}
	// The output layer's bf16 cast (vocab × hidden × 2) beside the loss chain,
	// and the down projection's cast freed by the MLP backward's peak.
	tt := termsOf(t, r)
	if want := 2 * float64(m.Vocab*m.Hidden); tt.HeadCast != want {
		t.Errorf("head cast %.0f B, want %.0f", tt.HeadCast, want)
	}
	if got, want := qloraMLPFreed(r), 2*float64(m.ActiveFFN())*1024*8; got != want {
		t.Errorf("freed before the MLP backward's peak: %.0f B, want %.0f", got, want)
	}
	// Without autocast lora_A saves the fp32 product itself, freed alike.
	bt := r
	bt.Precision = BF16True
	if got, want := qloraMLPFreed(bt), 4*float64(m.ActiveFFN())*1024*8; got != want {
		t.Errorf("bf16-true: freed %.0f B, want the fp32 product's %.0f", got, want)
	}
	// GPT-2's attn.c_proj and mlp.c_proj share a leaf name: the MLP's is
	// still found (its input is the feed-forward width).
	g := must(Request{Model: catalogModel(t, "openai-community/gpt2"), Method: QLoRA, Precision: BF16Mixed, Stack: StackHFTrainer,
		LoRARank: 16, LoRATargets: []string{"all-linear"}, SeqLen: 4096, Batch: 4, Attn: SDPA}.Normalize())
	if got, want := qloraMLPFreed(g), 2*float64(g.Model.ActiveFFN())*4096*4; got != want {
		t.Errorf("gpt2 all-linear: freed %.0f B, want %.0f", got, want)
	}
	// No adapter on the down projection: nothing of the MLP saved by one.
	att := r
	att.LoRATargets = []string{"attention"}
	if got := qloraMLPFreed(must(att.Normalize())); got != 0 {
		t.Errorf("attention-only adapters: freed %.0f B, want 0", got)
	}
}

// Falcon's FalconLinear is not an nn.Linear by type: transformers leaves it
// unquantized, and the QLoRA estimate is the fp32 LoRA one's but for the
// optimizer and adapters, which are the same: the two agree.
func TestFalconQLoRAIsFP32LoRA(t *testing.T) {
	m := catalogModel(t, "tiiuae/falcon-7b")
	q := Request{Model: m, Method: QLoRA, Precision: BF16True, LoRARank: 16, LoRATargets: []string{"attention"}, SeqLen: 1024, Batch: 2, Stack: StackHFTrainer}
	l := q
	l.Method, l.Precision = LoRA, FP32
	// The terms see the LoRA run (unconvertedQLoRA), so no QLoRA term —
	// packed weights, quant state, Linear4bit's working set — applies.
	tt, rn, err := PhasePeak{Coef: DefaultCoefficients}.terms(q)
	if err != nil {
		t.Fatal(err)
	}
	if rn.Method != LoRA || rn.Quant != "" || hfQLoRA(rn) {
		t.Errorf("falcon QLoRA read as %s (quant %q), want LoRA without a quantized base", rn.Method, rn.Quant)
	}
	if tt.Dequant != 0 {
		t.Errorf("falcon: Linear4bit working set %d B, want none", tt.Dequant)
	}
	if got := component(est(t, q), CQuantOverhead); got != 0 {
		t.Errorf("falcon: quant state %d B, want none", got)
	}
	for _, ck := range []Checkpointing{CkptNone, CkptFull} {
		q.GradCkpt, l.GradCkpt = ck, ck
		if a, b := allocated(t, q), allocated(t, l); a != b {
			t.Errorf("ckpt %s: falcon QLoRA %d B, fp32 LoRA %d B: want equal", ck, a, b)
		}
	}
}

// The weights: packed Linears and everything else in fp32, biases included.
func TestHFQLoRAWeights(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B") // q/k/v carry biases
	r := Request{Model: m, Method: QLoRA, Precision: BF16True, LoRARank: 16, LoRATargets: []string{"attention"}, SeqLen: 512, Batch: 1}
	tt, rn, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	packed, _, n := bnb4bitStorage(rn)
	if want := packed + (m.Params()-n)*4; tt.Weights != want {
		t.Errorf("weights %d, want %d", tt.Weights, want)
	}
	if n >= m.LinearParams() {
		t.Errorf("quantized weights %d include the biases (Linear params %d)", n, m.LinearParams())
	}
}

// GPT-2's attention adapters in fp32 on an fp32 residual stream: lora_A of
// c_attn keeps ln_1's output, and attn.c_proj's input is SDPA's saved output;
// mlp.c_proj, of the same leaf name, is not adapted and reads nothing here.
func TestGPT2AdapterInputsScoped(t *testing.T) {
	m := catalogModel(t, "openai-community/gpt2")
	r, err := Request{Model: m, Method: LoRA, Precision: FP32, LoRARank: 16, LoRATargets: []string{"attention"}, SeqLen: 512, Batch: 1}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	got := hfAdapterSaved(r, 4, nil)
	want := float64(4*16*2) + 4*float64(m.Hidden) // lora_B's inputs (rank) for two modules, and c_attn's input
	if got != want {
		t.Errorf("adapters save %.0f B per token and layer, want %.0f", got, want)
	}
}

// The quant_overhead and weights sources say how their figures were
// counted: a flat rate per Linear weight only where the figure is that rate
// (the fitted path), bitsandbytes' per-Linear tensors on the transformers
// path, whose figure the flat rate does not give.
func TestQLoRASourcesFollowThePath(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	pp := PhasePeak{Coef: DefaultCoefficients}
	flat, perLinear := 0, 0
	for name, r := range map[string]Request{
		"transformers": {Model: m, Method: QLoRA, SeqLen: 1024, Batch: 1},
		"fsdp_qlora":   {Model: m, Method: QLoRA, Stack: StackFSDPQLoRA, SeqLen: 1024, Batch: 1},
		"nf4":          {Model: m, Method: QLoRA, Quant: NF4, SeqLen: 1024, Batch: 1},
	} {
		e, err := pp.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		x, err := pp.Explain(r, e)
		if err != nil {
			t.Fatal(err)
		}
		n := must(r.Normalize())
		q, _ := e.Component(CQuantOverhead)
		rate := int64(float64(m.LinearParams()) * quantStateBytesPerParam(n.Quant))
		src, wsrc := x.Source(CQuantOverhead), x.Source(CWeights)
		if q == rate {
			flat++
			if !strings.Contains(src, "B/param") {
				t.Errorf("%s: quant state %d B is the flat rate, source %q does not say it", name, q, src)
			}
			continue
		}
		perLinear++
		if strings.Contains(src, "B/param") || !strings.Contains(src, "per quantized Linear") {
			t.Errorf("%s: quant state %d B, not the flat rate's %d B, but source %q", name, q, rate, src)
		}
		if !strings.Contains(wsrc, "512-byte") {
			t.Errorf("%s: weights source %q does not say the packed weights are counted in allocator blocks", name, wsrc)
		}
	}
	if flat == 0 || perLinear == 0 {
		t.Errorf("%d flat-rate and %d per-Linear requests: both paths must be checked", flat, perLinear)
	}
}

// QLoRA under autocast with eager attention is spelled out: the scores'
// matmuls run in bf16 over the fp32 stream, so the softmax (fp32) is kept
// beside the value matmul's bf16 cast of it, and GPT-2's dropout keeps its
// mask and the bf16 cast of its fp32 output. Per head per token per key, as
// the oracle's live sets show them (Llama-3.2-1B at 512 tokens; GPT-2 at
// its backward peak, read at 8192 tokens: per score element the figures do
// not depend on the length).
func TestAutocastQLoRAEagerScores(t *testing.T) {
	for _, c := range []struct {
		model          string
		saved, backing float64
	}{
		{"meta-llama/Llama-3.2-1B", 4 + 2, 12 - 6},
		{"openai-community/gpt2", 4 + 1 + 2, 13 - 7},
	} {
		m := catalogModel(t, c.model)
		r := must(Request{Model: m, Method: QLoRA, Precision: BF16Mixed, Stack: StackHFTrainer, LoRARank: 16,
			LoRATargets: []string{"attention"}, SeqLen: 512, Batch: 2, Attn: Eager, GradCkpt: CkptFull}.Normalize())
		if !hfAutocastQLoRA(r) {
			t.Fatalf("%s: eager QLoRA under autocast is not on the spelled-out path", c.model)
		}
		s := hfLayerSaved(r)
		heads := float64(m.Heads)
		if s.Scores != heads*c.saved || s.ScoresBackward != heads*c.backing {
			t.Errorf("%s: scores %g B, backward %g B per token per key; want %g × (%g, %g)",
				c.model, s.Scores, s.ScoresBackward, heads, c.saved, c.backing)
		}
	}
}

// Under autocast too, Falcon's QLoRA is LoRA over its fp32 frozen weights
// (every parameter 4 B after kbit preparation), not a 4-bit base: the two
// estimates agree, and the weights are the fp32 model's; sharded too.
func TestFalconAutocastQLoRAIsFP32BaseLoRA(t *testing.T) {
	m := catalogModel(t, "tiiuae/falcon-7b")
	q := Request{Model: m, Method: QLoRA, Precision: BF16Mixed, LoRARank: 16, LoRATargets: []string{"query_key_value", "dense"},
		SeqLen: 1024, Batch: 2, Stack: StackHFTrainer, Attn: SDPA}
	l := q
	l.Method, l.FrozenBaseBytes = LoRA, 4
	for _, ck := range []Checkpointing{CkptNone, CkptFull} {
		q.GradCkpt, l.GradCkpt = ck, ck
		if a, b := allocated(t, q), allocated(t, l); a != b {
			t.Errorf("ckpt %s: falcon QLoRA %d B, fp32-base LoRA %d B: want equal", ck, a, b)
		}
		if got, want := component(est(t, q), CWeights), 4*m.Params(); got != want {
			t.Errorf("ckpt %s: weights %d B, want every parameter in fp32, %d B", ck, got, want)
		}
	}
	// Sharded the same holds: FSDP wraps the unquantized Linears (fp32
	// after kbit preparation), and DeepSpeed's engine casts the module,
	// those Linears included, to 16 bits: LoRA over a 16-bit base.
	for _, c := range []struct {
		st         Strategy
		frozenBase int64
	}{{FSDPFullShard, 4}, {ZeRO3, 0}, {ZeRO2, 0}} {
		qs, ls := q, l
		qs.Sharding = Sharding{Strategy: c.st, GPUs: 2}
		ls.Sharding, ls.FrozenBaseBytes = qs.Sharding, c.frozenBase
		if a, b := allocated(t, qs), allocated(t, ls); a != b {
			t.Errorf("%s: falcon QLoRA %d B, LoRA over the unquantized base %d B: want equal", c.st, a, b)
		}
	}
	// Another model's QLoRA under autocast keeps its 4-bit base.
	g := q
	g.Model, g.LoRATargets = catalogModel(t, "meta-llama/Llama-3.2-1B"), []string{"attention"}
	if r := unconvertedQLoRA(must(g.Normalize())); r.Method != QLoRA {
		t.Errorf("llama QLoRA rewritten as %s", r.Method)
	}
}
