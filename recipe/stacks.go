package recipe

import (
	"fmt"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// The LitGPT and torchtune recipes: a plan made with --stack litgpt or
// --stack torchtune is estimated as that framework runs it (its own LoRA,
// pure bf16, its loss), so its recipe is the framework's own config, not
// the Trainer scripts.

// File names of the framework configs.
const (
	FileLitGPT    = "litgpt.yaml"
	FileTorchtune = "torchtune.yaml"
)

// own is what a framework config needs besides settings.
type own struct {
	// lora flags: which projections carry adapters (litgpt's lora_query …;
	// torchtune's lora_attn_modules and apply_lora_to_mlp).
	query, key, value, proj, mlp, head bool
	// optimizer is the class the framework instantiates and its options.
	optimizer string
	fused     bool
	// tt is the torchtune model entry (nil under LitGPT).
	tt *ttModel
}

// ttModel is a model torchtune has builders, a tokenizer and a checkpoint
// layout for (torchtune's own configs for the model).
type ttModel struct {
	pkg, size, modelType string
	tokenizer            string
	files                int
}

var ttModels = map[string]ttModel{
	"meta-llama/Llama-3.1-8B":  {pkg: "llama3_1", size: "8b", modelType: "LLAMA3", tokenizer: "llama3", files: 4},
	"meta-llama/Llama-3.1-70B": {pkg: "llama3_1", size: "70b", modelType: "LLAMA3", tokenizer: "llama3", files: 30},
	"Qwen/Qwen2.5-7B":          {pkg: "qwen2_5", size: "7b_base", modelType: "QWEN2", tokenizer: "qwen2_5", files: 4},
}

// ownStack reports whether the plan's stack writes its own config.
func ownStack(st estimate.StackName) bool {
	return st == estimate.StackLitGPT || st == estimate.StackTorchtune
}

// readOwn checks the plan against what LitGPT or torchtune runs.
func (s *settings) readOwn() error {
	r := s.req
	st := string(r.Stack)
	o := &own{}
	s.own = o
	if r.Task != "" && r.Task != estimate.TaskCausalLM {
		return unsupported("task", string(r.Task), st+" fine-tunes causal LMs", "the causal-lm task")
	}
	if r.FusedCE == estimate.LossLiger || r.FusedCE == estimate.LossCutCrossEntropy {
		return unsupported("loss kernel", string(r.FusedCE), st+"'s loss is its own cross-entropy (whole or chunked)", "--fused-ce none or chunked")
	}
	if len(r.Kernels) > 0 {
		return unsupported("kernel", string(r.Kernels[0]), st+" applies no Liger or fused-kernel bundle", "no --kernels")
	}
	if len(r.ExtraTrainable) > 0 {
		return unsupported("extra trainable modules", strings.Join(r.ExtraTrainable, ","), st+"'s LoRA recipes train only the adapters", "no --extra-trainable")
	}
	if r.Attn != estimate.SDPA {
		return unsupported("attention", string(r.Attn), st+" calls torch's scaled_dot_product_attention", "--attn sdpa")
	}
	if r.Method == estimate.QLoRA && r.Quant.Spec().GroupSize > 0 {
		return unsupported("quantization", string(r.Quant), st+" quantizes the base itself (no GPTQ)", "--quant nf4-dq")
	}
	switch r.Optimizer {
	case estimate.AdamWTorch:
		o.optimizer = "torch.optim.AdamW"
	case estimate.AdamWTorchFused:
		o.optimizer, o.fused = "torch.optim.AdamW", true
	case estimate.SGD:
		o.optimizer = "torch.optim.SGD"
	case estimate.AdamW8bit:
		o.optimizer = "bitsandbytes.optim.AdamW8bit"
	case estimate.PagedAdamW8bit:
		o.optimizer = "bitsandbytes.optim.PagedAdamW8bit"
	case estimate.AOAdamW8bit:
		// torchao's path since 0.11 (torchao.prototype.low_bit_optim before).
		o.optimizer = "torchao.optim.AdamW8bit"
	case estimate.PagedAdamW32bit:
		o.optimizer = "bitsandbytes.optim.PagedAdamW32bit"
		if r.Stack == estimate.StackLitGPT && r.Method == estimate.QLoRA {
			// LitGPT swaps an AdamW config for bitsandbytes' PagedAdamW
			// itself when it quantizes (litgpt/utils.py
			// instantiate_bnb_optimizer), with the AdamW arguments.
			o.optimizer = "torch.optim.AdamW"
		}
	default:
		return unsupported("optimizer", string(r.Optimizer), st+" configs name a torch or bitsandbytes optimizer class; this one has no class there", "--optimizer adamw_torch")
	}
	if r.OptimizerStateDtype != "" {
		param := estimate.DtypeFP32
		if !r.Precision.Spec().MasterWeights && r.Precision != estimate.FP32 {
			param = estimate.Dtype(strings.TrimSuffix(string(r.Precision), "-true"))
		}
		if r.OptimizerStateDtype != param {
			return unsupported("optimizer state dtype", string(r.OptimizerStateDtype),
				fmt.Sprintf("the optimizer keeps its states in the trained parameters' dtype (%s here)", param), "no --optimizer-state-dtype")
		}
	}
	if r.Method != estimate.Full {
		if err := s.readOwnTargets(); err != nil {
			return err
		}
		if r.LoRADropout != nil {
			s.dropout = *r.LoRADropout
		}
		s.alpha = 2 * r.LoRARank
	}
	if r.Stack == estimate.StackLitGPT {
		return s.readLitGPT()
	}
	return s.readTorchtune()
}

// readOwnTargets maps the LoRA targets onto the frameworks' switches: q,
// k and v each, the attention output, and the MLP as a whole.
func (s *settings) readOwnTargets() error {
	r, o := s.req, s.own
	lins, err := r.Model.Targets(r.LoRATargets)
	if err != nil {
		return fmt.Errorf("recipe: LoRA targets: %w", err)
	}
	var mlp []string
	for _, l := range lins {
		switch l.Name {
		case "q_proj":
			o.query = true
		case "k_proj":
			o.key = true
		case "v_proj":
			o.value = true
		case "o_proj":
			o.proj = true
		case "gate_proj", "up_proj", "down_proj":
			if !slices.Contains(mlp, l.Name) {
				mlp = append(mlp, l.Name)
			}
		default:
			return unsupported("LoRA target", l.Name, string(r.Stack)+" names q, k, v, the attention output and the MLP of Llama-style models", "--lora-targets attention, mlp or all-linear")
		}
		if !slices.Contains(s.targets, l.Name) {
			s.targets = append(s.targets, l.Name)
		}
	}
	switch len(mlp) {
	case 0:
	case 3:
		o.mlp = true
	default:
		return unsupported("LoRA targets", strings.Join(mlp, ","), string(r.Stack)+" puts adapters on all three MLP projections or none", "--lora-targets mlp or all-linear")
	}
	o.head = r.ExtraLoRAOnHead
	return nil
}

// readLitGPT: litgpt finetune lora|full (0.5): one GPU with no
// checkpointing, or FSDP full-shard over every GPU with each Block
// checkpointed; bitsandbytes quantization on one GPU, with -true precision.
func (s *settings) readLitGPT() error {
	r := s.req
	if s.world == 1 {
		if r.Sharding.Strategy != estimate.NoSharding && r.Sharding.Strategy != "" {
			return unsupported("sharding", string(r.Sharding.Strategy), "LitGPT runs one GPU unsharded", "no sharding")
		}
		if r.GradCkpt != estimate.CkptNone {
			return unsupported("gradient checkpointing", string(r.GradCkpt), "LitGPT's fine-tuning checkpoints only under FSDP, over several GPUs", "--grad-ckpt none")
		}
	} else {
		if r.Sharding.Strategy != estimate.FSDPFullShard || r.Sharding.CPUOffload != estimate.OffloadNone {
			return unsupported("sharding", string(r.Sharding.Strategy)+"+offload "+string(r.Sharding.CPUOffload), "LitGPT's fine-tuning shards with FSDP full-shard, no CPU offload, over several GPUs", "an fsdp_full_shard plan")
		}
		if r.GradCkpt != estimate.CkptFull {
			return unsupported("gradient checkpointing", string(r.GradCkpt), "LitGPT checkpoints every Block under FSDP", "--grad-ckpt full")
		}
	}
	if r.Method == estimate.QLoRA {
		if s.world > 1 {
			return unsupported("method", "qlora", "LitGPT quantizes on one GPU only", "one GPU")
		}
		if r.Precision.Spec().MasterWeights {
			return unsupported("precision", string(r.Precision), "LitGPT quantizes only with -true precision", "--precision bf16-true")
		}
		if r.Quant == estimate.Int8 || r.QuantStorage != estimate.DtypeUint8 {
			return unsupported("quantization", string(r.Quant)+"/"+string(r.QuantStorage), "LitGPT's bitsandbytes precision packs nf4/fp4 into uint8", "--quant nf4-dq")
		}
	}
	if r.Compile || r.OptimizerInBackward {
		return unsupported("compile/optimizer in backward", "true", "litgpt finetune has neither", "without them")
	}
	return nil
}

// readTorchtune: torchtune's lora/full finetune recipes (0.6), single
// device or FSDP2 over every GPU; pure bf16 or fp32.
func (s *settings) readTorchtune() error {
	r := s.req
	m, ok := ttModels[s.in.ModelID]
	if !ok {
		return unsupported("model", s.in.ModelID, "the recipe knows torchtune's builders for Llama-3.1-8B/70B and Qwen2.5-7B only", "one of those models or another stack")
	}
	s.own.tt = &m
	if r.Precision != estimate.BF16True && r.Precision != estimate.FP32 {
		return unsupported("precision", string(r.Precision), "torchtune trains pure bf16 or fp32 (no autocast, no fp16)", "--precision bf16-true")
	}
	switch {
	case s.world == 1 && (r.Sharding.Strategy == estimate.NoSharding || r.Sharding.Strategy == ""):
	case s.world > 1 && (r.Sharding.Strategy == estimate.FSDPFullShard || r.Sharding.Strategy == estimate.FSDPShardGradOp) &&
		(r.Sharding.CPUOffload == estimate.OffloadNone || r.Sharding.CPUOffload == estimate.OffloadParamsOptimizer):
	default:
		return unsupported("sharding", string(r.Sharding.Strategy)+"+offload "+string(r.Sharding.CPUOffload),
			"torchtune's distributed recipes run FSDP2 (full shard, or no reshard after forward) with optional parameter+optimizer offload", "an fsdp_full_shard or fsdp_shard_grad_op plan")
	}
	switch r.GradCkpt {
	case estimate.CkptNone, estimate.CkptFull, estimate.CkptOffload:
	case estimate.CkptSelectiveOp:
		return unsupported("gradient checkpointing", string(r.GradCkpt), "torchtune checkpoints whole blocks (or every k-th block); the per-op policy is torchtitan's", "--grad-ckpt full or offload")
	default:
		return unsupported("gradient checkpointing", string(r.GradCkpt), "torchtune has checkpointing and activation offloading, not Unsloth's", "--grad-ckpt full or offload")
	}
	if r.Method == estimate.QLoRA && (r.Quant != estimate.NF4DQ || r.QuantStorage != estimate.DtypeUint8) {
		return unsupported("quantization", string(r.Quant)+"/"+string(r.QuantStorage), "torchtune's QLoRA is torchao's NF4 (block 64, scales quantized again) packed in uint8", "--quant nf4-dq")
	}
	if s.world > 1 && strings.HasPrefix(s.own.optimizer, "bitsandbytes.") {
		return unsupported("optimizer", string(r.Optimizer), "torchtune supports bitsandbytes' optimizers in its single-device recipes only", "--optimizer adamw_torch")
	}
	if r.OptimizerInBackward && (r.Method != estimate.Full || s.accum > 1) {
		return unsupported("optimizer in backward", "true", "torchtune steps in the backward only in full fine-tuning with no accumulation", "without it")
	}
	if r.FusedCE != estimate.LossNone && r.FusedCE != estimate.LossChunked {
		return unsupported("loss kernel", string(r.FusedCE), "torchtune's losses are cross-entropy, whole or over chunked outputs", "--fused-ce none or chunked")
	}
	return nil
}

// yamlList writes a flow list of plain words.
func yamlList(words []string) string { return "[" + strings.Join(words, ", ") + "]" }

// checkpointDir is where `litgpt download` / `tune download` put the model.
func (s *settings) checkpointDir() string { return "checkpoints/" + s.in.ModelID }

// ownFiles writes the framework config, launch.sh and README.txt.
func (s *settings) ownFiles() map[string][]byte {
	out := map[string][]byte{}
	if s.req.Stack == estimate.StackLitGPT {
		out[FileLitGPT] = []byte(s.litgptYAML())
	} else {
		out[FileTorchtune] = []byte(s.torchtuneYAML())
	}
	out[FileLaunch] = []byte(s.ownLaunch())
	out[FileReadme] = []byte(s.ownReadme(out))
	return out
}

// litgptPrecision is Fabric's name for a precision.
func litgptPrecision(p estimate.Precision) string {
	return map[estimate.Precision]string{estimate.BF16True: "bf16-true", estimate.BF16Mixed: "bf16-mixed",
		estimate.FP16True: "16-true", estimate.FP16Mixed: "16-mixed", estimate.FP32: "32-true"}[p]
}

func (s *settings) litgptQuantize() string {
	q := s.req.Quant
	name := "bnb." + strings.TrimSuffix(string(q), "-dq")
	if q.Spec().DoubleQuant {
		name += "-dq"
	}
	return name
}

func (s *settings) litgptYAML() string {
	r, o := s.req, s.own
	var b strings.Builder
	kind := "lora"
	if r.Method == estimate.Full {
		kind = "full"
	}
	fmt.Fprintf(&b, "# LitGPT config for the plan: litgpt finetune %s --config %s\n", kind, FileLitGPT)
	b.WriteString("# Written by canifinetune plan --emit; the memory-relevant settings are the estimate's.\n")
	fmt.Fprintf(&b, "checkpoint_dir: %s\n", s.checkpointDir())
	fmt.Fprintf(&b, "out_dir: out/finetune/%s\n", kind)
	fmt.Fprintf(&b, "precision: %s\n", litgptPrecision(r.Precision))
	if r.Method == estimate.QLoRA {
		fmt.Fprintf(&b, "quantize: %s\n", s.litgptQuantize())
	}
	fmt.Fprintf(&b, "devices: %d\n", s.perNode)
	fmt.Fprintf(&b, "num_nodes: %d\n", s.nodes)
	if r.Method != estimate.Full {
		fmt.Fprintf(&b, "lora_r: %d\nlora_alpha: %d\nlora_dropout: %v\n", r.LoRARank, s.alpha, s.dropout)
		fmt.Fprintf(&b, "lora_query: %v\nlora_key: %v\nlora_value: %v\nlora_projection: %v\nlora_mlp: %v\nlora_head: %v\n",
			o.query, o.key, o.value, o.proj, o.mlp, o.head)
	}
	b.WriteString("data:\n  class_path: litgpt.data.JSON\n  init_args:\n    json_path: data.json\n    val_split_fraction: 0.05\n")
	epochs := s.in.Epochs
	if epochs == 0 {
		epochs = 1
	}
	b.WriteString("train:\n  save_interval: 1000\n  log_interval: 10\n")
	fmt.Fprintf(&b, "  global_batch_size: %d\n  micro_batch_size: %d\n", s.micro*s.accum*s.world, s.micro)
	fmt.Fprintf(&b, "  lr_warmup_steps: 100\n  epochs: %d\n  max_seq_length: %d\n", int(max(1, epochs)), r.SeqLen)
	fmt.Fprintf(&b, "  max_norm: %v\n", defaultMaxGradNrm)
	b.WriteString("optimizer:\n")
	fmt.Fprintf(&b, "  class_path: %s\n  init_args:\n    lr: %v\n", o.optimizer, defaultLR)
	if o.fused {
		b.WriteString("    fused: true\n")
	}
	b.WriteString("seed: 42\n")
	return b.String()
}

// ttRecipe is the torchtune recipe the plan runs.
func (s *settings) ttRecipe() string {
	kind := "lora"
	if s.req.Method == estimate.Full {
		kind = "full"
	}
	if s.world > 1 {
		return kind + "_finetune_distributed"
	}
	return kind + "_finetune_single_device"
}

func (s *settings) torchtuneYAML() string {
	r, o, m := s.req, s.own, s.own.tt
	var b strings.Builder
	fmt.Fprintf(&b, "# torchtune config for the plan: tune run %s --config %s\n", s.ttRecipe(), FileTorchtune)
	b.WriteString("# Written by canifinetune plan --emit; the memory-relevant settings are the estimate's.\n")
	dir := s.checkpointDir()
	b.WriteString("output_dir: output\n")
	fmt.Fprintf(&b, "tokenizer:\n  _component_: torchtune.models.%s.%s_tokenizer\n", map[string]string{"llama3": "llama3", "qwen2_5": "qwen2_5"}[m.tokenizer], m.tokenizer)
	if m.tokenizer == "llama3" {
		fmt.Fprintf(&b, "  path: %s/original/tokenizer.model\n", dir)
	} else {
		fmt.Fprintf(&b, "  path: %s/vocab.json\n  merges_file: %s/merges.txt\n", dir, dir)
	}
	fmt.Fprintf(&b, "  max_seq_len: %d\n", r.SeqLen)
	builder := m.pkg + "_" + m.size
	b.WriteString("model:\n")
	if r.Method == estimate.Full {
		fmt.Fprintf(&b, "  _component_: torchtune.models.%s.%s\n", m.pkg, builder)
	} else {
		fmt.Fprintf(&b, "  _component_: torchtune.models.%s.lora_%s\n", m.pkg, builder)
		var attn []string
		for _, p := range []struct {
			on   bool
			name string
		}{{o.query, "q_proj"}, {o.key, "k_proj"}, {o.value, "v_proj"}, {o.proj, "output_proj"}} {
			if p.on {
				attn = append(attn, p.name)
			}
		}
		fmt.Fprintf(&b, "  lora_attn_modules: %s\n  apply_lora_to_mlp: %v\n  apply_lora_to_output: %v\n", yamlList(attn), o.mlp, o.head)
		fmt.Fprintf(&b, "  lora_rank: %d\n  lora_alpha: %d\n  lora_dropout: %v\n", r.LoRARank, s.alpha, s.dropout)
		fmt.Fprintf(&b, "  quantize_base: %v\n", r.Method == estimate.QLoRA)
	}
	b.WriteString("checkpointer:\n  _component_: torchtune.training.FullModelHFCheckpointer\n")
	fmt.Fprintf(&b, "  checkpoint_dir: %s\n", dir)
	fmt.Fprintf(&b, "  checkpoint_files:\n    filename_format: model-{}-of-{}.safetensors\n    max_filename: \"%05d\"\n", m.files)
	fmt.Fprintf(&b, "  recipe_checkpoint: null\n  output_dir: ${output_dir}\n  model_type: %s\n", m.modelType)
	b.WriteString("resume_from_checkpoint: false\n")
	if r.Method != estimate.Full {
		b.WriteString("save_adapter_weights_only: true\n")
	}
	b.WriteString("dataset:\n  _component_: torchtune.datasets.text_completion_dataset\n  source: json\n  data_files: data.jsonl\n  column: text\n  split: train\n")
	// Packed: every batch is max_seq_len tokens (the estimate's fixed
	// shapes); unpacked, batches are padded to their longest sample.
	fmt.Fprintf(&b, "  packed: %v\n", !r.DynamicShapes)
	b.WriteString("seed: 42\nshuffle: true\n")
	fmt.Fprintf(&b, "batch_size: %d\n", s.micro)
	epochs := s.in.Epochs
	if epochs == 0 {
		epochs = 1
	}
	fmt.Fprintf(&b, "epochs: %d\nmax_steps_per_epoch: null\n", int(max(1, epochs)))
	fmt.Fprintf(&b, "gradient_accumulation_steps: %d\n", s.accum)
	if r.Method == estimate.Full {
		fmt.Fprintf(&b, "optimizer_in_bwd: %v\n", r.OptimizerInBackward)
		if r.OptimizerInBackward {
			b.WriteString("clip_grad_norm: null\n")
		} else {
			fmt.Fprintf(&b, "clip_grad_norm: %v\n", defaultMaxGradNrm)
		}
	} else {
		fmt.Fprintf(&b, "clip_grad_norm: %v\n", defaultMaxGradNrm)
	}
	fmt.Fprintf(&b, "optimizer:\n  _component_: %s\n  lr: %v\n", o.optimizer, defaultLR)
	if o.optimizer == "torch.optim.AdamW" {
		fmt.Fprintf(&b, "  fused: %v\n", o.fused)
	}
	b.WriteString("lr_scheduler:\n  _component_: torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup\n  num_warmup_steps: 100\n")
	if r.FusedCE == estimate.LossChunked {
		b.WriteString("loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n")
	} else {
		b.WriteString("loss:\n  _component_: torch.nn.CrossEntropyLoss\n")
	}
	fmt.Fprintf(&b, "compile: %v\n", r.Compile)
	b.WriteString("device: cuda\n")
	fmt.Fprintf(&b, "dtype: %s\n", map[bool]string{true: "bf16", false: "fp32"}[r.Precision == estimate.BF16True])
	fmt.Fprintf(&b, "enable_activation_checkpointing: %v\n", r.GradCkpt != estimate.CkptNone)
	fmt.Fprintf(&b, "enable_activation_offloading: %v\n", r.GradCkpt == estimate.CkptOffload)
	if s.world > 1 {
		fmt.Fprintf(&b, "fsdp_cpu_offload: %v\n", r.Sharding.CPUOffload == estimate.OffloadParamsOptimizer)
		fmt.Fprintf(&b, "fsdp_reshard_after_forward: %v\n", r.Sharding.Strategy == estimate.FSDPFullShard)
	}
	b.WriteString("metric_logger:\n  _component_: torchtune.training.metric_logging.DiskLogger\n  log_dir: ${output_dir}/logs\n")
	b.WriteString("log_every_n_steps: 10\nlog_peak_memory_stats: true\n")
	b.WriteString("profiler:\n  _component_: torchtune.training.setup_torch_profiler\n  enabled: false\n")
	return b.String()
}

func (s *settings) ownLaunch() string {
	var b strings.Builder
	b.WriteString("#!/usr/bin/env bash\n")
	fmt.Fprintf(&b, "# Launches the plan on %d GPU(s) per node × %d node(s) = %d GPU(s).\n", s.perNode, s.nodes, s.world)
	if s.nodes > 1 {
		b.WriteString("# Run it on every node with NODE_RANK (0.." + fmt.Sprint(s.nodes-1) + ") and MASTER_ADDR (node 0's address) set;\n")
		b.WriteString("# MASTER_PORT defaults to 29500.\n")
	}
	b.WriteString("set -euo pipefail\n")
	b.WriteString("here=\"$(cd \"$(dirname \"$0\")\" && pwd)\"\n")
	if s.req.Stack == estimate.StackLitGPT {
		kind := "lora"
		if s.req.Method == estimate.Full {
			kind = "full"
		}
		b.WriteString("# Usage: ./launch.sh DATASET [litgpt args...]\n#   DATASET: a JSON file of {instruction, input, output} records (litgpt.data.JSON)\n")
		b.WriteString("dataset=${1:?usage: ./launch.sh DATASET}\nshift\n")
		fmt.Fprintf(&b, "[ -d %q ] || litgpt download %q\n", s.checkpointDir(), s.in.ModelID)
		if s.nodes > 1 {
			// Fabric reads the rendezvous from the environment on each node.
			b.WriteString("export NODE_RANK=\"${NODE_RANK:?set NODE_RANK}\" MASTER_ADDR=\"${MASTER_ADDR:?set MASTER_ADDR}\" MASTER_PORT=\"${MASTER_PORT:-29500}\"\n")
		}
		fmt.Fprintf(&b, "exec litgpt finetune %s --config \"$here/%s\" --data.json_path \"$dataset\" \"$@\"\n", kind, FileLitGPT)
		return b.String()
	}
	b.WriteString("# Usage: ./launch.sh DATASET [key=value overrides...]\n#   DATASET: a JSON Lines file with a \"text\" field\n")
	b.WriteString("dataset=${1:?usage: ./launch.sh DATASET}\nshift\n")
	fmt.Fprintf(&b, "[ -d %q ] || tune download %q --output-dir %q\n", s.checkpointDir(), s.in.ModelID, s.checkpointDir())
	run := "tune run"
	switch {
	case s.nodes > 1:
		run += fmt.Sprintf(" --nnodes=%d --nproc_per_node=%d --node_rank=\"${NODE_RANK:?set NODE_RANK}\" --master_addr=\"${MASTER_ADDR:?set MASTER_ADDR}\" --master_port=\"${MASTER_PORT:-29500}\"", s.nodes, s.perNode)
	case s.world > 1:
		run += fmt.Sprintf(" --nproc_per_node=%d", s.perNode)
	}
	fmt.Fprintf(&b, "exec %s %s --config \"$here/%s\" dataset.data_files=\"$dataset\" \"$@\"\n", run, s.ttRecipe(), FileTorchtune)
	return b.String()
}

func (s *settings) ownReadme(files map[string][]byte) string {
	r, p := s.req, s.in.Plan
	var b strings.Builder
	cfg := FileTorchtune
	if r.Stack == estimate.StackLitGPT {
		cfg = FileLitGPT
	}
	fmt.Fprintf(&b, "%s recipe for %s, written by canifinetune plan --emit.\n\n", r.Stack, s.in.ModelID)
	b.WriteString("What the memory estimate assumed, and where each setting is in these files:\n\n")
	row := func(what, value, where string) { fmt.Fprintf(&b, "  %-24s %-28s %s\n", what, value, where) }
	lit := r.Stack == estimate.StackLitGPT
	key := func(litgpt, torchtune string) string {
		if lit {
			return cfg + " " + litgpt
		}
		return cfg + " " + torchtune
	}
	row("method", string(r.Method), key("litgpt finetune lora|full", "the recipe "+s.ttRecipe()))
	if r.Method == estimate.QLoRA {
		row("quantization", string(r.Quant), key("quantize", "model quantize_base"))
	}
	if r.Method != estimate.Full {
		row("LoRA rank", fmt.Sprint(r.LoRARank), key("lora_r", "model lora_rank"))
		row("LoRA targets", strings.Join(s.targets, ","), key("lora_query/key/value/projection/mlp", "model lora_attn_modules, apply_lora_to_mlp"))
		row("LoRA dropout", fmt.Sprint(s.dropout), key("lora_dropout", "model lora_dropout"))
	}
	row("precision", string(r.Precision), key("precision", "dtype"))
	row("sequence length", fmt.Sprint(r.SeqLen), key("train.max_seq_length", "tokenizer max_seq_len, dataset packed"))
	row("micro-batch per GPU", fmt.Sprint(s.micro), key("train.micro_batch_size", "batch_size"))
	row("gradient accumulation", fmt.Sprint(s.accum), key("train.global_batch_size / (micro-batch × GPUs)", "gradient_accumulation_steps"))
	gpus := FileLaunch + " (tune run --nnodes, --nproc_per_node)"
	if lit {
		gpus = cfg + " devices, num_nodes"
	}
	row("GPUs", fmt.Sprintf("%d × %d node(s) = %d", s.perNode, s.nodes, s.world), gpus)
	row("checkpointing", string(r.GradCkpt), key("(LitGPT checkpoints under FSDP only)", "enable_activation_checkpointing, enable_activation_offloading"))
	row("optimizer", string(r.Optimizer), key("optimizer.class_path", "optimizer _component_"))
	strategy := string(r.Sharding.Strategy)
	if strategy == "" {
		strategy = "none"
	}
	row("sharding", strategy, key("(FSDP over several GPUs)", "fsdp_reshard_after_forward, fsdp_cpu_offload"))
	row("CPU offload", string(r.Sharding.CPUOffload), key("(none)", "fsdp_cpu_offload"))
	if e := p.Estimate; e != nil {
		fmt.Fprintf(&b, "\nThe estimate: %.2f GiB per GPU, verdict %s (ratio %.2f of the budget).\n", float64(e.Total)/estimate.GiB, e.Verdict.Fit, e.Verdict.Ratio)
	}
	b.WriteString("\nThe learning rate, LoRA alpha (2 × rank), the seed, logging and saving hold no\nmemory and are ordinary defaults to tune.\n")
	b.WriteString("\nFiles:\n")
	for _, n := range Names(files) {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	return b.String()
}
