package estimate

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"github.com/canifinetune/canifinetune/hfconfig"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Fused kernels, torch.compile and optimizer-in-backward: each changes what
// the step saves by the amount its source says (kernels.go), and in the
// direction it says.

func kernelBase(t *testing.T) Request {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	return Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 16, LoRATargets: []string{"all-linear"},
		SeqLen: 1024, Batch: 2, GradCkpt: CkptNone, Stack: StackHFTrainer}
}

func allocated(t *testing.T, r Request) int64 { t.Helper(); return est(t, r).Levels.Allocated }

func TestKernelSavings(t *testing.T) {
	base := kernelBase(t)
	m := base.Model
	tokens := float64(base.SeqLen * base.Batch)
	L := float64(m.NumLayers)
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	// bf16 residual stream, LoRA (norm weights frozen): eager RMSNorm saves
	// an fp32 copy (4 B), Liger its 16-bit input (2 B): 2 B a norm, 2 norms.
	norm := 2 * 2 * h * tokens * L
	// SwiGLU: silu(gate) (2 B × ffn) is recomputed, not saved.
	glu := 2 * ffn * tokens * L
	b := allocated(t, base)
	for _, c := range []struct {
		name string
		mod  func(*Request)
		want float64
	}{
		{"liger-rmsnorm", func(r *Request) { r.Kernels = []Kernel{KernelLigerRMSNorm} }, norm},
		{"liger-swiglu", func(r *Request) { r.Kernels = []Kernel{KernelLigerSwiGLU} }, glu},
		{"liger-rope saves no stored activation", func(r *Request) { r.Kernels = []Kernel{KernelLigerRoPE} }, 0},
		{"rmsnorm+swiglu+rope", func(r *Request) {
			r.Kernels = []Kernel{KernelLigerRMSNorm, KernelLigerSwiGLU, KernelLigerRoPE}
		}, norm + glu},
		{"torch.compile recomputes the same pointwise ops", func(r *Request) { r.Compile = true }, norm + glu},
		// foak on an unquantized base: fused LoRA is not installed, its
		// RMSNorm is; its fast cross-entropy drops 8 B a logit.
		{"foak on lora", func(r *Request) { r.Kernels = []Kernel{KernelFOAK} }, norm + fastCELogitBytes*tokens*float64(m.Vocab)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.mod(&r)
			got := float64(b - allocated(t, r))
			if math.Abs(got-c.want) > 1e-6*float64(b)+2 {
				t.Errorf("saving %.4g B, want %.4g B", got, c.want)
			}
		})
	}
}

// fms-acceleration's fused LoRA is installed on quantized bases only; there
// Unsloth's LoRA_MLP saves neither act(gate) nor act(gate)·up.
func TestFOAKFusedLoRAOnQuantizedBase(t *testing.T) {
	base := kernelBase(t)
	base.Method = QLoRA
	base.Precision = BF16Mixed
	withNorm := base
	withNorm.Kernels = []Kernel{KernelLigerRMSNorm}
	foak := base
	foak.Kernels = []Kernel{KernelFOAK}
	tn, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(withNorm)
	if err != nil {
		t.Fatal(err)
	}
	tf, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(foak)
	if err != nil {
		t.Fatal(err)
	}
	m := base.Model
	// act(gate) and act(gate)·up are not kept, at the eager MLP dtype.
	want := 2 * refQLoRAMLPBytes * float64(m.ActiveFFN()) * float64(base.SeqLen*base.Batch)
	if got := tf.KernelSavedLayer - tn.KernelSavedLayer; math.Abs(got-want) > 1 {
		t.Errorf("fused LoRA MLP saves %.4g B a layer beyond the norm, want %.4g B", got, want)
	}
	// Adapters on attention only: the MLP op is not installed.
	attnOnly := foak
	attnOnly.LoRATargets = []string{"q_proj", "k_proj", "v_proj", "o_proj"}
	ta, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(attnOnly)
	if err != nil {
		t.Fatal(err)
	}
	if ta.KernelSavedLayer != tn.KernelSavedLayer {
		t.Errorf("foak with attention-only adapters saves %.4g B a layer, want the norm's alone %.4g B", ta.KernelSavedLayer, tn.KernelSavedLayer)
	}
	if allocated(t, foak) >= allocated(t, withNorm) {
		t.Error("foak on a QLoRA base does not estimate less than its RMSNorm alone")
	}
}

// Liger's fused linear cross-entropy: the chunk is next_pow2(⌈BT/⌈V/H⌉⌉) rows
// (its source's example: BT 16384, V 32000, H 4096 gives 2048), grad_input is
// saved, and the whole logits chain is gone.
func TestLigerFusedLinearCrossEntropy(t *testing.T) {
	r := kernelBase(t) // Llama 2: V 32000, H 4096
	r.SeqLen, r.Batch = 4096, 4
	r.FusedCE = LossLiger
	nr, _ := r.Normalize()
	saved, transient := fusedLossBytes(nr, 2, false, 2)
	bt := float64(r.SeqLen * r.Batch)
	if want := 2*2048*32000*2 + 4*bt; transient != want {
		t.Errorf("transient %.0f B, want two 2048-row bf16 chunks and the fp32 loss: %.0f", transient, want)
	}
	if want := bt * 4096 * 2; saved != want {
		t.Errorf("saved %.0f B, want grad_input %.0f", saved, want)
	}
	full := r
	full.Method, full.LoRARank, full.LoRATargets = Full, 0, nil
	nf, _ := full.Normalize()
	savedFull, transientFull := fusedLossBytes(nf, 2, true, 2)
	if want := saved + 32000*4096*2; savedFull != want {
		t.Errorf("full fine-tune saved %.0f B, want grad_input + the output layer's grad_weight %.0f", savedFull, want)
	}
	// A trained bf16 output layer: grad_weight += mm(...).float(), a V×H
	// bf16 product and its fp32 copy beside one chunk.
	if want := 2048*32000*2 + 32000*4096*(2+4) + 4*bt; transientFull != want {
		t.Errorf("full fine-tune transient %.0f B, want a chunk, the V×H product and its fp32 copy: %.0f", transientFull, want)
	}
	// fp32 master weights: addmm(out_dtype=float32) in place.
	if _, tr := fusedLossBytes(nf, 2, true, 4); tr != transient {
		t.Errorf("fp32 grad_weight transient %.0f B, want the chunks alone %.0f", tr, transient)
	}
	stock := r
	stock.FusedCE = LossNone
	if allocated(t, r) >= allocated(t, stock) {
		t.Error("Liger's fused loss does not estimate less than the stock loss chain")
	}
	cce := r
	cce.FusedCE = LossCutCrossEntropy
	if allocated(t, cce) >= allocated(t, r) {
		t.Error("Cut Cross-Entropy (log-sum-exp only) does not estimate less than Liger (grad_input + chunk)")
	}
}

// Optimizer-in-backward frees each gradient after its step: the step phase
// holds one parameter's gradient, not all of them.
func TestOptimizerInBackward(t *testing.T) {
	r := kernelBase(t)
	r.Method, r.LoRARank, r.LoRATargets = Full, 0, nil
	r.GradCkpt = CkptFull
	r.Optimizer = AdamWTorchFused
	in := r
	in.OptimizerInBackward = true
	te, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(in)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Model
	if want := m.Vocab * m.Hidden * 2; te.Grads != want {
		t.Errorf("gradients %d B, want the largest parameter's (the embedding) %d B", te.Grads, want)
	}
	if got, plain := est(t, in).Phases.Step, est(t, r).Phases.Step; got >= plain/2 {
		t.Errorf("step phase %d with optimizer-in-backward, %d without: not freed", got, plain)
	}
	// The in-flight gradient is stepped inside the backward: it adds to the
	// forward/backward phase, which is then the peak.
	with, without := est(t, in), est(t, r)
	if got := with.Phases.Forward - without.Phases.Forward; got != te.Grads {
		t.Errorf("forward/backward phase grows by %d B with optimizer-in-backward, want the in-flight gradient's %d B", got, te.Grads)
	}
	if !with.Phases.ForwardPeak {
		t.Error("optimizer-in-backward: the step phase is the peak, but the step runs inside the backward")
	}
	for _, bad := range []func(*Request){
		func(r *Request) { r.GradAccum = 4 },
		func(r *Request) { r.Method, r.LoRARank = LoRA, 8 },
	} {
		x := in
		bad(&x)
		var fe *FieldError
		if _, err := x.Normalize(); !errors.As(err, &fe) || fe.Field != "optimizer_in_backward" {
			t.Errorf("want a field error on optimizer_in_backward, got %v", err)
		}
	}
}

func TestUnknownKernelRefused(t *testing.T) {
	r := kernelBase(t)
	r.Kernels = []Kernel{"liger-everything"}
	var ue *UnknownValueError
	if _, err := r.Normalize(); !errors.As(err, &ue) || ue.Option != "kernel" {
		t.Errorf("want an unknown kernel error, got %v", err)
	}
	r.Kernels = []Kernel{"fused-ops-and-kernels"}
	n, err := r.Normalize()
	if err != nil || n.Kernels[0] != KernelFOAK {
		t.Errorf("alias: %v %v", n.Kernels, err)
	}
}

// Liger's published kernel benchmark (testdata/liger-flce-memory.csv, see
// testdata/README.md) measures peak allocated memory around one forward and
// backward of a bf16 output layer and its loss. Beside the loss, the
// benchmark holds both providers' weights, the input, and from the second of
// its ten iterations on the input's and the used weight's .grad. What is
// left is the loss's own working set: for torch's cross_entropy on bf16
// logits (no autocast) three logit-sized bf16 tensors — which checks that
// accounting — and for Liger's fused linear cross-entropy what
// ligerFLCEBytes counts for that version's code and a trained output layer.
func TestLigerFLCEMeasured(t *testing.T) {
	f, err := os.Open("testdata/liger-flce-memory.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	const mib = 1 << 20
	var liger int
	for _, row := range rows[1:] {
		var cfg struct {
			H, V  int64
			Dtype string `json:"dtype"`
		}
		if err := json.Unmarshal([]byte(row[col["extra_benchmark_config_str"]]), &cfg); err != nil {
			t.Fatal(err)
		}
		bt, err := strconv.ParseInt(row[col["x_value"]], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		measured, err := strconv.ParseFloat(row[col["y_value_50"]], 64)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Dtype != "torch.bfloat16" || row[col["metric_unit"]] != "MB" || row[col["kernel_operation_mode"]] != "full" {
			t.Fatalf("unexpected row %v", row)
		}
		head := float64(cfg.V * cfg.H * 2)
		input := float64(bt * cfg.H * 2)
		held := 2*head + 2*input + head + float64(bt*8) // weights, input and its grad, weight grad, targets
		var model float64
		switch provider := row[col["kernel_provider"]]; provider {
		case "huggingface":
			model = held + 3*float64(bt*cfg.V*2)
		case "liger":
			// The benchmark ran liger 0.4.2, whose forward upcast each
			// chunk to fp32 beside its bf16 logits and the previous chunk's
			// gradient (four chunk units) and accumulated grad_weight
			// with addmm in place.
			saved, transient := ligerFLCEBytes(bt, cfg.V, cfg.H, 2, true, 2, ligerFLCE{ChunkUnits: 4})
			model = held + saved + transient
			liger++
		default:
			t.Fatalf("unknown provider %q", provider)
		}
		if dev := model/mib/measured - 1; math.Abs(dev) > 0.005 {
			t.Errorf("%s BT %d: modelled %.0f MiB, measured %.0f MiB (%+.1f %%)", row[col["kernel_provider"]], bt, model/mib, measured, 100*dev)
		}
	}
	if liger != 4 {
		t.Errorf("%d Liger rows, want the 4 of the excerpt", liger)
	}
}

// The unsloth stack runs Unsloth's own kernels where its loader dispatches
// to its own model code: fast_rms_layernorm, and LoRA_MLP on any base where
// gate, up and down carry adapters, have no bias and lora_dropout is 0
// (patch_peft_model's fast path).
func TestUnslothStackKernels(t *testing.T) {
	drop := 0.05
	for _, c := range []struct {
		name          string
		mod           func(*Request)
		norm, loraMLP bool
	}{
		{"lora all-linear", func(r *Request) {}, true, true},
		{"qlora all-linear", func(r *Request) { r.Method = QLoRA }, true, true},
		{"lora dropout 0.05: no fast path", func(r *Request) { r.LoRADropout = &drop }, true, false},
		{"attention only: no LoRA_MLP", func(r *Request) { r.LoRATargets = []string{"q_proj", "k_proj", "v_proj", "o_proj"} }, true, false},
		// Full fine-tuning, 8-bit bases, MoE and the model types its loader
		// does not dispatch to its own code go through FastModel.
		{"full fine-tune", func(r *Request) { r.Method, r.LoRARank, r.LoRATargets = Full, 0, nil }, false, false},
		{"8-bit base", func(r *Request) { r.Method, r.Quant = QLoRA, Int8 }, false, false},
		{"MoE", func(r *Request) { r.Model = catalogModel(t, "Qwen/Qwen3-30B-A3B") }, false, false},
		{"gemma 3: not dispatched", func(r *Request) { r.Model = catalogModel(t, "google/gemma-3-4b-pt") }, false, false},
		{"qwen3: dispatched", func(r *Request) { r.Model = catalogModel(t, "Qwen/Qwen3-8B") }, true, true},
		{"biased MLP: no LoRA_MLP", func(r *Request) { r.Model = biasedMLP(t) }, true, false},
		{"hf-trainer: eager norms, PEFT MLP", func(r *Request) { r.Stack = StackHFTrainer }, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := kernelBase(t)
			r.Stack, r.Precision, r.GradCkpt = StackUnsloth, "", ""
			r.LoRATargets = []string{"all-linear"}
			c.mod(&r)
			n, err := r.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			if ks := kernelsOf(n); ks.norm != c.norm || ks.loraMLP != c.loraMLP {
				t.Errorf("fused norm %v, LoRA_MLP %v; want %v, %v", ks.norm, ks.loraMLP, c.norm, c.loraMLP)
			}
		})
	}
}

// The llama-factory preset is the transformers Trainer with LLaMA-Factory's
// defaults: checkpointing on, no adapter dropout, and a QLoRA base whose
// norms stay in 16 bits (no prepare_model_for_kbit_training), so its MLP
// intermediates are 16-bit where the hf-trainer preset's are fp32.
func TestLlamaFactoryStack(t *testing.T) {
	base := kernelBase(t)
	base.Method, base.Precision, base.GradCkpt, base.Stack = QLoRA, "", "", ""
	StackLlamaFactory.Spec().Apply(&base)
	n, err := base.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if n.GradCkpt != CkptFull || n.LoRADropout == nil || *n.LoRADropout != 0 || upcastFrozen(n) || n.Precision != BF16Mixed || n.QuantStorage != DtypeBF16 {
		t.Errorf("defaults: ckpt %s, dropout %v, upcast %v, precision %s, storage %s", n.GradCkpt, n.LoRADropout, upcastFrozen(n), n.Precision, n.QuantStorage)
	}
	none := kernelBase(t)
	none.Method, none.Precision, none.GradCkpt, none.Stack = QLoRA, "", CkptNone, ""
	hf := none
	StackLlamaFactory.Spec().Apply(&none)
	StackHFTrainer.Spec().Apply(&hf)
	lf, err := none.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if lf.GradCkpt != CkptNone {
		t.Errorf("an explicit --grad-ckpt none became %s", lf.GradCkpt)
	}
	hn, err := hf.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	var pc PhasePeak
	tl, _, err := pc.terms(lf)
	if err != nil {
		t.Fatal(err)
	}
	th, _, err := pc.terms(hn)
	if err != nil {
		t.Fatal(err)
	}
	m := base.Model
	tokens := float64(base.SeqLen * base.Batch)
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	if want := tokens * (refAttnTensors*h*2 + refGatedMLPTensors*ffn*2); math.Abs(tl.LayerUnit-want) > 1 {
		t.Errorf("llama-factory per-layer shape %.0f B, want every tensor 16-bit: %.0f B", tl.LayerUnit, want)
	}
	if want := tokens * (refAttnTensors*h*4 + refGatedMLPTensors*ffn*refQLoRAMLPBytes); math.Abs(th.LayerUnit-want) > 1 {
		t.Errorf("hf-trainer per-layer shape %.0f B, want an fp32 stream and MLP behind the upcast norms: %.0f B", th.LayerUnit, want)
	}
	lora := none
	lora.Method = LoRA
	if n, err := lora.Normalize(); err != nil || !hfExact(n) {
		t.Error("a LoRA run on llama-factory is not read through transformers' layer code")
	}
}

// biasedMLP is a small Llama with mlp_bias true.
func biasedMLP(t *testing.T) *hfconfig.Model {
	t.Helper()
	m, err := hfconfig.Parse([]byte(`{"model_type":"llama","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":512,"vocab_size":1000,"mlp_bias":true}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fms-acceleration's fused ops plug into the transformers Trainer; with the
// unsloth stack, which runs Unsloth's own kernels, they are refused by field.
func TestFOAKRefusedOnUnsloth(t *testing.T) {
	r := kernelBase(t)
	r.Stack, r.Precision, r.GradCkpt, r.Method = StackUnsloth, "", "", QLoRA
	r.Kernels = []Kernel{KernelFOAK}
	if _, err := r.Normalize(); err == nil || !strings.Contains(err.Error(), "kernels") {
		t.Errorf("foak on the unsloth stack: %v, want a refusal naming the kernels field", err)
	}
	r.Stack = StackHFTrainer
	if _, err := r.Normalize(); err != nil {
		t.Errorf("foak on the hf-trainer stack: %v", err)
	}
}
