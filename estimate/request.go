package estimate

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/internal/bytesize"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// GiB is 2^30 bytes; every *_gb field of the project means GiB. It is
// bytesize.GiB, named here for callers of this package outside the module.
const GiB = bytesize.GiB

// Method is what a run trains.
type Method string

// Methods.
const (
	Full  Method = "full"
	LoRA  Method = "lora"
	QLoRA Method = "qlora"
)

// Precision is how weights, gradients and optimizer states are held.
// "-mixed" keeps fp32 master weights and autocasts compute; "-true" holds
// everything in that dtype (docs/measurements-schema.md).
type Precision string

// Precisions.
const (
	BF16Mixed Precision = "bf16-mixed"
	BF16True  Precision = "bf16-true"
	FP16Mixed Precision = "fp16-mixed"
	FP16True  Precision = "fp16-true"
	FP32      Precision = "fp32"
)

// Request is one training configuration to estimate.
type Request struct {
	Model *hfconfig.Model

	Method    Method
	Precision Precision
	// Quant is the 4/8-bit scheme of a QLoRA base (Quants).
	Quant Quant
	// QuantStorage is the dtype packed 4-bit weights are stored in
	// (QuantStorages): uint8 (bitsandbytes default) or bf16 (FSDP-QLoRA's
	// bnb_4bit_quant_storage).
	QuantStorage Dtype

	LoRARank    int64
	LoRATargets []string // scope keywords or module names; nil: attention scope
	// ExtraTrainable lists fully trained modules besides adapters ("lm_head", "embed_tokens").
	ExtraTrainable []string
	// LoRADropout is the adapters' dropout probability; above 0 every
	// adapter keeps its dropped-out input and mask for the backward. nil:
	// the stack's default.
	LoRADropout *float64
	// ExtraLoRAOnHead puts an adapter on the output layer too (lm_head in the
	// target list): rank × (hidden + vocab) more trainable parameters.
	ExtraLoRAOnHead bool

	SeqLen, Batch int64
	// TargetLen is the decoder's length of an encoder-decoder model, whose
	// SeqLen is the encoder's (source) length; 0: as long as the source.
	// Refused for other models.
	TargetLen int64
	// DynamicShapes: batches are padded to their own longest sample, so the
	// step's tensor shapes change from batch to batch (SeqLen is then the
	// longest); the caching allocator keeps blocks of several sizes.
	DynamicShapes bool
	// LongestFirst: the first micro-batch holds the longest sample (SeqLen)
	// and the later ones are much shorter, as lit-gpt's finetune scripts of
	// 2023 arranged it (get_batch(..., longest_seq_ix if iter_num == 0)).
	// The peak is then the first micro-batch's, when no earlier
	// micro-batch's tensors are alive: on the litgpt stack the previous
	// micro-batch's logits that fit() holds and, on LitGPT's spelled-out
	// QLoRA path, the inputs bitsandbytes before 0.43.2 kept are left out
	// of the forward and backward (the LitGPT oracle finds that peak for
	// any later length up to about 0.6 of the longest). The optimizer step
	// is still counted with a full-length last micro-batch, and the first
	// micro-batch with the optimizer states and gradients that exist only
	// from the first step on: an upper bound (a few bytes per trained
	// parameter). Other stacks ignore it, and say so in a warning.
	LongestFirst bool
	// Lengths is the distribution of sample lengths when SeqLen is only
	// the bound (nil: unknown). It implies DynamicShapes; the peak is
	// estimated at the longest batch (SeqLen, or the distribution's
	// longest sample when shorter) and the reserved level by replaying the
	// distribution's batch shapes through the caching-allocator model.
	Lengths *LengthDist
	// GradAccum is the number of micro-batches per optimizer update (0 or 1:
	// none). It matters only where accumulation changes what is resident:
	// FSDP's no_sync() keeps unsharded gradients between updates.
	GradAccum int64

	// GradCkpt is the checkpointing mode (Checkpointings).
	GradCkpt Checkpointing
	// Optimizer is one of Optimizers.
	Optimizer Optimizer
	// OptimizerStateDtype is one of StateDtypes; empty: the parameter dtype.
	OptimizerStateDtype Dtype
	// Attn is the attention implementation (Attentions).
	Attn Attention
	// FusedCE is the loss kernel (LossKernels).
	FusedCE LossKernel
	// UpcastFrozen: frozen embeddings and norms upcast to fp32 under QLoRA
	// (PEFT's prepare_model_for_kbit_training). nil: the stack's default.
	UpcastFrozen *bool
	// FrozenBaseBytes overrides the dtype size of a frozen LoRA base (0:
	// 2 bytes, or 4 under fp32); stacks that keep fp32 weights set 4.
	FrozenBaseBytes int64
	// Compile is torch.compile: Inductor recomputes fused pointwise ops in
	// the backward instead of saving their outputs (kernels.go).
	Compile bool
	// EagerLoss: with Compile, the loss function still runs eager
	// (torchtitan compiled only its blocks from 2024-12-18 to 2025-04-02;
	// read on the torchtitan stack, torchtitan.go).
	EagerLoss bool
	// Kernels are fused kernels besides the loss kernel (Kernels).
	Kernels []Kernel
	// Task is the head the loss is computed through (Tasks); empty: the
	// model kind's default (causal-lm, or sequence-classification for
	// encoders).
	Task Task
	// FreesLogits: with a stack whose loop computes its own loss
	// (Stack.OwnLoss, the pytorch preset), the loop frees the model's
	// output before the backward — a loss function that returns only the
	// loss, or del — so its logits are not held beside the loss chain.
	FreesLogits bool
	// OptimizerInBackward steps and frees each gradient as the backward
	// produces it (torchtune's optimizer_in_bwd); full fine-tuning only.
	OptimizerInBackward bool
	// Stack is the framework preset the defaults came from; "" for none.
	// Stack.Apply fills the fields a request leaves unset from the preset
	// (precision, optimizer, UpcastFrozen, dropout, …); Normalize only
	// canonicalises the name and checks what the preset runs, so a caller
	// that sets Stack without Apply gets the request's own defaults.
	Stack StackName

	Sharding Sharding

	// GPUTotal is the card's total memory; it sizes overhead allowances.
	GPUTotal int64
	// Available is the memory currently free for the run (0: GPUTotal).
	Available int64
	// OverheadFraction and SafetyFraction override seed 000's 8 % and 5 %.
	OverheadFraction, SafetyFraction float64
	// Card is what the run's GPU can execute, when the GPU table knows the
	// card (nil: unknown, nothing checked). FlashAttention-2 on a card
	// without it is an error; bf16 without native support a warning.
	Card *CardFeatures
}

// Sharding spreads training state over data-parallel GPUs.
type Sharding struct {
	// Strategy is one of Strategies.
	Strategy Strategy
	// GPUs is the data-parallel world size (per node for hybrid).
	GPUs int64
	// CPUOffload is one of Offloads.
	CPUOffload Offload
}

// CardFeatures are the capabilities of a GPU that decide whether a request
// can run on it at all, from the GPU table (compute capability).
type CardFeatures struct {
	Name string
	// BF16: native bfloat16 (CUDA compute capability ≥ 8.0, CDNA).
	BF16 bool
	// FlashAttention2: the flash-attn 2 kernels run (Ampere or newer).
	FlashAttention2 bool
}

// ErrInvalidRequest is wrapped by every validation error.
var ErrInvalidRequest = errors.New("invalid request")

// isOutputLayer reports whether a module name is a model's output layer
// (lm_head in HF models, output_layer in ChatGLM, embed_out in GPT-NeoX).
func isOutputLayer(name string) bool {
	switch name {
	case "lm_head", "output_layer", "embed_out":
		return true
	}
	return false
}

// isInputEmbedding reports whether a module name is a model's token embedding.
func isInputEmbedding(name string) bool {
	switch name {
	case "embed_tokens", "wte", "word_embeddings", "embed_in":
		return true
	}
	return false
}

// Bounds of the request's numbers: far above any real run, low enough that
// no product of them (tokens × vocabulary × bytes, rank × module widths) can
// wrap an int64. A flag or a cohort row beyond them is refused by name.
const (
	MaxSeqLen    = 1 << 24 // tokens per sequence
	MaxBatch     = 1 << 16 // sequences per micro-batch
	MaxTokens    = 1 << 26 // seq_len × batch: tokens per micro-batch
	MaxGradAccum = 1 << 20 // micro-batches per optimizer update
	MaxGPUs      = 1 << 16 // data-parallel world size
	// MaxLoRARank bounds the rank before the model is consulted; the
	// model's own bound (the widest targeted module) is usually far lower.
	MaxLoRARank = 1 << 20
	// MinGPUMemory and MaxGPUMemory bound a card's memory: a MiB (smaller
	// reads as "not given" once in bytes) to 16 TiB (a hundred times the
	// largest card).
	MinGPUMemory = 1 << 20
	MaxGPUMemory = 16 << 40
)

// FieldError is a request field outside its accepted range, or in
// contradiction with another field. Field uses the names the CLI flags and
// the measurement rows share ("seq_len", "lora_rank", "gpu_vram_gb", …), so
// each caller can say which of its own inputs was wrong.
type FieldError struct {
	Field string
	// Value is the value as given ("-5", "NaN", "100000").
	Value string
	// Want says what is accepted: "an integer in 1..16777216".
	Want string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s must be %s, got %s", ErrInvalidRequest, e.Field, e.Want, e.Value)
}

// Is makes every FieldError an ErrInvalidRequest.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidRequest }

func fieldErr(field string, v any, want string, args ...any) error {
	return &FieldError{Field: field, Value: fmt.Sprint(v), Want: fmt.Sprintf(want, args...)}
}

// intIn checks lo ≤ v ≤ hi.
func intIn(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return fieldErr(field, v, "an integer in %d..%d", lo, hi)
	}
	return nil
}

// GiBBytes converts a memory size given in GiB (a flag, a measurement row)
// to bytes. NaN, infinities and sizes outside MinGPUMemory..MaxGPUMemory
// are refused with an error naming field: a NaN converted to int64 is
// whatever the CPU makes of it, and 0 would read as "not given".
func GiBBytes(field string, gib float64) (int64, error) {
	b, err := bytesize.FromGiB(gib)
	if err != nil || gib < bytesize.InGiB(MinGPUMemory) || gib > bytesize.InGiB(MaxGPUMemory) {
		return 0, fieldErr(field, gib, "a size in GiB from %g to %d", bytesize.InGiB(MinGPUMemory), MaxGPUMemory/GiB)
	}
	return b, nil
}

// Normalize fills defaults (seed 000's HF-Trainer path) and validates. It
// returns a copy; the caller's request is not changed. Every number is
// checked here, once, against the bounds above; a contradiction between
// options (CPU offload a strategy cannot do, adapter settings on a full
// fine-tune, flash-attention on a card without it) is an error too.
func (r Request) Normalize() (Request, error) {
	bad := func(field string, v any, want any) (Request, error) {
		return r, fmt.Errorf("%w: %s %v (want %v)", ErrInvalidRequest, field, v, want)
	}
	fail := func(err error) (Request, error) { return r, err }
	if r.Model == nil {
		return r, fmt.Errorf("%w: no model", ErrInvalidRequest)
	}
	if r.Stack != "" {
		if err := canonical(&r.Stack, ParseStack); err != nil {
			return fail(err)
		}
		if model := r.Stack.Spec().Model; model != nil {
			r.Model = model(r.Model)
		}
	}
	orDefault(&r.Method, LoRA)
	orDefault(&r.Precision, BF16True)
	orDefault(&r.GradCkpt, CkptNone)
	orDefault(&r.Optimizer, AdamWTorch)
	orDefault(&r.Attn, SDPA)
	orDefault(&r.FusedCE, LossNone)
	orDefault(&r.Sharding.Strategy, NoSharding)
	orDefault(&r.Sharding.CPUOffload, OffloadNone)
	orDefault(&r.QuantStorage, DtypeUint8)
	if r.Sharding.GPUs == 0 {
		if st, err := ParseStrategy(string(r.Sharding.Strategy)); err == nil && st.Spec().Shards != ShardNothing {
			// ZeRO and FSDP divide state by the world size: a guess of 1
			// would report an unsharded run as the sharded one.
			return r, fieldErr("num_gpus", "not given", "the data-parallel world size (GPUs in all) under %s: it divides the sharded state, so it is asked for, not guessed", st)
		}
		r.Sharding.GPUs = 1
	}
	normalizeLengths(&r)
	if err := canonical(&r.Method, ParseMethod); err != nil {
		return fail(err)
	}
	if err := r.checkNumbers(); err != nil {
		return fail(err)
	}
	if err := canonical(&r.Precision, ParsePrecision); err != nil {
		return fail(err)
	}
	if r.Method.Spec().QuantizedBase {
		orDefault(&r.Quant, NF4DQ)
		if err := canonical(&r.Quant, ParseQuant); err != nil {
			return fail(err)
		}
	} else if r.Quant != "" {
		return bad("quant", r.Quant, "no quantization outside qlora")
	}
	if r.Method == Full {
		if err := noAdapterSettings(r); err != nil {
			return fail(err)
		}
	} else {
		if r.LoRARank == 0 {
			r.LoRARank = 16
		}
		// An output-layer name in the target list is an adapter on lm_head,
		// which sits outside the decoder layers the other names select.
		var layerTargets []string
		for _, t := range r.LoRATargets {
			if isOutputLayer(t) {
				r.ExtraLoRAOnHead = true
			} else {
				layerTargets = append(layerTargets, t)
			}
		}
		r.LoRATargets = layerTargets
		if len(r.LoRATargets) == 0 {
			r.LoRATargets = []string{hfconfig.ScopeAttention}
		}
		for _, name := range r.ExtraTrainable {
			if !isOutputLayer(name) && !isInputEmbedding(name) {
				return fail(fieldErr("extra_trainable", fmt.Sprintf("%q", name), "an embedding or output layer (lm_head, embed_tokens, wte, word_embeddings, embed_in, output_layer, embed_out): adapters cover the layers inside the model"))
			}
		}
	}
	// Each option is read through its table: an alias ("adamw") becomes
	// the value it names, and an unknown value is refused with the list.
	for _, err := range []error{
		canonical(&r.Optimizer, ParseOptimizer),
		canonical(&r.GradCkpt, ParseCheckpointing),
		canonical(&r.Attn, ParseAttention),
		canonical(&r.FusedCE, ParseLossKernel),
		canonical(&r.Sharding.Strategy, ParseStrategy),
		canonical(&r.Sharding.CPUOffload, ParseOffload),
		canonical(&r.QuantStorage, ParseQuantStorage),
	} {
		if err != nil {
			return fail(err)
		}
	}
	r.Kernels = slices.Clone(r.Kernels)
	if err := checkKernels(&r); err != nil {
		return fail(err)
	}
	if err := checkTask(&r); err != nil {
		return fail(err)
	}
	if err := checkSeq2Seq(&r); err != nil {
		return fail(err)
	}
	if err := checkExpertParameters(r); err != nil {
		return fail(err)
	}
	if r.OptimizerStateDtype != "" {
		if err := canonical(&r.OptimizerStateDtype, ParseStateDtype); err != nil {
			return fail(err)
		}
	}
	if r.Stack != "" {
		if err := checkStack(r); err != nil {
			return fail(err)
		}
	}
	if err := checkOpPolicy(r); err != nil {
		return fail(err)
	}
	if err := checkOffload(r.Sharding); err != nil {
		return fail(err)
	}
	if err := checkStepOptimizer(r); err != nil {
		return fail(err)
	}
	if r.Card != nil && r.Attn.Spec().NeedsFlashAttention2 && !r.Card.FlashAttention2 {
		return fail(fieldErr("attn", r.Attn, "an attention this GPU runs (sdpa or eager): FlashAttention-2 needs an Ampere or newer NVIDIA GPU, and %s is not one", r.Card.Name))
	}
	if r.Method != Full {
		if _, err := r.Model.AdapterSum(r.LoRATargets); err != nil {
			return r, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
		if hi := r.widestTarget(); r.LoRARank > hi {
			return fail(fieldErr("lora_rank", r.LoRARank, "at most %d, the largest min(in, out) of the targeted modules: a higher rank gives every adapter more parameters than a full-rank update of its module", hi))
		}
	}
	return r, nil
}

// checkNumbers bounds every numeric field (NaN and infinities included),
// naming the field, the value and the accepted range.
func (r Request) checkNumbers() error {
	if r.Method != Full && r.LoRARank != 0 {
		if err := intIn("lora_rank", r.LoRARank, 1, MaxLoRARank); err != nil {
			return err
		}
	}
	if d := r.LoRADropout; d != nil && !(*d >= 0 && *d < 1) {
		return fieldErr("lora_dropout", *d, "a probability in [0, 1)")
	}
	if err := intIn("seq_len", r.SeqLen, 1, MaxSeqLen); err != nil {
		return err
	}
	if err := intIn("batch", r.Batch, 1, MaxBatch); err != nil {
		return err
	}
	if r.SeqLen*r.Batch > MaxTokens {
		return fieldErr("seq_len × batch", fmt.Sprintf("%d × %d", r.SeqLen, r.Batch), "at most %d tokens per micro-batch", MaxTokens)
	}
	if r.GradAccum != 0 { // 0: not given, one micro-batch per update
		if err := intIn("grad_accum", r.GradAccum, 1, MaxGradAccum); err != nil {
			return err
		}
	}
	if err := intIn("num_gpus", r.Sharding.GPUs, 1, MaxGPUs); err != nil {
		return err
	}
	gibOf := func(b int64) string { return fmt.Sprintf("%.4g GiB", bytesize.InGiB(b)) }
	const memWant = "a size in GiB from %g to %d"
	if r.GPUTotal != 0 && (r.GPUTotal < MinGPUMemory || r.GPUTotal > MaxGPUMemory) {
		return fieldErr("gpu_vram_gb", gibOf(r.GPUTotal), memWant, bytesize.InGiB(MinGPUMemory), MaxGPUMemory/GiB)
	}
	// A full card's budget is 1 byte, not 0 ("not given"): the lower bound
	// of Available is the byte.
	if r.Available < 0 || r.Available > MaxGPUMemory {
		return fieldErr("available_vram_gb", gibOf(r.Available), memWant, bytesize.InGiB(MinGPUMemory), MaxGPUMemory/GiB)
	}
	if r.Available > 0 && r.GPUTotal > 0 && r.Available > r.GPUTotal {
		return fieldErr("available_vram_gb", gibOf(r.Available), "at most the card's %s", gibOf(r.GPUTotal))
	}
	if r.Available > 0 && r.GPUTotal == 0 {
		return fieldErr("available_vram_gb", gibOf(r.Available), "given with the card's total memory (overheads are sized from it)")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"overhead_fraction", r.OverheadFraction}, {"safety_fraction", r.SafetyFraction}} {
		if !(f.v >= 0 && f.v < 1) {
			return fieldErr(f.name, f.v, "a fraction in [0, 1)")
		}
	}
	switch r.FrozenBaseBytes {
	case 0, 1, 2, 4:
	default:
		return fieldErr("frozen_base_bytes", r.FrozenBaseBytes, "0 (the precision's), 1, 2 or 4 bytes")
	}
	return nil
}

// noAdapterSettings refuses adapter settings on a full fine-tune: every
// weight trains, so a rank, targets, dropout or modules "trained besides
// the adapters" describe a different run than the one estimated.
func noAdapterSettings(r Request) error {
	switch {
	case r.LoRARank != 0:
		return fieldErr("lora_rank", r.LoRARank, "unset under method full (a full fine-tune has no adapters)")
	case len(r.LoRATargets) > 0:
		return fieldErr("lora_targets", strings.Join(r.LoRATargets, ","), "unset under method full (a full fine-tune has no adapters)")
	case r.LoRADropout != nil:
		return fieldErr("lora_dropout", *r.LoRADropout, "unset under method full (a full fine-tune has no adapters)")
	case len(r.ExtraTrainable) > 0:
		return fieldErr("extra_trainable", strings.Join(r.ExtraTrainable, ","), "unset under method full (every module trains already)")
	case r.ExtraLoRAOnHead:
		return fieldErr("lora_targets", "lm_head", "unset under method full (a full fine-tune has no adapters)")
	}
	return nil
}

// checkStepOptimizer refuses a parameter-at-a-time optimizer (torchao's
// AdamW8bit, torch's for-loop AdamW) under DeepSpeed ZeRO: DeepSpeed hands a client optimizer its
// flat fp32 partitions (ZeRO-1/2: one per parameter group; ZeRO-3:
// sub-groups of up to sub_group_size elements), so the step would hold its
// temporaries for a whole partition, which is not modelled.
func checkStepOptimizer(r Request) error {
	if o := r.Optimizer.Spec(); (o.StepTempBytes == 0 && o.StepTempStates == 0) || r.Sharding.Strategy.Spec().Family != FamilyDeepSpeed {
		return nil
	}
	return fieldErr("optimizer", r.Optimizer, "another under DeepSpeed ZeRO (adamw_8bit, bitsandbytes', is modelled there), or --strategy fsdp_full_shard: DeepSpeed would step its flat partitions with %s, whose temporaries the estimate does not model", r.Optimizer)
}

// checkOffload refuses CPU offload a strategy cannot do. DDP and a single
// GPU have no offload at all; DeepSpeed offloads parameters only under
// ZeRO stage 3 (its config docs: offload_param "only valid with stage 3"),
// optimizer states under stages 1–3; FSDP's CPUOffload moves parameters,
// gradients and the optimizer step together.
func checkOffload(s Sharding) error {
	off, st := s.CPUOffload.Spec(), s.Strategy.Spec()
	// An offload of the parameters takes the optimizer with it where the
	// strategy offloads parameters (FSDP); the optimizer alone needs a
	// strategy that offloads it alone (DeepSpeed ZeRO).
	ok := off.Params && st.OffloadsParams || !off.Params && (!off.Optimizer || st.OffloadsOptimizer)
	if !ok {
		switch {
		case !st.DataParallel:
			return fieldErr("cpu_offload", s.CPUOffload, "none without a sharding strategy: CPU offload is part of DeepSpeed ZeRO or FSDP")
		case !st.OffloadsOptimizer && !st.OffloadsParams && st.Family == FamilyDeepSpeed:
			return fieldErr("cpu_offload", s.CPUOffload, "none with %s: DeepSpeed's CPU offload needs ZeRO stage 1 or more (zero1, zero2, zero3)", s.Strategy)
		case !st.OffloadsOptimizer && !st.OffloadsParams:
			return fieldErr("cpu_offload", s.CPUOffload, "none with %s: PyTorch DDP has no CPU offload (DeepSpeed ZeRO and FSDP do)", s.Strategy)
		case !st.OffloadsOptimizer:
			return fieldErr("cpu_offload", s.CPUOffload, "%s or %s with %s: FSDP's CPUOffload moves the parameters, gradients and optimizer step together, it has no optimizer-only offload", OffloadParamsOptimizer, OffloadNone, s.Strategy)
		default:
			return fieldErr("cpu_offload", s.CPUOffload, "none or optimizer with %s: DeepSpeed offloads parameters only under ZeRO stage 3 (zero3)", s.Strategy)
		}
	}
	return nil
}

// canonical reads *p through its option's parser, replacing an alias by the
// value it names.
func canonical[T ~string](p *T, parse func(string) (T, error)) error {
	v, err := parse(string(*p))
	if err == nil {
		*p = v
	}
	return err
}

// widestTarget is the largest rank an adapter on the targeted modules can
// usefully have: the largest min(in, out) among them. It walks the layers
// without allocating; the Targets list is built only for a rank above the
// model's narrowest module width, which no common rank is.
func (r Request) widestTarget() int64 {
	m := r.Model
	if r.ExtraLoRAOnHead && r.LoRARank <= min(m.Hidden, m.Vocab) {
		return min(m.Hidden, m.Vocab)
	}
	if r.LoRARank <= m.NarrowestLinear() {
		return r.LoRARank
	}
	lins, err := m.Targets(r.LoRATargets)
	if err != nil {
		return MaxLoRARank // AdapterSum has reported it
	}
	var hi int64
	for _, l := range lins {
		hi = max(hi, min(l.In, l.Out))
	}
	if r.ExtraLoRAOnHead {
		hi = max(hi, min(m.Hidden, m.Vocab))
	}
	return hi
}

// actBytes is the activation dtype size: 2 under bf16/fp16 autocast or pure
// 16-bit, 4 for fp32 runs.
func (r Request) actBytes() int64 { return r.Precision.Spec().ComputeBytes }

// paramBytes is the dtype size of trained base weights in a full fine-tune
// (seed 000 §1: 4 / 2 / 2): mixed precision keeps fp32 master weights.
// mixed reports whether the precision keeps fp32 weights and runs the
// matmuls under torch.autocast (bf16-mixed, fp16-mixed).
func (p Precision) mixed() bool { return p.Spec().MasterWeights }

func (r Request) paramBytes() int64 { return r.Precision.Spec().ParamBytes }

// frozenBytes is the dtype size of a frozen (LoRA) base: loaded in 16-bit
// unless FrozenBaseBytes or an fp32 run says otherwise.
func (r Request) frozenBytes() int64 {
	if r.FrozenBaseBytes > 0 {
		return r.FrozenBaseBytes
	}
	return r.Precision.Spec().ComputeBytes
}
