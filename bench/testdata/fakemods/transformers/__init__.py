"""A fake transformers for probe_test.py (see ../README.md)."""

import json
import os
import types

import torch

__version__ = os.environ.get("FAKE_TRANSFORMERS_VERSION", "4.57.0")
_DTYPE_KW = "dtype" if __version__.startswith(("4.57", "5.")) else "torch_dtype"


class AutoConfig:
    @staticmethod
    def from_pretrained(src):
        path = src if src.endswith(".json") else os.path.join(src, "config.json")
        with open(path) as f:
            return types.SimpleNamespace(**json.load(f))


class _Model:
    def __init__(self, config, kw):
        # The probe must pass the dtype under the name this version knows.
        if _DTYPE_KW not in kw:
            raise TypeError("unexpected keywords %s (want %s)" % (sorted(kw), _DTYPE_KW))
        self.config = config
        self.config._attn_implementation = kw.get("attn_implementation", "sdpa")
        dt = kw[_DTYPE_KW]
        self._params = [torch.Tensor(1 << 20, dt, requires_grad=True) for _ in range(4)]
        self.gradient_checkpointing = False

    def parameters(self):
        return iter(self._params)

    def to(self, device):
        return self

    def train(self):
        return self

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.gradient_checkpointing = True

    def __call__(self, input_ids=None, labels=None):
        torch.cuda._stage("forward", 64 << 20)
        return types.SimpleNamespace(loss=torch.Tensor(1))


class AutoModelForCausalLM:
    @staticmethod
    def from_config(config, **kw):
        return _Model(config, kw)

    @staticmethod
    def from_pretrained(src, **kw):
        return _Model(AutoConfig.from_pretrained(src), kw)


class BitsAndBytesConfig:
    def __init__(self, **kw):
        self.kw = kw
