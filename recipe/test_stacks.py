"""Loads the LitGPT and torchtune recipes `canifinetune plan --stack ... --emit` writes.

For each plan below the test runs `canifinetune plan ... --json` (the plan's
settings as the estimate assumed them), then `--emit DIR --emit-plan N`, and
reads the framework's config with the framework itself, on CPU:

- litgpt.yaml through jsonargparse against litgpt's own `finetune lora|full`
  setup() signature (the parser `litgpt finetune --config` uses), with the
  classes instantiated (TrainArgs, the data module, the optimizer class);
- torchtune.yaml through OmegaConf, each `_component_` resolved with
  torchtune's own resolver and its arguments bound to the component's
  signature, the recipe found in torchtune's registry, and every key the
  recipe reads present.

Each memory-relevant setting is compared back to the plan's JSON. Run in the
environment of recipe/stacks-requirements.lock:

    CANIFINETUNE_BIN=/tmp/canifinetune $(scripts/python-env.sh recipe/stacks-requirements.lock)/bin/python \
        -m unittest discover -s recipe -p 'test_stacks.py' -v
"""

import importlib
import inspect
import json
import os
import shutil
import tempfile
import unittest

from emitted import SCOPES, emit  # recipe/ is on sys.path under `unittest discover -s recipe`

# name: (plan arguments, a predicate choosing the plan to emit from --json)
PLANS = {
    "litgpt-qlora-1gpu": (
        ["Qwen/Qwen2.5-7B", "--stack", "litgpt", "--gpu", "rtx-4090", "--dataset-tokens", "1e8"],
        lambda p: p["method"] == "qlora" and "recipe_refused" not in p,
    ),
    "litgpt-lora-fsdp-4gpu": (
        ["meta-llama/Llama-3.1-8B", "--stack", "litgpt", "--method", "lora", "--targets", "all-linear",
         "--gpus", "4xA100-80GB", "--dataset-tokens", "1e8"],
        lambda p: p["world_size"] == 4 and "recipe_refused" not in p,
    ),
    "torchtune-qlora-1gpu": (
        ["Qwen/Qwen2.5-7B", "--stack", "torchtune", "--gpu", "rtx-4090", "--dataset-tokens", "1e8"],
        lambda p: p["method"] == "qlora" and "recipe_refused" not in p,
    ),
    "torchtune-full-fsdp-8gpu": (
        ["meta-llama/Llama-3.1-8B", "--stack", "torchtune", "--method", "full", "--gpus", "8xA100-80GB", "--dataset-tokens", "1e8"],
        lambda p: p["world_size"] == 8 and "recipe_refused" not in p,
    ),
}

LITGPT_PRECISION = {"bf16-true": "bf16-true", "bf16-mixed": "bf16-mixed", "fp16-true": "16-true", "fp16-mixed": "16-mixed", "fp32": "32-true"}
OPTIMIZER_CLASS = {
    "adamw_torch": "torch.optim.AdamW",
    "adamw_torch_fused": "torch.optim.AdamW",
    "sgd": "torch.optim.SGD",
    "adamw_8bit": "bitsandbytes.optim.AdamW8bit",
    "paged_adamw_8bit": "bitsandbytes.optim.PagedAdamW8bit",
    "paged_adamw_32bit": "bitsandbytes.optim.PagedAdamW32bit",
    "adamw_torch_8bit": "torchao.optim.AdamW8bit",
}
# HF projection names → litgpt switches / torchtune attention modules.
ATTN = {"q_proj": ("lora_query", "q_proj"), "k_proj": ("lora_key", "k_proj"), "v_proj": ("lora_value", "v_proj"), "o_proj": ("lora_projection", "output_proj")}


def targets(plan):
    out = []
    for t in plan.get("lora_targets") or ["attention"]:
        for name in SCOPES.get(t, [t]):
            if name not in out:
                out.append(name)
    return out


class StackLoadBack(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="stack-recipes-")
        cls.recipes = emit(PLANS, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_litgpt(self):
        import jsonargparse
        import litgpt

        ran = 0
        for name, (plan, d) in self.recipes.items():
            if not name.startswith("litgpt"):
                continue
            with self.subTest(name):
                ran += 1
                kind = "full" if plan["method"] == "full" else "lora"
                setup = importlib.import_module(f"litgpt.finetune.{kind}").setup
                parser = jsonargparse.ArgumentParser()
                parser.add_argument("--config", action=jsonargparse.ActionConfigFile)
                parser.add_function_arguments(setup, fail_untyped=False)
                cwd = os.getcwd()
                os.chdir(d)
                try:
                    with open("train.json", "w") as f:  # litgpt.data.JSON checks that the file exists
                        f.write("[]")
                    # As launch.sh runs it: the config, the dataset given on the command line.
                    with open("launch.sh") as f:
                        self.assertIn('--config "$here/litgpt.yaml" --data.json_path "$dataset"', f.read())
                    cfg = parser.parse_args(["--config", "litgpt.yaml", "--data.json_path", "train.json"])
                    init = parser.instantiate_classes(cfg)
                finally:
                    os.chdir(cwd)
                self.assertEqual(cfg.precision, LITGPT_PRECISION[plan["precision"]])
                self.assertEqual(init.devices, plan["gpus_per_node"])
                self.assertEqual(init.num_nodes, plan["nodes"])
                self.assertEqual(init.train.micro_batch_size, plan["micro_batch"])
                self.assertEqual(init.train.gradient_accumulation_iters(init.devices, init.num_nodes), plan["grad_accum"])
                self.assertEqual(init.train.max_seq_length, plan["seq_len"])
                self.assertEqual(init.optimizer["class_path"], OPTIMIZER_CLASS[plan["optimizer"]])
                module, cls = init.optimizer["class_path"].rsplit(".", 1)
                getattr(importlib.import_module(module), cls)  # what litgpt's instantiate_torch_optimizer imports
                self.assertEqual(init.optimizer.get("init_args", {}).get("fused", False), plan["optimizer"] == "adamw_torch_fused")
                self.assertEqual(type(init.data).__name__, "JSON")
                self.assertEqual(str(init.data.json_path), "train.json")
                # LitGPT knows the model by the checkpoint's name.
                litgpt.Config.from_name(os.path.basename(cfg.checkpoint_dir))
                # What setup() runs: one GPU unsharded and uncheckpointed, or
                # FSDP full-shard with every Block checkpointed.
                if plan["world_size"] == 1:
                    self.assertEqual((plan["sharding"], plan["grad_ckpt"]), ("none", "none"))
                else:
                    self.assertEqual((plan["sharding"], plan["cpu_offload"], plan["grad_ckpt"]), ("fsdp_full_shard", "none", "full"))
                if kind == "lora":
                    self.assertEqual(init.lora_r, plan["lora_rank"])
                    want = targets(plan)
                    for hf, (switch, _) in ATTN.items():
                        self.assertEqual(getattr(init, switch), hf in want, switch)
                    self.assertEqual(init.lora_mlp, all(m in want for m in SCOPES["mlp"]))
                    if plan["method"] == "qlora":
                        self.assertEqual(cfg.quantize, "bnb." + plan["quant"])
                    else:
                        self.assertIsNone(cfg.quantize)
        self.assertGreater(ran, 0)

    def test_torchtune(self):
        from omegaconf import OmegaConf
        from torchtune import _recipe_registry
        from torchtune.config._utils import _get_component_from_path

        ran = 0
        for name, (plan, d) in self.recipes.items():
            if not name.startswith("torchtune"):
                continue
            with self.subTest(name):
                ran += 1
                cfg = OmegaConf.load(os.path.join(d, "torchtune.yaml"))
                OmegaConf.resolve(cfg)
                # Every component resolves and takes the arguments given
                # (those the recipe passes itself left unbound).
                for key in ("tokenizer", "model", "checkpointer", "dataset", "optimizer", "lr_scheduler", "loss", "metric_logger", "profiler"):
                    node = OmegaConf.to_container(cfg[key])
                    fn = _get_component_from_path(node.pop("_component_"))
                    try:
                        inspect.signature(fn).bind_partial(**node)
                    except TypeError as e:
                        self.fail(f"{key}: {e}")
                distributed = plan["world_size"] > 1
                kind = "full" if plan["method"] == "full" else "lora"
                recipe = f"{kind}_finetune_{'distributed' if distributed else 'single_device'}"
                self.assertIn(recipe, [r.name for r in _recipe_registry.get_all_recipes()])
                with open(os.path.join(d, "launch.sh")) as f:
                    self.assertIn(f"tune run", f.read())
                self.assertEqual(cfg.dtype, {"bf16-true": "bf16", "fp32": "fp32"}[plan["precision"]])
                self.assertEqual(cfg.batch_size, plan["micro_batch"])
                self.assertEqual(cfg.gradient_accumulation_steps, plan["grad_accum"])
                self.assertEqual(cfg.tokenizer.max_seq_len, plan["seq_len"])
                self.assertEqual(cfg.enable_activation_checkpointing, plan["grad_ckpt"] in ("full", "offload"))
                self.assertEqual(cfg.enable_activation_offloading, plan["grad_ckpt"] == "offload")
                self.assertEqual(cfg.optimizer._component_, OPTIMIZER_CLASS[plan["optimizer"]])
                self.assertEqual(cfg.loss._component_.endswith("CEWithChunkedOutputLoss"), plan["fused_ce"] == "chunked")
                if distributed:
                    self.assertIn(plan["sharding"], ("fsdp_full_shard", "fsdp_shard_grad_op"))
                    self.assertEqual(cfg.fsdp_reshard_after_forward, plan["sharding"] == "fsdp_full_shard")
                    self.assertEqual(cfg.fsdp_cpu_offload, plan["cpu_offload"] == "params+optimizer")
                else:
                    self.assertEqual(plan["sharding"], "none")
                if kind == "lora":
                    self.assertEqual(cfg.model.lora_rank, plan["lora_rank"])
                    want = targets(plan)
                    self.assertEqual(sorted(cfg.model.lora_attn_modules), sorted(ATTN[t][1] for t in want if t in ATTN))
                    self.assertEqual(cfg.model.apply_lora_to_mlp, all(m in want for m in SCOPES["mlp"]))
                    self.assertEqual(cfg.model.quantize_base, plan["method"] == "qlora")
        self.assertGreater(ran, 0)


if __name__ == "__main__":
    unittest.main()
