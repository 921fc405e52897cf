package estimate

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// Fused kernels, torch.compile and optimizer-in-backward: what each changes in
// the tensors a step saves for the backward and in what it frees, derived
// from the kernels' source (docs/memory-model.md#fused-kernels). The
// fitted activation shape is a sum over eager ops; a kernel's saving is
// subtracted from it in bytes, unscaled, because it is a count of tensors
// the kernel does not save, not a share of the fitted shape.

// Kernel is a fused kernel or kernel bundle that replaces eager ops.
type Kernel string

// Kernels a run can use besides its loss kernel (Request.FusedCE).
const (
	KernelLigerRMSNorm Kernel = "liger-rmsnorm"
	KernelLigerSwiGLU  Kernel = "liger-swiglu"
	KernelLigerGeGLU   Kernel = "liger-geglu"
	KernelLigerRoPE    Kernel = "liger-rope"
	// KernelFOAK is fms-acceleration's fused-ops-and-kernels plugin with its
	// defaults: Unsloth's fused LoRA autograd functions (quantized bases
	// only), fast RMSNorm, fast RoPE and fast cross-entropy.
	KernelFOAK Kernel = "foak"
)

// KernelSpec is what a kernel stops saving for the backward.
type KernelSpec struct {
	Name    Kernel
	Help    string
	Aliases []string
	// FusedNorm: RMSNorm saves its 16-bit input and a per-row fp32 rstd
	// instead of eager's fp32 upcast (and, when the weight trains, the
	// normalised 16-bit product).
	FusedNorm bool
	// FusedGLU: the gated activation saves its two inputs and recomputes
	// act(gate) in the backward instead of saving act(gate) too.
	FusedGLU bool
	// FusedLoRAMLP: one autograd function for the LoRA MLP saves X, gate
	// and up and recomputes act(gate)·up (Unsloth's LoRA_MLP).
	FusedLoRAMLP bool
	// FastCE: the cross-entropy kernel computes the log-sum-exp per row and
	// writes the gradient into the logits in place (Unsloth's
	// Fast_CrossEntropyLoss): no log-softmax and no separate gradient.
	FastCE bool
}

func (s KernelSpec) choice() Choice {
	return Choice{Name: string(s.Name), Help: s.Help, Aliases: s.Aliases}
}

// Kernels is the table of fused kernels.
var Kernels = []KernelSpec{
	{Name: KernelLigerRMSNorm, Help: "Liger RMSNorm: saves the 16-bit input and a per-row rstd, no fp32 copy", FusedNorm: true},
	{Name: KernelLigerSwiGLU, Help: "Liger SwiGLU: saves gate and up, recomputes silu(gate) in the backward", FusedGLU: true},
	{Name: KernelLigerGeGLU, Help: "Liger GeGLU: saves gate and up, recomputes gelu(gate) in the backward", FusedGLU: true},
	{Name: KernelLigerRoPE, Help: "Liger RoPE: in place; eager RoPE saves nothing per token either, so no saved-memory change"},
	{Name: KernelFOAK, Help: "fms-acceleration fused ops: fused LoRA (quantized bases), fast RMSNorm, RoPE and cross-entropy", Aliases: []string{"fused-ops-and-kernels"}, FusedNorm: true, FusedLoRAMLP: true, FastCE: true},
}

// ParseKernel reads a fused kernel's name.
func ParseKernel(s string) (Kernel, error) { return parseIn[Kernel]("kernel", s, Kernels) }

// Spec is the kernel's row of Kernels.
func (k Kernel) Spec() KernelSpec { return lookup(Kernels, k) }

// kernelSet is the union of a request's kernels and what torch.compile
// fuses.
type kernelSet struct {
	norm, glu, loraMLP, fastCE bool
}

func kernelsOf(r Request) kernelSet {
	var ks kernelSet
	for _, k := range r.Kernels {
		s := k.Spec()
		ks.norm = ks.norm || s.FusedNorm
		ks.glu = ks.glu || s.FusedGLU
		ks.loraMLP = ks.loraMLP || s.FusedLoRAMLP
		ks.fastCE = ks.fastCE || s.FastCE
	}
	// fms-acceleration installs its fused LoRA only on quantized bases
	// (framework_plugin_fast_kernels.py omits "fused_lora" without one),
	// and its MLP op only where gate, up and down all carry adapters
	// (models/utils.py trigger_fused_ops: all submodules LoRA layers).
	ks.loraMLP = ks.loraMLP && r.Method == QLoRA
	if unslothFastPath(r) {
		// Unsloth's own decoder forward normalises with
		// fast_rms_layernorm, and its patch_peft_model puts every MLP
		// whose gate, up and down carry adapters and have no bias under
		// LoRA_MLP, on any base, when lora_dropout is 0
		// (unsloth/models/llama.py at 015bdef0d9; PEFT's bias "none",
		// which it also requires, is assumed). Its fast RoPE works in
		// place and its loss is the stack's loss path.
		ks.norm = true
		ks.loraMLP = ks.loraMLP || (r.LoRADropout == nil || *r.LoRADropout == 0) && !mlpBiased(r.Model)
	}
	ks.loraMLP = ks.loraMLP && r.Model.MLP == hfconfig.MLPGated && adaptsWholeMLP(r)
	if r.Compile {
		// Inductor's partitioner (torch/_functorch/partitioners.py,
		// min_cut_rematerialization_partition) saves the matmul outputs
		// and recomputes the fusible pointwise ops between them in the
		// backward: the norm's fp32 upcast and the gated activation's
		// output are not saved, as with the fused kernels.
		ks.norm, ks.glu = true, true
	}
	ks.glu = ks.glu && r.Model.MLP == hfconfig.MLPGated
	return ks
}

// unslothFastTypes are the model types Unsloth's loader sends to its own
// model code (FastLlamaModel, FastMistralModel, FastGemmaModel,
// FastGemma2Model, FastQwen2Model, FastQwen3Model: unsloth/models/loader.py
// at 015bdef0d9; its llama-fied Phi uploads read as llama). Every other
// type, and any full fine-tune or 8-bit load, goes through its FastModel
// path, which patches neither the norms nor the LoRA MLP.
var unslothFastTypes = map[string]bool{"llama": true, "mistral": true, "gemma": true, "gemma2": true, "qwen2": true, "qwen3": true}

// unslothFastPath reports whether an unsloth-stack run trains through
// Unsloth's own patched decoder (unslothFastTypes), whose kernels kernelsOf
// counts.
func unslothFastPath(r Request) bool {
	return r.Stack == StackUnsloth && r.Method != Full && r.Quant != Int8 && r.Model.Experts == 0 && unslothFastTypes[r.Model.ModelType]
}

// mlpBiased reports whether any of the first block's MLP projections has a
// bias (Unsloth's LoRA_MLP requires none).
func mlpBiased(m *hfconfig.Model) bool {
	if len(m.Layers) == 0 {
		return false
	}
	return slices.ContainsFunc(m.Layers[0].Linears, func(l hfconfig.Linear) bool { return l.Role == hfconfig.RoleMLP && l.Bias })
}

// normsPerLayer counts a decoder layer's hidden-sized RMSNorms (2, Gemma 2
// and 3's sandwich norms 4); per-head q/k norms are narrower and left out.
func normsPerLayer(m *hfconfig.Model) float64 {
	if len(m.Layers) == 0 || m.Hidden == 0 {
		return 2
	}
	return float64(max(1, m.Layers[0].NormParams/m.Hidden))
}

// kernelSavingPerLayer is, for s·b tokens, what one layer's fused kernels
// and torch.compile stop saving for the backward, in bytes.
//
//   - RMSNorm: eager LlamaRMSNorm upcasts to fp32 and pow/mul save that copy
//     (4 B per element); a trained weight's mul also saves the 16-bit
//     normalised product. Liger's LigerRMSNormFunction saves its input and
//     an fp32 rstd per row (ops/rms_norm.py); so does Unsloth's
//     fast_rms_layernorm. Where the residual stream is fp32 the upcast is
//     the input itself and only the trained product is saved.
//   - SwiGLU/GeGLU: eager act(gate)·up saves gate (for act), act(gate) and
//     up (for mul); LigerSiLUMulFunction / LigerGELUMulFunction save gate
//     and up and recompute the activation (ops/swiglu.py, ops/geglu.py).
//   - Unsloth's LoRA_MLP (fast_lora.py, used by fms-acceleration's fused
//     LoRA) saves X, gate and up: it keeps neither act(gate) nor
//     act(gate)·up (the down projection's input, which the down adapter's
//     lora_A keeps in eager PEFT).
func kernelSavingPerLayer(r Request, act, mlpBytes float64) float64 {
	ks := kernelsOf(r)
	m := r.Model
	tokens := float64(r.SeqLen) * float64(r.Batch)
	h, ffn := float64(m.Hidden), float64(m.ActiveFFN())
	var per float64
	if ks.norm {
		eager := max(4, act)
		if r.Method == Full {
			eager += act
		}
		per += normsPerLayer(m) * (eager - act) * h
	}
	switch {
	case ks.loraMLP:
		// Neither act(gate) nor act(gate)·up is kept. Counted at the
		// eager MLP dtype: whether LoRA_MLP's gate and up come out 16-bit
		// under autocast where eager's are fp32 is not settled here, and
		// counting it would lower the estimate further.
		per += 2 * mlpBytes * ffn
	case ks.glu:
		per += mlpBytes * ffn
	}
	return per * tokens
}

// fusedLossBytes is what a loss kernel that never materialises the whole
// logits saves for the backward at the end of the forward, and the
// transient it holds while it runs, in bytes:
//
//   - Liger's fused linear cross-entropy (ops/fused_linear_cross_entropy.py)
//     computes the gradients in the forward: grad_input (the hidden states'
//     shape and dtype) and, when the output layer trains, grad_weight (the
//     parameter's shape and dtype) stay saved for the backward; it works
//     through chunks of logits, chunk = next_pow2(⌈BT / ⌈V/H⌉⌉) rows of V
//     (about BT·H elements), as ligerFLCEBytes counts for its current code.
//   - Apple's Cut Cross-Entropy (cut_cross_entropy/cce.py) saves the
//     log-sum-exp, one fp32 per token; the gradients come in the backward
//     block by block.
func fusedLossBytes(r Request, act float64, headTrains bool, gradBytes int64) (saved, transient float64) {
	m := r.Model
	bt := r.SeqLen * r.Batch
	switch r.FusedCE {
	case LossLiger:
		return ligerFLCEBytes(bt, m.Vocab, m.Hidden, act, headTrains, gradBytes, ligerCurrent)
	case LossCutCrossEntropy:
		return 4 * float64(bt), 0
	}
	return 0, 0
}

// ligerFLCE is what one version of Liger's fused linear cross-entropy holds
// while its forward runs, beside what it saves.
type ligerFLCE struct {
	// ChunkUnits is how many chunk-sized logit tensors, in the logits'
	// dtype, it holds at once.
	ChunkUnits float64
	// GradWeightCopy: a trained 16-bit grad_weight is accumulated chunk by
	// chunk through a V×H product in the logits' dtype and its fp32 copy.
	GradWeightCopy bool
}

// ligerCurrent is Liger's code from 0.6.2 on (read at ead96b61, 2026-08):
//   - grad_logits_chunk is logits_chunk itself (since 0.5.3), so the next
//     chunk's logits are computed beside the previous chunk's only: two
//     chunks (0.5.0–0.5.2 scaled a copy, three; 0.4.2 and before upcast each
//     chunk to fp32 too, four, which Liger's own benchmark measures:
//     TestLigerFLCEMeasured);
//   - a 16-bit grad_weight takes grad_weight += torch.mm(grad_logits_chunk.t(),
//     _input_chunk).float(), a V×H product and its fp32 copy beside the
//     chunk; an fp32 grad_weight (fp32 master weights) goes through
//     addmm(out_dtype=float32) in place on torch ≥ 2.8 and Ampere or newer
//     (since 0.8.1), which the estimate assumes.
var ligerCurrent = ligerFLCE{ChunkUnits: 2, GradWeightCopy: true}

// ligerFLCEBytes is what Liger's fused linear cross-entropy saves for the
// backward and the transient it holds, for bt tokens over a V×H output
// layer, in version v's code.
func ligerFLCEBytes(bt, vocab, hidden int64, act float64, headTrains bool, gradBytes int64, v ligerFLCE) (saved, transient float64) {
	inc := max(1, (vocab+hidden-1)/hidden)
	chunk := min(nextPow2((bt+inc-1)/inc), bt)
	saved = float64(bt*hidden) * act
	if headTrains {
		saved += float64(vocab * hidden * gradBytes)
	}
	c := float64(chunk*vocab) * act
	transient = v.ChunkUnits * c
	if v.GradWeightCopy && headTrains && gradBytes < 4 {
		transient = max(transient, c+float64(vocab*hidden)*(act+4))
	}
	// The fp32 per-token loss.
	return saved, transient + 4*float64(bt)
}

func nextPow2(n int64) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(n-1))
}

// fastCELogitBytes is what Unsloth's Fast_CrossEntropyLoss (fms-acceleration's
// fast_loss) does not hold per logit beside the eager chain: torch's
// log-softmax output (4 B) and its separate fp32 gradient (4 B); the kernel
// keeps the logits and a per-row log-sum-exp and writes the gradient into
// the logits in place.
const fastCELogitBytes = 8

// inBackwardGrads is what optimizer-in-backward keeps of the gradients: each
// parameter's step runs from a post-accumulate-grad hook as its gradient is
// produced and frees it (torchtune's optimizer_in_bwd, PyTorch's
// register_post_accumulate_grad_hook tutorial), so at most the largest
// single parameter's gradient, with its step's temporary, is alive.
func inBackwardGrads(r Request, gradBytes int64, foreach bool) int64 {
	g := r.Model.LargestTensor() * gradBytes
	if foreach {
		g *= 2
	}
	return g
}

// checkKernels validates a request's kernels and combinations the model
// cannot honour.
func checkKernels(r *Request) error {
	for i := range r.Kernels {
		if err := canonical(&r.Kernels[i], ParseKernel); err != nil {
			return err
		}
	}
	if r.Stack == StackUnsloth && slices.Contains(r.Kernels, KernelFOAK) {
		return fieldErr("kernels", KernelFOAK, "unset under --stack unsloth: fms-acceleration's fused ops are a transformers Trainer plugin, and the unsloth stack runs Unsloth's own kernels")
	}
	if r.OptimizerInBackward {
		if r.GradAccum > 1 {
			return fieldErr("optimizer_in_backward", true, "off with grad_accum %d: each gradient is stepped and freed as it is produced, so nothing accumulates (torchtune refuses the combination)", r.GradAccum)
		}
		if r.Method != Full {
			return fieldErr("optimizer_in_backward", true, "used with method full (the adapters' gradients are already small)")
		}
		if r.Sharding.Strategy.Spec().Family == FamilyDeepSpeed {
			return fieldErr("optimizer_in_backward", true, "off with %s: DeepSpeed's engine steps its ZeRO optimizer after the backward, over the partitions it reduced", r.Sharding.Strategy)
		}
	}
	return nil
}

// kernelAssumptions are the report's lines for the request's kernels.
func kernelAssumptions(r Request) []string {
	var a []string
	for _, k := range r.Kernels {
		a = append(a, fmt.Sprintf("kernel %s: %s", k, k.Spec().Help))
	}
	if r.Compile {
		a = append(a, "torch.compile: the norms' fp32 upcast and the gated activation's output are recomputed in the backward, not saved (Inductor's min-cut partitioner)")
	}
	if unslothFastPath(r) {
		line := "unsloth kernels (its own model code for this type): fast_rms_layernorm saves the 16-bit input and a per-row rstd"
		if kernelsOf(r).loraMLP {
			line += "; LoRA_MLP saves X, gate and up and recomputes act(gate)·up"
		}
		a = append(a, line)
	}
	if r.OptimizerInBackward {
		a = append(a, "optimizer in backward: each gradient is stepped and freed as it is produced; at most the largest parameter's gradient is alive")
	}
	return a
}

// adaptsWholeMLP: the LoRA targets cover every projection of the MLP.
func adaptsWholeMLP(r Request) bool {
	mlp, err := r.Model.Targets([]string{hfconfig.ScopeMLP})
	if err != nil || len(mlp) == 0 {
		return false
	}
	got, err := r.Model.Targets(r.LoRATargets)
	if err != nil {
		return false
	}
	for _, l := range mlp {
		if !slices.ContainsFunc(got, func(g hfconfig.Linear) bool { return g.Name == l.Name }) {
			return false
		}
	}
	return true
}

// headExtra: the output layer trains beside the adapters (extra_trainable),
// so a fused loss computes its weight gradient in the forward.
func headExtra(r Request) bool {
	for _, name := range r.ExtraTrainable {
		if isOutputLayer(name) {
			return true
		}
	}
	return false
}
