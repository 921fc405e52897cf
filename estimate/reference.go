package estimate

import (
	"fmt"
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// Reference is the reference memory model (docs/memory-model.md), every
// component summed term by term. It is kept intact so other estimators are
// compared against it; "reference" is another name for it.
type Reference struct{}

func init() { register(Reference{}) }

// Name implements Estimator.
func (Reference) Name() string { return "seed000" }

// Version implements Estimator.
func (Reference) Version() string { return "0.4.0" }

// Describe implements Estimator.
func (Reference) Describe() string {
	return "reference: the memory model of docs/memory-model.md, term by term (sum of all components, flat 8 % CUDA overhead, 5 % safety)"
}

// The reference model's coefficients; § numbers are the sections of its
// specification, which docs/memory-model.md follows.
const (
	refOverheadFraction = 0.08 // §7: flat fraction of total VRAM for context, workspaces, fragmentation
	refSafetyFraction   = 0.05 // §8: held back so the estimator never recommends the brink
	refAttnTensors      = 9.0  // §5: 9·h·act_bytes per token per layer (Korthikanti-shaped, refitted)
	refGatedMLPTensors  = 4.5  // §5: SwiGLU families
	refClassicMLPTensor = 2.8  // §5: two-matmul MLPs (gpt2, phi, …)
	refEagerScoreCoef   = 5.0  // §5: 5·a·s² per layer with --attn eager (Korthikanti)
	refLogitsExtra      = 12   // §6: fp32 upcast 4 B + log-softmax 4 B + fp32 grad 4 B per logit
	refQLoRAMLPBytes    = 4    // §5: kbit intermediates held in fp32
	refAdapterBytes     = 4    // §1: PEFT keeps adapters in fp32
	ref8bitOptimBytes   = 2.5  // §4: 8-bit/paged AdamW heuristic per parameter
)

// Estimate implements Estimator.
func (Reference) Estimate(req Request) (*Estimate, error) {
	r, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	r.UpcastFrozen = nil // seed 000 always upcasts frozen embeddings and norms (§1)
	m := r.Model
	e := &Estimate{Estimator: Reference{}.Name(), Version: Reference{}.Version(), Params: m.Params()}
	add := func(name string, b int64, src string) {
		e.Components = append(e.Components, Component{Name: name, Bytes: b, Source: src})
	}
	act := r.actBytes()

	// §1 Weights.
	switch r.Method {
	case QLoRA:
		linear := m.LinearParams()
		rest := m.Params() - linear // embeddings, lm_head, norms (and a frozen tower)
		add(CWeights, int64(float64(linear)*quantBytesPerParam(r.Quant))+rest*4,
			"quantized Linear layers packed + embeddings/norms upcast to fp32 by prepare_model_for_kbit_training (docs/memory-model.md#weights)")
		add(CQuantOverhead, int64(float64(linear)*quantMetaBytesPerParam(r.Quant))+dequantWorkspace(m),
			fmt.Sprintf("%s absmax metadata %.4g B/param + dequant workspace 2·h·ffn·2 B (docs/memory-model.md#quantization-state)", r.Quant, quantMetaBytesPerParam(r.Quant)))
	case LoRA:
		add(CWeights, m.Params()*r.frozenBytes(), fmt.Sprintf("%d B/param frozen base (docs/memory-model.md#weights)", r.frozenBytes()))
	case Full:
		add(CWeights, m.Params()*r.paramBytes(), fmt.Sprintf("%d B/param (docs/memory-model.md#weights)", r.paramBytes()))
	}

	// §2 Trainable parameters.
	adapters := adapterParams(r)
	extra := extraTrainableParams(r)
	trainable := adapters + extra
	if r.Method == Full {
		trainable = m.Params()
	} else {
		add(CAdapters, (adapters+extra)*refAdapterBytes, "rank·(in+out) per targeted Linear per layer, fp32 (docs/memory-model.md#lora-adapters)")
	}
	e.TrainableParams = trainable

	// §3 Gradients.
	gradBytes := int64(refAdapterBytes)
	if r.Method == Full {
		gradBytes = r.paramBytes()
	}
	add(CGradients, trainable*gradBytes, fmt.Sprintf("trainable params × %d B (docs/memory-model.md#gradients)", gradBytes))

	// §4 Optimizer states.
	var optim int64
	var optimSrc string
	switch r.Optimizer {
	case "sgd":
		optimSrc = "plain SGD has no momentum state (docs/memory-model.md#optimizer-states)"
	case "adamw_8bit", "paged_adamw_8bit", "adamw_bnb_8bit", "lion_8bit":
		optim = int64(float64(trainable) * ref8bitOptimBytes)
		optimSrc = "8-bit/paged AdamW heuristic 2.5 B/param (docs/memory-model.md#optimizer-states)"
	case "adamw_torch_fused":
		optim = 2 * trainable * gradBytes
		optimSrc = "fused AdamW, two states in parameter dtype (docs/memory-model.md#optimizer-states)"
	default:
		optim = 3 * trainable * gradBytes
		optimSrc = "foreach AdamW, two states + a tensor-sized workspace in parameter dtype (docs/memory-model.md#optimizer-states)"
	}
	add(COptimizer, optim, optimSrc)

	// §5 Activations.
	s, b, h := r.SeqLen, r.Batch, m.Hidden
	mlpT, mlpBytes := refGatedMLPTensors, float64(act)
	if m.MLP == hfconfig.MLPClassic {
		mlpT = refClassicMLPTensor
	}
	if r.Method == QLoRA {
		mlpBytes = refQLoRAMLPBytes
	}
	perLayer := float64(s*b) * (refAttnTensors*float64(h*act) + mlpT*float64(m.ActiveFFN())*mlpBytes)
	if r.Attn == "eager" {
		perLayer += refEagerScoreCoef * float64(m.Heads*s*s*b)
	}
	L := float64(m.NumLayers)
	var acts float64
	if ckptOn(r) {
		acts = L*float64(2*s*b*h*act) + perLayer
	} else {
		acts = L * perLayer
	}
	add(CActivations, int64(acts), "s·b·(9·h·act + k·ffn·mlp_bytes) per layer"+map[bool]string{true: "; checkpointing keeps block inputs + one layer", false: ""}[ckptOn(r)]+" (docs/memory-model.md#activations)")

	// §6 Logits chain.
	if fusedCE(r) {
		add(CLogits, 0, "a fused cross-entropy removes the logits chain (docs/memory-model.md#logits-and-loss-chain)")
	} else {
		add(CLogits, s*b*m.Vocab*(act+refLogitsExtra), "s·b·vocab·(act_bytes + 12) (docs/memory-model.md#logits-and-loss-chain)")
	}

	applySharding(e, r)
	tensors := e.componentSum()

	// §7, §8 overhead and safety from the card's total memory.
	overF, safeF := refOverheadFraction, refSafetyFraction
	if r.OverheadFraction > 0 {
		overF = r.OverheadFraction
	}
	if r.SafetyFraction > 0 {
		safeF = r.SafetyFraction
	}
	e.Levels.Allocated = tensors
	if r.GPUTotal > 0 {
		over := frac(r.GPUTotal, overF)
		safe := frac(r.GPUTotal, safeF)
		add(COverhead, over, fmt.Sprintf("%.0f %% of total VRAM (docs/memory-model.md#cuda-overhead)", overF*100))
		add(CSafety, safe, fmt.Sprintf("%.0f %% of total VRAM held back (docs/memory-model.md#safety-margin)", safeF*100))
		e.Total = tensors + over + safe
		e.PlanningProxy = e.Total - safe
		e.Levels.Reserved = e.PlanningProxy
		e.Levels.Process = e.PlanningProxy
	} else {
		e.Total = tensors
		e.PlanningProxy = tensors
		e.Levels.Reserved = tensors
		e.Levels.Process = tensors
		e.Assumptions = append(e.Assumptions, "no GPU given: CUDA overhead and safety margin (fractions of the card) are not included and there is no verdict")
	}
	e.Verdict = verdict(e.Total, r)
	e.Assumptions = append(e.Assumptions, requestAssumptions(r)...)
	e.Confidence = confidence(r, "seed000")
	return finish(e, r)
}

// verdict compares the total with the free memory if given, else the card.
func verdict(total int64, r Request) Verdict {
	budget, src := r.GPUTotal, "total memory"
	if r.Available > 0 {
		budget, src = r.Available, "free memory"
	}
	v := Classify(total, budget)
	if v.Fit != FitUnknown {
		v.BudgetSource = src
	}
	return v
}

func requestAssumptions(r Request) []string {
	var a []string
	m := r.Model
	a = append(a, fmt.Sprintf("%s, %s, seq %d × batch %d, optimizer %s, attention %s, checkpointing %s",
		r.Method, r.Precision, r.SeqLen, r.Batch, r.Optimizer, r.Attn, r.GradCkpt))
	if r.Method != Full {
		a = append(a, fmt.Sprintf("LoRA rank %d on %s", r.LoRARank, strings.Join(r.LoRATargets, ", ")))
	}
	if r.Method == QLoRA {
		if r.UpcastFrozen == nil || *r.UpcastFrozen {
			a = append(a, fmt.Sprintf("%s base: only decoder Linear layers quantized; embeddings, lm_head and norms in fp32 after prepare_model_for_kbit_training", r.Quant))
		} else {
			a = append(a, fmt.Sprintf("%s base: only decoder Linear layers quantized; embeddings, lm_head and norms stay 16-bit (%s does not upcast them)", r.Quant, r.Stack))
		}
	}
	if !fusedCE(r) {
		a = append(a, "stock HF loss: bf16 logits + fp32 upcast + log-softmax + fp32 gradient (no fused cross-entropy)")
	}
	if r.Compile {
		a = append(a, "torch.compile is not modelled: its fused kernels usually save activation memory, so the estimate leans high")
	}
	if r.Sharding.Strategy != "none" && r.Sharding.Strategy != "" {
		a = append(a, fmt.Sprintf("per GPU of %d, %s, offload %s", r.Sharding.GPUs, r.Sharding.Strategy, r.Sharding.CPUOffload))
	}
	a = append(a, m.Notes...)
	return a
}

// confidence grades how well the evidence covers a request.
func confidence(r Request, estimator string) Confidence {
	m := r.Model
	var why []string
	g := Medium
	switch {
	case m.Generic:
		g, why = Low, append(why, "unknown architecture, generic shapes")
	case m.Experts > 0:
		g, why = Low, append(why, "MoE: no measured MoE runs in the evidence")
	case r.Sharding.Strategy != "none" && r.Sharding.Strategy != "":
		g, why = Low, append(why, "sharded: per-GPU split is modelled, communication buffers are not measured")
	case r.SeqLen >= 8192:
		g, why = Low, append(why, "seq ≥ 8192: allocator fragmentation grows with the largest tensors")
	case r.Attn == "eager":
		g, why = Low, append(why, "eager attention: the s² term is not covered by measurements")
	}
	if g == Medium {
		why = append(why, "dense decoder within the measured families; a bounded bench settles it")
	}
	if estimator != Default && g == Medium {
		why = append(why, "reference estimator")
	}
	return Confidence{Grade: g, Reason: strings.Join(why, "; ")}
}
