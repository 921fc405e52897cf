"""A fake peft for probe_test.py (see ../README.md)."""

import torch

__version__ = "0.0+fake"


class LoraConfig:
    def __init__(self, r, lora_alpha, lora_dropout, target_modules, task_type):
        self.r, self.lora_alpha, self.target_modules = r, lora_alpha, target_modules


class _PeftModel:
    def __init__(self, model, config):
        if config.target_modules == "all-linear":
            config.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
        else:
            config.target_modules = set(config.target_modules)
        self.base, self.config, self.peft_config = model, model.config, {"default": config}
        for p in model._params:
            p.requires_grad = False
        self._adapters = [torch.Tensor(config.r * 1024, torch.float32, requires_grad=True) for _ in config.target_modules]

    def parameters(self):
        return iter(self.base._params + self._adapters)

    def train(self):
        return self

    def __call__(self, **kw):
        return self.base(**kw)


def get_peft_model(model, config):
    return _PeftModel(model, config)


def prepare_model_for_kbit_training(model, use_gradient_checkpointing=True, gradient_checkpointing_kwargs=None):
    return model
