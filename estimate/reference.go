package estimate

import (
	"fmt"
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/bytesize"
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

// normalize is Request.Normalize with the reference's own reading: it
// always upcasts frozen embeddings and norms (§1).
func (Reference) normalize(req Request) (Request, error) {
	r, err := req.Normalize()
	r.UpcastFrozen = nil
	return r, err
}

// Estimate implements Estimator.
func (ref Reference) Estimate(req Request) (*Estimate, error) {
	r, err := ref.normalize(req)
	if err != nil {
		return nil, err
	}
	if r.Model.Seq2Seq != nil {
		return nil, errSeq2SeqEstimator(ref.Name(), r.Model)
	}
	m := r.Model
	e := &Estimate{Estimator: ref.Name(), Version: ref.Version(), Params: m.Params()}
	add := func(name ComponentID, b int64) {
		e.Components = append(e.Components, Component{Name: name, Bytes: b})
	}
	act := r.actBytes()

	// §1 Weights.
	switch r.Method {
	case QLoRA:
		linear := m.LinearParams()
		rest := m.Params() - linear // embeddings, lm_head, norms (and a frozen tower)
		add(CWeights, int64(float64(linear)*quantBytesPerParam(r.Quant))+rest*4)
		add(CQuantOverhead, int64(float64(linear)*quantMetaBytesPerParam(r.Quant))+dequantWorkspace(m))
	case LoRA:
		add(CWeights, m.Params()*r.frozenBytes())
	case Full:
		add(CWeights, m.Params()*r.paramBytes())
	}

	// §2 Trainable parameters.
	adapters := adapterParams(r)
	extra := extraTrainableParams(r)
	trainable := adapters + extra
	if r.Method == Full {
		trainable = m.Params()
	} else {
		add(CAdapters, (adapters+extra)*refAdapterBytes)
	}
	e.TrainableParams = trainable

	// §3 Gradients.
	gradBytes := refGradBytes(r)
	add(CGradients, trainable*gradBytes)

	// §4 Optimizer states.
	var optim int64
	switch {
	case r.Optimizer == "sgd":
	case r.Optimizer.Spec().EightBit:
		optim = int64(float64(trainable) * ref8bitOptimBytes)
	case r.Optimizer == "adamw_torch_fused":
		optim = 2 * trainable * gradBytes
	default:
		optim = 3 * trainable * gradBytes
	}
	add(COptimizer, optim)

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
	add(CActivations, int64(acts))

	// §6 Logits chain.
	if fusedCE(r) {
		add(CLogits, 0)
	} else {
		add(CLogits, s*b*m.Vocab*(act+refLogitsExtra))
	}

	applySharding(e, r)
	tensors := e.componentSum()

	// §7, §8 overhead and safety from the card's total memory.
	overF, safeF := refFractions(r)
	e.Levels.Allocated = tensors
	if r.GPUTotal > 0 {
		over := frac(r.GPUTotal, overF)
		safe := frac(r.GPUTotal, safeF)
		add(COverhead, over)
		add(CSafety, safe)
		e.Total = tensors + over + safe
		e.PlanningProxy = e.Total - safe
		e.Levels.Reserved = e.PlanningProxy
		e.Levels.Process = e.PlanningProxy
	} else {
		e.Total = tensors
		e.PlanningProxy = tensors
		e.Levels.Reserved = tensors
		e.Levels.Process = tensors
	}
	e.Verdict = verdict(e.Total, r)
	return finish(e, r)
}

// refGradBytes is the gradient dtype: the adapters' fp32 (§1), or the
// trained weights' own in a full fine-tune.
func refGradBytes(r Request) int64 {
	if r.Method == Full {
		return r.paramBytes()
	}
	return refAdapterBytes
}

// refFractions are the CUDA overhead and safety fractions of the card,
// the request's own where it gives them.
func refFractions(r Request) (overhead, safety float64) {
	overhead, safety = refOverheadFraction, refSafetyFraction
	if r.OverheadFraction > 0 {
		overhead = r.OverheadFraction
	}
	if r.SafetyFraction > 0 {
		safety = r.SafetyFraction
	}
	return overhead, safety
}

// Explain implements Estimator: each component's section of
// docs/memory-model.md, with how sharding divided it.
func (ref Reference) Explain(req Request, e *Estimate) (Explanation, error) {
	r, err := ref.normalize(req)
	if err != nil {
		return Explanation{}, err
	}
	overF, safeF := refFractions(r)
	x := Explanation{Sources: make(map[ComponentID]string, len(e.Components))}
	for _, c := range e.Components {
		var src string
		switch c.Name {
		case CWeights:
			switch r.Method {
			case QLoRA:
				src = "quantized Linear layers packed + embeddings/norms upcast to fp32 by prepare_model_for_kbit_training (docs/memory-model.md#weights)"
			case LoRA:
				src = fmt.Sprintf("%d B/param frozen base (docs/memory-model.md#weights)", r.frozenBytes())
			default:
				src = fmt.Sprintf("%d B/param (docs/memory-model.md#weights)", r.paramBytes())
			}
		case CQuantOverhead:
			src = fmt.Sprintf("%s absmax metadata %.4g B/param + dequant workspace 2·h·ffn·2 B (docs/memory-model.md#quantization-state)", r.Quant, quantMetaBytesPerParam(r.Quant))
		case CAdapters:
			src = "rank·(in+out) per targeted Linear per layer, fp32 (docs/memory-model.md#lora-adapters)"
		case CGradients:
			src = fmt.Sprintf("trainable params × %d B (docs/memory-model.md#gradients)", refGradBytes(r))
		case COptimizer:
			switch {
			case r.Optimizer == "sgd":
				src = "plain SGD has no momentum state (docs/memory-model.md#optimizer-states)"
			case r.Optimizer.Spec().EightBit:
				src = "8-bit/paged AdamW heuristic 2.5 B/param (docs/memory-model.md#optimizer-states)"
			case r.Optimizer == "adamw_torch_fused":
				src = "fused AdamW, two states in parameter dtype (docs/memory-model.md#optimizer-states)"
			default:
				src = "foreach AdamW, two states + a tensor-sized workspace in parameter dtype (docs/memory-model.md#optimizer-states)"
			}
		case CActivations:
			src = "s·b·(9·h·act + k·ffn·mlp_bytes) per layer"
			if ckptOn(r) {
				src += "; checkpointing keeps block inputs + one layer"
			}
			src += " (docs/memory-model.md#activations)"
		case CLogits:
			src = "s·b·vocab·(act_bytes + 12) (docs/memory-model.md#logits-and-loss-chain)"
			if fusedCE(r) {
				src = "a fused cross-entropy removes the logits chain (docs/memory-model.md#logits-and-loss-chain)"
			}
		case COverhead:
			src = fmt.Sprintf("%.0f %% of total VRAM (docs/memory-model.md#cuda-overhead)", overF*100)
		case CSafety:
			src = fmt.Sprintf("%.0f %% of total VRAM held back (docs/memory-model.md#safety-margin)", safeF*100)
		}
		x.Sources[c.Name] = src + shardingNote(r, c.Name)
	}
	if a := replicaAssumption(r); a != "" {
		x.Assumptions = append(x.Assumptions, a)
	}
	if r.GPUTotal <= 0 {
		x.Assumptions = append(x.Assumptions, "no GPU given: CUDA overhead and safety margin (fractions of the card) are not included and there is no verdict")
	}
	x.Assumptions = append(x.Assumptions, requestAssumptions(r)...)
	x.Confidence = confidence(r, ref.Name())
	return x, nil
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

// requestAssumptions are the reference estimator's lines for a request:
// the stock loss chain whatever the stack, as it counts it.
func requestAssumptions(r Request) []string {
	return requestAssumptionsWith(r, qloraBaseAssumption(r), stockLossAssumption(r))
}

// stockLossLine is the stock transformers loss chain's assumption line.
const stockLossLine = "stock HF loss: bf16 logits + fp32 upcast + log-softmax + fp32 gradient (no fused cross-entropy)"

// stockLossAssumption is the loss line of an estimator that counts the
// stock chain for every stack ("" with a fused loss or no vocabulary
// logits).
func stockLossAssumption(r Request) string {
	if fusedCE(r) || !r.Task.Spec().VocabLogits {
		return ""
	}
	return stockLossLine
}

// lossAssumption is the default estimator's loss line for a request as it
// runs (under DeepSpeed, the 16-bit module deepspeedModule made): a loop
// that computes its own loss says in which dtype, and whether it holds the
// logits through the backward.
func lossAssumption(r Request) string {
	line := stockLossAssumption(r)
	if line == "" || !r.Stack.Spec().OwnLoss {
		return line
	}
	switch {
	case ownLoss16(r):
		line = "the loop's own loss: F.cross_entropy on the 16-bit logits the model returns (called without labels), no fp32 upcast: log-softmax and its two gradients in 16 bits"
	case r.Precision.mixed():
		line = "the loop's own loss under autocast: cross_entropy runs in fp32 (on autocast's float32 list), the fp32 cast, log-softmax and two fp32 gradients, as transformers' loss"
	default:
		line = "the loop's own loss on fp32 logits (an fp32 output layer): log-softmax and its two gradients in fp32"
	}
	if held := heldPerLogit(r); held > 0 {
		return line + fmt.Sprintf("; the loop keeps the logits (%d B each) referenced through the backward (--frees-logits if it frees them first)", held)
	}
	return line + "; the loop frees the logits before the backward"
}

// qloraBaseAssumption is the assumption line of a QLoRA base's unquantized
// parameters ("" for other methods).
func qloraBaseAssumption(r Request) string {
	switch {
	case r.Method != QLoRA:
		return ""
	case r.UpcastFrozen == nil || *r.UpcastFrozen:
		return fmt.Sprintf("%s base: only decoder Linear layers quantized; embeddings, lm_head and norms in fp32 after prepare_model_for_kbit_training", r.Quant)
	}
	return fmt.Sprintf("%s base: only decoder Linear layers quantized; embeddings, lm_head and norms stay 16-bit (%s does not upcast them)", r.Quant, r.Stack)
}

// requestAssumptionsWith is requestAssumptions with the QLoRA base's line
// given (the default estimator's under DeepSpeed says why the norms are
// 16-bit).
func requestAssumptionsWith(r Request, qloraBase, loss string) []string {
	var a []string
	m := r.Model
	a = append(a, fmt.Sprintf("%s, %s, seq %d × batch %d, optimizer %s, attention %s, checkpointing %s",
		r.Method, r.Precision, r.SeqLen, r.Batch, r.Optimizer, r.Attn, r.GradCkpt))
	if o := r.Optimizer.Spec(); o.StepTempBytes > 0 {
		a = append(a, fmt.Sprintf("%s steps one parameter at a time: its fp32 temporaries (%d B per element) for the largest trained tensor are counted with the gradients, when that tensor is stepped", o.Name, o.StepTempBytes))
	}
	if r.Method != Full {
		a = append(a, fmt.Sprintf("LoRA rank %d on %s", r.LoRARank, strings.Join(r.LoRATargets, ", ")))
	}
	if qloraBase != "" {
		a = append(a, qloraBase)
	}
	if a1 := moeQLoRAAssumption(r); a1 != "" {
		a = append(a, a1)
	}
	if loss != "" {
		a = append(a, loss)
	}
	a = append(a, kernelAssumptions(r)...)
	a = append(a, seq2seqAssumptions(r)...)
	if ta := taskAssumption(r); ta != "" {
		a = append(a, ta)
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
	case m.Seq2Seq != nil:
		g, why = Low, append(why, "encoder-decoder: no measured encoder-decoder runs in the evidence")
	case m.Encoder:
		g, why = Low, append(why, "encoder-only: few measured encoder runs in the evidence (BERT, process level)")
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

// moeQLoRAAssumption warns that a MoE model's routed experts are counted as
// 4-bit under QLoRA, which holds where they are per-expert nn.Linear modules
// (transformers 4.x, and the stacks that keep that layout) but not under
// transformers 5, which stores them as fused 3-D parameters: its
// bitsandbytes integration replaces only nn.Linear modules, so the experts
// stay in the load dtype, and prepare_model_for_kbit_training then casts
// every non-4-bit 16-bit parameter to fp32 (the fake-tensor oracle shows
// both on the pinned transformers 5.23 and PEFT 0.21).
func moeQLoRAAssumption(r Request) string {
	if r.Method != QLoRA || r.Model == nil {
		return ""
	}
	p := r.Model.RoutedExpertParams()
	if p == 0 {
		return ""
	}
	stored := int64(2) // bf16 as loaded
	how := "bf16"
	if r.UpcastFrozen == nil || *r.UpcastFrozen {
		stored, how = 4, "fp32 after prepare_model_for_kbit_training"
	}
	// nf4 packs two weights per byte; the quantization state is left out
	// of the difference (it only lowers it).
	more := p*stored - p/2
	return fmt.Sprintf("MoE under QLoRA: the %.2fB routed-expert weights are counted as 4-bit, as bitsandbytes quantizes per-expert Linear layers (transformers 4.x); transformers 5 stores them as fused 3-D parameters that bitsandbytes leaves unquantized (%s): about %.1f GiB more there",
		float64(p)/1e9, how, bytesize.InGiB(more))
}
