package recipe

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/plan"
)

// Input is a chosen plan and what the recipe needs besides it.
type Input struct {
	// ModelID is what the scripts pass to from_pretrained: a Hub id
	// (org/name) or a local directory.
	ModelID string
	// Plan is the chosen plan; its Request is normalized (plan.Search's).
	Plan plan.Plan
	// Epochs is the passes over the dataset (num_train_epochs; 0: 1).
	Epochs float64
}

// ErrUnsupported is wrapped by every refusal: the plan has a setting the
// emitted stacks cannot reproduce.
var ErrUnsupported = errors.New("no equivalent in the emitted stacks")

// Refusal is a setting the emitted stacks cannot reproduce: it wraps
// ErrUnsupported and names the setting, its value, why and what to plan
// with instead.
type Refusal struct {
	Setting, Value, Why, Instead string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%v: %s %s: %s; plan with %s", ErrUnsupported, r.Setting, r.Value, r.Why, r.Instead)
}

// Unwrap makes errors.Is(err, ErrUnsupported) hold.
func (r *Refusal) Unwrap() error { return ErrUnsupported }

// Short is the setting and its value, for a line in a table.
func (r *Refusal) Short() string { return r.Setting + " " + r.Value }

// unsupported is a refusal naming the setting, its value and what to plan
// with instead.
func unsupported(setting, value, why, instead string) error {
	return &Refusal{Setting: setting, Value: value, Why: why, Instead: instead}
}

// File names, in the order README.txt lists them.
const (
	FileReadme        = "README.txt"
	FileLaunch        = "launch.sh"
	FileTRL           = "train_trl.py"
	FileSFTConfig     = "sft_config.json"
	FileHF            = "train_hf.py"
	FileTrainingArgs  = "training_args.json"
	FileModel         = "model.json"
	FileLoRA          = "lora_config.json"
	FileAccelerate    = "accelerate_config.yaml"
	FileDeepSpeed     = "ds_config.json"
	defaultOutputDir  = "output"
	defaultLR         = 2e-4
	defaultMaxGradNrm = 1.0
)

// Hyperparameters that hold no memory, the same in every recipe.
const (
	adamBeta1, adamBeta2, adamEps = 0.9, 0.999, 1e-8
	// DeepSpeed's own defaults (deepspeed/runtime/zero/config.py), written
	// out so the file says what runs; the estimate's sharding terms divide
	// the state by the world and add two gathered layers under ZeRO-3, and
	// do not model the buckets.
	dsReduceBucket     = 500_000_000
	dsAllgatherBucket  = 500_000_000
	dsPrefetchBucket   = 50_000_000
	dsParamPersistence = 100_000
	dsMaxLive          = 1_000_000_000
	dsMaxReuse         = 1_000_000_000
)

// settings is the plan read into the stacks' vocabulary, once.
type settings struct {
	in  Input
	req estimate.Request
	// world is the data-parallel GPUs; perNode × nodes = world.
	world, perNode, nodes int64
	micro, accum          int64
	family                string // estimate.Family*, "" on one GPU
	// loadDtype is the torch dtype from_pretrained loads the weights in.
	loadDtype string
	// bf16/fp16 are TrainingArguments' flags: autocast (and the scaler for
	// fp16) on top of the loaded dtype.
	bf16, fp16 bool
	// mixed is accelerate's mixed_precision.
	mixed string
	// targets are the LoRA target module names.
	targets      []string
	fp32Adapters bool
	kbitPrepare  bool
	dropout      float64
	alpha        int64
	// own is set when the plan's stack writes its own config (LitGPT,
	// torchtune) instead of the Trainer scripts.
	own *own
}

// torchDtype names a precision's 16-bit dtype as torch does.
func torchDtype(p estimate.Precision) string {
	switch p {
	case estimate.BF16Mixed, estimate.BF16True:
		return "bfloat16"
	case estimate.FP16Mixed, estimate.FP16True:
		return "float16"
	}
	return "float32"
}

// read checks the plan against what the stacks can express and reads it.
func read(in Input) (*settings, error) { return readFor(in, true) }

// readFor reads the plan; without render it checks only (the LoRA targets,
// which the estimate already resolved, are not named again).
func readFor(in Input, render bool) (*settings, error) {
	p := in.Plan
	r := p.Request
	if r.Model == nil {
		return nil, errors.New("recipe: the plan has no model")
	}
	if strings.TrimSpace(in.ModelID) == "" {
		return nil, errors.New("recipe: no model id to load (a Hub id or a local directory)")
	}
	if in.Epochs < 0 {
		return nil, fmt.Errorf("recipe: epochs must be 0 or more, got %v", in.Epochs)
	}
	// The scripts load AutoModelForCausalLM with a causal-LM PEFT task: an
	// encoder-decoder or encoder-only model needs another model class,
	// collator and task type.
	switch m := r.Model; {
	case m.Seq2Seq != nil:
		return nil, unsupported("model", m.ModelType, "an encoder-decoder model; the emitted scripts load AutoModelForCausalLM (a Seq2SeqTrainer script with AutoModelForSeq2SeqLM is not emitted)", "canifinetune estimate for the memory, and your own seq2seq script")
	case m.Encoder:
		return nil, unsupported("model", m.ModelType, "an encoder-only model; the emitted scripts load AutoModelForCausalLM", "canifinetune estimate for the memory, and your own classification or masked-LM script")
	}
	if r.Stack == estimate.StackTorchtitan {
		return nil, unsupported("stack", string(r.Stack), "torchtitan trains its own model code from its own config registry, which the emitted files do not write", "canifinetune estimate for the memory, and torchtitan's own config for the run")
	}
	if r.Stack == estimate.StackLlamaFactory {
		return nil, unsupported("stack", string(r.Stack), "LLaMA-Factory runs from its own YAML config (llamafactory-cli train), which the emitted files do not write; its settings are named in the estimate's assumptions", "canifinetune estimate for the memory, then the same settings in a LLaMA-Factory config")
	}
	if r.Attn == estimate.SDPAMath {
		return nil, unsupported("attention", string(r.Attn), "SDPA's math kernel is what torch falls back to, not an attn_implementation transformers loads", "--attn sdpa (and, to force the math kernel, torch.nn.attention.sdpa_kernel(SDPBackend.MATH) around the training step)")
	}
	if r.Stack == estimate.StackPyTorch {
		return nil, unsupported("stack", string(r.Stack), "a plain PyTorch loop is the user's own code; the emitted scripts run the transformers Trainer, whose loss is transformers' own (the logits upcast to fp32), not the loop's", "--stack hf-trainer, whose scripts are emitted, or this plan's settings in your own loop")
	}
	s := &settings{in: in, req: r, world: p.World, nodes: max(p.Nodes, 1), micro: p.MicroBatch, accum: max(p.GradAccum, 1)}
	if s.world < 1 {
		s.world = 1
	}
	s.perNode = s.world / s.nodes
	if s.perNode*s.nodes != s.world {
		return nil, fmt.Errorf("recipe: %d GPUs do not split evenly over %d nodes", s.world, s.nodes)
	}
	if s.micro < 1 || r.Batch != s.micro || max(r.GradAccum, 1) != s.accum {
		return nil, fmt.Errorf("recipe: the plan's micro-batch %d × accumulation %d disagrees with its request's %d × %d", s.micro, s.accum, r.Batch, r.GradAccum)
	}
	spec := r.Sharding.Strategy.Spec()
	s.family = spec.Family
	wantShardGPUs := s.world
	if spec.PerNode {
		wantShardGPUs = s.perNode
	}
	if s.world > 1 && !spec.DataParallel {
		return nil, fmt.Errorf("recipe: %d GPUs with sharding %q: the emitted stacks run one data-parallel replica per GPU", s.world, r.Sharding.Strategy)
	}
	if spec.DataParallel && r.Sharding.GPUs != wantShardGPUs {
		return nil, fmt.Errorf("recipe: sharding over %d GPUs disagrees with the plan's %d × %d", r.Sharding.GPUs, s.nodes, s.perNode)
	}
	if ownStack(r.Stack) {
		if err := s.readOwn(); err != nil {
			return nil, err
		}
		return s, nil
	}
	if err := s.readPrecision(); err != nil {
		return nil, err
	}
	if err := s.readKernels(); err != nil {
		return nil, err
	}
	if err := s.readOffload(); err != nil {
		return nil, err
	}
	if err := s.readAdapters(render); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *settings) readPrecision() error {
	r := s.req
	mixed := r.Precision.Spec().MasterWeights
	if plan.RunPrecision(r.Sharding.Strategy, r.Precision) != r.Precision {
		return unsupported("precision", string(r.Precision),
			"DeepSpeed ZeRO keeps fp32 master weights and fp32 optimizer states for 16-bit training (its bf16/fp16 modes are mixed precision)",
			"--precision bf16-mixed, or an FSDP/DDP plan")
	}
	// A full fine-tune under mixed precision loads fp32 weights (the
	// master copy) and autocasts; "-true" loads the 16-bit dtype and trains
	// it. A LoRA base is frozen: the estimate holds it in 16-bit (or in
	// fp32 under fp32 or FrozenBaseBytes 4) whatever autocast does.
	switch {
	case r.Precision == estimate.FP32:
		s.loadDtype = "float32"
	case r.Method == estimate.Full && mixed:
		s.loadDtype = "float32"
	case r.Method != estimate.Full && r.FrozenBaseBytes == 4:
		s.loadDtype = "float32"
	default:
		s.loadDtype = torchDtype(r.Precision)
	}
	switch r.Precision {
	case estimate.BF16Mixed, estimate.BF16True:
		// bf16=True on bf16 weights autocasts to the dtype they already
		// have: no copies.
		s.bf16, s.mixed = true, "bf16"
	case estimate.FP16Mixed:
		s.fp16, s.mixed = true, "fp16"
	default:
		// fp16-true: the Trainer's fp16=True refuses to unscale fp16
		// gradients; the weights train in the dtype they load in.
		s.mixed = "no"
	}
	if d := r.OptimizerStateDtype; d != "" {
		param := estimate.DtypeFP32
		if !mixed && r.Precision != estimate.FP32 {
			param = estimate.Dtype(strings.TrimSuffix(string(r.Precision), "-true"))
		}
		if d != param {
			return unsupported("optimizer state dtype", string(d),
				fmt.Sprintf("the Trainer's optimizers keep their states in the trained parameters' dtype (%s here)", param),
				"no --optimizer-state-dtype")
		}
	}
	return nil
}

func (s *settings) readKernels() error {
	r := s.req
	switch r.GradCkpt {
	case estimate.CkptNone, estimate.CkptFull:
	case estimate.CkptOffload:
		return unsupported("gradient checkpointing", string(r.GradCkpt),
			"the Trainer has no activation offloading (TRL's activation_offloading exists, but the HF Trainer script could not match it)",
			"--grad-ckpt full")
	case estimate.CkptSelectiveOp:
		return unsupported("gradient checkpointing", string(r.GradCkpt),
			"the Trainer's gradient checkpointing recomputes whole blocks; the per-op policy is torchtitan's", "--grad-ckpt full")
	default:
		return unsupported("gradient checkpointing", string(r.GradCkpt),
			"Unsloth's offloaded checkpointing runs only inside Unsloth", "--grad-ckpt full")
	}
	switch r.FusedCE {
	case estimate.LossNone, estimate.LossLiger:
	default:
		return unsupported("loss kernel", string(r.FusedCE),
			"the Trainer selects no chunked or Cut Cross-Entropy loss (Liger's fused loss is use_liger_kernel)",
			"--fused-ce liger or none")
	}
	for _, k := range r.Kernels {
		if _, ok := ligerKernelKey[k]; !ok {
			return unsupported("kernel", string(k),
				"the Trainer applies Liger's kernels (liger_kernel_config) and no other fused-kernel bundle",
				"Liger kernels or none")
		}
	}
	if r.OptimizerInBackward {
		return unsupported("optimizer in backward", "true",
			"the Trainer steps the optimizer after the backward, with every gradient resident",
			"no --optimizer-in-backward")
	}
	if r.Task != "" && r.Task != estimate.TaskCausalLM {
		return unsupported("task", string(r.Task),
			"the scripts train a causal LM (AutoModelForCausalLM, SFT on text)", "a decoder with the causal-lm task")
	}
	if r.Method == estimate.QLoRA && r.Quant.Spec().GroupSize > 0 {
		return unsupported("quantization", string(r.Quant),
			"the scripts quantize with bitsandbytes (BitsAndBytesConfig); a GPTQ base needs fms-acceleration's AutoGPTQ plugin",
			"--quant nf4-dq")
	}
	if len(r.ExtraTrainable) > 0 {
		return unsupported("extra trainable modules", strings.Join(r.ExtraTrainable, ","),
			"PEFT's modules_to_save trains a copy and keeps the original, which the estimate does not hold",
			"no --extra-trainable")
	}
	return nil
}

func (s *settings) readOffload() error {
	r := s.req
	off := r.Sharding.CPUOffload.Spec()
	if !off.Params && !off.Optimizer {
		return nil
	}
	switch s.family {
	case estimate.FamilyFSDP:
		// FSDP's CPUOffload(offload_params=True) moves the parameters and
		// the optimizer step together; the estimate accepts only that.
		if off.Optimizer && !plan.OffloadRuns(r.Optimizer) {
			return unsupported("optimizer", string(r.Optimizer),
				"FSDP's CPU offload steps the optimizer on host tensors: torch's AdamW does, bitsandbytes' kernels run only on the GPU, and torchao's AdamW8bit was not tried there",
				"--optimizer adamw_torch, or no CPU offload")
		}
	case estimate.FamilyDeepSpeed:
		if off.Params && r.Sharding.Strategy != estimate.ZeRO3 {
			return unsupported("cpu offload", string(r.Sharding.CPUOffload),
				"DeepSpeed offloads parameters only under ZeRO-3", "a ZeRO-3 plan")
		}
		if off.Optimizer && !plan.OffloadRuns(r.Optimizer) {
			return unsupported("optimizer", string(r.Optimizer),
				"ZeRO-Offload runs DeepSpeed's CPU AdamW (fp32 states on the host); it has no CPU version of this optimizer",
				"--optimizer adamw_torch")
		}
	default:
		return unsupported("cpu offload", string(r.Sharding.CPUOffload),
			"only FSDP and DeepSpeed offload to the CPU", "an FSDP or ZeRO plan")
	}
	return nil
}

func (s *settings) readAdapters(render bool) error {
	r := s.req
	if r.Model.LlamafiedFrom != "" {
		// The estimate is Unsloth's llama-fied upload (split q/k/v and
		// gate/up); these scripts load the checkpoint with transformers,
		// whose modules are the fused ones, so the estimated adapters
		// would not be the ones trained.
		return unsupported("model", r.Model.Name, "the estimate is of Unsloth's llama-fied upload, while the scripts load the checkpoint with transformers, whose "+r.Model.LlamafiedFrom+" modules are fused (qkv_proj, gate_up_proj)", "--stack hf-trainer, or Unsloth's own notebook for this model")
	}
	if r.Method == estimate.Full {
		return nil
	}
	if render {
		lins, err := r.Model.Targets(r.LoRATargets)
		if err != nil {
			return fmt.Errorf("recipe: LoRA targets: %w", err)
		}
		for _, l := range lins {
			if !slices.Contains(s.targets, l.Name) {
				s.targets = append(s.targets, l.Name)
			}
		}
	}
	if r.ExtraLoRAOnHead {
		s.targets = append(s.targets, "lm_head")
	}
	if r.LoRADropout != nil {
		s.dropout = *r.LoRADropout
	}
	s.alpha = 2 * r.LoRARank
	// PEFT makes adapters fp32 (autocast_adapter_dtype=True) unless a
	// stack that trains pure 16-bit keeps them in 16-bit: the estimate's
	// rule, read from the same table.
	s.fp32Adapters = r.Stack == "" || r.Stack.Spec().FP32Adapters ||
		(r.Precision != estimate.BF16True && r.Precision != estimate.FP16True)
	if r.Method == estimate.QLoRA {
		s.kbitPrepare = r.UpcastFrozen == nil || *r.UpcastFrozen
		if plan.RunQuantStorage(r.Stack, r.Sharding.Strategy, r.Method, r.Precision, r.QuantStorage) != r.QuantStorage {
			return unsupported("quant storage", string(r.QuantStorage),
				"FSDP and ZeRO-3 shard the packed 4-bit weights only when they are stored in the 16-bit dtype of the other parameters (bnb_4bit_quant_storage)",
				"--stack fsdp_qlora (packed weights stored in bf16)")
		}
	}
	return nil
}

// Check reports whether Files would write the plan: nil, or the error
// Files would return (ErrUnsupported naming the setting). It renders
// nothing, so a caller can ask it of every ranked plan.
func Check(in Input) error {
	_, err := readFor(in, false)
	return err
}

// Names lists the files Files writes for the plan, in README order.
func Names(files map[string][]byte) []string {
	order := []string{FileReadme, FileLaunch, FileLitGPT, FileTorchtune, FileTRL, FileSFTConfig, FileHF, FileTrainingArgs, FileModel, FileLoRA, FileAccelerate, FileDeepSpeed}
	var out []string
	for _, n := range order {
		if _, ok := files[n]; ok {
			out = append(out, n)
		}
	}
	return out
}
