package estimate

import (
	"fmt"
	"slices"
	"strings"
)

// The option vocabulary: every choice a Request offers is a typed value with
// a table of its properties. The tables are the one place a value is added:
// Normalize validates against them, the estimators read their properties,
// and the CLI builds its flag enums and help text from them (Choices).

// Choice is one value of an option as a user interface shows it: the name,
// a one-line description, and the other spellings Parse accepts for it.
type Choice struct {
	Name    string
	Help    string
	Aliases []string
}

// spec is a row of an option table.
type spec interface{ choice() Choice }

// UnknownValueError is a value outside an option's table. It is an
// ErrInvalidRequest.
type UnknownValueError struct {
	// Option names the option in words: "optimizer", "sharding strategy".
	Option string
	Value  string
	// Valid lists the accepted names, in table order.
	Valid []string
}

func (e *UnknownValueError) Error() string {
	return fmt.Sprintf("unknown %s %q (want one of %s)", e.Option, e.Value, strings.Join(e.Valid, ", "))
}

// Is makes every UnknownValueError an ErrInvalidRequest.
func (e *UnknownValueError) Is(target error) bool { return target == ErrInvalidRequest }

// choices lists a table's rows for a user interface.
func choices[S spec](table []S) []Choice {
	out := make([]Choice, len(table))
	for i, s := range table {
		out[i] = s.choice()
	}
	return out
}

// parseIn finds s among a table's names and aliases and returns the row's
// canonical value.
func parseIn[T ~string, S spec](option, s string, table []S) (T, error) {
	for _, row := range table {
		c := row.choice()
		if c.Name == s || slices.Contains(c.Aliases, s) {
			return T(c.Name), nil
		}
	}
	// The list of names is built only for the error: Normalize parses
	// every option of every request.
	valid := make([]string, len(table))
	for i, row := range table {
		valid[i] = row.choice().Name
	}
	return "", &UnknownValueError{Option: option, Value: s, Valid: valid}
}

// lookup is the row named v; the zero row when v is not in the table
// (Normalize refuses such a request before an estimator reads it).
func lookup[T ~string, S spec](table []S, v T) S {
	for _, row := range table {
		if row.choice().Name == string(v) {
			return row
		}
	}
	var zero S
	return zero
}

// rowOf is lookup for the Spec methods, which an estimate calls dozens of
// times: reading the row's name directly instead of through choice() (a
// call through the generic dictionary that builds a Choice per row) makes
// a lookup about 20 times faster (BenchmarkSpecLookup).
func rowOf[T ~string, S any](table []S, v T, name func(*S) T) S {
	for i := range table {
		if name(&table[i]) == v {
			return table[i]
		}
	}
	var zero S
	return zero
}

// Options lists every option's choices by the name the request fields and
// flags share ("method", "optimizer", …), in the order a form shows them.
func Options() []Option {
	return []Option{
		{"method", choices(Methods)},
		{"precision", choices(Precisions)},
		{"quant", choices(Quants)},
		{"quant_storage", choices(QuantStorages)},
		{"grad_ckpt", choices(Checkpointings)},
		{"optimizer", choices(Optimizers)},
		{"optimizer_state_dtype", choices(StateDtypes)},
		{"attn", choices(Attentions)},
		{"fused_ce", choices(LossKernels)},
		{"kernels", choices(Kernels)},
		{"task", choices(Tasks)},
		{"stack", choices(stacks)},
		{"strategy", choices(Strategies)},
		{"cpu_offload", choices(Offloads)},
	}
}

// Option is one option of a Request and its choices, in table order.
type Option struct {
	Name    string
	Choices []Choice
}

// ---- Method -----------------------------------------------------------------

// MethodSpec is what a training method trains.
type MethodSpec struct {
	Name Method
	Help string
	// Adapters: LoRA adapters train on a frozen base.
	Adapters bool
	// QuantizedBase: the frozen base is held in 4 or 8 bits.
	QuantizedBase bool
}

func (s MethodSpec) choice() Choice { return Choice{Name: string(s.Name), Help: s.Help} }

// Methods is the table of training methods.
var Methods = []MethodSpec{
	{Name: Full, Help: "every weight trains"},
	{Name: LoRA, Help: "low-rank adapters on a frozen 16-bit base", Adapters: true},
	{Name: QLoRA, Help: "low-rank adapters on a 4- or 8-bit quantized base", Adapters: true, QuantizedBase: true},
}

// ParseMethod reads a training method.
func ParseMethod(s string) (Method, error) { return parseIn[Method]("method", s, Methods) }

// Spec is the method's row of Methods.
func (m Method) Spec() MethodSpec {
	return rowOf(Methods, m, func(r *MethodSpec) Method { return r.Name })
}

// ---- Precision --------------------------------------------------------------

// PrecisionSpec is how a precision holds weights and runs compute.
type PrecisionSpec struct {
	Name Precision
	Help string
	// MasterWeights: trained weights stay fp32 and the matmuls run under
	// torch.autocast in 16 bits (the "-mixed" precisions).
	MasterWeights bool
	// ParamBytes is the dtype size of trained weights (docs/memory-model.md#weights: 4 / 2 / 2).
	ParamBytes int64
	// ComputeBytes is the dtype size of activations, and of a frozen base
	// loaded without an override: 4 for fp32 runs, else 2.
	ComputeBytes int64
}

func (s PrecisionSpec) choice() Choice { return Choice{Name: string(s.Name), Help: s.Help} }

// Precisions is the table of precisions.
var Precisions = []PrecisionSpec{
	{Name: BF16Mixed, Help: "fp32 master weights, bf16 autocast", MasterWeights: true, ParamBytes: 4, ComputeBytes: 2},
	{Name: BF16True, Help: "weights, gradients and optimizer states in bf16", ParamBytes: 2, ComputeBytes: 2},
	{Name: FP16Mixed, Help: "fp32 master weights, fp16 autocast", MasterWeights: true, ParamBytes: 4, ComputeBytes: 2},
	{Name: FP16True, Help: "everything in fp16", ParamBytes: 2, ComputeBytes: 2},
	{Name: FP32, Help: "everything in fp32", ParamBytes: 4, ComputeBytes: 4},
}

// ParsePrecision reads a precision.
func ParsePrecision(s string) (Precision, error) {
	return parseIn[Precision]("precision", s, Precisions)
}

// Spec is the precision's row of Precisions.
func (p Precision) Spec() PrecisionSpec {
	return rowOf(Precisions, p, func(r *PrecisionSpec) Precision { return r.Name })
}

// ---- Quantization -----------------------------------------------------------

// Quant is the 4/8-bit scheme of a QLoRA base.
type Quant string

// Quantization schemes (bitsandbytes).
const (
	NF4   Quant = "nf4"
	NF4DQ Quant = "nf4-dq"
	FP4   Quant = "fp4"
	Int8  Quant = "int8"
	// GPTQ4 is a GPTQ-quantized 4-bit base (auto_gptq / gptqmodel
	// QuantLinear, group size 128), as fms-acceleration's
	// accelerated-peft-autogptq trains on.
	GPTQ4 Quant = "gptq"
)

// QuantSpec is how a scheme packs the base's Linear weights.
type QuantSpec struct {
	Name    Quant
	Help    string
	Aliases []string
	// BitsPerWeight is the packed size of one weight.
	BitsPerWeight int
	// DoubleQuant: the per-block absmax are quantized again (8-bit, one
	// fp32 scale per 256 blocks).
	DoubleQuant bool
	// GroupSize: GPTQ's quantization group along the input dimension, each
	// with an fp16 scale and a 4-bit zero point per output column (0: the
	// bitsandbytes block layout).
	GroupSize int
}

func (s QuantSpec) choice() Choice {
	return Choice{Name: string(s.Name), Help: s.Help, Aliases: s.Aliases}
}

// Quants is the table of quantization schemes.
var Quants = []QuantSpec{
	{Name: NF4, Help: "4-bit NormalFloat, one fp32 absmax per 64 weights", BitsPerWeight: 4},
	{Name: NF4DQ, Help: "NF4 with double quantization (QLoRA's default)", BitsPerWeight: 4, DoubleQuant: true},
	{Name: FP4, Help: "4-bit float, one fp32 absmax per 64 weights", BitsPerWeight: 4},
	{Name: Int8, Help: "LLM.int8(): 8-bit weights, a scale per row", BitsPerWeight: 8},
	{Name: GPTQ4, Help: "GPTQ 4-bit, group 128: an fp16 scale and a packed zero per group and column", Aliases: []string{"gptq-4bit", "autogptq"}, BitsPerWeight: 4, GroupSize: 128},
}

// ParseQuant reads a quantization scheme.
func ParseQuant(s string) (Quant, error) { return parseIn[Quant]("quantization", s, Quants) }

// Spec is the scheme's row of Quants.
func (q Quant) Spec() QuantSpec { return rowOf(Quants, q, func(r *QuantSpec) Quant { return r.Name }) }

// ---- Dtypes -----------------------------------------------------------------

// Dtype is a tensor element type named as the flags name it.
type Dtype string

// Dtypes.
const (
	DtypeUint8 Dtype = "uint8"
	DtypeBF16  Dtype = "bf16"
	DtypeFP16  Dtype = "fp16"
	DtypeFP32  Dtype = "fp32"
)

// DtypeSpec is an element type's size.
type DtypeSpec struct {
	Name  Dtype
	Help  string
	Bytes int64
}

func (s DtypeSpec) choice() Choice { return Choice{Name: string(s.Name), Help: s.Help} }

// QuantStorages are the dtypes packed 4-bit weights can be stored in.
var QuantStorages = []DtypeSpec{
	{Name: DtypeUint8, Help: "bitsandbytes' default", Bytes: 1},
	{Name: DtypeBF16, Help: "FSDP-QLoRA's bnb_4bit_quant_storage, so FSDP can shard packed weights", Bytes: 2},
	{Name: DtypeFP16, Help: "as bf16, for fp16 runs", Bytes: 2},
	{Name: DtypeFP32, Help: "fp32 storage", Bytes: 4},
}

// StateDtypes are the dtypes an optimizer can hold its states in.
var StateDtypes = []DtypeSpec{
	{Name: DtypeFP32, Help: "fp32 states", Bytes: 4},
	{Name: DtypeBF16, Help: "bf16 states (torchtune's pure-bf16 recipes)", Bytes: 2},
}

// ParseQuantStorage reads the storage dtype of packed 4-bit weights.
func ParseQuantStorage(s string) (Dtype, error) {
	return parseIn[Dtype]("quant storage dtype", s, QuantStorages)
}

// ParseStateDtype reads an optimizer state dtype.
func ParseStateDtype(s string) (Dtype, error) {
	return parseIn[Dtype]("optimizer state dtype", s, StateDtypes)
}

// ---- Gradient checkpointing -------------------------------------------------

// Checkpointing is how a step saves activations for the backward.
type Checkpointing string

// Checkpointing modes.
const (
	CkptNone    Checkpointing = "none"
	CkptFull    Checkpointing = "full"
	CkptUnsloth Checkpointing = "unsloth"
	CkptOffload Checkpointing = "offload"
	// CkptSelectiveOp is torchtitan's per-op selective activation
	// checkpointing (activation_checkpoint mode "selective",
	// selective_ac_option "op").
	CkptSelectiveOp Checkpointing = "selective-op"
)

// CheckpointingSpec is what a checkpointing mode keeps and recomputes.
type CheckpointingSpec struct {
	Name Checkpointing
	Help string
	// Aliases are other spellings read as Name.
	Aliases []string
	// Recomputes: only block inputs are saved and each layer's forward runs
	// again in the backward (one more forward per step).
	Recomputes bool
	// OffloadsInputs: the saved block inputs go to host RAM (non-blocking)
	// and come back for the recomputation; one stays on the GPU.
	OffloadsInputs bool
	// OpPolicy: besides its input, each block keeps what a per-op policy
	// marks must-save (opPolicySaved), and the backward recomputes only
	// the rest.
	OpPolicy bool
}

func (s CheckpointingSpec) choice() Choice {
	return Choice{Name: string(s.Name), Help: s.Help, Aliases: s.Aliases}
}

// Checkpointings is the table of checkpointing modes.
var Checkpointings = []CheckpointingSpec{
	{Name: CkptNone, Help: "every layer keeps its activations", Aliases: []string{"false"}},
	{Name: CkptFull, Help: "block inputs only, each layer recomputed in the backward (what gradient_checkpointing=True does in transformers)", Aliases: []string{"true"}, Recomputes: true},
	{Name: CkptUnsloth, Help: "Unsloth's: block inputs offloaded to host RAM, layers recomputed", Recomputes: true, OffloadsInputs: true},
	{Name: CkptOffload, Help: "activation offloading: block inputs in host RAM, layers recomputed", Recomputes: true, OffloadsInputs: true},
	{Name: CkptSelectiveOp, Help: "torchtitan's per-op selective checkpointing: block inputs, every other matmul's output and attention's kept; the rest recomputed", Recomputes: true, OpPolicy: true},
}

// ParseCheckpointing reads a checkpointing mode.
func ParseCheckpointing(s string) (Checkpointing, error) {
	return parseIn[Checkpointing]("gradient checkpointing", s, Checkpointings)
}

// Spec is the mode's row of Checkpointings.
func (c Checkpointing) Spec() CheckpointingSpec {
	return rowOf(Checkpointings, c, func(r *CheckpointingSpec) Checkpointing { return r.Name })
}

// ---- Optimizer --------------------------------------------------------------

// Optimizer is the training optimizer, named as transformers' `optim` names it.
type Optimizer string

// Optimizers.
const (
	AdamWTorch      Optimizer = "adamw_torch"
	AdamWTorchFused Optimizer = "adamw_torch_fused"
	SGD             Optimizer = "sgd"
	AdamW8bit       Optimizer = "adamw_8bit"
	AOAdamW8bit     Optimizer = "adamw_torch_8bit"
	AdamWTorchLoop  Optimizer = "adamw_torch_forloop"
	PagedAdamW8bit  Optimizer = "paged_adamw_8bit"
	PagedAdamW32bit Optimizer = "paged_adamw_32bit"
	Adafactor       Optimizer = "adafactor"
	Lion8bit        Optimizer = "lion_8bit"
)

// OptimizerSpec is what an optimizer keeps per trainable parameter.
type OptimizerSpec struct {
	Name    Optimizer
	Help    string
	Aliases []string
	// States is the number of per-parameter state tensors (AdamW 2, Lion 1,
	// SGD without momentum 0).
	States int64
	// EightBit: states quantized block-wise to 8 bits with one fp32 absmax
	// per AbsmaxBlock elements (bitsandbytes 256 since 0.44.0, torchao 256).
	EightBit    bool
	AbsmaxBlock int64
	// Min8bitNumel: a tensor with fewer elements keeps fp32 states and no
	// absmax (bitsandbytes' min_8bit_size, 4096 by default: init_state
	// makes its state1 and state2 torch.float32); 0: every tensor is
	// quantized.
	Min8bitNumel int64
	// Paged: states in CUDA unified memory, evicted to host RAM under pressure.
	Paged bool
	// Fused: the step has none of the whole-model, tensor-sized
	// intermediates of torch's foreach implementation (a parameter-at-a-time
	// step's own temporaries are StepTempBytes).
	Fused bool
	// Factored: the second moment is one row and one column vector per
	// matrix (Adafactor).
	Factored bool
	// StepTempBytes is what the step's temporaries hold per element of the
	// parameter being stepped, for an optimizer that steps one parameter at
	// a time: the largest parameter sets the transient (torchao's compiled
	// single_param_adam: aoStepTempBytes).
	StepTempBytes int64
	// StepTempStates is, for a parameter-at-a-time step whose temporaries
	// follow the states' dtype, how many state-sized copies of the largest
	// parameter they hold at once (torch's single-tensor AdamW: 2).
	StepTempStates int64
	// StateBytes fixes the states' dtype size whatever the parameters'
	// (paged_adamw_32bit: fp32); 0 follows the parameters or
	// Request.OptimizerStateDtype.
	StateBytes int64
}

func (s OptimizerSpec) choice() Choice {
	return Choice{Name: string(s.Name), Help: s.Help, Aliases: s.Aliases}
}

// Optimizers is the table of optimizers. "adamw" (transformers' own name for
// torch's AdamW) and "adamw_bnb_8bit" (transformers' other name for
// bitsandbytes' AdamW8bit) are accepted and read as the value they alias.
var Optimizers = []OptimizerSpec{
	{Name: AdamWTorch, Help: "torch AdamW, foreach: two states + a tensor-sized step buffer", Aliases: []string{"adamw"}, States: 2},
	{Name: AdamWTorchFused, Help: "torch AdamW, fused: two states", States: 2, Fused: true},
	{Name: AdamWTorchLoop, Help: "torch AdamW, for-loop (foreach=False, or fused=False passed alone, which also turns foreach off): two states + two temporaries the size of the largest parameter", Aliases: []string{"adamw_torch_foreach_off"}, States: 2, Fused: true, StepTempStates: 2},
	{Name: SGD, Help: "SGD without momentum: no state"},
	{Name: AdamW8bit, Help: "bitsandbytes AdamW, 8-bit states", Aliases: []string{"adamw_bnb_8bit"}, States: 2, EightBit: true, AbsmaxBlock: bnbOptimBlock, Min8bitNumel: bnbMin8bitSize, Fused: true},
	{Name: AOAdamW8bit, Help: "torchao AdamW8bit (transformers' name): 8-bit states, an fp32 step per parameter", Aliases: []string{"ao_adamw_8bit", "torchao_adamw_8bit"}, States: 2, EightBit: true, AbsmaxBlock: aoOptimBlock, StepTempBytes: aoStepTempBytes, Fused: true},
	{Name: PagedAdamW8bit, Help: "bitsandbytes AdamW, 8-bit states in paged memory", States: 2, EightBit: true, AbsmaxBlock: bnbOptimBlock, Min8bitNumel: bnbMin8bitSize, Paged: true, Fused: true},
	{Name: PagedAdamW32bit, Help: "bitsandbytes AdamW, fp32 states in paged memory", States: 2, Paged: true, Fused: true, StateBytes: 4},
	{Name: Adafactor, Help: "factored second moment, no first moment", States: 1, Factored: true},
	{Name: Lion8bit, Help: "bitsandbytes Lion, one 8-bit state", States: 1, EightBit: true, AbsmaxBlock: bnbOptimBlock, Min8bitNumel: bnbMin8bitSize, Fused: true},
}

const (
	// bnbOptimBlock: bitsandbytes' blockwise 8-bit optimizers keep one fp32
	// absmax per 256 elements of a state (Optimizer2State.init_state,
	// blocksize = 256, since bitsandbytes 0.44.0: PR #1365, September 2024;
	// 2048 before it, an eighth of the absmax).
	bnbOptimBlock = 256
	// bnbMin8bitSize: bitsandbytes' optimizers keep fp32 states for a
	// tensor under 4096 elements (min_8bit_size's default in the
	// Optimizer8bit subclasses, bitsandbytes/optim/optimizer.py).
	bnbMin8bitSize = 4096
	// aoOptimBlock: torchao's OptimState8bit keeps one fp32 scale per 256
	// elements (block_size=256, torchao/prototype/low_bit_optim/adam.py,
	// torchao 0.6.1); a parameter under 4096 elements, or not a multiple of
	// the block, keeps unquantized states in its own dtype (_new_buffer),
	// which only norms' vectors are, a negligible share.
	aoOptimBlock = 256
	// aoStepTempBytes: torchao's AdamW8bit steps each parameter with one
	// torch.compile'd single_param_adam, which computes in fp32. The
	// wrapper code Inductor generates for it allocates, per element of the
	// parameter, three fp32 buffers (the updated first and second moments
	// before they are quantized back, and the updated parameter before it
	// is copied into the bf16 one) and two fp32 scales per 256 elements:
	// 12.03 B with torch 2.5.1 and torchao 0.6.1 (the releases of late
	// 2024), read by oracle/torchao/stepbuffers.py (receipt
	// oracle/torchao/receipts/torch-2.5.1-torchao-0.6.1.json). That code is
	// Inductor's C++ backend's (no GPU here): its CUDA backend may fuse a
	// buffer away, so the figure is a bound from above for the GPU's step.
	// torch 2.15 with torchao 0.18 no longer materialises the parameter's
	// fp32 copy: 8.03 B (torch-2.15.0-torchao-0.18.0.json beside it); the
	// estimate keeps the older, larger figure.
	aoStepTempBytes = 12
)

// ParseOptimizer reads an optimizer name; an alias gives the value it names.
func ParseOptimizer(s string) (Optimizer, error) {
	return parseIn[Optimizer]("optimizer", s, Optimizers)
}

// Spec is the optimizer's row of Optimizers.
func (o Optimizer) Spec() OptimizerSpec {
	return rowOf(Optimizers, o, func(r *OptimizerSpec) Optimizer { return r.Name })
}

// ---- Attention --------------------------------------------------------------

// Attention is the attention implementation (transformers' attn_implementation).
type Attention string

// Attention implementations.
const (
	SDPA            Attention = "sdpa"
	FlashAttention2 Attention = "flash_attention_2"
	FlexAttention   Attention = "flex_attention"
	Eager           Attention = "eager"
	SDPAMath        Attention = "sdpa_math"
)

// AttentionSpec is what an attention implementation keeps and needs.
type AttentionSpec struct {
	Name Attention
	Help string
	// Aliases are other spellings read as Name.
	Aliases []string
	// ScoreTensors is how many s² tensors per head, each as wide as an
	// activation, it keeps for the backward (0: none, a fused kernel): eager's
	// Korthikanti 5·a·s² bytes at 2-byte activations (the scores, the
	// softmax output and the dropout's 1-byte mask: 2.5), SDPA's math
	// kernel's softmax output alone (1: at::_scaled_dot_product_attention_math
	// scales q and k, multiplies, adds the causal mask in place and
	// softmaxes; the probabilities·v matmul saves the probabilities, and
	// without dropout nothing else of s² size).
	ScoreTensors float64
	// NeedsFlashAttention2: runs only where the flash-attn 2 kernels do
	// (Ampere or newer NVIDIA GPUs).
	NeedsFlashAttention2 bool
}

// KeepsScores reports whether the kernel materialises every head's s²
// score matrix and keeps it for the backward (ScoreTensors above 0).
func (a AttentionSpec) KeepsScores() bool { return a.ScoreTensors > 0 }

func (s AttentionSpec) choice() Choice {
	return Choice{Name: string(s.Name), Help: s.Help, Aliases: s.Aliases}
}

// Attentions is the table of attention implementations.
var Attentions = []AttentionSpec{
	{Name: SDPA, Help: "torch scaled_dot_product_attention (memory-efficient or flash kernels)"},
	{Name: FlashAttention2, Help: "the flash-attn 2 package (Ampere or newer)", Aliases: []string{"fa2"}, NeedsFlashAttention2: true},
	{Name: FlexAttention, Help: "torch flex_attention"},
	{Name: Eager, Help: "plain matmuls: keeps the s² score matrix of every head", ScoreTensors: refEagerScoreCoef / 2},
	{Name: SDPAMath, Help: "torch scaled_dot_product_attention on its math kernel, where the fused kernels refuse the inputs (query and key/value head counts that differ without enable_gqa, as lit-gpt's Falcon 7B of 2023 passed them): keeps every head's s² softmax output, as torch before 2.5 runs it (2.5 computes 16-bit inputs there in fp32)", Aliases: []string{"math"}, ScoreTensors: 1},
}

// scoreTensors is how many activation-wide s² tensors per head the
// request's attention keeps for the backward (AttentionSpec.ScoreTensors;
// 0 for the fused kernels). SDPA's math kernel under attention dropout
// also keeps at::dropout's mask and output: eager's count.
func scoreTensors(r Request) float64 {
	a := r.Attn.Spec()
	if r.Attn == SDPAMath && r.Model != nil && r.Model.AttnDropout > 0 {
		return refEagerScoreCoef / 2
	}
	return a.ScoreTensors
}

// ParseAttention reads an attention implementation.
func ParseAttention(s string) (Attention, error) {
	return parseIn[Attention]("attention", s, Attentions)
}

// Spec is the implementation's row of Attentions.
func (a Attention) Spec() AttentionSpec {
	return rowOf(Attentions, a, func(r *AttentionSpec) Attention { return r.Name })
}

// ---- Loss kernel ------------------------------------------------------------

// LossKernel is how the loss is computed from the last hidden states.
type LossKernel string

// Loss kernels.
const (
	LossNone            LossKernel = "none"
	LossLiger           LossKernel = "liger"
	LossChunked         LossKernel = "chunked"
	LossCutCrossEntropy LossKernel = "cut_cross_entropy"
)

// LossKernelSpec is what a loss kernel materialises.
type LossKernelSpec struct {
	Name LossKernel
	Help string
	// MaterialisesLogits: the sequence's logits exist in memory (in full or
	// chunk by chunk); the fused kernels never hold them.
	MaterialisesLogits bool
	// Chunked: the fp32 upcast, log-softmax and gradient exist one chunk at
	// a time; only the 16-bit logits stay for the backward.
	Chunked bool
}

func (s LossKernelSpec) choice() Choice { return Choice{Name: string(s.Name), Help: s.Help} }

// LossKernels is the table of loss kernels.
var LossKernels = []LossKernelSpec{
	{Name: LossNone, Help: "the model's own cross-entropy over the whole logits", MaterialisesLogits: true},
	{Name: LossLiger, Help: "Liger's fused linear cross-entropy: no logits materialised"},
	{Name: LossChunked, Help: "chunked cross-entropy: the upcast one chunk at a time", MaterialisesLogits: true, Chunked: true},
	{Name: LossCutCrossEntropy, Help: "Apple's Cut Cross-Entropy: no logits materialised"},
}

// ParseLossKernel reads a loss kernel.
func ParseLossKernel(s string) (LossKernel, error) {
	return parseIn[LossKernel]("fused cross-entropy", s, LossKernels)
}

// Spec is the kernel's row of LossKernels.
func (k LossKernel) Spec() LossKernelSpec {
	return rowOf(LossKernels, k, func(r *LossKernelSpec) LossKernel { return r.Name })
}

// ---- Sharding strategy ------------------------------------------------------

// Strategy is a data-parallel sharding strategy.
type Strategy string

// Strategies.
const (
	NoSharding      Strategy = "none"
	DDP             Strategy = "ddp"
	FSDPFullShard   Strategy = "fsdp_full_shard"
	FSDPShardGradOp Strategy = "fsdp_shard_grad_op"
	FSDPNoShard     Strategy = "fsdp_no_shard"
	FSDPHybridShard Strategy = "fsdp_hybrid_shard"
	ZeRO0           Strategy = "zero0"
	ZeRO1           Strategy = "zero1"
	ZeRO2           Strategy = "zero2"
	ZeRO3           Strategy = "zero3"
)

// ShardLevel is how much of the training state a strategy divides over the
// world, in ZeRO's stages.
type ShardLevel int

// Shard levels.
const (
	ShardNothing    ShardLevel = iota // every GPU holds a replica
	ShardOptimizer                    // optimizer states (ZeRO-1)
	ShardGradients                    // + gradients (ZeRO-2)
	ShardParameters                   // + parameters, gathered per unit (ZeRO-3)
)

// Strategy families.
const (
	FamilyTorchDDP  = "ddp"
	FamilyFSDP      = "fsdp"
	FamilyDeepSpeed = "deepspeed"
)

// StrategySpec is what a strategy divides, and what it can offload.
type StrategySpec struct {
	Name Strategy
	Help string
	// Aliases are other spellings read as Name.
	Aliases []string
	// DataParallel: the run is replicated or sharded over GPUs (every
	// strategy but none).
	DataParallel bool
	// Family is the library: FamilyTorchDDP, FamilyFSDP, FamilyDeepSpeed;
	// "" for none.
	Family string
	Shards ShardLevel
	// PerNode: shards within a node and replicates across nodes.
	PerNode bool
	// OffloadsParams: the strategy can keep the parameters in host RAM
	// (DeepSpeed only under ZeRO-3; FSDP's CPUOffload(offload_params=True),
	// which moves the gradients and the optimizer step with them).
	OffloadsParams bool
	// OffloadsOptimizer: the strategy can move the optimizer states and
	// step to the CPU on their own, the parameters staying on the GPU
	// (DeepSpeed's offload_optimizer, stages 1–3). FSDP cannot: its only
	// CPU offload is the parameters', the step going with them.
	OffloadsOptimizer bool
}

func (s StrategySpec) choice() Choice {
	return Choice{Name: string(s.Name), Help: s.Help, Aliases: s.Aliases}
}

// Strategies is the table of sharding strategies.
var Strategies = []StrategySpec{
	{Name: NoSharding, Help: "one GPU, or a model placed across GPUs"},
	{Name: DDP, Help: "PyTorch DDP: a full replica per GPU", DataParallel: true, Family: FamilyTorchDDP},
	{Name: FSDPFullShard, Help: "FSDP: parameters, gradients and optimizer states sharded (FSDP's default ShardingStrategy, and FSDP2's fully_shard)", Aliases: []string{"fsdp", "fsdp2"}, DataParallel: true, Family: FamilyFSDP, Shards: ShardParameters, OffloadsParams: true},
	{Name: FSDPShardGradOp, Help: "FSDP: gradients and optimizer states sharded", DataParallel: true, Family: FamilyFSDP, Shards: ShardGradients, OffloadsParams: true},
	{Name: FSDPNoShard, Help: "FSDP without sharding: as DDP", DataParallel: true, Family: FamilyFSDP, OffloadsParams: true},
	{Name: FSDPHybridShard, Help: "FSDP: full shard within a node, replicas across nodes", DataParallel: true, Family: FamilyFSDP, Shards: ShardParameters, PerNode: true, OffloadsParams: true},
	{Name: ZeRO0, Help: "DeepSpeed without ZeRO (stage 0): a full replica per GPU; in fp16 its optimizer keeps the whole fp32 master copy, in bf16 a partition of it and a whole fp32 gradient buffer", Aliases: []string{"zero-0", "zero_0"}, DataParallel: true, Family: FamilyDeepSpeed},
	{Name: ZeRO1, Help: "DeepSpeed ZeRO-1: optimizer states sharded", Aliases: []string{"zero-1", "zero_1"}, DataParallel: true, Family: FamilyDeepSpeed, Shards: ShardOptimizer, OffloadsOptimizer: true},
	{Name: ZeRO2, Help: "DeepSpeed ZeRO-2: gradients and optimizer states sharded", Aliases: []string{"zero-2", "zero_2"}, DataParallel: true, Family: FamilyDeepSpeed, Shards: ShardGradients, OffloadsOptimizer: true},
	{Name: ZeRO3, Help: "DeepSpeed ZeRO-3: parameters too", Aliases: []string{"zero-3", "zero_3"}, DataParallel: true, Family: FamilyDeepSpeed, Shards: ShardParameters, OffloadsParams: true, OffloadsOptimizer: true},
}

// ParseStrategy reads a sharding strategy.
func ParseStrategy(s string) (Strategy, error) {
	return parseIn[Strategy]("sharding strategy", s, Strategies)
}

// Spec is the strategy's row of Strategies.
func (s Strategy) Spec() StrategySpec {
	return rowOf(Strategies, s, func(r *StrategySpec) Strategy { return r.Name })
}

// ---- CPU offload ------------------------------------------------------------

// Offload is what a sharded run keeps in host RAM.
type Offload string

// CPU offloads.
const (
	OffloadNone            Offload = "none"
	OffloadParams          Offload = "params"
	OffloadOptimizer       Offload = "optimizer"
	OffloadParamsOptimizer Offload = "params+optimizer"
)

// OffloadSpec is what an offload moves to the host.
type OffloadSpec struct {
	Name Offload
	Help string
	// Params: sharded parameters live in host RAM, two layers on the GPU.
	Params bool
	// Optimizer: the optimizer states and step run on the CPU (ZeRO-Offload).
	Optimizer bool
}

func (s OffloadSpec) choice() Choice { return Choice{Name: string(s.Name), Help: s.Help} }

// Offloads is the table of CPU offloads.
var Offloads = []OffloadSpec{
	{Name: OffloadNone, Help: "everything on the GPU"},
	{Name: OffloadParams, Help: "parameters in host RAM (zero3, FSDP)", Params: true},
	{Name: OffloadOptimizer, Help: "optimizer states and step on the CPU", Optimizer: true},
	{Name: OffloadParamsOptimizer, Help: "both", Params: true, Optimizer: true},
}

// ParseOffload reads a CPU offload.
func ParseOffload(s string) (Offload, error) { return parseIn[Offload]("cpu offload", s, Offloads) }

// Spec is the offload's row of Offloads.
func (o Offload) Spec() OffloadSpec {
	return rowOf(Offloads, o, func(r *OffloadSpec) Offload { return r.Name })
}

// ---- Stack ------------------------------------------------------------------

// StackName names a framework preset (Stacks).
type StackName string

// Framework presets.
const (
	StackHFTrainer      StackName = "hf-trainer"
	StackTRL            StackName = "trl"
	StackPEFTAccelerate StackName = "peft-accelerate"
	StackAxolotl        StackName = "axolotl"
	StackLlamaFactory   StackName = "llama-factory"
	StackLitGPT         StackName = "litgpt"
	StackTorchtune      StackName = "torchtune"
	StackFSDPQLoRA      StackName = "fsdp_qlora"
	StackUnsloth        StackName = "unsloth"
	StackTorchtitan     StackName = "torchtitan"
	StackPyTorch        StackName = "pytorch"
)

func (s Stack) choice() Choice { return Choice{Name: string(s.Name), Help: s.Help} }

// ParseStack reads a framework preset's name.
func ParseStack(s string) (StackName, error) { return parseIn[StackName]("stack", s, stacks) }

// Spec is the preset named n; the zero Stack for "" (no preset).
func (n StackName) Spec() Stack { return rowOf(stacks, n, func(r *Stack) StackName { return r.Name }) }
