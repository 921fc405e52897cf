#!/usr/bin/env python3
"""HF Trainer + PEFT fine-tune of meta-llama/Llama-3.1-70B, as canifinetune planned it.

Reads training_args.json (transformers.TrainingArguments), model.json and, for LoRA/QLoRA, lora_config.json.
Launch with launch.sh; what the memory estimate assumed is in README.txt.
"""
import argparse
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
