package recipe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// TrainingArgs are the transformers.TrainingArguments fields the recipe
// sets (training_args.json); SFTConfig adds its own (sft_config.json).
type TrainingArgs struct {
	OutputDir                   string          `json:"output_dir"`
	PerDeviceTrainBatchSize     int64           `json:"per_device_train_batch_size"`
	GradientAccumulationSteps   int64           `json:"gradient_accumulation_steps"`
	NumTrainEpochs              float64         `json:"num_train_epochs"`
	LearningRate                float64         `json:"learning_rate"`
	WeightDecay                 float64         `json:"weight_decay"`
	AdamBeta1                   float64         `json:"adam_beta1"`
	AdamBeta2                   float64         `json:"adam_beta2"`
	AdamEpsilon                 float64         `json:"adam_epsilon"`
	MaxGradNorm                 float64         `json:"max_grad_norm"`
	BF16                        bool            `json:"bf16"`
	FP16                        bool            `json:"fp16"`
	GradientCheckpointing       bool            `json:"activation_checkpointing"`
	GradientCheckpointingKwargs map[string]bool `json:"activation_checkpointing_kwargs,omitempty"`
	Optim                       string          `json:"optim"`
	UseLigerKernel              bool            `json:"use_liger_kernel"`
	TorchCompile                bool            `json:"torch_compile"`
	FSDP                        bool            `json:"fsdp,omitempty"`
	FSDPConfig                  *FSDPArgs       `json:"fsdp_config,omitempty"`
	DeepSpeed                   string          `json:"deepspeed,omitempty"`
	LoggingSteps                int             `json:"logging_steps"`
	SaveStrategy                string          `json:"save_strategy"`
	ReportTo                    []string        `json:"report_to"`
	Seed                        int             `json:"seed"`
}

// FSDPArgs is TrainingArguments' fsdp_config. FSDP2 (fully_shard) runs
// full_shard (reshard_after_forward true) and shard_grad_op (false); the
// other strategies exist only in FSDP1, named by reshard_after_forward.
type FSDPArgs struct {
	Version             int  `json:"version"`
	ReshardAfterForward any  `json:"reshard_after_forward"`
	CPUOffload          bool `json:"cpu_offload"`
	// ActivationCheckpointing is FSDP's own checkpointing of each wrapped
	// layer, which transformers prefers under FSDP to the model's (that
	// one gathers the parameters once more in the backward).
	ActivationCheckpointing bool   `json:"activation_checkpointing"`
	CPURAMEfficientLoading  bool   `json:"cpu_ram_efficient_loading"`
	StateDictType           string `json:"state_dict_type"`
	BackwardPrefetch        string `json:"backward_prefetch,omitempty"`
	ForwardPrefetch         *bool  `json:"forward_prefetch,omitempty"`
	UseOrigParams           *bool  `json:"use_orig_params,omitempty"`
	SyncModuleStates        *bool  `json:"sync_module_states,omitempty"`
}

// SFTConfig is trl.SFTConfig's fields: TrainingArguments' and the
// sequence handling.
type SFTConfig struct {
	TrainingArgs
	MaxLength            int64  `json:"max_length"`
	Packing              bool   `json:"packing"`
	PackingStrategy      string `json:"packing_strategy"`
	PaddingFree          bool   `json:"padding_free"`
	ActivationOffloading bool   `json:"activation_offloading"`
	DatasetTextField     string `json:"dataset_text_field"`
}

// ModelSpec is model.json: how both scripts load the model and wrap it.
type ModelSpec struct {
	ModelID            string        `json:"model_id"`
	Method             string        `json:"method"`
	Dtype              string        `json:"dtype"`
	AttnImplementation string        `json:"attn_implementation"`
	Quantization       *Quantization `json:"quantization,omitempty"`
	// PrepareKbit: peft.prepare_model_for_kbit_training (frozen
	// embeddings and norms upcast to fp32).
	PrepareKbit bool `json:"prepare_model_for_kbit_training"`
	// AutocastAdapterDtype: get_peft_model keeps the adapters in fp32.
	AutocastAdapterDtype bool `json:"autocast_adapter_dtype"`
	// SeqLen and Packed: what the HF script tokenizes to (fixed blocks of
	// seq_len when packed, else truncated and padded to the batch).
	SeqLen int64 `json:"seq_len"`
	Packed bool  `json:"packed"`
}

// Quantization is transformers.BitsAndBytesConfig's fields.
type Quantization struct {
	LoadIn4bit     bool   `json:"load_in_4bit,omitempty"`
	LoadIn8bit     bool   `json:"load_in_8bit,omitempty"`
	QuantType      string `json:"bnb_4bit_quant_type,omitempty"`
	UseDoubleQuant bool   `json:"bnb_4bit_use_double_quant,omitempty"`
	ComputeDtype   string `json:"bnb_4bit_compute_dtype,omitempty"`
	QuantStorage   string `json:"bnb_4bit_quant_storage,omitempty"`
}

// LoRA is peft.LoraConfig's fields.
type LoRA struct {
	R             int64    `json:"r"`
	LoRAAlpha     int64    `json:"lora_alpha"`
	LoRADropout   float64  `json:"lora_dropout"`
	TargetModules []string `json:"target_modules"`
	Bias          string   `json:"bias"`
	TaskType      string   `json:"task_type"`
}

// DeepSpeedConfig is the DeepSpeed JSON (ds_config.json).
type DeepSpeedConfig struct {
	BF16                       *dsEnabled     `json:"bf16,omitempty"`
	FP16                       *dsFP16        `json:"fp16,omitempty"`
	ZeroOptimization           dsZero         `json:"zero_optimization"`
	Optimizer                  *dsOptimizer   `json:"optimizer,omitempty"`
	ZeroAllowUntestedOptimizer bool           `json:"zero_allow_untested_optimizer,omitempty"`
	TrainMicroBatchSizePerGPU  int64          `json:"train_micro_batch_size_per_gpu"`
	GradientAccumulationSteps  int64          `json:"gradient_accumulation_steps"`
	TrainBatchSize             int64          `json:"train_batch_size"`
	GradientClipping           float64        `json:"gradient_clipping"`
	ActivationCheckpointing    map[string]any `json:"activation_checkpointing,omitempty"`
	WallClockBreakdown         bool           `json:"wall_clock_breakdown"`
}

type dsEnabled struct {
	Enabled bool `json:"enabled"`
}

type dsFP16 struct {
	Enabled         bool `json:"enabled"`
	LossScale       int  `json:"loss_scale"`
	InitialScalePow int  `json:"initial_scale_power"`
	LossScaleWindow int  `json:"loss_scale_window"`
	Hysteresis      int  `json:"hysteresis"`
	MinLossScale    int  `json:"min_loss_scale"`
}

type dsOffload struct {
	Device    string `json:"device"`
	PinMemory bool   `json:"pin_memory"`
}

type dsZero struct {
	Stage                          int        `json:"stage"`
	OffloadOptimizer               *dsOffload `json:"offload_optimizer,omitempty"`
	OffloadParam                   *dsOffload `json:"offload_param,omitempty"`
	OverlapComm                    bool       `json:"overlap_comm"`
	ContiguousGradients            bool       `json:"contiguous_gradients"`
	ReduceBucketSize               int64      `json:"reduce_bucket_size"`
	AllgatherBucketSize            int64      `json:"allgather_bucket_size,omitempty"`
	Stage3PrefetchBucketSize       int64      `json:"stage3_prefetch_bucket_size,omitempty"`
	Stage3ParamPersistence         int64      `json:"stage3_param_persistence_threshold,omitempty"`
	Stage3MaxLiveParameters        int64      `json:"stage3_max_live_parameters,omitempty"`
	Stage3MaxReuseDistance         int64      `json:"stage3_max_reuse_distance,omitempty"`
	Stage3Gather16bitWeightsOnSave bool       `json:"stage3_gather_16bit_weights_on_model_save,omitempty"`
}

type dsOptimizer struct {
	Type   string         `json:"type"`
	Params map[string]any `json:"params"`
}

// Files returns the recipe of a plan: file name → contents. It fails with
// ErrUnsupported when the plan has a setting the stacks cannot reproduce.
func Files(in Input) (map[string][]byte, error) {
	s, err := read(in)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	put := func(name string, v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("recipe: %s: %w", name, err)
		}
		out[name] = append(b, '\n')
		return nil
	}
	args := s.trainingArgs()
	sft := SFTConfig{TrainingArgs: args, MaxLength: s.req.SeqLen, DatasetTextField: "text"}
	if !s.req.DynamicShapes {
		// Fixed shapes: blocks of exactly max_length tokens ("wrapped"
		// cuts across documents; "bfd" would pad and vary the shape).
		sft.Packing, sft.PackingStrategy = true, "wrapped"
	} else {
		sft.PackingStrategy = "bfd"
	}
	for name, v := range map[string]any{FileTrainingArgs: args, FileSFTConfig: sft, FileModel: s.modelSpec()} {
		if err := put(name, v); err != nil {
			return nil, err
		}
	}
	if s.req.Method != estimate.Full {
		if err := put(FileLoRA, LoRA{R: s.req.LoRARank, LoRAAlpha: s.alpha, LoRADropout: s.dropout, TargetModules: s.targets, Bias: "none", TaskType: "CAUSAL_LM"}); err != nil {
			return nil, err
		}
	}
	if s.family == estimate.FamilyDeepSpeed {
		if err := put(FileDeepSpeed, s.deepSpeed()); err != nil {
			return nil, err
		}
	}
	out[FileAccelerate] = []byte(s.accelerateYAML())
	out[FileTRL] = []byte(s.script("trl"))
	out[FileHF] = []byte(s.script("hf"))
	out[FileLaunch] = []byte(s.launch())
	out[FileReadme] = []byte(s.readme(out))
	return out, nil
}

func (s *settings) trainingArgs() TrainingArgs {
	r := s.req
	a := TrainingArgs{OutputDir: defaultOutputDir, PerDeviceTrainBatchSize: s.micro, GradientAccumulationSteps: s.accum,
		NumTrainEpochs: s.in.Epochs, LearningRate: defaultLR, AdamBeta1: adamBeta1, AdamBeta2: adamBeta2, AdamEpsilon: adamEps,
		MaxGradNorm: defaultMaxGradNrm, BF16: s.bf16, FP16: s.fp16, GradientCheckpointing: r.GradCkpt == estimate.CkptFull,
		Optim: string(r.Optimizer), UseLigerKernel: r.FusedCE == estimate.LossLiger, TorchCompile: r.Compile,
		LoggingSteps: 10, SaveStrategy: "no", ReportTo: []string{"none"}, Seed: 42}
	if a.NumTrainEpochs == 0 {
		a.NumTrainEpochs = 1
	}
	switch s.family {
	case estimate.FamilyFSDP:
		a.FSDP = true
		a.FSDPConfig = s.fsdpArgs()
		// FSDP checkpoints each wrapped layer itself (the same block inputs
		// kept); the model's own checkpointing would gather again.
		a.GradientCheckpointing = false
	case estimate.FamilyDeepSpeed:
		a.DeepSpeed = FileDeepSpeed
	}
	if a.GradientCheckpointing {
		// Non-reentrant checkpointing: what PyTorch recommends, and what
		// works with frozen inputs (LoRA).
		a.GradientCheckpointingKwargs = map[string]bool{"use_reentrant": false}
	}
	return a
}

// fsdpStrategy is FSDP1's ShardingStrategy for the plan.
func (s *settings) fsdpStrategy() string {
	switch s.req.Sharding.Strategy {
	case estimate.FSDPShardGradOp:
		return "SHARD_GRAD_OP"
	case estimate.FSDPNoShard:
		return "NO_SHARD"
	case estimate.FSDPHybridShard:
		return "HYBRID_SHARD"
	}
	return "FULL_SHARD"
}

// fsdpVersion is 2 (fully_shard) where FSDP2 has the strategy, else 1.
func (s *settings) fsdpVersion() int {
	switch s.req.Sharding.Strategy {
	case estimate.FSDPFullShard, estimate.FSDPShardGradOp:
		return 2
	}
	return 1
}

// fsdpArgs is TrainingArguments' fsdp_config for the plan.
func (s *settings) fsdpArgs() *FSDPArgs {
	f := &FSDPArgs{Version: s.fsdpVersion(), CPUOffload: s.req.Sharding.CPUOffload.Spec().Params,
		ActivationCheckpointing: s.req.GradCkpt == estimate.CkptFull, CPURAMEfficientLoading: true, StateDictType: "SHARDED_STATE_DICT"}
	if f.Version == 2 {
		f.ReshardAfterForward = s.req.Sharding.Strategy == estimate.FSDPFullShard
		return f
	}
	no, yes := false, true
	f.ReshardAfterForward = strings.ToLower(s.fsdpStrategy())
	f.BackwardPrefetch, f.ForwardPrefetch, f.UseOrigParams, f.SyncModuleStates = "BACKWARD_PRE", &no, &yes, &yes
	return f
}

func (s *settings) modelSpec() ModelSpec {
	r := s.req
	m := ModelSpec{ModelID: s.in.ModelID, Method: string(r.Method), Dtype: s.loadDtype, AttnImplementation: string(r.Attn),
		PrepareKbit: s.kbitPrepare, AutocastAdapterDtype: s.fp32Adapters, SeqLen: r.SeqLen, Packed: !r.DynamicShapes}
	if r.Method == estimate.QLoRA {
		q := &Quantization{}
		if r.Quant == estimate.Int8 {
			q.LoadIn8bit = true
		} else {
			q.LoadIn4bit = true
			q.QuantType = "nf4"
			if r.Quant == estimate.FP4 {
				q.QuantType = "fp4"
			}
			q.UseDoubleQuant = r.Quant.Spec().DoubleQuant
			q.ComputeDtype = torchDtype(r.Precision)
			q.QuantStorage = map[estimate.Dtype]string{estimate.DtypeUint8: "uint8", estimate.DtypeBF16: "bfloat16",
				estimate.DtypeFP16: "float16", estimate.DtypeFP32: "float32"}[r.QuantStorage]
		}
		m.Quantization = q
	}
	return m
}

func (s *settings) deepSpeed() DeepSpeedConfig {
	r := s.req
	spec := r.Sharding.Strategy.Spec()
	c := DeepSpeedConfig{TrainMicroBatchSizePerGPU: s.micro, GradientAccumulationSteps: s.accum,
		TrainBatchSize: s.micro * s.accum * s.world, GradientClipping: defaultMaxGradNrm}
	switch {
	case s.bf16:
		c.BF16 = &dsEnabled{Enabled: true}
	case s.fp16:
		c.FP16 = &dsFP16{Enabled: true, InitialScalePow: 16, LossScaleWindow: 1000, Hysteresis: 2, MinLossScale: 1}
	}
	z := dsZero{Stage: int(spec.Shards), OverlapComm: true, ContiguousGradients: true, ReduceBucketSize: dsReduceBucket}
	if spec.Shards == estimate.ShardParameters {
		z.Stage3PrefetchBucketSize = dsPrefetchBucket
		z.Stage3ParamPersistence = dsParamPersistence
		z.Stage3MaxLiveParameters = dsMaxLive
		z.Stage3MaxReuseDistance = dsMaxReuse
		z.Stage3Gather16bitWeightsOnSave = true
	} else {
		z.AllgatherBucketSize = dsAllgatherBucket
	}
	off := r.Sharding.CPUOffload.Spec()
	if off.Optimizer {
		z.OffloadOptimizer = &dsOffload{Device: "cpu", PinMemory: true}
		// ZeRO-Offload needs DeepSpeed's CPU AdamW, named here; the
		// Trainer fills "auto" from its own arguments.
		c.Optimizer = &dsOptimizer{Type: "AdamW", Params: map[string]any{"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}
	} else if r.Optimizer != estimate.AdamWTorch && r.Optimizer != estimate.AdamWTorchFused {
		// The Trainer's own optimizer (bitsandbytes, Adafactor, SGD) runs
		// under ZeRO as a client optimizer.
		c.ZeroAllowUntestedOptimizer = true
	}
	if off.Params {
		z.OffloadParam = &dsOffload{Device: "cpu", PinMemory: true}
	}
	c.ZeroOptimization = z
	return c
}

// accelerateYAML is accelerate's config file: flat keys and one nested
// plugin section, as `accelerate config` writes it.
func (s *settings) accelerateYAML() string {
	var b bytes.Buffer
	b.WriteString("# accelerate config for the plan (accelerate launch --config_file " + FileAccelerate + ").\n")
	b.WriteString("# Written by canifinetune plan --emit; the memory-relevant settings are the estimate's.\n")
	b.WriteString("compute_environment: LOCAL_MACHINE\n")
	b.WriteString("debug: false\n")
	dt := "NO"
	switch {
	case s.family == estimate.FamilyFSDP:
		dt = "FSDP"
	case s.family == estimate.FamilyDeepSpeed:
		dt = "DEEPSPEED"
	case s.world > 1:
		dt = "MULTI_GPU"
	}
	// 'NO' and 'no' are quoted: YAML reads them bare as false.
	fmt.Fprintf(&b, "distributed_type: %s\n", yamlWord(dt))
	b.WriteString("downcast_bf16: 'no'\n")
	switch s.family {
	case estimate.FamilyFSDP:
		b.WriteString("fsdp_config:\n")
		f := s.fsdpArgs()
		kv := [][2]string{
			{"fsdp_activation_checkpointing", fmt.Sprint(f.ActivationCheckpointing)},
			{"fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"},
		}
		if f.Version == 1 {
			kv = append(kv, [2]string{"fsdp_backward_prefetch", f.BackwardPrefetch})
		}
		kv = append(kv, [2]string{"fsdp_cpu_ram_efficient_loading", "true"})
		if f.Version == 1 {
			kv = append(kv, [2]string{"fsdp_forward_prefetch", "false"})
		}
		kv = append(kv, [2]string{"fsdp_offload_params", fmt.Sprint(f.CPUOffload)})
		if f.Version == 2 {
			kv = append(kv, [2]string{"fsdp_reshard_after_forward", fmt.Sprint(f.ReshardAfterForward)})
		} else {
			kv = append(kv, [2]string{"fsdp_sharding_strategy", s.fsdpStrategy()})
		}
		kv = append(kv, [2]string{"fsdp_state_dict_type", f.StateDictType})
		if f.Version == 1 {
			kv = append(kv, [2]string{"fsdp_sync_module_states", "true"}, [2]string{"fsdp_use_orig_params", "true"})
		}
		kv = append(kv, [2]string{"fsdp_version", fmt.Sprint(f.Version)})
		for _, p := range kv {
			fmt.Fprintf(&b, "  %s: %s\n", p[0], p[1])
		}
	case estimate.FamilyDeepSpeed:
		b.WriteString("deepspeed_config:\n")
		fmt.Fprintf(&b, "  deepspeed_config_file: %s\n", FileDeepSpeed)
		b.WriteString("  deepspeed_multinode_launcher: standard\n")
		fmt.Fprintf(&b, "  zero3_init_flag: %v\n", s.req.Sharding.Strategy == estimate.ZeRO3)
	}
	b.WriteString("machine_rank: 0\n")
	b.WriteString("main_training_function: main\n")
	if s.family == estimate.FamilyDeepSpeed {
		b.WriteString("# Under DeepSpeed the precision is ds_config.json's; this line repeats it.\n")
	}
	fmt.Fprintf(&b, "mixed_precision: %s\n", yamlWord(s.mixed))
	fmt.Fprintf(&b, "num_machines: %d\n", s.nodes)
	fmt.Fprintf(&b, "num_processes: %d\n", s.world)
	b.WriteString("rdzv_backend: static\n")
	b.WriteString("same_network: true\n")
	b.WriteString("use_cpu: false\n")
	return b.String()
}

// yamlWord quotes the words YAML 1.1 reads as booleans.
func yamlWord(w string) string {
	switch strings.ToLower(w) {
	case "no", "yes", "on", "off", "y", "n", "true", "false":
		return "'" + w + "'"
	}
	return w
}
