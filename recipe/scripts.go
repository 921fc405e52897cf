package recipe

import (
	"fmt"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// scriptHead is shared by both training scripts: reading the JSON files
// beside the script and loading the model as model.json says. A test
// imports the script and calls these functions without training.
const scriptHead = `import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load_json(name):
    """One of the JSON files written beside this script."""
    with open(os.path.join(HERE, name)) as f:
        return json.load(f)


def with_paths(cfg):
    """Makes the DeepSpeed file path absolute, so any working directory works."""
    cfg = dict(cfg)
    if cfg.get("deepspeed"):
        cfg["deepspeed"] = os.path.join(HERE, cfg["deepspeed"])
    return cfg


def model_kwargs(spec):
    """from_pretrained's keyword arguments: dtype, attention, quantization."""
    import torch

    kwargs = {"dtype": getattr(torch, spec["dtype"]), "attn_implementation": spec["attn_implementation"]}
    quant = spec.get("quantization")
    if quant:
        from transformers import BitsAndBytesConfig

        quant = dict(quant)
        for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
            if key in quant:
                quant[key] = getattr(torch, quant[key])
        kwargs["quantization_config"] = BitsAndBytesConfig(**quant)
    return kwargs


def lora_config():
    from peft import LoraConfig

    return LoraConfig(**load_json("lora_config.json"))


def wrap_model(model, spec, args):
    """Adds the LoRA adapters (and, for QLoRA, PEFT's k-bit preparation)."""
    if spec["method"] == "full":
        return model
    from peft import get_peft_model, prepare_model_for_kbit_training

    if spec["prepare_model_for_kbit_training"]:
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=args.activation_checkpointing,
            gradient_checkpointing_kwargs=args.activation_checkpointing_kwargs,
        )
    return get_peft_model(model, lora_config(), autocast_adapter_dtype=spec["autocast_adapter_dtype"])


def load_model(spec, args):
    """Loads the model after the training arguments exist (ZeRO-3 shards it while loading)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(spec["model_id"], **model_kwargs(spec))
    model.config.use_cache = False
    return wrap_model(model, spec, args)


def parse_cli():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", required=True, help="a JSON Lines file with a \"text\" field, or a Hub dataset id")
    p.add_argument("--output-dir", help="where checkpoints and logs go (default: the config's output_dir)")
    return p.parse_args()


def load_dataset_any(name):
    from datasets import load_dataset

    if os.path.exists(name):
        return load_dataset("json", data_files=name, split="train")
    return load_dataset(name, split="train")
`

// script is train_trl.py or train_hf.py.
func (s *settings) script(kind string) string {
	var b strings.Builder
	b.WriteString("#!/usr/bin/env python3\n")
	switch kind {
	case "trl":
		fmt.Fprintf(&b, "\"\"\"TRL SFT fine-tune of %s, as canifinetune planned it.\n\n", pyDoc(s.in.ModelID))
		fmt.Fprintf(&b, "Reads %s (trl.SFTConfig), %s and, for LoRA/QLoRA, %s.\n", FileSFTConfig, FileModel, FileLoRA)
	default:
		fmt.Fprintf(&b, "\"\"\"HF Trainer + PEFT fine-tune of %s, as canifinetune planned it.\n\n", pyDoc(s.in.ModelID))
		fmt.Fprintf(&b, "Reads %s (transformers.TrainingArguments), %s and, for LoRA/QLoRA, %s.\n", FileTrainingArgs, FileModel, FileLoRA)
	}
	b.WriteString("Launch with launch.sh; what the memory estimate assumed is in README.txt.\n\"\"\"\n")
	b.WriteString(scriptHead)
	switch kind {
	case "trl":
		b.WriteString(`

def training_args(extra=None):
    """The trl.SFTConfig of the plan (extra: fields to override, e.g. in tests)."""
    from trl import SFTConfig

    cfg = with_paths(load_json("sft_config.json"))
    cfg.update(extra or {})
    return SFTConfig(**cfg)


def main():
    cli = parse_cli()
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    extra = {"output_dir": cli.output_dir} if cli.output_dir else {}
    args = training_args(extra)
    spec = load_json("model.json")
    tokenizer = AutoTokenizer.from_pretrained(spec["model_id"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_model(spec, args)
    trainer = SFTTrainer(model=model, args=args, train_dataset=load_dataset_any(cli.dataset), processing_class=tokenizer)
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
`)
	default:
		b.WriteString(`

def training_args(extra=None):
    """The transformers.TrainingArguments of the plan (extra: fields to override, e.g. in tests)."""
    from transformers import TrainingArguments

    cfg = with_paths(load_json("training_args.json"))
    cfg.update(extra or {})
    return TrainingArguments(**cfg)


def tokenized(dataset, tokenizer, seq_len, packed):
    """Fixed blocks of seq_len tokens when packed (the estimate's shapes), else truncated samples."""
    cols = dataset.column_names
    if not packed:
        return dataset.map(lambda b: tokenizer(b["text"], truncation=True, max_length=seq_len), batched=True, remove_columns=cols)

    def blocks(batch):
        ids = [t for row in tokenizer(batch["text"])["input_ids"] for t in row + [tokenizer.eos_token_id]]
        n = len(ids) // seq_len * seq_len
        chunks = [ids[i : i + seq_len] for i in range(0, n, seq_len)]
        return {"input_ids": chunks, "attention_mask": [[1] * seq_len for _ in chunks]}

    return dataset.map(blocks, batched=True, remove_columns=cols)


def main():
    cli = parse_cli()
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, Trainer

    extra = {"output_dir": cli.output_dir} if cli.output_dir else {}
    args = training_args(extra)
    spec = load_json("model.json")
    tokenizer = AutoTokenizer.from_pretrained(spec["model_id"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_model(spec, args)
    data = tokenized(load_dataset_any(cli.dataset), tokenizer, spec["seq_len"], spec["packed"])
    collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
`)
	}
	return b.String()
}

// pyDoc keeps a model id from ending a Python docstring.
func pyDoc(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"""`, `\"\"\"`)
}

// launch is launch.sh: torchrun or accelerate launch, TRL or the HF script.
func (s *settings) launch() string {
	var b strings.Builder
	b.WriteString("#!/usr/bin/env bash\n")
	fmt.Fprintf(&b, "# Launches the plan on %d GPU(s) per node × %d node(s) = %d GPU(s).\n", s.perNode, s.nodes, s.world)
	b.WriteString("# Usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET [script args...]\n")
	b.WriteString("#   trl: train_trl.py (TRL SFTTrainer); hf: train_hf.py (Trainer + PEFT)\n")
	b.WriteString("#   DATASET: a JSON Lines file with a \"text\" field, or a Hub dataset id\n")
	if s.nodes > 1 {
		b.WriteString("# Run it on every node with NODE_RANK (0.." + fmt.Sprint(s.nodes-1) + ") and MASTER_ADDR (node 0's address) set;\n")
		b.WriteString("# MASTER_PORT defaults to 29500.\n")
	}
	b.WriteString("set -euo pipefail\n")
	b.WriteString("here=\"$(cd \"$(dirname \"$0\")\" && pwd)\"\n")
	b.WriteString("stack=${1:?usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET}\n")
	b.WriteString("launcher=${2:?usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET}\n")
	b.WriteString("dataset=${3:?usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET}\n")
	b.WriteString("shift 3\n")
	b.WriteString("case \"$stack\" in\ntrl) script=\"$here/" + FileTRL + "\" ;;\nhf) script=\"$here/" + FileHF + "\" ;;\n*) echo \"launch.sh: stack must be trl or hf, got $stack\" >&2; exit 2 ;;\nesac\n")
	torchrun := fmt.Sprintf("torchrun --standalone --nnodes=1 --nproc_per_node=%d", s.perNode)
	acc := fmt.Sprintf("accelerate launch --config_file \"$here/%s\"", FileAccelerate)
	if s.nodes > 1 {
		torchrun = fmt.Sprintf("torchrun --nnodes=%d --nproc_per_node=%d --node_rank=\"${NODE_RANK:?set NODE_RANK}\" --master_addr=\"${MASTER_ADDR:?set MASTER_ADDR}\" --master_port=\"${MASTER_PORT:-29500}\"", s.nodes, s.perNode)
		acc += " --machine_rank \"${NODE_RANK:?set NODE_RANK}\" --main_process_ip \"${MASTER_ADDR:?set MASTER_ADDR}\" --main_process_port \"${MASTER_PORT:-29500}\""
	}
	if s.family == estimate.FamilyDeepSpeed {
		b.WriteString("# Under ZeRO the scripts hand " + FileDeepSpeed + " to the Trainer (TrainingArguments.deepspeed).\n")
	}
	b.WriteString("case \"$launcher\" in\n")
	fmt.Fprintf(&b, "torchrun) exec %s \"$script\" --dataset \"$dataset\" \"$@\" ;;\n", torchrun)
	fmt.Fprintf(&b, "accelerate) exec %s \"$script\" --dataset \"$dataset\" \"$@\" ;;\n", acc)
	b.WriteString("*) echo \"launch.sh: launcher must be torchrun or accelerate, got $launcher\" >&2; exit 2 ;;\nesac\n")
	return b.String()
}

// readme is README.txt: what the estimate assumed, and where each setting
// went.
func (s *settings) readme(files map[string][]byte) string {
	r := s.req
	p := s.in.Plan
	var b strings.Builder
	fmt.Fprintf(&b, "Fine-tuning recipe for %s, written by canifinetune plan --emit.\n\n", s.in.ModelID)
	b.WriteString("What the memory estimate assumed, and where each setting is in these files:\n\n")
	row := func(what, value, where string) { fmt.Fprintf(&b, "  %-24s %-28s %s\n", what, value, where) }
	row("method", string(r.Method), FileModel+" method")
	// DeepSpeed's engine casts a 16-bit or mixed-precision module to 16
	// bits, undoing the fp32 upcasts the files ask for.
	dsCast := s.family == estimate.FamilyDeepSpeed && r.Precision != estimate.FP32
	if r.Method == estimate.QLoRA {
		row("quantization", string(r.Quant), FileModel+" quantization (BitsAndBytesConfig)")
		row("quant storage", string(r.QuantStorage), FileModel+" bnb_4bit_quant_storage")
		norms := map[bool]string{true: "fp32 (upcast)", false: "16-bit"}[s.kbitPrepare]
		if dsCast {
			norms = "16-bit (DeepSpeed's cast)" // the engine casts the module after the upcast
		}
		row("frozen norms/embeddings", norms, FileModel+" prepare_model_for_kbit_training")
	}
	if r.Method != estimate.Full {
		row("LoRA rank", fmt.Sprint(r.LoRARank), FileLoRA+" r")
		row("LoRA targets", strings.Join(s.targets, ","), FileLoRA+" target_modules")
		row("LoRA dropout", fmt.Sprint(s.dropout), FileLoRA+" lora_dropout")
		adapters := map[bool]string{true: "fp32", false: "16-bit"}[s.fp32Adapters]
		if dsCast {
			adapters = "16-bit (DeepSpeed's cast)"
		}
		row("adapter dtype", adapters, FileModel+" autocast_adapter_dtype")
	}
	row("precision", string(r.Precision), fmt.Sprintf("weights load as %s; bf16=%v fp16=%v", s.loadDtype, s.bf16, s.fp16))
	row("sequence length", fmt.Sprint(r.SeqLen), map[bool]string{true: "max_length; packed blocks of exactly this length", false: "max_length; samples truncated, padded to the batch"}[!r.DynamicShapes])
	row("micro-batch per GPU", fmt.Sprint(s.micro), "per_device_train_batch_size")
	row("gradient accumulation", fmt.Sprint(s.accum), "gradient_accumulation_steps")
	row("GPUs", fmt.Sprintf("%d × %d node(s) = %d", s.perNode, s.nodes, s.world), FileLaunch+", "+FileAccelerate)
	row("effective batch", fmt.Sprint(s.micro*s.accum*s.world), "micro-batch × accumulation × GPUs")
	row("checkpointing", string(r.GradCkpt), map[bool]string{true: "fsdp_config activation_checkpointing (FSDP's own, per layer)", false: "activation_checkpointing (non-reentrant)"}[s.family == estimate.FamilyFSDP])
	row("attention", string(r.Attn), FileModel+" attn_implementation")
	row("loss kernel", string(r.FusedCE), "use_liger_kernel, liger_kernel_config fused_linear_cross_entropy")
	if len(r.Kernels) > 0 {
		names := make([]string, len(r.Kernels))
		for i, k := range r.Kernels {
			names[i] = string(k)
		}
		row("kernels", strings.Join(names, ","), "liger_kernel_config")
	}
	row("optimizer", string(r.Optimizer), "optim")
	row("torch.compile", fmt.Sprint(r.Compile), "torch_compile")
	strategy := string(r.Sharding.Strategy)
	switch s.family {
	case estimate.FamilyFSDP:
		strategy += fmt.Sprintf(" (FSDP%d %s)", s.fsdpVersion(), s.fsdpStrategy())
	case estimate.FamilyDeepSpeed:
		strategy += fmt.Sprintf(" (ZeRO stage %d)", r.Sharding.Strategy.Spec().Shards)
	}
	row("sharding", strategy, FileAccelerate+map[bool]string{true: ", " + FileDeepSpeed, false: ", fsdp_config in the training arguments"}[s.family == estimate.FamilyDeepSpeed])
	row("CPU offload", string(r.Sharding.CPUOffload), map[string]string{estimate.FamilyFSDP: "fsdp_offload_params, fsdp_config cpu_offload", estimate.FamilyDeepSpeed: "offload_optimizer / offload_param"}[s.family])
	if e := p.Estimate; e != nil {
		fmt.Fprintf(&b, "\nThe estimate: %.2f GiB per GPU, verdict %s (ratio %.2f of the budget).\n", float64(e.Total)/estimate.GiB, e.Verdict.Fit, e.Verdict.Ratio)
		if e.HostOffload > 0 {
			fmt.Fprintf(&b, "Host RAM for the offloaded state: %.2f GiB per GPU.\n", float64(e.HostOffload)/estimate.GiB)
		}
		if e.PagedOptimizer > 0 {
			fmt.Fprintf(&b, "Beside it, %.2f GiB per GPU of optimizer states in paged (unified) memory,\nwhich the driver moves to host RAM when the card is full.\n", float64(e.PagedOptimizer)/estimate.GiB)
		}
	}
	if p.Time.Known {
		fmt.Fprintf(&b, "The time model: %.1f h in all, %.0f tokens/s (a model, not a measurement).\n", p.Time.Total/3600, p.Time.TokensPerSec)
	}
	b.WriteString(`
Settings that hold no memory are ordinary defaults, to tune freely: the learning
rate, LoRA alpha (2 × rank), the seed, logging and saving. Changing anything in
the table above changes the memory the run needs: plan again first.

The estimate assumes sequences of exactly the sequence length (packed), the
flash/SDPA kernels named, and no other process on the GPUs.
`)
	b.WriteString("\nFiles:\n  " + FileReadme + " (this file)\n")
	for _, n := range Names(files) {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	return b.String()
}
