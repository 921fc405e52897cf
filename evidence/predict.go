package evidence

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// Prediction is an estimator's answer for one case.
type Prediction struct {
	// Estimate is nil when the case is unsupported.
	Estimate *estimate.Estimate
	// Unsupported says why the case cannot be estimated ("" when it can).
	Unsupported string
	// Assumed lists the fields the case leaves null that the stack's default filled.
	Assumed []string
	// Request is the configuration the case was estimated with.
	Request estimate.Request
}

// Predicted returns the estimate at the case's measurement kind, in bytes.
func (p Prediction) Predicted(kind string) int64 {
	if p.Estimate == nil {
		return 0
	}
	b, _ := p.Estimate.Levels.Level(kind)
	return b
}

// Predict estimates one case with its own configuration.
func Predict(est estimate.Estimator, c Case) Prediction {
	req, assumed, why := RequestFor(c)
	if why != "" {
		return Prediction{Unsupported: why, Assumed: assumed}
	}
	e, err := est.Estimate(req)
	if err != nil {
		return Prediction{Unsupported: err.Error(), Assumed: assumed, Request: req}
	}
	return Prediction{Estimate: e, Assumed: assumed, Request: req}
}

// Other kernels of a case (other_kernels) that are not fused kernels of
// estimate.Kernels: each sets a request field of its own.
const (
	kernelCompile    = "torch.compile"
	kernelOptInBwd   = "optimizer-in-backward"
	kernelActOffload = "activation-offload"
)

// RequestFor turns a case into an estimate request, filling the fields the
// source leaves null from the framework's preset (and saying which). It
// returns a reason when the case needs something the model does not cover.
// The model comes from the embedded catalog; RequestForModel takes one
// already resolved.
func RequestFor(c Case) (estimate.Request, []string, string) {
	e, err := catalog.Lookup(c.Model)
	if err != nil {
		return estimate.Request{}, nil, fmt.Sprintf("model %s is not in the catalog", c.Model)
	}
	var vocab int64
	if c.VocabSize != nil {
		vocab = int64(*c.VocabSize)
	}
	m, err := hfconfig.ParseWith(e.Config, hfconfig.ParseOptions{Vocab: vocab})
	if err != nil {
		if errors.Is(err, hfconfig.ErrNoVocab) {
			return estimate.Request{}, nil, fmt.Sprintf("model %s: config.json has no vocab_size; the case needs one (field vocab_size)", c.Model)
		}
		return estimate.Request{}, nil, err.Error()
	}
	m.Name = c.Model // as modelsource names a resolved model
	return RequestForModel(m, c)
}

// RequestForModel is RequestFor with the case's model already parsed (from a
// local directory, the Hub cache or the catalog): the one mapping from a
// case's configuration to an estimate request, which bench also uses for the
// estimate a receipt records before its run (on bench.ConfigCase), so that
// the estimate recorded and the one validate makes for the finished case
// cannot drift apart.
func RequestForModel(m *hfconfig.Model, c Case) (estimate.Request, []string, string) {
	var assumed []string
	if c.SeqLen == nil {
		return estimate.Request{}, nil, "seq_len unknown (the source does not state the padded length)"
	}
	if c.Batch == nil {
		return estimate.Request{}, nil, "batch unknown"
	}
	r := estimate.Request{
		Model:     m,
		Method:    estimate.Method(c.Method),
		Precision: estimate.Precision(c.Precision),
		SeqLen:    int64(*c.SeqLen),
		Batch:     int64(*c.Batch),
	}
	if c.Quant != nil {
		switch c.Quant.Scheme {
		case "nf4", "fp4":
			r.Quant = estimate.Quant(c.Quant.Scheme)
			if c.Quant.DoubleQuant != nil && *c.Quant.DoubleQuant && c.Quant.Scheme == "nf4" {
				r.Quant = estimate.NF4DQ
			}
		case "int8":
			r.Quant = estimate.Int8
		case "gptq":
			r.Quant = estimate.GPTQ4
		default:
			return r, nil, fmt.Sprintf("quant scheme %q is not modelled", c.Quant.Scheme)
		}
		if c.Quant.StorageDtype != nil {
			r.QuantStorage = estimate.Dtype(*c.Quant.StorageDtype)
		}
		if c.Method != "qlora" {
			return r, nil, "a quantized frozen base outside qlora is not modelled"
		}
	}
	if c.LoRA != nil {
		r.LoRARank = int64(c.LoRA.Rank)
		r.LoRATargets = c.LoRA.Targets // an output-layer name is handled by Request.Normalize
		r.ExtraTrainable = c.LoRA.ExtraTrainable
		r.LoRADropout = c.LoRA.Dropout
	}
	st := statedLengthsOf(c)
	switch c.SeqLenKind {
	case "max", "padded-to-longest":
		r.DynamicShapes = true
		if st.Dist != nil {
			dist, err := st.Dist.Lengths(c.SeqLen)
			if err != nil {
				return r, assumed, "seq_len_dist: " + err.Error()
			}
			r.Lengths = &dist
			if st.StepPeaks && (c.Measured.Kind == KindActive || c.Measured.Kind == KindAllocated) {
				// One optimizer step's peak is its longest micro-batch's:
				// the longest of batch × grad_accum samples.
				samples := r.Batch
				if c.GradAccum != nil {
					samples *= int64(max(1, *c.GradAccum))
				}
				r.SeqLen = dist.LongestOf(samples)
				assumed = append(assumed, fmt.Sprintf("seq_len (the %s figure is one logged step's peak: scored at a typical step, %d tokens, the median of the longest of its %d samples)", c.Measured.Kind, r.SeqLen, samples))
			} else if c.SamplesSeen != nil {
				// A run that drew few of its dataset's samples met a
				// longest batch well short of the dataset's longest; a
				// per-GPU figure is one rank's, which drew its share.
				n, ranks := int64(*c.SamplesSeen), int64(1)
				if c.GPU.Count != nil && *c.GPU.Count > 1 {
					ranks = int64(*c.GPU.Count)
				}
				if l := dist.LongestOf(max(1, n/ranks)); l < r.SeqLen {
					r.SeqLen = l
					perRank := ""
					if ranks > 1 {
						perRank = fmt.Sprintf(", %d a rank", n/ranks)
					}
					assumed = append(assumed, fmt.Sprintf("seq_len (the run drew %d samples%s: scored at the median of their longest, %d tokens)", n, perRank, l))
				}
			}
		}
	}
	r.LongestFirst = st.LongestFirst
	r.EagerLoss = c.EagerLoss != nil && *c.EagerLoss
	if c.GradAccum != nil {
		r.GradAccum = int64(*c.GradAccum)
	}
	if c.GradCkpt != nil {
		r.GradCkpt = estimate.Checkpointing(*c.GradCkpt)
	} else {
		assumed = append(assumed, "grad_ckpt")
	}
	if c.Optimizer != nil {
		r.Optimizer = normalizeOptimizer(*c.Optimizer, c.Framework)
	} else {
		assumed = append(assumed, "optimizer")
	}
	if c.OptimizerStateDtype != nil {
		r.OptimizerStateDtype = estimate.Dtype(*c.OptimizerStateDtype)
	}
	if c.Attn != nil {
		r.Attn = estimate.Attention(*c.Attn)
	} else {
		assumed = append(assumed, "attn")
	}
	if c.FusedCE != nil {
		r.FusedCE = estimate.LossKernel(*c.FusedCE)
	}
	if c.Task != nil {
		t, err := estimate.ParseTask(*c.Task)
		if err != nil {
			return r, nil, err.Error()
		}
		if s := t.Spec(); m.Encoder && !s.Encoder || !m.Encoder && !s.Decoder {
			kind := "a decoder"
			if m.Encoder {
				kind = "an encoder-only model"
			}
			return r, nil, fmt.Sprintf("task %s is not a head %s has", t, kind)
		}
		r.Task = t
	}
	if why := applyOtherKernels(&r, c.OtherKernels); why != "" {
		return r, assumed, why
	}
	if st, err := estimate.StackByName(c.Framework); err == nil {
		st.Apply(&r)
	} else if loop, ok := plainLoops[c.Framework]; ok {
		assumed = append(assumed, "stack (framework "+c.Framework+" is a plain loop with its own loss: the pytorch preset; "+loop.why+")")
		estimate.StackPyTorch.Spec().Apply(&r)
		r.FreesLogits = loop.freesLogits
	} else {
		assumed = append(assumed, "stack (framework "+c.Framework+" has no preset; hf-trainer defaults)")
		st, _ := estimate.StackByName("hf-trainer")
		st.Apply(&r)
	}
	if r.GradCkpt == "" {
		r.GradCkpt = estimate.CkptNone
	}
	if slices.Contains(c.OtherKernels, kernelActOffload) && !r.GradCkpt.Spec().OffloadsInputs {
		// torchtune's and Unsloth's activation offloading keep the saved
		// block inputs in host RAM, one block's on the GPU: the offload
		// checkpointing mode. Without checkpointing, torchtune offloads
		// every saved activation and streams one layer's back at a time,
		// which the same mode bounds.
		r.GradCkpt = estimate.CkptOffload
	}
	// GPU: the card's own memory when it is in the table, else the stated size.
	if c.GPU.Name != nil {
		if card, err := gpu.Lookup(*c.GPU.Name); err == nil {
			r.GPUTotal = card.MemoryBytes()
		}
	}
	if r.GPUTotal == 0 && c.GPU.VRAMGiB != nil {
		r.GPUTotal = int64(*c.GPU.VRAMGiB * estimate.GiB)
	}
	if c.Sharding.Strategy != "" && c.Sharding.Strategy != "none" {
		n := int64(1)
		if c.GPU.Count != nil {
			n = int64(*c.GPU.Count)
		}
		if n < 2 && c.Sharding.Strategy != "ddp" {
			return r, assumed, fmt.Sprintf("sharding %s without a GPU count", c.Sharding.Strategy)
		}
		r.Sharding = estimate.Sharding{Strategy: estimate.Strategy(c.Sharding.Strategy), GPUs: n, CPUOffload: estimate.Offload(c.Sharding.CPUOffload)}
	}
	return r, assumed, ""
}

// applyOtherKernels reads a case's other_kernels into the request: fused
// kernels by name (estimate.Kernels), torch.compile and
// optimizer-in-backward as their fields; activation-offload is read with
// the checkpointing mode. An unknown name is refused by name, so that a
// switch the model does not know is never silently ignored.
func applyOtherKernels(r *estimate.Request, names []string) string {
	for _, k := range names {
		switch k {
		case kernelCompile:
			r.Compile = true
		case kernelOptInBwd:
			r.OptimizerInBackward = true
		case kernelActOffload:
		default:
			kern, err := estimate.ParseKernel(k)
			if err != nil {
				return fmt.Sprintf("other_kernels %q is not modelled", k)
			}
			r.Kernels = append(r.Kernels, kern)
		}
	}
	return ""
}

// normalizeOptimizer maps optimizer names that measurement sources use and
// behave alike onto the names the estimators know (estimate.Optimizers;
// Normalize reads their own aliases), in the framework's vocabulary.
func normalizeOptimizer(name, framework string) estimate.Optimizer {
	name = strings.ToLower(name)
	switch name {
	case "adamw_hf":
		// transformers.optimization.AdamW, the Trainer's adamw_hf until
		// it was removed: a Python loop over the parameters whose one
		// temporary (denom = exp_avg_sq.sqrt().add_(eps)) is a single
		// parameter's, as in torch's for-loop AdamW (which briefly holds
		// two: the square root and its quotient), not the foreach
		// implementation's step buffers the size of every parameter.
		return estimate.AdamWTorchLoop
	case "adam":
		return estimate.AdamWTorch
	case "adamw_8bit":
		if framework == "torchtune" {
			// torchtune's memory guide names two 8-bit optimizers,
			// torchao.prototype.low_bit_optim.AdamW8bit and
			// bitsandbytes.optim.PagedAdamW8bit (docs/source/tutorials/
			// memory_optimizations.rst, "Lower Precision Optimizers",
			// November 2024); the paged one is paged_adamw_8bit, so a
			// torchtune run's unpaged "AdamW8bit" is torchao's.
			return estimate.AOAdamW8bit
		}
	}
	return estimate.Optimizer(name)
}

// plainLoops are the frameworks of evidence rows that are a plain PyTorch
// loop calling the model without labels and computing the cross-entropy on
// its logits itself — the pytorch preset — each as its source shows
// (evidence/curated-SOURCES.md), with whether the loop frees the logits
// before the backward.
var plainLoops = map[string]struct {
	why         string
	freesLogits bool
}{
	"pytorch-custom":         {"calc_loss_batch runs F.cross_entropy(logits.flatten(0, 1), targets.flatten()) on the model's output and returns only the loss", true},
	"thunder-litgpt-example": {"lightning-thunder's examples/lit-gpt train.py and train_fsdp.py: logits = model(input_ids); F.cross_entropy(logits.reshape(-1, V), targets); fabric.backward(loss), with the logits still referenced", false},
	"universal-llm-trainer":  {"its models' forward(return_loss=True) computes nn.CrossEntropyLoss on output.logits[:, :-1] of a model called without labels (transformers 4.49) and deletes the output (del_logits_after_forward)", true},
}
