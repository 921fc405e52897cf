package estimate

import (
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// Coefficients are the fitted numbers of the default estimator. Each is
// fitted on a named cohort by `canifinetune calibrate`; the embedded defaults
// (coefficients.json) are produced from evidence/dev.jsonl by `make-coefficients`
// (see evidence.FitDefault) and a test re-runs that fit.
type Coefficients struct {
	// ActGated and ActClassic scale seed 000's per-layer activation shape
	// s·b·(9·h·act + k·ffn·mlp_bytes) for gated (SwiGLU/GeGLU, k = 4.5) and
	// classic two-matmul (k = 2.8) feed-forwards, measured on adapter runs.
	ActGated   float64 `json:"act_gated"`
	ActClassic float64 `json:"act_classic"`
	// FullScale multiplies activations of full fine-tuning relative to adapter
	// runs: a trained Linear saves its input for the weight gradient, a
	// frozen one needs none.
	FullScale float64 `json:"act_full_scale"`
	// Logits is bytes per logit element of the stock loss chain (seed 000:
	// 14 — bf16 logits, fp32 upcast, log-softmax, fp32 gradient).
	Logits float64 `json:"logits_bytes"`
	// CkptPerLayer is bytes per token per hidden unit each checkpointed
	// block keeps (its input; seed 000: 2 × act_bytes = 4 for bf16).
	CkptPerLayer float64 `json:"ckpt_bytes_per_token_hidden"`
	// ReservedFrac, ReservedLargest and ReservedConstGiB map the allocated
	// peak to the caching allocator's reserved peak: reserved = allocated ·
	// (1 + frac) + largest · (the step's largest transient tensor) + const.
	// Fragmentation grows with the largest blocks (seed 000, "when the
	// estimator is wrong"), not with the card.
	ReservedFrac     float64 `json:"reserved_frac"`
	ReservedLargest  float64 `json:"reserved_largest"`
	ReservedConstGiB float64 `json:"reserved_const_gib"`
	// ReservedDynamic applies when the batch shapes change from step to step
	// (Request.DynamicShapes): blocks cached for one shape do not fit the
	// next exactly, so the allocator keeps this × the step's whole
	// shape-dependent transient (activations and loss chain) cached.
	ReservedDynamic float64 `json:"reserved_dynamic"`
	// ContextGiB is what the device shows beyond reserved memory: the CUDA
	// context, cuBLAS/cuDNN workspaces (not fitted: the dev cohort has no
	// decoder row measured with nvidia-smi).
	ContextGiB float64 `json:"context_gib"`
}

// PhasePeak is the default estimator: seed 000's components, combined as the
// peak over the phases of a step rather than their sum, with allocated,
// reserved and device levels predicted separately and coefficients fitted on
// measured runs.
type PhasePeak struct {
	Coef Coefficients
	// CoefSource names where Coef came from (embedded default or a calibration file).
	CoefSource string
}

// Name implements Estimator.
func (PhasePeak) Name() string { return "canifinetune" }

// Version implements Estimator.
func (PhasePeak) Version() string { return "1.0.0" }

// Describe implements Estimator.
func (PhasePeak) Describe() string {
	return "default: phase-peak model (forward/loss vs backward-end/optimizer step), separate allocated/reserved/process levels, coefficients fitted on evidence/dev.jsonl"
}

// terms are the first-principles pieces of a step, before the fitted
// coefficients scale and combine them.
type terms struct {
	// Static is resident through the whole step: weights, quantization
	// metadata, adapters, and for full mixed-precision runs nothing else.
	Weights, QuantMeta, Adapters int64
	// OptStates are the optimizer's persistent states (present from the
	// first step on, so in every steady-state peak).
	OptStates int64
	// Grads are the trainable parameters' gradients, alive from backward
	// to the optimizer step (freed by zero_grad(set_to_none=True)).
	Grads int64
	// PagedStates are a paged optimizer's states in CUDA unified memory,
	// which the caching allocator does not count (paged.go).
	PagedStates int64
	// OptTransient is the optimizer step's temporary memory (foreach
	// AdamW's tensor-sized intermediates).
	OptTransient int64
	// HookStepTemp is, with optimizer-in-backward, the step temporaries of
	// the largest parameter (an optimizer with StepTempBytes): they exist
	// while its post-accumulate-grad hook runs, after the loss chain's
	// backward has freed its tensors.
	HookStepTemp int64
	// AutocastCache is the bf16 copy of fp32 trainable weights that
	// torch.autocast keeps for the forward and backward of a mixed-precision run.
	AutocastCache int64
	// ActUnit is Σ over layers of seed 000's per-layer activation shape
	// (coefficient 1).
	ActUnit float64
	// Loss is the loss path: "full", "chunked", "litgpt" or "fused".
	Loss string
	// Largest is the step's largest transient tensor in bytes: the fp32
	// logits of an unchunked loss, else the widest fp32 MLP intermediate.
	Largest float64
	// LayerUnit is one layer's share of ActUnit (the recomputation peak
	// under checkpointing).
	LayerUnit float64
	// LogitUnit is the number of logit elements s·b·vocab (0 with a fused loss).
	LogitUnit float64
	// CkptUnit is layers·s·b·h (0 without checkpointing).
	CkptUnit float64
	// OpSaved is what a per-op checkpointing policy keeps beyond the
	// block inputs, in bytes over all blocks (opPolicySaved; 0 otherwise).
	OpSaved float64
	// Eager is the s² attention-score memory of eager attention.
	Eager float64
	// FrozenCast is the 16-bit copies of fp32 frozen Linear weights that
	// autocast makes for each matmul and the matmul keeps for the backward
	// (autocast caches casts only of leaves that require grad).
	FrozenCast float64
	// TrainedInputs is what full fine-tuning keeps beyond an adapter run:
	// each trained Linear's input, for its weight gradient, over all layers
	// (trainedLinearInputs).
	TrainedInputs float64
	// HeadCast is the 16-bit copy autocast makes of a frozen fp32 output
	// layer for the logits matmul, kept for its backward (outside the
	// checkpointed blocks, so present whether or not they are recomputed).
	HeadCast float64
	// AdapterAct is what the LoRA adapters keep for the backward beyond the
	// base layers' own saved inputs, over all layers (adapterActivations).
	AdapterAct float64
	// Dequant is QLoRA's transient 16-bit copy of the weight being
	// multiplied (seed 000 §1: 2 · hidden · intermediate · 2 B).
	Dequant int64
	// Trainable is the trained parameter count.
	Trainable int64
	// HF is the transformers layer's saved tensors, spelled out (hfExact
	// requests only; nil otherwise: the fitted shape applies).
	HF *hfSaved
	// DSMaster: DeepSpeed's optimizer keeps fp32 master weights
	// (dsMasterCopy), which the optimizer states include (deepspeed.go).
	DSMaster bool
	// LitGPT is litgptExact, read once per estimate: HF then holds
	// LitGPT's blocks, spelled out (litgptsaved.go).
	LitGPT bool
	// KernelSavedLayer is what one layer's fused kernels (and
	// torch.compile) do not save for the backward, in bytes (kernels.go).
	KernelSavedLayer float64
	// BlockExtra is what the blocks keep beyond the fitted per-layer shape,
	// in bytes over all blocks, unscaled: an encoder-decoder model's
	// dropout masks and position-bias masks (seq2seq.go).
	BlockExtra float64
	// FusedLossSaved and FusedLossTransient are what a loss kernel
	// without materialised logits saves for the backward and holds while
	// it runs (fusedLossBytes).
	FusedLossSaved, FusedLossTransient float64
}

func init() {
	register(PhasePeak{Coef: DefaultCoefficients, CoefSource: "embedded (fitted on evidence/dev.jsonl)"})
}

// terms computes the first-principles pieces of a request.
func (c PhasePeak) terms(req Request) (terms, Request, error) {
	r, err := req.Normalize()
	if err != nil {
		return terms{}, r, err
	}
	r = asRun(r)
	return c.normalizedTerms(r), r, nil
}

// normalizedTerms computes the terms of a normalized request (terms, and
// Prepared for the candidates of a search), after deepspeedModule.
func (c PhasePeak) normalizedTerms(r Request) terms {
	r = sdpaKernel(r)
	m := r.Model
	var t terms
	t.LitGPT = litgptExact(r)
	ds := dsMasterCopy(r)
	t.DSMaster = ds
	P := m.Params()
	adapterBytes := adapterDtypeBytes(r)

	// litgpt's GPT has no weight tying: its converted checkpoints copy a tied
	// embedding into a separate lm_head, which it holds (and, fully
	// fine-tuned, trains) as a parameter of its own.
	if r.Stack == StackLitGPT && m.LMHeadParams == 0 {
		P += m.Vocab * m.Hidden
	}
	switch r.Method {
	case Full:
		t.Weights = P * r.paramBytes()
		if r.Precision.mixed() {
			// torch.autocast caches the 16-bit cast of each fp32 weight that
			// requires grad for the forward and backward (cache_enabled=True).
			t.AutocastCache = P * 2
		}
	case LoRA:
		t.Weights = P * frozenBaseBytes(r)
		if frozenBaseBytes(r) == 4 && r.Precision.mixed() {
			t.FrozenCast = 2 * float64(m.LinearParams())
			t.HeadCast = 2 * float64(m.Vocab*m.Hidden)
		}
	case QLoRA:
		if t.LitGPT {
			// Fabric's BitsandbytesPrecision over LitGPT's GPT
			// (litgptqlora.go); the rest stays bf16.
			packed, state, n := litgptQLoRAStorage(r)
			t.Weights = packed + (P-n)*2
			t.QuantMeta = state
			break
		}
		if r.Precision.mixed() && r.Stack != StackLitGPT && (upcastFrozen(r) || frozenBaseBytes(r) == 4) {
			// The output layer stays unquantized in fp32 (PEFT's kbit
			// preparation): autocast casts it for the logits matmul (not
			// cached: autocast caches trained leaves only), and the matmul
			// saves the cast until its backward.
			t.HeadCast = 2 * float64(m.Vocab*m.Hidden)
		}
		if hfExact(r) {
			// The oracle's loading of a bitsandbytes 4-bit base
			// (hfqlora.go); the rest, biases included, upcast to fp32.
			packed, state, n := bnb4bitStorage(r)
			t.Weights = packed + (P-n)*4
			t.QuantMeta = state
			break
		}
		linear := m.LinearParams()
		rest := P - linear
		restBytes := int64(2)
		if upcastFrozen(r) {
			restBytes = 4 // prepare_model_for_kbit_training casts non-quantized params to fp32
		} else if frozenBaseBytes(r) == 4 {
			restBytes = 4
		}
		t.Dequant = dequantWorkspace(m)
		if r.Stack == StackLitGPT {
			// litgpt (Fabric's BitsandbytesPrecision, no ignore_modules)
			// quantizes every Linear, the output layer included; each
			// 128-token lm_head chunk dequantizes the whole matrix.
			head := m.Vocab * m.Hidden // in P, tied or not (see above)
			rest -= head
			linear += head
			t.Dequant = max(t.Dequant, 2*head)
		}
		t.Weights = int64(float64(linear)*quantBytesPerParam(r.Quant)) + rest*restBytes
		t.QuantMeta = int64(float64(linear) * quantStateBytesPerParam(r.Quant))
	}
	trainable := P
	gradBytes := r.paramBytes()
	if r.Method != Full {
		if a, ok := litgptAdapters(r); ok && r.Stack == StackLitGPT {
			// LitGPT's own LoRA layers (a fused qkv's lora_A is r per
			// enabled slice; HF's gate_up_proj is two adapted Linears),
			// whatever the checkpointing or sharding.
			trainable = litgptAdapterParams(r, a)
		} else {
			trainable = adapterParams(r) + extraTrainableParams(r)
		}
		gradBytes = adapterBytes
		t.Adapters = trainable * adapterBytes
	}
	t.Grads = trainable * gradBytes
	t.Trainable = trainable
	if wholeUnitGrads(r) {
		// FSDP with use_orig_params allocates the gradient of a unit's whole
		// flat parameter when any parameter in it trains (PyTorch FSDP docs
		// on frozen parameters: "the gradient memory usage will be higher
		// than expected, equivalent to not freezing those parameters");
		// litgpt wraps each Block, LoRA and frozen weights together, as one
		// unit (litgpt issue #1417).
		m := r.Model
		blocks := m.LinearParams() + m.NormParams() - m.FinalNormParams
		t.Grads = blocks*frozenBaseBytes(r) + extraTrainableParams(r)*gradBytes
	}
	stateBytes := gradBytes
	if r.OptimizerStateDtype != "" {
		stateBytes = lookup(StateDtypes, r.OptimizerStateDtype).Bytes
	}
	if ds && r.OptimizerStateDtype == "" {
		stateBytes = 4 // DeepSpeed's optimizer steps the fp32 master partition (deepspeed.go)
	}
	opt := r.Optimizer.Spec()
	if opt.StateBytes > 0 {
		stateBytes = opt.StateBytes // paged_adamw_32bit: fp32 whatever the parameters
	}
	switch {
	case opt.States == 0:
		// Plain SGD without momentum keeps no state (seed 000 §4).
	case opt.Paged && ds:
		// DeepSpeed's flat partitions are paged whole (pagedFlat); the
		// client optimizer's kernels step in place. The master copy and
		// the fp32 gradient partition are DeepSpeed's, added below.
		t.OptStates, t.PagedStates = pagedFlat(trainable, opt, stateBytes)
	case opt.Paged:
		// A paged optimizer's states of tensors of 1e5 elements or more
		// are in CUDA unified memory, outside the caching allocator
		// (paged.go); its fused kernels step in place.
		t.OptStates, t.PagedStates = pagedStates(r, opt, stateBytes)
	case opt.Factored:
		// Factored second moment: one row and one column vector per matrix;
		// no first moment by default (transformers Adafactor beta1=None).
		t.OptStates = adafactorState(m, r)
	case opt.EightBit:
		// 8-bit states plus one fp32 absmax per block (bitsandbytes'
		// blockwise 8-bit optimizers, torchao's OptimState8bit).
		t.OptStates = eightBitStates(r, opt, trainable, ds)
	default:
		t.OptStates = opt.States * trainable * stateBytes
		if !opt.Fused {
			// foreach AdamW materialises tensor-sized intermediates in the
			// step (seed 000 §4: 3× vs 2× parameter bytes).
			t.OptTransient = trainable * stateBytes
		}
	}

	if opt.StepTempBytes > 0 {
		// A parameter-at-a-time step holds its temporaries for one
		// parameter, the largest, beside every gradient.
		t.OptTransient = largestTrainable(r) * opt.StepTempBytes
	}
	if opt.StepTempStates > 0 {
		// torch's _single_tensor_adam: denom = (exp_avg_sq.sqrt() /
		// bias_correction2_sqrt).add_(eps) holds the square root and the
		// quotient, each in the state dtype, for one parameter at a time
		// (torch/optim/adam.py). An H200 probe of Qwen2.5-7B (bf16, for-loop
		// AdamW) peaked at weights + gradients + states + 2.38e9 B, against
		// 2 × 1.09e9 B for its largest parameter (the embeddings).
		t.OptTransient = largestTrainable(r) * opt.StepTempStates * stateBytes
	}
	if ds {
		// DeepSpeed's ZeRO optimizer: the fp32 master copy of the trained
		// parameters beside their states (divided with them), and for the
		// step the fp32 gradient partition it builds from the reduced
		// 16-bit gradients (deepspeed.go).
		t.OptStates += dsMasterBytes * trainable
		if dsBF16Stage0(r) {
			// BF16_Optimizer (deepspeed.go): the fp32 gradients are a
			// persistent whole buffer, not a step temporary; combine
			// divides the states and the step over the ranks.
			t.Grads = dsGradBytes * trainable
		} else {
			t.OptTransient += dsGradBytes * trainable
		}
	}

	s, b, h := float64(r.SeqLen), float64(r.Batch), float64(m.Hidden)
	act := float64(residualBytes(r))
	mlpT, mlpBytes := refGatedMLPTensors, act
	if m.MLP == hfconfig.MLPClassic {
		mlpT = refClassicMLPTensor
	}
	if r.Method == QLoRA && upcastFrozen(r) {
		// PEFT's prepare_model_for_kbit_training leaves the norms' weights
		// in fp32, so the hidden states entering each Linear4bit are fp32
		// and bitsandbytes returns its output in its input's dtype
		// (Linear4bit.forward: out.to(inp_dtype)): the MLP's intermediates
		// are fp32. A stack that keeps the norms in 16 bits (a preset
		// with UpcastFrozen false) computes them in 16 bits.
		mlpBytes = refQLoRAMLPBytes
	}
	perLayer := s * b * (refAttnTensors*h*act + mlpT*float64(m.ActiveFFN())*mlpBytes)
	t.Eager = scoreTensors(r) * float64(m.Heads) * s * s * b * act
	L := float64(m.NumLayers)
	t.AdapterAct = adapterActivations(r, act)
	if r.Method == Full {
		t.TrainedInputs = trainedLinearInputs(r)
	}
	t.LayerUnit = perLayer
	t.ActUnit = L * perLayer
	t.KernelSavedLayer = kernelSavingPerLayer(r, act, mlpBytes)
	if r.OptimizerInBackward {
		// A parameter-at-a-time step's temporaries move to the largest
		// tensor's hook; foreach AdamW's step buffer doubles the one
		// in-flight gradient (inBackwardGrads).
		foreach := t.OptTransient > 0 && opt.StepTempBytes == 0 && opt.StepTempStates == 0
		t.Grads = inBackwardGrads(r, gradBytes, foreach)
		if !foreach {
			t.HookStepTemp = t.OptTransient
		}
		t.OptTransient = 0
	}
	switch ck := r.GradCkpt.Spec(); {
	case ck.OffloadsInputs:
		// Unsloth's gradient checkpointing and activation offloading copy
		// each block's saved input to host RAM (non-blocking) and bring it
		// back for the recomputation: one block's input stays on the GPU.
		t.CkptUnit = s * b * h
	case ck.Recomputes:
		// A block's saved input has the residual stream's dtype: the
		// coefficient is fitted per 16-bit element.
		t.CkptUnit = L * s * b * h * act / 2
		if ck.OpPolicy {
			// The matmuls and attention run in the compute dtype, also
			// where autocast keeps an fp32 residual stream (torchtitan
			// without FSDP).
			t.OpSaved = L * s * b * opPolicySaved(m, float64(r.Precision.Spec().ComputeBytes))
		}
	}
	if hfExact(r) {
		hs := hfWithFullLayers(r, hfLayerSaved(r))
		t.HF = &hs
	}
	if t.LitGPT {
		// LitGPT's own blocks, spelled out the same way (litgptsaved.go).
		hs := litgptLayerSaved(r)
		litgptMathScores(r, &hs)
		t.HF = &hs
	}
	t.Loss = lossPath(r)
	switch t.Loss {
	case "full":
		t.LogitUnit = s * b * float64(m.Vocab)
		t.Largest = 4 * t.LogitUnit
	case "chunked", "litgpt":
		t.LogitUnit = s * b * float64(m.Vocab)
		t.Largest = 4 * s * b * float64(max(m.ActiveFFN(), m.Hidden))
	default:
		t.Largest = 4 * s * b * float64(max(m.ActiveFFN(), m.Hidden))
		t.FusedLossSaved, t.FusedLossTransient = fusedLossBytes(r, act, r.Method == Full || headExtra(r), gradBytes)
	}
	if !r.Task.Spec().VocabLogits {
		// A classifier's logits are a few per sequence: no loss chain.
		t.LogitUnit, t.FusedLossSaved, t.FusedLossTransient = 0, 0, 0
		t.Largest = 4 * s * b * float64(max(m.ActiveFFN(), m.Hidden))
	}
	if m.Seq2Seq != nil {
		seq2seqTerms(&t, r, act, mlpT, mlpBytes)
	}
	if m.Disentangled {
		disentangledTerms(&t, r, act)
	}
	return t
}

// Estimate implements Estimator.
func (c PhasePeak) Estimate(req Request) (*Estimate, error) {
	t, r, err := c.terms(req)
	if err != nil {
		return nil, err
	}
	e := new(Estimate)
	if err := c.combine(t, r, e); err != nil {
		return nil, err
	}
	return e, nil
}

// combine turns the terms of a normalized request into its estimate,
// written into e (which it resets): the one arithmetic behind Estimate and
// Prepared.
func (c PhasePeak) combine(t terms, r Request, e *Estimate) error {
	k := c.Coef
	*e = Estimate{Estimator: c.Name(), Version: c.Version(), Params: r.Model.Params()}
	e.Components = e.buf[:0]
	actCoef, logitsCoef := c.scales(r, t.Loss)
	// acts is what the forward keeps for the backward; fixedCasts is the
	// part of it whose size does not follow the batch shape.
	var acts, fixedCasts float64
	layers := float64(r.Model.NumLayers)
	if ckptOn(r) {
		// Checkpointed blocks keep their inputs; the recomputed layer and the
		// loss chain do not coexist (the loss is done before the first
		// recomputation), so the transient is the larger of the two.
		fixedCasts = t.HeadCast
		acts = k.CkptPerLayer*t.CkptUnit + t.OpSaved + fixedCasts
	} else {
		fixedCasts = t.FrozenCast + t.HeadCast
		acts = actCoef*t.ActUnit + t.Eager*layers + t.AdapterAct + t.TrainedInputs + t.BlockExtra + fixedCasts
		acts -= min(t.KernelSavedLayer, actCoef*t.LayerUnit/2) * layers
	}
	acts += t.FusedLossSaved
	logits := logitsCoef*t.LogitUnit + t.FusedLossTransient
	if r.Model.LogitSoftcap > 0 {
		sc := float64(softcapLogitBytes)
		if !r.Precision.mixed() && residualBytes(r) == 4 {
			sc = 4 // fp32 logits: tanh keeps an fp32 output
		}
		logits += sc * t.LogitUnit
	}
	if r.Method == QLoRA && t.LitGPT {
		// The last LM head chunk's dequantized head beside the loss chain's
		// forward half (litgptQLoRAHeadBytes).
		logits = max(logits, litgptQLoRAHeadBytes(r, t.LogitUnit),
			litgptQLoRAHeadBackward(r, t.LogitUnit)-litgptPrevAlive(r)*litgptQLoRAStepHeld(r))
	}
	if b, ok := torchtitanLossBytes(r, t.LogitUnit); ok {
		// torchtitan's compiled or chunked loss (torchtitanLossBytes).
		logits = b
	}
	if torchtuneChunkedLoss(r) {
		// torchtune's chunked output and loss, with the output layer's
		// gradient its chunks accumulate (torchtuneChunkedLossBytes).
		logits = torchtuneChunkedLossBytes(r, t.LogitUnit)
	}
	recompute, logitsFixed := 0.0, 0.0
	if ckptOn(r) {
		recompute = actCoef*t.LayerUnit + t.Eager + (t.AdapterAct+t.FrozenCast+t.TrainedInputs+t.BlockExtra)/layers
		recompute -= min(t.KernelSavedLayer, actCoef*t.LayerUnit/2)
		// A per-op policy's saved outputs are not made again: the
		// recomputation regenerates the rest of the block.
		recompute = max(0, recompute-t.OpSaved/layers)
	}
	if t.HF != nil {
		acts, recompute = hfActivations(r, *t.HF, t.KernelSavedLayer)
		acts += t.FusedLossSaved
		if r.Method == Full && ckptOn(r) && r.GradAccum == 1 && r.Sharding.GPUs <= 1 {
			recompute += hfGradsDuringRecompute(r, t.Grads, *t.HF)
		}
		if r.Method == QLoRA && !t.LitGPT {
			// A Linear4bit's working set, or the MLP's backward: beside
			// the one layer recomputed, or (without checkpointing) the
			// saved tensors, against the loss chain.
			q := max(bnbLinearTransient(r), qloraMLPBackward(r)-qloraMLPFreed(r))
			if ckptOn(r) {
				// The recomputed layer's MLP backward runs before its
				// softmax backward, whose transient the recomputation
				// already holds: the larger of the two, not both.
				recompute += max(0, q-hfSoftmaxBackwardExtra(r, *t.HF))
			} else {
				recompute = max(recompute, q)
			}
		}
		// A block's first forward, against the recomputation's backward.
		recompute = max(recompute, hfFirstPass(r, *t.HF))
		// An autocast QLoRA's bf16 output layer lives from the logits
		// matmul to its backward: beside the loss chain, not in acts. Its
		// size does not follow the batch shape, so the reserved level's
		// transient leaves it out of the loss side (logitsFixed).
		logits += t.HeadCast
		logitsFixed, fixedCasts = t.HeadCast, 0
	}
	held := heldLogitBytes(r, t)
	add := func(name ComponentID, b int64) {
		e.Components = append(e.Components, Component{Name: name, Bytes: b})
	}
	// Resident state and the step phase's gradients first, so that sharding
	// divides them before the peak phase is chosen: activations and the loss
	// chain are not divided, so the larger phase per GPU can differ from the
	// larger one on a single GPU.
	add(CWeights, t.Weights)
	if r.Method == QLoRA {
		add(CQuantOverhead, t.QuantMeta)
	}
	if r.Method != Full {
		add(CAdapters, t.Adapters)
	}
	add(COptimizer, t.OptStates)
	add(CGradients, t.Grads)
	applySharding(e, r)
	var sgoShard, sgoGathered int64
	if shardGradOpFSDP(r) {
		sgoShard, sgoGathered = shardGradOpWeights(r, t.Weights)
		e.setComponent(CWeights, sgoShard)
	}
	if n := r.Sharding.GPUs; dsBF16Stage0(r) && n > 1 {
		// BF16_Optimizer divides its fp32 master weights and states over
		// the ranks, as ZeRO-1 does (deepspeed.go).
		o, _ := e.Component(COptimizer)
		e.setComponent(COptimizer, (o+n-1)/n)
	}
	if t.DSMaster && offloadsOptimizer(r.Sharding.CPUOffload) && r.Sharding.GPUs > 0 {
		// ZeRO-Offload: the master weights went to host RAM with the
		// optimizer states; the fp32 gradient partition the CPU optimizer
		// steps is there too (deepspeed.go).
		e.HostOffload += dsGradBytes * t.Trainable / r.Sharding.GPUs
	}
	// The step's temporaries follow the tensors it steps: a shard of each
	// under sharded gradients, none on the GPU when the optimizer runs on
	// the CPU; DDP's gradient buckets do not double them. grads is the
	// gradients alone, per GPU, what accumulation keeps through a forward.
	grads, _ := e.Component(CGradients)
	if t.DSMaster {
		if offloadsOptimizer(r.Sharding.CPUOffload) {
			// ZeRO-Offload reduces each bucket and copies it to the
			// gradient partition in host RAM (stage_1_and_2.py
			// async_accumulate_grad_in_cpu_via_gpu; stage3.py keeps
			// grad_partitions_flat_buffer on the CPU): no partition on the
			// GPU, as DeepSpeed's own estimate counts it (2 B of 16-bit
			// parameters only, under ZeRO-2).
			grads = 0
		}
		e.setComponent(CGradients, dsStepGradients(r, grads, t.OptTransient, t.Trainable))
	} else {
		e.addTo(CGradients, stepTempPerGPU(r, t.OptTransient))
	}
	step, _ := e.Component(CGradients)
	autocast := float64(t.AutocastCache)
	if paramsSharded(r.Sharding.Strategy) || shardGradOpFSDP(r) {
		// FSDP/ZeRO-3 cast each unit's shard for its all-gather and free the
		// unsharded 16-bit copy after the unit: no whole-model cast is held.
		// SHARD_GRAD_OP keeps the gathered units, but gathered in the
		// compute dtype already (shardGradOpWeights): autocast finds no
		// fp32 weight to cast and cache beside them. (A param_dtype fp32
		// policy would gather fp32 and autocast would save a cast of each
		// weight: not seen, as shardGradOpWeights says.)
		autocast /= float64(r.Sharding.GPUs)
	}
	if t.HF != nil && autocastCacheEndsWithForward(r) {
		// Checkpointed blocks save no weight cast: autocast's cache holds
		// the casts only until the forward's autocast region ends, which is
		// before the loss chain's backward peak. There the output layer's
		// cast, saved by the logits' matmul, is left; in the forward the
		// whole cache sits beside the forward half of the loss chain; a
		// recomputed block casts its own weights again.
		m := r.Model
		head := 2 * float64(m.Vocab*m.Hidden)
		logits = max(logits+head, hfForwardLogitBytes*t.LogitUnit+autocast)
		recompute += 2 * float64(m.LinearParams()) / float64(m.NumLayers)
		autocast = 0
	}
	if r.OptimizerInBackward && torchtuneChunkedLoss(r) {
		// The output layer's gradient the chunked chain counts is the
		// gradient optimizer-in-backward holds beside it (added below): the
		// step of a parameter runs only once its gradient is complete.
		logits = max(0, logits-float64(step))
	}
	fwd := acts + held + max(logits, recompute) + autocast + float64(t.Dequant) + float64(sgoGathered)
	var accumulated int64
	if t.DSMaster && (paramsSharded(r.Sharding.Strategy) || dsBF16Stage0(r)) && r.GradAccum <= 1 && grads > 0 {
		// ZeRO-3 allocates its 16-bit gradient partition when it is built
		// (stage3.py, grad_partitions_flat_buffer on the GPU without
		// offload), and BF16_Optimizer its fp32 gradient buffer: resident
		// in the forward too.
		accumulated = grads
		fwd += float64(grads)
	}
	if r.GradAccum > 1 && t.Grads+t.OptTransient > 0 {
		// Accumulating micro-batches keep the gradients of the earlier ones
		// through the next forward and backward: they are resident then,
		// not only in the optimizer-step phase. Under FSDP's no_sync they
		// are the whole, unsharded gradients.
		accumulated = int64(float64(step) * float64(t.Grads) / float64(t.Grads+t.OptTransient))
		if t.DSMaster {
			// DeepSpeed's step temporaries are not divided as its
			// gradients are (dsStepGradients): read the gradients.
			accumulated = grads
		}
		if noSyncAccumulation(r) {
			accumulated = t.Grads
		}
		fwd += float64(accumulated)
	}
	if r.OptimizerInBackward {
		// The step runs inside the backward, from each parameter's
		// post-accumulate-grad hook (torchtune's optimizer_in_bwd, PyTorch's
		// register_post_accumulate_grad_hook tutorial): the gradient being
		// stepped and its step's temporary (inBackwardGrads) coexist with
		// the backward's activations and loss chain, and there is no
		// separate optimizer-step phase after it. A tied output layer's
		// gradient is the largest of them, and it lives through the whole
		// backward: autograd sums the output layer's and the embedding's
		// contributions in the leaf's input buffer before the hook fires
		// (torch/csrc/autograd/input_buffer.cpp).
		accumulated = step
		fwd += float64(step)
	}
	// LitGPT's fit() holds the last micro-batch's logits through the
	// optimizer step (litgptStepLogitBytes).
	stepHeld := 0.0
	if t.LitGPT {
		stepHeld = litgptStepLogitBytes * t.LogitUnit
		if r.Method == QLoRA {
			stepHeld += litgptQLoRAStepHeld(r)
		}
	}
	// A loop that holds the model's output (Stack.HoldsOutputs) holds its
	// logits through the optimizer step too.
	stepHeld += held
	// The step's transient peak: forward/loss or backward-end/optimizer step,
	// whichever is larger per GPU. Report its parts under their usual names.
	stepPeak := step + int64(stepHeld)
	if end := tiedBackwardEnd(r); end > 0 {
		// The end of the backward, before the optimizer step: every
		// gradient and the tied embedding's second one; the step's own
		// temporaries (in step) come after it.
		stepPeak = max(stepPeak, int64(float64(t.Grads)+end))
	}
	var stepActs int64
	if t.HookStepTemp > 0 {
		// With optimizer-in-backward the largest parameter's step runs from
		// its hook once its gradient is complete, after the loss chain's
		// backward has freed its tensors: a tied output layer's at the end
		// of the backward, with the activations gone; an untied one's
		// before the layers' backward, beside the saved activations.
		temp := stepTempPerGPU(r, t.HookStepTemp)
		hook := step + temp
		if !r.Model.TiedEmbeddings {
			hook += int64(acts)
		}
		if hook > stepPeak {
			stepPeak, stepActs = hook, hook-step-temp
		}
	}
	fwdWins := fwd >= float64(stepPeak)
	e.Phases = Phases{Forward: int64(fwd), Step: stepPeak, ForwardPeak: fwdWins}
	if fwdWins {
		if sgoGathered > 0 {
			// SHARD_GRAD_OP's gathered model, live from the forward to
			// the backward, beside the shard (shardGradOpFSDP).
			e.setComponent(CWeights, sgoShard+sgoGathered)
		}
		e.setComponent(CGradients, accumulated)
		add(CActivations, int64(acts+recompute*b2f(recompute > logits)+autocast+float64(t.Dequant)))
		add(CLogits, int64(logits*b2f(logits >= recompute)+held))
	} else {
		// The phase's gradients: those of the step, or at the backward's
		// end the larger set it holds (tiedBackwardEnd), with a
		// hook-time step's temporaries.
		e.setComponent(CGradients, stepPeak-int64(stepHeld)-stepActs)
		add(CActivations, stepActs)
		add(CLogits, int64(stepHeld))
	}
	alloc := e.componentSum()
	// What max_memory_reserved shows on a card with room to spare: the
	// allocator keeps the blocks of the step's largest transient tensors
	// cached. Under memory pressure it releases cached blocks and retries
	// before reporting an OOM (PyTorch's CUDA caching allocator frees
	// cached blocks on a failed cudaMalloc), so the plan — what the run
	// needs — counts fragmentation but not those releasable blocks.
	needed := int64(float64(alloc)*(1+k.ReservedFrac) + k.ReservedConstGiB*GiB)
	context := int64(k.ContextGiB * GiB)
	transient := acts - fixedCasts + held + max(logits-logitsFixed, recompute)
	// With the same shapes every step, a block freed in one step serves the
	// same request in the next: the allocator cannot keep more cached than
	// the step's transient, whatever a fitted coefficient says.
	cached := int64(min(k.ReservedLargest*t.Largest, transient))
	if r.DynamicShapes {
		// Every tensor the step frees is sized by this batch's length, so
		// blocks cached for other lengths do not fit it exactly: what the
		// allocator keeps follows the step's whole shape-dependent
		// transient (activations and the loss chain), not one tensor, as
		// far as the allocator model bounds it (allocbound.go).
		cached = int64(dynamicCachedCoef(k.ReservedDynamic, t, r) * transient)
	}
	if !fwdWins {
		// The forward's blocks, released and cached, serve the larger
		// optimizer-step phase that follows: only what the step does not
		// reuse stays cached on top of its peak.
		cached = max(0, cached-(stepPeak-int64(fwd)))
	}
	if r.GPUTotal > 0 {
		// The allocator cannot hold more than the card: with little
		// headroom it releases cached blocks before each new segment, so
		// the cached share shrinks to what is left beside the context.
		cached = max(0, min(cached, r.GPUTotal-context-needed))
	}
	reserved := needed + cached
	if ceiling := r.GPUTotal - context; r.GPUTotal > 0 && alloc <= ceiling {
		// A run whose tensors fit cannot reserve more than the card holds
		// beside the context: on a failed cudaMalloc the caching allocator
		// frees its unused cached segments and retries before it reports
		// an OOM (c10/cuda/CUDACachingAllocator.cpp, release_cached_blocks),
		// so the fitted fragmentation allowance in needed, which the plan
		// keeps, does not raise the reserved level past the card.
		reserved = min(reserved, ceiling)
	}
	if n := optimizerShards(r); t.PagedStates > 0 {
		e.PagedOptimizer = (t.PagedStates + n - 1) / n
		if shardedStrategy(r.Sharding.Strategy) && offloadsOptimizer(r.Sharding.CPUOffload) {
			// The optimizer runs on the CPU: its states, paged or
			// not, are in host RAM (applySharding).
			e.HostOffload += e.PagedOptimizer
			e.PagedOptimizer = 0
		}
	}
	process := reserved + context + e.PagedOptimizer
	if r.GPUTotal > 0 {
		// nvidia-smi shows the unified pages resident on the card, which
		// cannot hold more than itself: the rest wait in host RAM.
		process = min(process, max(reserved+context, r.GPUTotal))
	}
	add(COverhead, needed+context-alloc)
	e.Levels = Levels{Allocated: alloc, Reserved: reserved, Process: process}
	e.TrainableParams = t.Trainable
	var safe int64
	safeF := refSafetyFraction
	if r.SafetyFraction > 0 {
		safeF = r.SafetyFraction
	}
	if r.GPUTotal > 0 {
		safe = frac(r.GPUTotal, safeF)
		add(CSafety, safe)
	}
	e.PlanningProxy = needed + context
	e.Total = e.PlanningProxy + safe
	e.Verdict = verdict(e.Total, r)
	_, err := finish(e, r)
	return err
}

// scales are the fitted coefficients a request's activations and loss
// chain are multiplied by.
func (c PhasePeak) scales(r Request, loss string) (actCoef, logitsCoef float64) {
	k := c.Coef
	actCoef = k.ActClassic
	if r.Model.MLP != hfconfig.MLPClassic {
		actCoef = k.ActGated
	}
	if r.Method == Full {
		actCoef *= k.FullScale
	}
	logitsCoef = k.Logits
	if hfExact(r) {
		logitsCoef = hfLogitBytes
	}
	switch loss {
	case "litgpt":
		// LitGPT's chunked LM head, chunked_cross_entropy and fit() are
		// the same code for every model it builds: the LitGPT oracle's
		// chain, on the spelled-out path and off it (not fitted).
		logitsCoef = litgptLogitBytes(r)
	case "chunked":
		logitsCoef = chunkedLogitBytes
	case "full":
		if c, ok := lossChainOf(r); ok && (!hfExact(r) || ownLoss16(r)) {
			// The model's own code's loss chain, or the loop's own loss
			// (losschain.go), at its peak, in place of the fitted stock
			// figure or transformers' upcast chain.
			logitsCoef = float64(c.peak())
		}
		if kernelsOf(r).fastCE && !r.Stack.Spec().OwnLoss {
			// fms-acceleration's fast cross-entropy patches transformers'
			// loss, which a loop computing its own never calls.
			logitsCoef = max(chunkedLogitBytes, logitsCoef-fastCELogitBytes)
		}
		if r.Model.Seq2Seq != nil {
			logitsCoef = seq2seqLogitBytes(r, logitsCoef)
		}
	}
	return actCoef, logitsCoef
}

// Explain implements Estimator: each component's formula and coefficient,
// which phase of the step is the peak, and how sharding divided the state.
func (c PhasePeak) Explain(req Request, e *Estimate) (Explanation, error) {
	r, err := req.Normalize()
	if err != nil {
		return Explanation{}, err
	}
	orig := r
	r = asRun(r)
	ds := dsMasterCopy(r)
	k := c.Coef
	actCoef, logitsCoef := c.scales(r, lossPath(r))
	fwdWins := e.Phases.ForwardPeak
	// What the allocator keeps cached beyond what the run needs: the
	// reserved level less the planning proxy's share without the context.
	cached := e.Levels.Reserved - (e.PlanningProxy - int64(k.ContextGiB*GiB))
	safeF := refSafetyFraction
	if r.SafetyFraction > 0 {
		safeF = r.SafetyFraction
	}
	x := Explanation{Sources: make(map[ComponentID]string, len(e.Components))}
	for _, comp := range e.Components {
		var src string
		switch comp.Name {
		case CWeights:
			src = weightSource(r)
		case CQuantOverhead:
			src = quantStateSource(r)
		case CAdapters:
			src = fmt.Sprintf("rank·(in+out) per targeted Linear, %d B/param (%s)", adapterDtypeBytes(r), adapterDtypeWhy(r))
			if deepspeed16(r) {
				src = "rank·(in+out) per targeted Linear, 2 B/param (DeepSpeed casts the module; docs/memory-model.md#deepspeeds-mixed-precision)"
			}
		case COptimizer:
			src = string(r.Optimizer) + " states, resident from the first step"
			if ds {
				src += ", and DeepSpeed's fp32 master weights (4 B per trained parameter; docs/memory-model.md#deepspeeds-mixed-precision)"
			}
			if dsBF16Stage0(r) && r.Sharding.GPUs > 1 {
				src += fmt.Sprintf("; ÷ %d GPUs (BF16_Optimizer's partition)", r.Sharding.GPUs)
			}
			switch {
			case r.Optimizer.Spec().Paged && ds:
				src += fmt.Sprintf("; the client optimizer's states of DeepSpeed's flat partitions, %.2f GiB, are paged whole into CUDA unified memory, outside the caching allocator — in the process level, not in this component or the total (docs/memory-model.md#paged-optimizers)",
					bytesize.InGiB(e.PagedOptimizer))
			case r.Optimizer.Spec().Paged:
				src += fmt.Sprintf("; only the states of tensors under %d elements (and 8-bit absmax): the rest, %.2f GiB, are paged into CUDA unified memory, outside the caching allocator — in the process level, not in this component or the total (docs/memory-model.md#paged-optimizers)",
					pagedMinNumel, bytesize.InGiB(e.PagedOptimizer))
			}
		case CActivations:
			src = "the backward-end/optimizer-step phase is larger than the forward/loss phase"
			if !fwdWins && comp.Bytes > 0 {
				src = "the saved activations beside the output layer's in-backward step, the larger phase"
			}
			switch {
			case fwdWins && litgptExact(r):
				src = "forward/loss phase: each block's saved tensors as LitGPT's own code keeps them, spelled out, no fitted coefficient (docs/memory-model.md#litgpts-own-code-path)" + ckptNote(r)
			case fwdWins && hfExact(r):
				src = "forward/loss phase: each layer's saved tensors as transformers' code keeps them, spelled out, no fitted coefficient (docs/memory-model.md#the-transformers-code-path-tensor-by-tensor)" + ckptNote(r)
			case fwdWins:
				src = fmt.Sprintf("forward/loss phase: activations ×%.3g of the per-layer activation shape (%sactivations)%s", actCoef, "docs/memory-model.md#", ckptNote(r))
			}
		case CLogits:
			src = "not live in the optimizer-step phase"
			if held := heldPerLogit(r); held > 0 && lossPath(r) == "full" {
				src = fmt.Sprintf("%d B per logit: the logits the training loop keeps through the optimizer step (docs/memory-model.md#logits-and-loss-chain)", held)
			}
			if fwdWins {
				src = fmt.Sprintf("%s loss chain %.3g B per logit", lossPath(r), logitsCoef)
				if ownLoss16(r) && lossPath(r) == "full" {
					src += ": the loop's own F.cross_entropy on 16-bit logits (docs/memory-model.md#a-loops-own-loss)"
				}
				if torchtuneChunkedLoss(r) {
					src = fmt.Sprintf("torchtune's chunked output and CEWithChunkedOutputLoss over %d chunks: the saved chunks or their 16-bit gradients beside the output layer's weight gradients the chunks accumulate (docs/memory-model.md#torchtunes-own-code-path)", torchtuneOutputChunks)
				}
				if autocastCacheEndsWithForward(r) {
					src += ", + the output layer's bf16 weight cast its matmul saves (2 B per output-layer weight); or, where larger, the forward's end: 10 B per logit beside autocast's whole weight-cast cache (2 B per trained parameter) (docs/memory-model.md#the-transformers-code-path-tensor-by-tensor)"
				}
				if held := heldPerLogit(r); held > 0 && lossPath(r) == "full" {
					src += fmt.Sprintf(", + %d B per logit: the logits the training loop keeps through the backward (docs/memory-model.md#logits-and-loss-chain)", held)
				}
			}
		case CGradients:
			src = "gradients + optimizer-step temporaries (the larger phase)"
			if end := tiedBackwardEnd(r); end > 0 {
				src += fmt.Sprintf(", or the backward's end: every gradient and %g more of the tied embedding's (docs/memory-model.md#gradients)", end/headGrad(r))
			}
			if fwdWins {
				src = "freed before the forward (zero_grad set_to_none); the optimizer-step phase is smaller"
				if r.OptimizerInBackward {
					src = "optimizer-in-backward: the largest parameter's gradient and its step temporary, stepped inside the backward (docs/memory-model.md#fused-kernels-compile-and-optimizer-in-backward)"
				}
				if r.GradAccum > 1 {
					src = fmt.Sprintf("accumulated over %d micro-batches: resident through the forward and backward", r.GradAccum)
					if noSyncAccumulation(r) {
						src += ", unsharded: FSDP no_sync() skips the reduce-scatter until the update"
					}
				}
			}
		case COverhead:
			src = fmt.Sprintf("caching-allocator fragmentation %.3g·allocated + %.2f GiB and the CUDA context %.2f GiB (%s); on a card with room to spare the allocator also keeps %.2f GiB of released blocks cached (levels.reserved)",
				k.ReservedFrac, k.ReservedConstGiB, k.ContextGiB, c.CoefSource, bytesize.InGiB(cached))
		case CSafety:
			src = fmt.Sprintf("%.0f %% of total VRAM held back (docs/memory-model.md#safety-margin)", safeF*100)
		}
		if comp.Name == CWeights && shardGradOpFSDP(r) {
			where := "beside this rank's shard"
			if offloadsParams(r.Sharding.CPUOffload) {
				where = "the rank's shard is in host RAM"
			}
			if fwdWins {
				src += "; SHARD_GRAD_OP: every unit's parameters, gathered in the compute dtype, from its forward to the backward, " + where + " (docs/memory-model.md#data-parallel-sharding)"
			} else {
				src += "; SHARD_GRAD_OP: the rank's shard in the optimizer step, the gathered parameters freed after the backward (docs/memory-model.md#data-parallel-sharding)"
			}
		}
		x.Sources[comp.Name] = src + shardingNote(r, comp.Name)
	}
	x.Assumptions = append(c.assumptions(orig, r), "peak = resident state + the larger of the forward/loss and the optimizer-step phases (not the sum of every transient)")
	x.Confidence = confidence(r, c.Name())
	return x, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func ckptNote(r Request) string {
	switch ck := r.GradCkpt.Spec(); {
	case ck.OffloadsInputs:
		return "; checkpointed with block inputs offloaded to host RAM: the larger of the loss chain and one recomputed layer"
	case ck.OpPolicy:
		return "; per-op selective checkpointing: block inputs + every other matmul's output and attention's in every block (docs/memory-model.md#torchtitans-per-op-selective-checkpointing) + the larger of the loss chain and the rest of one recomputed layer"
	case ck.Recomputes:
		return "; checkpointed: block inputs + the larger of the loss chain and one recomputed layer"
	}
	return ""
}

func weightSource(r Request) string {
	switch r.Method {
	case QLoRA:
		if litgptExact(r) {
			return fmt.Sprintf("%s-packed Linear layers (LitGPT's fused qkv and LM head included), (n+1)/2 B each in 512-byte allocator blocks, + embeddings/norms in bf16 (Fabric's BitsandbytesPrecision; docs/memory-model.md#litgpts-own-code-path)", r.Quant)
		}
		if hfExact(r) {
			// bnb4bitStorage: what the figure counts on the transformers path.
			return fmt.Sprintf("%s-packed Linear layers, (n+1)/2 B each in 512-byte allocator blocks, + embeddings/norms/biases in fp32 (kbit prepare; docs/memory-model.md#the-transformers-code-path-tensor-by-tensor)", r.Quant)
		}
		return fmt.Sprintf("%s-packed Linear layers + embeddings/norms in %s", r.Quant, map[bool]string{true: "fp32 (kbit prepare)", false: "16-bit"}[upcastFrozen(r)])
	case LoRA:
		return fmt.Sprintf("frozen base, %d B/param", frozenBaseBytes(r))
	}
	if deepspeed16(r) {
		return fmt.Sprintf("trained weights, %d B/param: DeepSpeed casts the module to %s (its fp32 master copy is in optimizer_states; docs/memory-model.md#deepspeeds-mixed-precision)", r.paramBytes(), map[Precision]string{BF16True: "bf16", FP16True: "fp16"}[r.Precision])
	}
	return fmt.Sprintf("trained weights, %d B/param (%s)", r.paramBytes(), r.Precision)
}

// quantStateSource says how the quant_overhead figure was counted: per
// quantized Linear, tensor by tensor, on the transformers path
// (bnb4bitStorage), else a flat rate per Linear weight
// (quantStateBytesPerParam).
func quantStateSource(r Request) string {
	if r.Method == QLoRA && (hfExact(r) || litgptExact(r)) {
		state := "an fp32 absmax per 64 weights"
		if r.Quant.Spec().DoubleQuant {
			state = "a uint8 absmax per 64 weights, an fp32 absmax per 256 of those, the 256-entry fp32 code, an offset"
		}
		return fmt.Sprintf("%s quant state per quantized Linear as bitsandbytes allocates it: %s, and the 16-entry 4-bit code; each tensor in 512-byte allocator blocks (docs/memory-model.md#the-transformers-code-path-tensor-by-tensor)", r.Quant, state)
	}
	return fmt.Sprintf("%s quant state: %.4g B/param (bitsandbytes blockwise absmax)", r.Quant, quantStateBytesPerParam(r.Quant))
}

// adapterActivations is what LoRA adapters keep for the backward beyond the
// base layer's own saved input, over all layers, for s·b tokens. Per element
// an adapter reads: a dropout with p > 0 keeps its mask (1 B) and its output;
// an adapter whose dtype differs from the activations' reads a cast copy of
// the input (PEFT: x.to(lora_A.weight.dtype)), which autocast casts again to
// 16 bits for the matmul and keeps; a 16-bit adapter without dropout reads
// the base layer's own input and keeps nothing more. litgpt feeds its fused
// qkv adapter from one dropout, so q, k and v count once there.
func adapterActivations(r Request, act float64) float64 {
	if r.Method == Full || r.LoRARank == 0 {
		return 0
	}
	dropout := r.LoRADropout != nil && *r.LoRADropout > 0
	autocast := r.Precision.mixed()
	var per float64
	switch ad := float64(adapterDtypeBytes(r)); {
	case ad != act && autocast:
		per = 2
	case ad != act:
		per = ad
	case dropout:
		per = act
	}
	if dropout {
		per++
	}
	if per == 0 {
		return 0
	}
	m := r.Model
	shared := [][]string(nil)
	if r.Stack == StackLitGPT {
		shared = litgptSharedInputs
	}
	in, err := m.DistinctInputs(r.LoRATargets, shared)
	if err != nil {
		return 0
	}

	if r.ExtraLoRAOnHead {
		in += m.Hidden
	}
	return per * float64(in) * float64(r.SeqLen) * float64(r.Batch)
}

// litgptSharedInputs: litgpt feeds its fused qkv adapter from one dropout.
var litgptSharedInputs = [][]string{hfconfig.QKV}

// allLinear selects every Linear a full fine-tune trains (routers aside, as
// in seed 000's table).
var allLinear = []string{hfconfig.ScopeAllLinear}

// trainedLinearInputs is, for s·b tokens over all layers, the inputs that
// trained Linear layers keep for their weight gradients and that a frozen
// base does not keep: the normed hidden state read by q/k/v and by the MLP's
// first projections, the attention output read by o_proj, the MLP
// intermediate read by the down projection (seed 000's shape counts what
// both kinds of run keep). Inputs are the matmul's 16-bit copy except
// under fp32.
func trainedLinearInputs(r Request) float64 {
	in, err := r.Model.DistinctInputs(allLinear, hfconfig.SharedInputs)
	if err != nil {
		return 0
	}
	bytes := 2.0
	if r.Precision == FP32 {
		bytes = 4
	}
	return bytes * float64(in) * float64(r.SeqLen) * float64(r.Batch)
}

// wholeUnitGrads: litgpt's LoRA under FSDP puts adapters and frozen weights
// in the same FSDP unit (its Block), so gradients cover the whole unit.
func wholeUnitGrads(r Request) bool {
	return r.Stack == StackLitGPT && r.Method != Full && fsdpSharded(r.Sharding.Strategy) && r.Sharding.GPUs > 1
}

// upcastFrozen: QLoRA's frozen embeddings and norms are fp32 after PEFT's
// prepare_model_for_kbit_training — seed 000's HF path, the default when no
// stack says otherwise.
func upcastFrozen(r Request) bool { return r.UpcastFrozen == nil || *r.UpcastFrozen }

// residualBytes is the dtype of the activations a step saves. Autocast casts
// only matmul inputs to 16-bit; norms, element-wise ops and the residual
// stream run in the parameters' dtype, so a run whose module weights are fp32
// (fp32 runs, litgpt's -mixed LoRA, mixed-precision full fine-tuning of fp32
// weights) saves 4-byte activations, and 16-bit weights save 2-byte ones.
func residualBytes(r Request) int64 {
	switch {
	case r.Precision == FP32:
		return 4
	case r.Method == Full && r.paramBytes() == 4:
		if r.Sharding.Strategy.Spec().Family == FamilyFSDP && r.Precision != FP32 {
			// FSDP's MixedPrecision gathers 16-bit parameters for compute
			// (accelerate sets param_dtype from its mixed precision).
			return 2
		}
		return 4
	case r.Method == LoRA && frozenBaseBytes(r) == 4:
		return 4
	case r.Method == QLoRA && upcastFrozen(r):
		// prepare_model_for_kbit_training makes the embeddings and norms
		// fp32, and bitsandbytes' Linear4bit casts its output back to its
		// input's dtype: the residual stream stays fp32.
		return 4
	}
	return 2
}

// adapterDtypeBytes: PEFT keeps adapters in fp32 (autocast_adapter_dtype);
// stacks that train in pure 16-bit keep them in 16-bit.
func adapterDtypeBytes(r Request) int64 {
	if deepspeed16(r) {
		return 2 // DeepSpeed casts the whole module, adapters too (deepspeed.go)
	}
	if r.Stack == "" || r.Stack.Spec().FP32Adapters {
		return 4
	}
	if r.Precision == BF16True || r.Precision == FP16True {
		return 2
	}
	return 4
}

// adapterDtypeWhy names what set the adapter dtype, for the component's
// source: the stack, or PEFT's own default when no stack was given.
func adapterDtypeWhy(r Request) string {
	if r.Stack == "" {
		return "PEFT's default, no --stack"
	}
	return string(r.Stack)
}

// frozenBaseBytes: HF stacks load the base in 16-bit; litgpt (Fabric) keeps
// module parameters in fp32 under -mixed precision.
func frozenBaseBytes(r Request) int64 {
	if r.FrozenBaseBytes == 0 && r.Stack == StackLitGPT && r.Precision.mixed() {
		return 4
	}
	return r.frozenBytes()
}

// quantStateBytesPerParam is bitsandbytes' quantization state per weight:
// NF4/FP4 keep one fp32 absmax per 64-weight block (4/64 = 0.0625 B); double
// quantization stores those absmax in 8 bits with one fp32 scale per 256
// blocks (1/64 + 4/(64·256) ≈ 0.0159 B); int8 keeps one fp32 scale per row,
// which seed 000 measured at ~0.15 B/param with its outlier buffers.
func quantStateBytesPerParam(scheme Quant) float64 {
	switch q := scheme.Spec(); {
	case q.GroupSize > 0:
		return gptqStateBytesPerParam(q)
	case q.BitsPerWeight == 8:
		return 0.15
	case q.DoubleQuant:
		return 1.0/64 + 4.0/(64*256)
	}
	return 4.0 / 64
}

func adafactorState(m *hfconfig.Model, r Request) int64 {
	var n int64
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			n += (lin.In + lin.Out) * lin.Copies
		}
	}
	n += m.Vocab + m.Hidden
	return n * 4
}

// chunkedLogitBytes is what a chunked cross-entropy holds per logit
// (torchtune's CEWithChunkedOutputLoss and its kind): the 16-bit logits stay
// for the backward, while each chunk's fp32 upcast, log-softmax and gradient
// live only while that chunk is computed. Not fitted: the cohort has two
// such rows.
const chunkedLogitBytes = 2

// softcapLogitBytes is what final-logit soft-capping (Gemma 2:
// tanh(logits/cap)·cap) adds per logit at the loss chain's peak: tanh keeps
// its 16-bit output for the backward (fp32 logits: 4 B, gemma-2-2b fp32 LoRA
// census: tanh's output beside the log-softmax, both s·V·4 bytes). The gradient through it comes after
// the fp32 chain's peak (the fake-tensor oracle on Gemma-2-2B LoRA, eager,
// 1024×1 and 1024×2 with checkpointing: 14 B per logit with the 12 of the
// stock chain, not 16). Not fitted.
const softcapLogitBytes = 2

// autocastCacheEndsWithForward reports whether autocast's weight-cast
// cache is gone before the loss chain's backward peak: a checkpointed full
// fine-tune of fp32 weights under autocast on the transformers path, whose
// blocks save no weight cast (combine moves the cache to the loss chain's
// forward half and the output layer's cast beside its backward).
func autocastCacheEndsWithForward(r Request) bool {
	return hfExact(r) && hfAutocastFull(r) && ckptOn(r) && !paramsSharded(r.Sharding.Strategy)
}

// heldLogitBytes is what a training loop that keeps the model's output
// referenced through the backward (Stack.HoldsOutputs) holds beside the loss
// chain: the returned logits, fp32 on the stock loss path — transformers'
// LlamaForCausalLM upcasts them before returning them (logits =
// logits.float(), transformers 4.37, the release fsdp_qlora's README allows
// beside 4.40+) — alive from the loss until after the optimizer step, so in
// the recomputation phase as well as at the loss chain's peak. The
// Trainer's compute_loss drops its outputs before the backward, which is
// why the stock chain (hfLogitBytes) counts no logits.
func heldLogitBytes(r Request, t terms) float64 {
	if t.Loss != "full" {
		return 0
	}
	return float64(heldPerLogit(r)) * t.LogitUnit
}

// heldPerLogit is heldLogitBytes per logit: 0 where the loop drops the
// model's output before the backward.
func heldPerLogit(r Request) int64 {
	switch s := r.Stack.Spec(); {
	case r.Stack == "" || !s.HoldsOutputs || !r.Task.Spec().VocabLogits:
		return 0
	case s.OwnLoss && r.FreesLogits:
		return 0
	case s.OwnLoss:
		// The loop's own loss: the logits as the model returns them.
		return ownLogitBytes(r)
	}
	return 4
}

// ownLogitBytes is the dtype size of the logits a model called without
// labels returns to a loop that computes its own loss: 16-bit under
// autocast (the output layer's matmul runs in bf16) or from a 16-bit
// residual stream, fp32 from an fp32 model or a QLoRA base whose output
// layer prepare_model_for_kbit_training made fp32.
func ownLogitBytes(r Request) int64 {
	if r.Precision.mixed() || residualBytes(r) == 2 {
		return 2
	}
	return 4
}

// lossPath is how the step computes its loss: "fused" (Liger,
// cut-cross-entropy: no logits materialised), "litgpt" (whose finetune
// scripts always call the model with lm_head_chunk_size=128 and
// chunked_cross_entropy), "chunked" (an explicit chunked loss), or "full"
// (stock HF: the whole chain at once).
func lossPath(r Request) string {
	k := r.FusedCE.Spec()
	if !k.MaterialisesLogits {
		return "fused"
	}
	if r.Stack == StackLitGPT {
		return "litgpt"
	}
	if k.Chunked {
		return "chunked"
	}
	return "full"
}
