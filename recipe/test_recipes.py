"""Loads the recipes `canifinetune plan --emit` writes with the real libraries.

For each plan below the test runs `canifinetune plan ... --json` (the plan's
settings as the estimate assumed them), then `--emit DIR --emit-plan N`, and
loads every emitted file with the library that will run it, on CPU, injecting
what a GPU run would supply (use_cpu, the world size): trl.SFTConfig and
transformers.TrainingArguments through the scripts' own functions,
peft.LoraConfig applied to a tiny model of the same family, accelerate's
config loader, transformers' DeepSpeed config check and DeepSpeed's own
DeepSpeedConfig. Each memory-relevant setting is compared back to the plan's
JSON.

The Go binary comes from CANIFINETUNE_BIN, else `go build` into a temporary
directory. Run in the pinned environment (scripts/python-env.sh):

    CANIFINETUNE_BIN=/tmp/canifinetune $(scripts/python-env.sh)/bin/python \
        -m unittest discover -s recipe -p 'test_recipes.py' -v
"""

import importlib.util
import json
import os
import py_compile
import shutil
import sys
import tempfile
import unittest
from unittest import mock

from emitted import SCOPES, emit  # recipe/ is on sys.path under `unittest discover -s recipe`

# name: (plan arguments, a predicate choosing the plan to emit from --json)
PLANS = {
    "lora-1gpu": (
        ["Qwen/Qwen2.5-7B", "--gpu", "rtx-4090", "--dataset-tokens", "1e8"],
        lambda p: p["method"] == "lora",
    ),
    "qlora-1gpu": (
        ["Qwen/Qwen2.5-7B", "--gpu", "rtx-4080", "--method", "qlora", "--dataset-tokens", "1e8"],
        lambda p: p["method"] == "qlora",
    ),
    "fsdp-full-4gpu": (
        ["meta-llama/Llama-3.1-8B", "--method", "full", "--precision", "bf16-mixed", "--gpus", "4xA100-80GB", "--dataset-tokens", "1e8"],
        lambda p: p["sharding"] == "fsdp_full_shard" and p["world_size"] == 4 and p["method"] == "full",
    ),
    "zero3-offload-2x8": (
        ["meta-llama/Llama-3.1-70B", "--method", "full", "--precision", "bf16-mixed", "--nodes", "2", "--gpus", "8xH100", "--dataset-tokens", "1e9"],
        lambda p: p["sharding"] == "zero3" and p["nodes"] == 2 and p["cpu_offload"] != "none"
        and p["optimizer"].startswith("adamw_torch") and p["method"] == "full",
    ),
}



def load_script(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeMPU:
    """Gives DeepSpeedConfig the data-parallel world size a launch would."""

    def __init__(self, world):
        self.world = world

    def get_data_parallel_world_size(self):
        return self.world


class RecipeLoadBack(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="recipes-")
        cls.recipes = emit(PLANS, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def read(self, d, name):
        with open(os.path.join(d, name)) as f:
            return json.load(f)

    def check_training_args(self, plan, args, world):
        """The TrainingArguments fields every stack shares, against the plan."""
        precision = plan["precision"]
        self.assertEqual(args.per_device_train_batch_size, plan["micro_batch"])
        self.assertEqual(args.gradient_accumulation_steps, plan["grad_accum"])
        sharding = plan["sharding"]
        fsdp_ckpt = bool(args.fsdp and args.fsdp_config.get("activation_checkpointing"))
        # Checkpointed once: by FSDP per wrapped layer under FSDP, by the model elsewhere.
        self.assertEqual(args.activation_checkpointing or fsdp_ckpt, plan["grad_ckpt"] == "full")
        self.assertFalse(args.activation_checkpointing and fsdp_ckpt)
        if args.activation_checkpointing:
            self.assertEqual(args.activation_checkpointing_kwargs, {"use_reentrant": False})
        self.assertEqual(str(getattr(args.optim, "value", args.optim)), plan["optimizer"])
        self.assertEqual(args.bf16, precision.startswith("bf16"))
        self.assertEqual(args.fp16, precision == "fp16-mixed")
        self.assertEqual(args.use_liger_kernel, plan["fused_ce"] == "liger" or bool(plan.get("kernels")))
        if args.use_liger_kernel:
            # Only the kernels the estimate assumed: Liger's loss, and no other.
            cfg = args.liger_kernel_config
            self.assertEqual(cfg["fused_linear_cross_entropy"], plan["fused_ce"] == "liger")
            self.assertFalse(cfg["cross_entropy"])
            for key in ("rms_norm", "swiglu", "geglu", "rope"):
                self.assertFalse(cfg[key], key)
        self.assertEqual(plan["micro_batch"] * plan["grad_accum"] * world, plan["micro_batch"] * plan["grad_accum"] * plan["world_size"])
        if sharding.startswith("fsdp"):
            self.assertIs(args.fsdp, True)
            # The FSDP plugin's arguments as transformers derives them from
            # the training arguments, then accelerate's own plugin.
            plugin_args = args.fsdp_plugin_args
            strategy = sharding[len("fsdp_"):]
            if strategy in ("full_shard", "shard_grad_op"):
                self.assertEqual(plugin_args["fsdp_version"], 2)
                self.assertIs(plugin_args["reshard_after_forward"], strategy == "full_shard")
            else:
                self.assertEqual(plugin_args["fsdp_version"], 1)
                self.assertEqual(plugin_args["reshard_after_forward"], strategy)
            self.assertEqual(bool(plugin_args.get("cpu_offload")), plan["cpu_offload"] != "none")
            self.assertEqual(bool(plugin_args.get("activation_checkpointing")), plan["grad_ckpt"] == "full")
        else:
            self.assertFalse(args.fsdp)
        self.assertEqual(bool(args.deepspeed), sharding.startswith("zero"))

    def test_trl_sft_config(self):
        for name, (plan, d) in self.recipes.items():
            with self.subTest(name):
                trl_script = load_script(os.path.join(d, "train_trl.py"), f"train_trl_{name.replace('-', '_')}")
                args = trl_script.training_args({"use_cpu": True})
                import trl

                self.assertIsInstance(args, trl.SFTConfig)
                self.check_training_args(plan, args, plan["world_size"])
                self.assertEqual(args.max_length, plan["seq_len"])
                self.assertTrue(args.packing)
                self.assertEqual(args.packing_strategy, "wrapped")
                self.assertFalse(args.padding_free)

    def test_hf_training_arguments(self):
        import transformers

        for name, (plan, d) in self.recipes.items():
            with self.subTest(name):
                hf = load_script(os.path.join(d, "train_hf.py"), f"train_hf_{name.replace('-', '_')}")
                args = hf.training_args({"use_cpu": True})
                self.assertIs(type(args), transformers.TrainingArguments)
                self.check_training_args(plan, args, plan["world_size"])
                spec = hf.load_json("model.json")
                self.assertEqual(spec["seq_len"], plan["seq_len"])
                self.assertTrue(spec["packed"])

    def test_scripts_compile(self):
        for name, (_, d) in self.recipes.items():
            for script in ("train_trl.py", "train_hf.py"):
                with self.subTest(f"{name}/{script}"):
                    py_compile.compile(os.path.join(d, script), cfile=os.path.join(self.tmp, "compiled.pyc"), doraise=True)

    def test_model_and_lora(self):
        """model.json through the script's from_pretrained arguments, and the
        LoRA config applied by the script to a tiny model of the family."""
        import peft
        import torch
        import transformers

        for name, (plan, d) in self.recipes.items():
            with self.subTest(name):
                hf = load_script(os.path.join(d, "train_hf.py"), f"train_hf_m_{name.replace('-', '_')}")
                spec = hf.load_json("model.json")
                self.assertEqual(spec["method"], plan["method"])
                self.assertEqual(spec["attn_implementation"], plan["attn"])
                master = plan["method"] == "full" and plan["precision"].endswith("-mixed")
                want_dtype = torch.float32 if master or plan["precision"] == "fp32" else (
                    torch.bfloat16 if plan["precision"].startswith("bf16") else torch.float16)
                if plan["method"] == "qlora":
                    # The quantization config is transformers' own class,
                    # built as the script builds it; bitsandbytes itself is
                    # not installed here (it needs a GPU to quantize).
                    q = spec["quantization"]
                    self.assertTrue(q["load_in_4bit"])
                    self.assertEqual(q["bnb_4bit_quant_type"], "nf4")
                    self.assertEqual(q["bnb_4bit_use_double_quant"], plan.get("quant", "nf4-dq") == "nf4-dq")
                    try:
                        kwargs = hf.model_kwargs(spec)
                    except Exception as e:  # noqa: BLE001 - reported with the reason
                        self.fail(f"BitsAndBytesConfig refused the quantization config: {e}")
                    bnb = kwargs["quantization_config"]
                    self.assertTrue(bnb.load_in_4bit)
                    self.assertEqual(bnb.bnb_4bit_quant_type, "nf4")
                    self.assertEqual(bnb.bnb_4bit_compute_dtype, torch.bfloat16 if plan["precision"].startswith("bf16") else torch.float16)
                else:
                    kwargs = hf.model_kwargs(spec)
                self.assertEqual(kwargs["dtype"], want_dtype)
                self.assertEqual(kwargs["attn_implementation"], plan["attn"])

                # A tiny model of the same family, built from a config, not
                # downloaded, wrapped by the script's own function.
                model_type = "qwen2" if "Qwen" in spec["model_id"] else "llama"
                cfg = transformers.AutoConfig.for_model(model_type, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
                model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=want_dtype, attn_implementation=plan["attn"])
                args = hf.training_args({"use_cpu": True})
                wrapped = hf.wrap_model(model, spec, args)
                if plan["method"] == "full":
                    self.assertFalse(os.path.exists(os.path.join(d, "lora_config.json")))
                    self.assertIs(wrapped, model)
                    continue
                lora = hf.lora_config()
                self.assertIsInstance(lora, peft.LoraConfig)
                self.assertEqual(lora.r, plan["lora_rank"])
                want = sorted({m for t in plan["lora_targets"] for m in SCOPES.get(t, [t])})
                self.assertEqual(sorted(lora.target_modules), want)
                adapted = sorted({n.split(".lora_A.")[0].split(".")[-1] for n, _ in wrapped.named_parameters() if ".lora_A." in n})
                self.assertEqual(adapted, want, "the adapters sit on other modules than the plan's targets")
                trainable = [p for p in wrapped.parameters() if p.requires_grad]
                self.assertTrue(trainable)
                # PEFT's adapters are fp32 (autocast_adapter_dtype), as the estimate assumed.
                self.assertEqual({p.dtype for p in trainable}, {torch.float32} if spec["autocast_adapter_dtype"] else {want_dtype})
                if plan["method"] == "qlora":
                    self.assertTrue(spec["prepare_model_for_kbit_training"])

    def test_accelerate_config(self):
        from accelerate.commands.config.config_args import load_config_from_file

        for name, (plan, d) in self.recipes.items():
            with self.subTest(name):
                cfg = load_config_from_file(os.path.join(d, "accelerate_config.yaml"))
                dt = str(getattr(cfg.distributed_type, "value", cfg.distributed_type))
                sharding = plan["sharding"]
                want = "NO" if plan["world_size"] == 1 else "FSDP" if sharding.startswith("fsdp") else "DEEPSPEED" if sharding.startswith("zero") else "MULTI_GPU"
                self.assertEqual(dt, want)
                self.assertEqual(cfg.num_processes, plan["world_size"])
                self.assertEqual(cfg.num_machines, plan["nodes"])
                mp = str(getattr(cfg.mixed_precision, "value", cfg.mixed_precision))
                self.assertEqual(mp, "bf16" if plan["precision"].startswith("bf16") else "fp16" if plan["precision"] == "fp16-mixed" else "no")
                if want == "FSDP":
                    f = cfg.fsdp_config
                    strategy = sharding[len("fsdp_"):]
                    if strategy in ("full_shard", "shard_grad_op"):
                        self.assertEqual(f["fsdp_version"], 2)
                        self.assertIs(f["fsdp_reshard_after_forward"], strategy == "full_shard")
                    else:
                        self.assertEqual(f["fsdp_version"], 1)
                        self.assertEqual(f["fsdp_sharding_strategy"], strategy.upper())
                        self.assertTrue(f["fsdp_use_orig_params"])
                    self.assertIs(f["fsdp_offload_params"], plan["cpu_offload"] != "none")
                    self.assertIs(f["fsdp_activation_checkpointing"], plan["grad_ckpt"] == "full")
                if want == "DEEPSPEED":
                    self.assertEqual(cfg.deepspeed_config["deepspeed_config_file"], "ds_config.json")
                    self.assertEqual(cfg.deepspeed_config["zero3_init_flag"], sharding == "zero3")

    def test_deepspeed_config(self):
        import deepspeed.runtime.config as dsc
        from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

        ran = 0
        for name, (plan, d) in self.recipes.items():
            path = os.path.join(d, "ds_config.json")
            if not plan["sharding"].startswith("zero"):
                self.assertFalse(os.path.exists(path), f"{name}: ds_config.json without ZeRO")
                continue
            ran += 1
            with self.subTest(name):
                world = plan["world_size"]
                hf = load_script(os.path.join(d, "train_hf.py"), f"train_hf_ds_{name.replace('-', '_')}")
                args = hf.training_args({"use_cpu": True})
                # transformers' own check of the DeepSpeed file against the
                # training arguments, on the plan's world size.
                for w, ok in ((world, True), (world + 1, False)):
                    ds = HfTrainerDeepSpeedConfig(args.deepspeed)
                    with mock.patch.object(type(args), "world_size", new_callable=mock.PropertyMock, return_value=w):
                        ds.trainer_config_process(args)
                    self.assertEqual(ds.mismatches == [], ok, f"world {w}: mismatches {ds.mismatches}")
                self.assertEqual(ds.is_zero3(), plan["sharding"] == "zero3")
                self.assertEqual(ds.is_offload(), plan["cpu_offload"] != "none")

                # DeepSpeed's own parser, world size injected as a launch would.
                with mock.patch.object(dsc.dist, "get_rank", return_value=0):
                    cfg = dsc.DeepSpeedConfig(path, mpu=FakeMPU(world))
                self.assertEqual(cfg.world_size, world)
                self.assertEqual(cfg.zero_optimization_stage, {"zero1": 1, "zero2": 2, "zero3": 3}[plan["sharding"]])
                self.assertEqual(cfg.train_micro_batch_size_per_gpu, plan["micro_batch"])
                self.assertEqual(cfg.gradient_accumulation_steps, plan["grad_accum"])
                self.assertEqual(cfg.train_batch_size, plan["micro_batch"] * plan["grad_accum"] * world)
                off = plan["cpu_offload"]
                zc = cfg.zero_config
                opt_dev = zc.offload_optimizer.device if zc.offload_optimizer else None
                par_dev = zc.offload_param.device if zc.offload_param else None
                self.assertEqual(str(getattr(opt_dev, "value", opt_dev)) if opt_dev else None, "cpu" if "optimizer" in off else None)
                self.assertEqual(str(getattr(par_dev, "value", par_dev)) if par_dev else None, "cpu" if "params" in off else None)
                self.assertEqual(bool(cfg.bfloat16_config.enabled), plan["precision"].startswith("bf16"))
                with mock.patch.object(dsc.dist, "get_rank", return_value=0):
                    with self.assertRaises(AssertionError):
                        dsc.DeepSpeedConfig(path, mpu=FakeMPU(world + 1))  # the batch fields hold only for the plan's world
        self.assertGreater(ran, 0, "no ZeRO plan was loaded")


if __name__ == "__main__":
    unittest.main()
