"""Fake-tensor oracle: the allocated memory of real training steps, without a GPU.

Builds a model with transformers' ``AutoModelForCausalLM.from_config`` on the
``meta`` device (tensors with shape, dtype and strides but no storage, so no
weight is read or allocated), applies PEFT LoRA, gradient checkpointing and
the attention implementation as an HF Trainer run does, and runs two full
training steps (forward with labels, so the loss is the model's own; backward;
AdamW ``foreach`` step; ``zero_grad(set_to_none=True)``). A
``TorchDispatchMode`` sees every tensor the operators create on the training
device and counts live storages once each, rounded up to 512 bytes as the CUDA
caching allocator's ``allocated_bytes`` counter does; a storage stops counting
when its last reference dies. The result is the peak of live tensor bytes per
phase (forward, loss, backward, optimizer) and overall: the figure
``torch.cuda.max_memory_allocated`` reports, less what torch allocates outside
tensors on a GPU (cuBLAS workspaces, CUDA context; not simulated).

The CUDA path is imitated where it differs from what meta tensors would do:

* SDPA takes the kernel CUDA would choose: flash attention for bf16/fp16 with
  no mask and head dim <= 256 (it saves the output and an fp32 logsumexp, not
  the seq x seq probabilities), memory-efficient attention otherwise, except
  for grouped key/value heads without a mask in fp32, which CUDA runs on the
  math kernel (torch 2.11, as measured; see _cuda_sdpa).
* Dropout (PEFT's lora_dropout) takes the fused CUDA kernel, which saves a
  one-byte bool mask; on meta ATen would take the unfused path and save a
  noise tensor in the input's dtype.
* transformers' check for packed sequences (a data-dependent ``.all()``) is
  answered as it is on a real fixed-length, unpacked batch: not packed.
* Any other data-dependent operation (``.item()`` on a device tensor) stops
  the run with an error instead of guessing.
* bf16-mixed runs as HF Trainer runs it (accelerate's native AMP): the
  forward, loss included, inside ``torch.autocast("cuda", bfloat16)`` and
  ``convert_outputs_to_fp32``; fp32 weights, gradients and AdamW states for
  a full fine-tune, a bf16 base with fp32 adapters for LoRA. CUDA autocast
  casts only CUDA tensors, so its casting policies (the pinned torch's own
  operator lists, read from ``ATen/autocast_mode.h``) and its weight cache
  are applied above autograd by a TorchFunctionMode while torch's real
  autocast state is on (see AutocastImitation; the tests compare what it
  saves with what the real autocast kernels save on fake CUDA tensors).

MoE models run transformers' ``grouped_mm`` experts implementation (its
default on a GPU, pinned here), whose tensor sizes do not depend on the
routing, so no routing assumption is made.

QLoRA runs bitsandbytes' 4-bit path as oracle/qlora.py re-implements it on
meta tensors (transformers' BitsAndBytesConfig load_in_4bit, nf4/fp4 with
or without double quantization, bf16 compute, a bf16-loaded base, PEFT's
own prepare_model_for_kbit_training; see that module for what is and is not
imitated), without autocast (bf16-true) or under the Trainer's bf16
autocast (bf16-mixed).

Not simulated (``NotSimulated`` names the reason): QLoRA in other precisions,
8-bit or GPTQ bases, fp16-mixed (the Trainer's GradScaler is not
imitated), the eager MoE experts loop, LoRA on routed experts (PEFT maps
transformers 4's expert names onto the fused 3-D expert parameters as
``target_parameters`` for Mixtral, Qwen3-MoE, OLMoE and DeepSeek-V2/V3; its
parametrization does not run on meta tensors), fused cross-entropy kernels, 8-bit/paged
optimizers, sharding and offload, unsloth/offloaded checkpointing, padded
(dynamic) batches.

Command line: ``python -m oracle.fakestep CONFIG_DIR REQUEST.json`` prints one
JSON Lines case (the measurements schema, ``"simulated": true``) per request;
REQUEST.json holds one request object or a list, in the vocabulary of
``canifinetune estimate --json``'s ``config`` block.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

ROUND = 512  # the CUDA caching allocator's block granularity
STACK = "hf-trainer"


class NotSimulated(Exception):
    """The request asks for something the oracle does not imitate."""


class DataDependent(RuntimeError):
    """The training code asked for a device tensor's value."""


@dataclasses.dataclass
class Request:
    method: str = "lora"
    precision: str = "bf16-true"
    lora_rank: int = 16
    lora_alpha: int | None = None
    lora_targets: list[str] = dataclasses.field(default_factory=lambda: ["attention"])
    lora_dropout: float = 0.0
    seq_len: int = 2048
    batch: int = 1
    grad_accum: int = 1
    grad_ckpt: str = "none"
    optimizer: str = "adamw_torch"
    attn: str = "sdpa"
    fused_ce: str = "none"
    sharding: str = "none"
    num_gpus: int = 1
    cpu_offload: str = "none"
    dynamic_padding: bool = False
    # QLoRA only (bitsandbytes' bnb_4bit_quant_type, with double quant as
    # "nf4-dq"); left out of case_id for the other methods.
    quant: str = "nf4-dq"
    # The training loop computes the loss itself: the model is called
    # without labels and F.cross_entropy runs on the logits it returns (the
    # estimate's --stack pytorch). Left out of case_id when false.
    own_loss: bool = False
    # With own_loss: the loop frees the logits before the backward (a loss
    # function returning only the loss); otherwise the loop's variable keeps
    # them until the step is done. Left out of case_id when false.
    frees_logits: bool = False
    # The optimizers this stack simulates (a class attribute, not a field:
    # the LitGPT stack's request adds bitsandbytes' paged AdamW).
    OPTIMIZERS = ("adamw_torch", "adamw_torch_forloop", "sgd")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Request":
        # estimate --json's task is not a field (the ids of the rows predate
        # it) but must not be dropped: the oracle builds the causal-LM head.
        task = d.get("task")
        if task not in (None, "", "causal-lm"):
            raise NotSimulated(f"task {task!r}: the oracle builds transformers' causal-LM model and loss (AutoModelForCausalLM), not this head")
        for k in ("kernels", "compile", "optimizer_in_backward"):
            if d.get(k):
                raise NotSimulated(f"{k} {d[k]!r}: Triton/CUDA kernels, torch.compile and optimizer steps in the backward do not run on meta tensors")
        known = {f.name for f in dataclasses.fields(cls)}
        # The Go side simulates the HF Trainer's path and, for --stack
        # pytorch, the same model with the loop's own loss; it refuses the
        # other stacks before calling.
        stack = d.get("stack")
        if stack not in (None, "", "hf-trainer", "pytorch"):
            raise NotSimulated(f"stack {stack!r}: the oracle runs the HF Trainer's code path, or a plain loop's own loss (pytorch)")
        own = stack == "pytorch" or bool(d.get("own_loss"))
        # estimate --json spells these without the lora_ prefix in places.
        aliases = {"rank": "lora_rank", "alpha": "lora_alpha", "targets": "lora_targets", "dropout": "lora_dropout"}
        kw = {}
        for k, v in d.items():
            k = aliases.get(k, k)
            if k not in known and k not in ESTIMATE_ONLY:
                # A misspelt field would otherwise leave its default in place unsaid.
                raise ValueError(f"request field {k!r}: unknown (the fields are {', '.join(sorted(known))})")
            if k in known and v is not None:
                kw[k] = v
        if own:
            kw["own_loss"] = True
        else:
            kw.pop("frees_logits", None)  # read with the loop's own loss only
        r = cls(**kw)
        r.check()
        return r

    def check(self) -> None:
        def no(what: str) -> None:
            raise NotSimulated(what)

        if self.method == "qlora":
            if self.quant not in QLORA_QUANTS:
                no(f"qlora quant {self.quant!r} (nf4, nf4-dq and fp4 with uint8 storage are imitated)")
            if self.precision not in ("bf16-true", "bf16-mixed"):
                no(f"qlora with precision {self.precision} (a bf16-loaded base with bf16 compute, with or without bf16 autocast, is imitated)")
            if self.seq_len == 1 and self.batch == 1 and self.grad_ckpt == "none":
                no("qlora with seq_len 1, batch 1 and no checkpointing: bitsandbytes takes its one-token gemv_4bit path "
                   "for the first layer's inputs (no gradient there), which is not imitated")
        if self.method not in ("full", "lora", "qlora"):
            no(f"method {self.method!r}")
        if self.own_loss and self.precision in AUTOCAST:
            no(f"own_loss under {self.precision}: the loop's own autocast region around its loss is not imitated (the Trainer's wraps the model's forward only)")
        if self.precision == "fp16-mixed":
            no("precision fp16-mixed: the Trainer's GradScaler (loss scaling, unscaling and the inf check before each step) is not imitated")
        if self.precision not in DTYPES:
            no(f"precision {self.precision!r}")
        if self.grad_ckpt not in ("none", "full"):
            no(f"grad_ckpt {self.grad_ckpt!r}")
        if self.optimizer not in self.OPTIMIZERS:
            no(f"optimizer {self.optimizer!r} ({' and '.join(self.OPTIMIZERS)} are simulated)")
        if self.attn not in ("sdpa", "eager", "sdpa_math", "flash_attention_2"):
            no(f"attn {self.attn!r}")
        if self.attn == "flash_attention_2" and self.precision == "fp32":
            no("flash_attention_2 in fp32 (flash-attn takes fp16 and bf16 only; transformers casts fp32 inputs to the weights' dtype, fp32 here)")
        if self.fused_ce != "none":
            no(f"fused_ce {self.fused_ce!r}")
        if self.sharding not in ("none", "") or self.num_gpus not in (0, 1) or self.cpu_offload not in ("none", ""):
            no("sharding, several GPUs or CPU offload")
        if self.dynamic_padding:
            no("dynamic padding")
        for name, v in (("seq_len", self.seq_len), ("batch", self.batch), ("grad_accum", self.grad_accum)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"request field {name}: bad value {v!r} (want a positive integer)")
        if self.method in ("lora", "qlora") and (not isinstance(self.lora_rank, int) or self.lora_rank < 1):
            raise ValueError(f"request field lora_rank: bad value {self.lora_rank!r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"request field lora_dropout: bad value {self.lora_dropout!r}")


QLORA_QUANTS = ("nf4", "nf4-dq", "fp4")  # oracle/qlora.py imitates these
# Fields of estimate --json's config block that are not Request fields:
# task, kernels, compile and optimizer_in_backward are checked by from_json;
# target_len belongs to seq2seq (a task refused), seq_len_p50 to dynamic
# padding (refused), stack to the Go side (it runs this oracle for the HF
# Trainer stack only; litgptstep.py reads the same requests).
ESTIMATE_ONLY = {"task", "kernels", "compile", "optimizer_in_backward", "target_len", "seq_len_p50", "stack"}
# The dtype the model is built in; bf16-mixed keeps fp32 weights and runs
# the forward under autocast (AUTOCAST).
DTYPES = {"bf16-true": torch.bfloat16, "fp16-true": torch.float16, "fp32": torch.float32, "bf16-mixed": torch.float32}


def _round(n: int) -> int:
    return (n + ROUND - 1) // ROUND * ROUND


class LiveBytes(TorchDispatchMode):
    """Counts live storages on the meta (training) device, once each."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[int, Any]] = {}
        self.cur = 0
        self.peak = 0
        self.phase = "setup"
        self.phase_peak: dict[str, int] = {}
        self._ppeak = 0
        # census: the operator and dtype that created each live storage, to
        # break a snapshot down (None: not recorded).
        self.origin: dict[int, str] | None = None
        self._op = "setup"

    def track(self, t: torch.Tensor) -> None:
        if t.device.type != "meta":
            return  # CPU scalars (optimizer step counts, RNG state) stay off the GPU too
        s = t.untyped_storage()
        key = s._cdata
        if key in self.live:
            return
        n = _round(s.nbytes())
        live = self.live

        def gone(_ref: Any, key: int = key, n: int = n) -> None:
            if live.pop(key, None) is not None:
                self.cur -= n

        live[key] = (n, weakref.ref(s, gone))
        if self.origin is not None:
            self.origin[key] = f"{self._op} {str(t.dtype).removeprefix('torch.')}"
        self.cur += n
        if self.cur > self._ppeak:
            self._ppeak = self.cur
            if self.cur > self.peak:
                self.peak = self.cur

    def set_phase(self, name: str) -> None:
        self.phase_peak[self.phase] = max(self.phase_peak.get(self.phase, 0), self._ppeak)
        self.phase = name
        self._ppeak = self.cur

    def by_origin(self, exclude=frozenset()) -> dict[str, int]:
        """Live bytes grouped by creating operator and dtype, leaving out the
        storage keys in exclude."""
        out: dict[str, int] = {}
        for k, (n, _) in self.live.items():
            if k in exclude:
                continue
            o = (self.origin or {}).get(k, "?")
            out[o] = out.get(o, 0) + n
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def bytes_of(self, tensors) -> int:
        seen, n = set(), 0
        for t in tensors:
            if t is None or t.device.type != "meta":
                continue
            k = t.untyped_storage()._cdata
            if k not in seen:
                seen.add(k)
                n += _round(t.untyped_storage().nbytes())
        return n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _LOCAL_SCALAR and args[0].device.type == "meta":
            raise DataDependent(
                "the training code read a device tensor's value (.item()); the oracle does not guess data-dependent results"
            )
        if self.origin is not None:
            self._op = func.__name__.removesuffix(".default")
        out = _meta_call(func, args, kwargs or {}) if META_CACHE else func(*args, **(kwargs or {}))
        if type(out) is torch.Tensor:
            self.track(out)
        elif isinstance(out, (tuple, list)):
            for o in out:
                if type(o) is torch.Tensor:
                    self.track(o)
                elif isinstance(o, (tuple, list)):
                    for p in o:
                        if type(p) is torch.Tensor:
                            self.track(p)
        return out


_LOCAL_SCALAR = torch.ops.aten._local_scalar_dense.default

# Meta kernels (most of them torch's Python reference implementations) take
# about three quarters of a run's CPU time, and a model runs the same few
# hundred (operator, input layout) pairs over and over, layer after layer and
# step after step. On meta tensors an operator's outputs are a function of
# its inputs' metadata and its other arguments alone, so for an operator that
# returns fresh tensors (no alias in its schema, writes to no argument) and
# takes and returns only meta tensors, the first call's output layouts
# (sizes, strides, dtype, storage offset and storage size) are remembered and
# later calls get new, empty storages of the same layouts. Any call that
# would need more (an output aliasing an input or another output, a CPU
# tensor, an argument type not listed) runs the kernel every time.
# TestMetaCache checks that the cache changes no figure.
META_CACHE = True
_uncacheable = object()
_cache: dict = {}
_fresh_op: dict = {}


def _op_fresh(func) -> bool:
    ok = _fresh_op.get(func)
    if ok is None:
        sch = func._schema
        ok = not any(r.alias_info is not None for r in sch.returns) and not any(
            a.alias_info is not None and a.alias_info.is_write for a in sch.arguments
        )
        _fresh_op[func] = ok
    return ok


_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _key(x):
    if type(x) is torch.Tensor:
        if x.device.type != "meta" or x.is_conj() or x.is_neg():
            raise KeyError
        return (tuple(x.shape), x.stride(), x.dtype, x.storage_offset(), x.untyped_storage().nbytes())
    if isinstance(x, (list, tuple)):
        return (type(x), tuple(_key(v) for v in x))
    if isinstance(x, _SCALARS):
        return (type(x), x)
    raise KeyError


def _layout(t: torch.Tensor):
    return (tuple(t.shape), t.stride(), t.dtype, t.storage_offset(), t.untyped_storage().nbytes())


def _fresh(lay) -> torch.Tensor:
    size, stride, dtype, offset, nbytes = lay
    t = torch.empty(0, dtype=dtype, device="meta")
    t.set_(torch.UntypedStorage(nbytes, device="meta"), offset, size, stride)
    return t


def _meta_call(func, args, kwargs):
    if not _op_fresh(func):
        return func(*args, **kwargs)
    try:
        key = (func, _key(args), _key(tuple(sorted(kwargs.items()))))
    except (KeyError, TypeError):
        return func(*args, **kwargs)
    hit = _cache.get(key)
    if hit is _uncacheable:
        return func(*args, **kwargs)
    if hit is not None:
        kind, lay = hit
        if kind == "t":
            return _fresh(lay)
        return type(lay)(_fresh(x[1]) if type(x) is tuple and x and x[0] == "t" else x for x in lay)
    out = func(*args, **kwargs)
    _cache[key] = _remember(out, args, kwargs)
    return out


def _remember(out, args, kwargs):
    """The layouts of out to replay, or _uncacheable."""
    seen = set()
    for a in list(args) + list(kwargs.values()):
        for t in a if isinstance(a, (list, tuple)) else [a]:
            if type(t) is torch.Tensor:
                seen.add(t.untyped_storage()._cdata)

    def one(t):
        if t.device.type != "meta" or t.is_conj() or t.is_neg():
            raise KeyError
        k = t.untyped_storage()._cdata
        if k in seen:
            raise KeyError  # aliases an input or another output
        seen.add(k)
        return ("t", _layout(t))

    try:
        if type(out) is torch.Tensor:
            return ("t", one(out)[1])
        if isinstance(out, (tuple, list)):
            items = []
            for o in out:
                if type(o) is torch.Tensor:
                    items.append(one(o))
                elif isinstance(o, (int, float, bool, type(None))):
                    items.append(o)
                else:
                    raise KeyError
            return ("s", type(out)(items))
    except KeyError:
        pass
    return _uncacheable
_real_sdpa = torch.nn.functional.scaled_dot_product_attention


_sdpa_math = False  # the request's attn is sdpa_math: SDPA on its math kernel
_gqa_math_used = False  # _cuda_sdpa ran grouped fp32 heads on the math kernel


def _cuda_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as the CUDA dispatcher runs it: flash, else memory-efficient
    (or, for attn sdpa_math, the math kernel)."""
    if query.device.type != "meta":
        return _real_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if _autocast_mode is not None and torch.is_autocast_enabled("cuda"):
        # scaled_dot_product_attention is on autocast's lower-precision list:
        # its floating inputs are cast before the kernel is chosen.
        low = torch.get_autocast_dtype("cuda")
        query, key, value, attn_mask = (_autocast_mode._cast(t, low) for t in (query, key, value, attn_mask))
    if _sdpa_math:
        if dropout_p > 0:
            # The math kernel's at::dropout takes ATen's unfused path on
            # meta (a noise tensor in the input's dtype) where CUDA's fused
            # kernel saves a bool mask.
            raise NotSimulated("attention dropout under SDPA's math kernel (ATen's meta dropout is not CUDA's fused one)")
        # The composite math kernel, as torch before 2.5 ran it on CUDA:
        # 16-bit inputs stay 16-bit (2.5 and later upcast them to fp32
        # unless fp16/bf16 reduction is allowed, which is set here).
        prev = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
        try:
            return torch.ops.aten._scaled_dot_product_attention_math(
                query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
            )[0]
        finally:
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(prev)
    hd = query.shape[-1]
    if attn_mask is None and query.dtype in (torch.bfloat16, torch.float16) and hd <= 256 and hd == value.shape[-1]:
        # Flash takes grouped key/value heads natively.
        return torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale
        )[0]
    if key.shape[-3] != query.shape[-3] and attn_mask is None:
        # Grouped key/value heads passed as they are (transformers'
        # use_gqa_in_sdpa: no mask, head dims <= 256) to inputs flash cannot
        # take (fp32): the memory-efficient kernel refuses head counts that
        # differ (sdp_utils.cpp, check_batch_size_and_num_heads_dense<false>)
        # until PyTorch PR #191085 (July 2026), so CUDA runs the math
        # kernel, which saves every head's s^2 softmax output; measured on
        # an H200 with torch 2.11 (evidence/device/h200-20261204).
        if dropout_p > 0:
            raise NotSimulated("attention dropout under SDPA's math kernel (ATen's meta dropout is not CUDA's fused one)")
        global _gqa_math_used
        _gqa_math_used = True
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, None, dropout_p, is_causal, None, scale=scale, enable_gqa=True
        )[0]
    if key.shape[-3] != query.shape[-3]:
        n = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(n, dim=-3), value.repeat_interleave(n, dim=-3)
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale
    )[0]


_real_dropout = torch.nn.functional.dropout

# --- flash_attention_2: the flash-attn package imitated on meta tensors -----
#
# transformers' own flash path runs as it is (integrations/flash_attention.py:
# q, k and v transposed to [batch, seq, heads, dim], fp32 inputs cast to the
# target dtype by fa_peft_integration_check, _flash_attention_forward's
# dispatch); only the package's functions, which _lazy_imports would import
# from flash_attn, are imitated from its Python interface
# (flash_attn/flash_attn_interface.py, FLASH_ATTN_VERSION) and the shapes its
# CUDA entry points return (csrc/flash_attn/flash_api.cpp: mha_fwd's
# out = empty_like(q), an fp32 softmax_lse [batch, heads, seq], a 2-element
# int64 rng_state). Not imitated, as for SDPA's flash kernel: the CUDA
# backward's own workspaces (the fp32 dq accumulator, softmax_d, and with
# grouped heads dk/dv expanded per query head), which live for one layer's
# attention backward.
FLASH_ATTN_VERSION = "2.8.3"


class _FlashAttnFunc(torch.autograd.Function):
    """flash_attn_interface.py: FlashAttnFunc."""

    @staticmethod
    def forward(ctx, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_softmax, is_grad_enabled):
        if return_softmax:
            raise NotSimulated("flash-attn's return_attn_probs")
        is_grad = is_grad_enabled and any(x.requires_grad for x in (q, k, v))
        head_size_og = q.size(3)
        if head_size_og % 8 != 0:
            q, k, v = (torch.nn.functional.pad(x, [0, 8 - head_size_og % 8]) for x in (q, k, v))
        # _flash_attn_forward: maybe_contiguous (a copy only if the last dim is strided)
        q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
        out_padded = torch.empty_like(q)
        b, s_q, h, _ = q.shape
        softmax_lse = torch.empty((b, h, s_q), dtype=torch.float32, device=q.device)
        rng_state = torch.empty(2, dtype=torch.int64, device=q.device)
        if is_grad:
            ctx.save_for_backward(q, k, v, out_padded, softmax_lse, rng_state)
        return out_padded[..., :head_size_og]

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, softmax_lse, rng_state = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        n = dout.size(3)
        # The kernel reads dout padded and made contiguous (maybe_contiguous)
        # beside dq, dk and dv: those copies live until it returns.
        if n % 8 != 0:
            dout = torch.nn.functional.pad(dout, [0, 8 - n % 8])
        if dout.stride(-1) != 1:
            dout = dout.contiguous()
        return dq[..., :n], dk[..., :n], dv[..., :n], None, None, None, None, None, None, None, None, None


def _flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                     alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_interface.py: flash_attn_func (flash-attn's keywords: transformers reads its signature)."""
    return _FlashAttnFunc.apply(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                deterministic, return_attn_probs, torch.is_grad_enabled())


def _flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                            deterministic=False, return_attn_probs=False, block_table=None):
    raise NotSimulated("flash-attn's varlen path (padded or packed batches)")


def _flash_imports(implementation, *args, **kwargs):
    """modeling_flash_attention_utils._lazy_imports with the package imitated."""
    import transformers.modeling_flash_attention_utils as fau

    if implementation != "flash_attention_2":
        raise NotSimulated(f"attention {implementation!r}")
    return _flash_attn_func, _flash_attn_varlen_func, None, fau._pad_input, fau._unpad_input


def _cuda_dropout(input, p=0.5, training=True, inplace=False):
    """Dropout as ATen runs it on CUDA: the fused kernel, which saves a
    one-byte bool mask for backward. On meta tensors ATen takes the unfused
    path (a noise tensor in the input's dtype, saved by the multiply), which
    would count one byte per element too many in bf16."""
    if input.device.type == "meta" and training and 0 < p < 1 and not inplace and input.numel() > 0:
        return torch.ops.aten.native_dropout(input, p, True)[0]
    return _real_dropout(input, p, training, inplace)


# --- bf16-mixed: torch.autocast("cuda") imitated on meta tensors -----------
#
# HF Trainer's bf16-mixed (accelerate's native AMP) keeps fp32 weights and
# wraps the model's forward, loss included, in torch.autocast("cuda",
# dtype=bfloat16) and accelerate's convert_outputs_to_fp32. CUDA autocast is
# a dispatcher key whose kernels cast only CUDA tensors (at::autocast::
# is_autocast_eligible: tensor.is_cuda()), so on meta tensors it does
# nothing. Fake CUDA tensors (FakeTensorMode) do take the real autocast
# kernels, but the autograd engine cannot run their backward without a
# CUDA device (it asks the driver for device 0's context). So the run keeps
# meta tensors, enters the real torch.autocast("cuda") (its thread-local
# state, nesting and cache clearing are torch's own), and a TorchFunctionMode
# -- above autograd, so autograd records and saves the casts -- applies the
# autocast kernels' casting policies to the operators of the pinned torch's
# own lists, read from the autocast_mode.h header the wheel ships:
#
# * lower_precision_fp (linear, matmul, mm, bmm, baddbmm, addmm, einsum,
#   scaled_dot_product_attention, ...): every floating tensor argument cast
#   to the autocast dtype (cached_cast);
# * fp32 (pow, rsqrt, exp, layer_norm, nll_loss, ...): cast to fp32;
# * fp32_set_opt_dtype (softmax, log_softmax, sum, cumsum, prod, ...): run
#   with dtype=float32 unless a dtype is given, when the first argument is a
#   floating tensor;
# * promote (addcmul, addcdiv, index_put, scatter_add, ...): cast to the
#   widest floating type among the arguments.
#
# cached_cast's weight cache is imitated as torch has it: a cast to the
# autocast dtype of an fp32 leaf tensor that requires grad and is not a view
# is kept (and reused) until torch.clear_autocast_cache(), which
# torch.autocast's __exit__ calls when the outermost region ends.
# Checkpointing's recomputation re-enters autocast with the forward's state
# (torch.utils.checkpoint records it for the device type of the block's
# inputs; the meta device stands for CUDA here, so it is told "cuda"), and
# transformers' maybe_autocast(device_type="meta") regions act on CUDA's
# autocast state as they would on the GPU.
#
# What a TorchFunctionMode sees differs from the dispatcher in one way: it
# sees the Python-level call (F.cross_entropy), not the ATen operators a
# composite one decomposes into (log_softmax, nll_loss), which CUDA autocast
# would see one by one. cross_entropy is therefore given its parts' policy
# (fp32); transformers' loss upcasts the logits before it anyway, and the
# other composites the supported models call hold no listed operator.
# oracle/test_fakestep.py (class Autocast) compares the saved tensors with
# those the real autocast kernels save on fake CUDA tensors.

AUTOCAST = {"bf16-mixed": torch.bfloat16}  # precision -> autocast dtype
_autocast_mode: "AutocastImitation | None" = None  # the active imitation, for _cuda_sdpa
_AUTOCAST_POLICIES: dict[str, str] | None = None
# Python names of the operators' callables that differ from the ATen name.
_AUTOCAST_ALIASES = {"__matmul__": "matmul", "__pow__": "pow", "__rpow__": "pow", "cross_entropy": "nll_loss"}


def autocast_policies() -> dict[str, str]:
    """ATen operator name -> autocast policy, from the installed torch's
    ATen/autocast_mode.h (the lists the CUDA autocast kernels are registered
    from)."""
    global _AUTOCAST_POLICIES
    if _AUTOCAST_POLICIES is not None:
        return _AUTOCAST_POLICIES
    import re

    path = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise NotSimulated(f"bf16-mixed: torch's autocast operator lists ({path}) cannot be read: {e}") from e
    lists = {
        "AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp",
        "AT_FORALL_FP32": "fp32",
        "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype",
        "AT_FORALL_PROMOTE": "promote",
        "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE": "fp32",  # norm: fp32_append_dtype
    }
    out: dict[str, str] = {}
    for macro, policy in lists.items():
        m = re.search(r"#define\s+" + macro + r"\(_\)(.*?)(?=\n\s*#|\Z)", text, re.S)
        if not m:
            raise NotSimulated(f"bf16-mixed: {path} has no {macro} list")
        for name in re.findall(r"_\(\s*(?:ADD_NS\()?(\w+)", m.group(1)):
            out.setdefault(name, policy)
    if "linear" not in out or "softmax" not in out:
        raise NotSimulated(f"bf16-mixed: {path}: autocast lists not understood")
    _AUTOCAST_POLICIES = out
    return out


class AutocastImitation(TorchFunctionMode):
    """CUDA autocast's casting policies, above autograd, for meta tensors."""

    def __init__(self, device: str = "cuda") -> None:
        super().__init__()
        self.device = device
        self.policies = autocast_policies()
        self.cache: dict[int, tuple[Any, torch.Tensor]] = {}

    def clear(self) -> None:
        self.cache.clear()

    def _cast(self, x, to):
        if type(x) in (list, tuple):
            return type(x)(self._cast(v, to) for v in x)
        if not isinstance(x, torch.Tensor) or x.device.type != "meta" or not x.is_floating_point() or x.dtype in (to, torch.float64):
            return x
        if (to == torch.get_autocast_dtype(self.device) and x.dtype == torch.float32 and x.requires_grad
                and x.is_leaf and not x._is_view() and torch.is_autocast_cache_enabled()):
            hit = self.cache.get(id(x))
            if hit is not None and hit[0]() is x:
                return hit[1]
            y = x.to(to)
            self.cache[id(x)] = (weakref.ref(x), y)
            return y
        return x.to(to)

    def cast_args(self, args, kwargs, to):
        return self._cast(tuple(args), to), {k: self._cast(v, to) for k, v in kwargs.items()}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not torch.is_autocast_enabled(self.device):
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        policy = self.policies.get(_AUTOCAST_ALIASES.get(name, name))
        if policy is None:
            return func(*args, **kwargs)
        low = torch.get_autocast_dtype(self.device)
        if policy == "lower_precision_fp":
            args, kwargs = self.cast_args(args, kwargs, low)
        elif policy == "fp32":
            args, kwargs = self.cast_args(args, kwargs, torch.float32)
        elif policy == "fp32_set_opt_dtype":
            first = args[0] if args else None
            if (isinstance(first, torch.Tensor) and first.device.type == "meta" and first.is_floating_point()
                    and first.dtype != torch.float64 and kwargs.get("dtype") is None):
                kwargs = dict(kwargs, dtype=torch.float32)
        elif policy == "promote":
            to = low
            for a in list(args) + list(kwargs.values()):
                for t in a if type(a) in (list, tuple) else [a]:
                    if isinstance(t, torch.Tensor) and t.device.type == "meta" and t.is_floating_point() and t.dtype != torch.float64:
                        if to == torch.float32 or t.dtype == torch.float32:
                            to = torch.float32
            args, kwargs = self.cast_args(args, kwargs, to)
        return func(*args, **kwargs)


def _autocast_patches(dtype: torch.dtype):
    """Context for a bf16-mixed run: torch.autocast("cuda") usable on a
    machine without CUDA, the meta device standing for CUDA in
    checkpointing's and transformers' autocast regions, the imitation mode,
    and its cache cleared where torch clears the real one."""
    import sys as _sys

    import torch.cuda.amp.common as amp_common
    import torch.utils.checkpoint as ckpt
    from transformers.utils import generic

    mode = AutocastImitation("cuda")

    @contextlib.contextmanager
    def ctx():
        old = (amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported, ckpt._infer_device_type,
               torch.clear_autocast_cache)
        real_maybe = generic.maybe_autocast
        real_infer, real_clear = old[2], old[3]

        def infer(*args):
            t = real_infer(*args)
            return "cuda" if t == "meta" else t

        def clear():
            real_clear()
            mode.clear()

        def maybe_autocast(device_type, *a, **k):
            return real_maybe("cuda" if device_type == "meta" else device_type, *a, **k)

        # The mode is pushed while a CUDA autocast region is open (the
        # outermost one pushes it, as torch's nesting counts them), not
        # around the whole step: a TorchFunctionMode is popped while it
        # handles a call, so one around loss.backward() would miss the
        # recomputation that checkpointing runs inside the backward.
        Autocast = torch.amp.autocast_mode.autocast
        real_enter, real_exit = Autocast.__enter__, Autocast.__exit__
        depth = [0]

        def enter(self):
            r = real_enter(self)
            if self.device == "cuda":
                depth[0] += 1
                if depth[0] == 1:
                    mode.__enter__()
            return r

        def exit_(self, *exc):
            if self.device == "cuda":
                depth[0] -= 1
                if depth[0] == 0:
                    mode.__exit__(None, None, None)
            return real_exit(self, *exc)

        swapped = [m for m in list(_sys.modules.values())
                   if getattr(m, "__name__", "").startswith("transformers") and getattr(m, "maybe_autocast", None) is real_maybe]
        amp_common.amp_definitely_not_available = lambda: False
        torch.cuda.is_bf16_supported = lambda *a, **k: dtype == torch.bfloat16
        ckpt._infer_device_type = infer
        torch.clear_autocast_cache = clear
        for m in swapped:
            m.maybe_autocast = maybe_autocast
        Autocast.__enter__, Autocast.__exit__ = enter, exit_
        global _autocast_mode
        _autocast_mode = mode
        try:
            yield mode
        finally:
            _autocast_mode = None
            Autocast.__enter__, Autocast.__exit__ = real_enter, real_exit
            for m in swapped:
                m.maybe_autocast = real_maybe
            (amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported, ckpt._infer_device_type,
             torch.clear_autocast_cache) = old
            mode.clear()

    return ctx()


def _autocast_forward(model, dtype: torch.dtype):
    """The model's forward as accelerate's prepare_model wraps it for native
    AMP: convert_outputs_to_fp32(torch.autocast("cuda", dtype)(forward))."""
    try:
        from accelerate.utils import convert_to_fp32
    except ImportError as e:
        raise NotSimulated(f"bf16-mixed: accelerate (the Trainer's autocast wrapper) cannot be imported: {e}") from e

    def forward(**kw):
        with torch.autocast(device_type="cuda", dtype=dtype):
            out = model(**kw)
        return convert_to_fp32(out)

    return forward


def _patched():
    """Context: imitate the CUDA path in transformers/torch for the run."""
    import contextlib

    import transformers.masking_utils as mu
    import transformers.modeling_flash_attention_utils as fau

    @contextlib.contextmanager
    def ctx():
        F = torch.nn.functional
        old_pack, old_sdpa, old_drop = mu.find_packed_sequence_indices, F.scaled_dot_product_attention, F.dropout
        old_flash = fau._lazy_imports
        # A fixed-length batch with position_ids 0..seq-1 is not packed: the
        # real check returns None after reading the tensor.
        mu.find_packed_sequence_indices = lambda position_ids: None
        F.scaled_dot_product_attention, F.dropout = _cuda_sdpa, _cuda_dropout
        # The flash-attn package, imitated (_flash_imports); its cache of
        # loaded functions is cleared on the way in and out.
        fau._lazy_imports, fau._loaded_implementation = _flash_imports, None
        # The same for the flash path's packing check (batch 1): position_ids
        # 0..seq-1 are one sequence, which the real check finds by reading
        # them (small tensors, freed at once).
        old_packed = fau._is_packed_sequence
        fau._is_packed_sequence = lambda position_ids, batch_size: False
        # Autocast queries about the meta device (transformers' flash path
        # asks about the query's device) answer for CUDA, which it stands for;
        # torch itself raises for "meta".
        old_enabled, old_dtype = torch.is_autocast_enabled, torch.get_autocast_dtype

        def enabled(*a):
            return old_enabled(*(("cuda",) if a == ("meta",) else a))

        def autocast_dtype(device_type):
            return old_dtype("cuda" if device_type == "meta" else device_type)

        torch.is_autocast_enabled, torch.get_autocast_dtype = enabled, autocast_dtype
        try:
            yield
        finally:
            mu.find_packed_sequence_indices = old_pack
            F.scaled_dot_product_attention, F.dropout = old_sdpa, old_drop
            fau._lazy_imports, fau._loaded_implementation = old_flash, None
            fau._is_packed_sequence = old_packed
            torch.is_autocast_enabled, torch.get_autocast_dtype = old_enabled, old_dtype

    return ctx()


def lora_targets(model: torch.nn.Module, spec: list[str]) -> list[str]:
    """Resolves scope keywords (attention, mlp, all-linear) to module names."""
    from transformers.pytorch_utils import Conv1D  # GPT-2's projections; PEFT adapts them too

    attn, mlp = [], []
    out_emb = model.get_output_embeddings()
    scopes: dict[str, set[bool]] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, (torch.nn.Linear, Conv1D)) and mod is not out_emb:
            parts = name.split(".")
            scopes.setdefault(parts[-1], set()).add(any("attn" in p or "attention" in p for p in parts[:-1]))
    shared = {k for k, v in scopes.items() if len(v) > 1}
    for name, mod in model.named_modules():
        if not isinstance(mod, (torch.nn.Linear, Conv1D)) or mod is out_emb:
            continue
        parts = name.split(".")
        # The leaf name, or parent.leaf where the leaf is in both scopes
        # (GPT-2's attn.c_proj and mlp.c_proj): PEFT matches name suffixes.
        leaf = ".".join(parts[-2:]) if parts[-1] in shared else parts[-1]
        if any("attn" in p or "attention" in p for p in parts[:-1]):
            if leaf not in attn:
                attn.append(leaf)
        elif leaf not in mlp and not any(p in ("gate", "router") for p in parts[-1:]):
            mlp.append(leaf)
    out: list[str] = []
    for s in spec:
        k = s.strip().lower()
        names = {"attention": attn, "mlp": mlp, "all-linear": attn + mlp, "all_linear": attn + mlp, "all": attn + mlp}.get(k, [s.strip()])
        for n in names:
            if n not in out:
                out.append(n)
    return out


@dataclasses.dataclass
class Result:
    peak_bytes: int
    phase_peak_bytes: dict[str, int]
    params_bytes: int
    trainable_params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int
    trainable_params: int
    total_params: int
    lora_targets: list[str]
    adapter_dtype: str | None
    build_s: float
    run_s: float
    cpu_s: float
    # saved_by_op (census only): what the forward and the loss left alive
    # when the last backward started — the tensors autograd saved and the
    # loss chain — in bytes by creating operator and dtype.
    saved_by_op: dict[str, int] | None = None
    experts: str | None = None
    # gqa_math: SDPA ran grouped fp32 key/value heads on the math kernel.
    gqa_math: bool = False


EXPERTS = "grouped_mm"  # the MoE experts implementation the oracle pins


def is_moe(cfg) -> bool:
    return bool(getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None) or getattr(cfg, "n_routed_experts", None))


def peft_maps_experts(model) -> bool:
    """Whether PEFT maps transformers 4's MoE module names onto this model's
    fused 3-D expert parameters (target_parameters): Mixtral, Qwen3-MoE,
    OLMoE, DeepSeek-V2/V3 under the pinned versions."""
    try:
        from peft.utils import transformers_weight_conversion as twc
    except ImportError:
        return False
    base = twc._MODEL_TO_CONVERSION_PATTERN.get(getattr(model.config, "model_type", None))
    return bool(base and twc._MOE_TARGET_MODULE_MAPPING.get(base) and twc._MOE_FUSED_TARGETS.get(base))


def model_dtype(req: Request) -> torch.dtype:
    """The dtype the model is loaded in. bf16-mixed keeps fp32 weights for a
    full fine-tune (the master copy the optimizer steps); a LoRA base is
    frozen and loaded in bf16, as the plans canifinetune emits load it (the
    estimator's frozen base is 2 bytes), with PEFT's adapters upcast to fp32."""
    if req.precision in AUTOCAST and req.method != "full":
        return AUTOCAST[req.precision]
    return DTYPES[req.precision]


def build(config_dir: str, req: Request):
    """The model as the run trains it, on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(config_dir)
    dtype = model_dtype(req)
    kw = {}
    if is_moe(cfg):
        # transformers' default experts implementation on a GPU. Its tensors
        # are tokens x top_k rows or whole expert weights whatever the routing
        # (tokens per expert only set grouped_mm's offsets), so the allocated
        # bytes assume nothing about how tokens spread over experts. The eager
        # loop over the experts hit is data-dependent and not simulated.
        kw["experts_implementation"] = EXPERTS
    with torch.device("meta"):
        # flash_attention_2: built eager (transformers checks for the flash-attn
        # package at build time), then switched (set_flash below).
        impl = {"sdpa_math": "sdpa", "flash_attention_2": "eager"}.get(req.attn, req.attn)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=impl, **kw)
    if req.attn == "flash_attention_2":
        set_flash(model)
    if kw and model.config._experts_implementation != EXPERTS:
        raise NotSimulated(f"{cfg.model_type}: experts implementation {model.config._experts_implementation!r}, not {EXPERTS}")
    targets: list[str] = []
    if req.method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model

        scopes = {s.strip().lower() for s in req.lora_targets} & {"mlp", "all-linear", "all_linear", "all"}
        if scopes and peft_maps_experts(model):
            # PEFT's own all-linear (and transformers 4's MLP names) reach
            # the routed experts here; the nn.Linear leaves alone would not.
            raise NotSimulated(f"{cfg.model_type}: PEFT's {'/'.join(sorted(scopes))} scope adapts the routed experts through target_parameters, not run on fake tensors")

        targets = lora_targets(model, req.lora_targets)
        lc = LoraConfig(
            r=req.lora_rank,
            lora_alpha=req.lora_alpha if req.lora_alpha is not None else 2 * req.lora_rank,
            lora_dropout=req.lora_dropout,
            target_modules=targets,
            task_type="CAUSAL_LM",
        )
        if req.method == "qlora":
            _qlora_prepare(model, req, lc)
        with torch.device("meta"):
            model = get_peft_model(model, lc)
        tp = getattr(model.peft_config["default"], "target_parameters", None)
        if tp:
            # PEFT (transformers 5) maps transformers 4's expert names
            # (Mixtral's w1/w2/w3, gate_proj/up_proj/down_proj of Qwen3-MoE,
            # OLMoE, DeepSeek) onto the fused expert parameters, even when
            # the names were meant for a dense or shared MLP: a
            # parametrization (ParamWrapper) whose autocast guard fails on
            # the meta device.
            raise NotSimulated(f"{cfg.model_type}: PEFT adapts {', '.join(sorted(tp))} through target_parameters (routed experts), not run on fake tensors")
    if req.grad_ckpt == "full":
        # As the Trainer enables it (use_reentrant False is the default too).
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    return model, targets


def set_flash(model) -> None:
    """Switches a built model to transformers' flash_attention_2 path, which
    it reads from the config at each forward (the package is imitated by
    _patched)."""
    if not getattr(type(model), "_supports_flash_attn", False):
        raise NotSimulated(f"{model.config.model_type}: transformers does not run flash-attn for it (_supports_flash_attn)")
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "_attn_implementation"):
            c._attn_implementation = "flash_attention_2"


def _qlora():
    try:
        from oracle import qlora
    except ImportError:  # run from estimate --simulate's directory, beside fakestep.py
        import qlora
    return qlora


def _qlora_prepare(model, req: Request, lc) -> None:
    """QLoRA's loading and kbit preparation, before get_peft_model (oracle/qlora.py)."""
    q = _qlora()
    q.quantize_model(model, req.quant, compute_dtype=torch.bfloat16)
    q.prepare(model, req.grad_ckpt == "full")
    lc._register_custom_module({q.Linear4bit: q.lora_layer_class()})


def _param_groups(model: torch.nn.Module):
    """HF Trainer's two groups: weight decay on all but biases and norms."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith("bias") or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": 0.0}, {"params": no_decay, "weight_decay": 0.0}]


def build_key(req: Request) -> tuple:
    """The request fields the built model depends on: requests that agree on
    them can share one model and differ only in shapes (seq_len, batch,
    grad_accum) and the optimizer."""
    return (req.method, req.precision, req.attn, req.grad_ckpt, req.lora_rank, req.lora_alpha,
            tuple(req.lora_targets), req.lora_dropout) + ((req.quant,) if req.method == "qlora" else ())


def simulate(config_dir: str, req: Request, steps: int = 2, built=None, census: bool = False) -> Result:
    """Runs `steps` optimizer steps of the request and returns the peaks.

    built is (model, targets) from build() for a request with the same
    build_key, to vary shapes without rebuilding the model; a run leaves the
    model as it found it (gradients set to None, no optimizer attached).
    census records which operator created each storage and fills
    Result.saved_by_op.
    """
    c0, t0 = time.process_time(), time.perf_counter()
    model, targets = built if built is not None else build(config_dir, req)
    t1 = time.perf_counter()
    live = LiveBytes()
    if census:
        live.origin = {}
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    for p in params:
        live.track(p)
    for b in model.buffers():
        live.track(b)
    groups = [g for g in _param_groups(model) if g["params"]]
    if req.optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=1e-5, foreach=True)
    else:
        # adamw_torch_forloop: torch's one-parameter-at-a-time step, which
        # CUDA runs when foreach=False (or fused=False alone) is passed.
        opt = torch.optim.AdamW(groups, lr=1e-5, foreach=req.optimizer == "adamw_torch")
    head = model.get_output_embeddings()
    hook = head.register_forward_hook(lambda *a: live.set_phase("loss"))
    grads_bytes = 0
    saved = None
    mixed = AUTOCAST.get(req.precision)
    forward = _autocast_forward(model, mixed) if mixed else model
    global _sdpa_math, _gqa_math_used
    _sdpa_math = req.attn == "sdpa_math"
    _gqa_math_used = False
    try:
        with _patched(), live, (_autocast_patches(mixed) if mixed else contextlib.nullcontext()):
            for _ in range(steps):
                for _ in range(req.grad_accum):
                    live.set_phase("forward")
                    before = set(live.live) if census else None
                    ids = torch.zeros((req.batch, req.seq_len), dtype=torch.long, device="meta")
                    labels = torch.zeros((req.batch, req.seq_len), dtype=torch.long, device="meta")
                    if req.own_loss:
                        # A plain loop: no labels to the model, then
                        # F.cross_entropy on the logits as they come out;
                        # the inline loop's variable keeps them through the
                        # backward and the step, unless it frees them.
                        logits = forward(input_ids=ids).logits
                        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
                        if req.frees_logits:
                            logits = None
                    else:
                        loss = forward(input_ids=ids, labels=labels).loss
                    if req.grad_accum > 1:
                        loss = loss / req.grad_accum
                    live.set_phase("backward")
                    if census:
                        saved = live.by_origin(exclude=before)
                    loss.backward()
                    del loss, ids, labels
                grads_bytes = live.bytes_of(p.grad for p in trainable)
                live.set_phase("optimizer")
                opt.step()
                opt.zero_grad(set_to_none=True)
                logits = None  # the loop's next forward overwrites it
            live.set_phase("done")
    finally:
        _sdpa_math = False
        hook.remove()
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    phases = {k: v for k, v in live.phase_peak.items() if k in ("forward", "loss", "backward", "optimizer")}
    adapter = next((str(p.dtype).removeprefix("torch.") for n, p in model.named_parameters() if "lora_" in n), None)
    return Result(
        peak_bytes=live.peak,
        phase_peak_bytes=phases,
        params_bytes=live.bytes_of(params),
        trainable_params_bytes=live.bytes_of(trainable),
        grads_bytes=grads_bytes,
        optimizer_state_bytes=live.bytes_of(state),
        trainable_params=sum(p.numel() for p in trainable),
        total_params=sum(p.numel() for p in params),
        lora_targets=targets,
        adapter_dtype=adapter,
        build_s=t1 - t0,
        run_s=time.perf_counter() - t1,
        cpu_s=time.process_time() - c0,
        saved_by_op=saved,
        experts=getattr(model.config, "_experts_implementation", None) if is_moe(model.config) else None,
        gqa_math=_gqa_math_used,
    )


def version_map() -> dict[str, str]:
    """The versions of the libraries whose code the oracle runs."""
    import peft
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}


def versions() -> str:
    return ", ".join(f"{k} {v}" for k, v in version_map().items())


def model_id(config_dir: str) -> str:
    """org/name from a catalog path (catalog/models/<org>/<name>), else the directory name."""
    parts = os.path.normpath(os.path.abspath(config_dir)).split(os.sep)
    if "models" in parts and len(parts) - parts.index("models") == 3:
        return "/".join(parts[-2:])
    return parts[-1]


def case_id(model: str, req: Request) -> str:
    """The row id of a request on a model: readable fields and a hash of the whole request."""
    d = dataclasses.asdict(req)
    if req.method != "qlora":
        del d["quant"]  # the ids of the other methods' rows predate the field
    if not req.own_loss:
        del d["own_loss"]  # so do the ids of the rows that run the model's own loss
    if not req.frees_logits:
        del d["frees_logits"]
    key = json.dumps(d, sort_keys=True)
    slug = model.replace("/", "-").lower()
    return f"oracle-{slug}-{req.method}-{req.precision}-s{req.seq_len}-b{req.batch}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def case(config_dir: str, req: Request, res: Result, model: str | None = None) -> dict[str, Any]:
    """The result as a row of the measurements schema, marked simulated."""
    from transformers import AutoConfig

    model = model or model_id(config_dir)
    arch = AutoConfig.from_pretrained(config_dir).model_type
    rid = case_id(model, req)
    gib = res.peak_bytes / 2**30
    state_dtype = None
    if req.optimizer in ("adamw_torch", "adamw_torch_forloop"):
        state_dtype = (res.adapter_dtype if req.method in ("lora", "qlora") else str(DTYPES[req.precision]).removeprefix("torch."))
        state_dtype = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}.get(state_dtype, state_dtype)
    phases = ", ".join(f"{k} {v / 2**30:.3f}" for k, v in res.phase_peak_bytes.items())
    moe = f"MoE experts {EXPERTS} (sizes independent of routing); " if res.experts else ""
    # Module names the schema's target list cannot say (a leaf in two scopes,
    # named parent.leaf for PEFT) are written as the request's scope keywords;
    # the notes keep the names PEFT was given.
    row_targets = res.lora_targets
    if any("." in t for t in res.lora_targets):
        row_targets = list(req.lora_targets)
        moe += f"LoRA modules {', '.join(res.lora_targets)}; "
    qnote = ""
    if req.method == "qlora":
        qnote = (f"QLoRA: bitsandbytes {_qlora().BNB_VERSION}'s Linear4bit/MatMul4Bit imitated (oracle/qlora.py), "
                 "kbit preparation by PEFT's own function; ")
    return {
        "id": rid,
        "source": f"canifinetune fake-tensor oracle (oracle/fakestep.py; {versions()}): two training steps on meta tensors, live storages rounded to 512 B",
        "trust": "",
        "simulated": True,
        "model": model,
        "arch": arch,
        "method": req.method,
        "precision": req.precision,
        "quant": (
            {"scheme": req.quant.removesuffix("-dq"), "double_quant": req.quant.endswith("-dq"), "compute_dtype": "bf16", "storage_dtype": "uint8"}
            if req.method == "qlora"
            else None
        ),
        "lora": (
            {"rank": req.lora_rank, "alpha": req.lora_alpha if req.lora_alpha is not None else 2 * req.lora_rank, "targets": row_targets, "extra_trainable": [], "dropout": req.lora_dropout}
            if req.method in ("lora", "qlora")
            else None
        ),
        "seq_len": req.seq_len,
        "seq_len_kind": "fixed",
        "batch": req.batch,
        "grad_accum": req.grad_accum,
        "grad_ckpt": req.grad_ckpt,
        "optimizer": req.optimizer,
        "optimizer_state_dtype": state_dtype,
        "attn": req.attn,
        "fused_ce": "none",
        "other_kernels": [],
        "framework": "pytorch" if req.own_loss else STACK,
        "gpu": {"name": None, "count": 1, "vram_gib": None},
        "sharding": {"strategy": "none", "cpu_offload": "none"},
        "measured": {"kind": "allocated", "gib": round(gib, 4), "oom": False, "original": f"{res.peak_bytes} bytes (simulated)"},
        "notes": (
            f"simulated, not measured: peak live tensor bytes on the training device; per phase GiB: {phases}; "
            f"params {res.params_bytes}, grads {res.grads_bytes}, optimizer states {res.optimizer_state_bytes} bytes; "
            f"LoRA dropout {req.lora_dropout}, adapters {res.adapter_dtype}; "
            f"{moe}{qnote}CUDA path imitated: SDPA flash (bf16/fp16, no mask) else memory-efficient kernel"
            f"{', grouped fp32 heads without a mask on the math kernel (torch 2.11)' if res.gqa_math else ''}, fused dropout (bool mask); "
            "not counted: cuBLAS workspace, CUDA context, allocator caching"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oracle.fakestep", description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="directory holding config.json (e.g. catalog/models/Qwen/Qwen2.5-0.5B)")
    ap.add_argument("request", help="JSON file: one request object or a list ('-' reads stdin)")
    ap.add_argument("--model", help="model id for the rows (default: org/name from a catalog path)")
    ap.add_argument("--timing", action="store_true", help="print build/run/CPU seconds per case on stderr")
    ap.add_argument("--census", action="store_true",
                    help="print on stderr, per case, the bytes the forward and loss left for the backward by creating operator and dtype")
    a = ap.parse_args(argv)
    cfg = a.config[: -len("config.json")] if a.config.endswith("config.json") else a.config
    cfg = cfg or "."
    try:
        raw = json.load(sys.stdin if a.request == "-" else open(a.request))
    except (OSError, ValueError) as e:
        print(f"fakestep: request {a.request}: {e}", file=sys.stderr)
        return 1
    reqs = raw if isinstance(raw, list) else [raw]
    rc = 0
    for i, d in enumerate(reqs):
        try:
            req = Request.from_json(d.get("config", d))
            res = simulate(cfg, req, census=a.census)
        except NotSimulated as e:
            print(f"fakestep: {a.request} request {i}: not simulated: {e}", file=sys.stderr)
            rc = 1
            continue
        except (ValueError, OSError, DataDependent) as e:
            print(f"fakestep: {a.request} request {i}: {e}", file=sys.stderr)
            rc = 1
            continue
        if a.census:
            print(json.dumps({"census": {"seq_len": req.seq_len, "batch": req.batch, "saved_by_op": res.saved_by_op}}), file=sys.stderr)
        if a.timing:
            print(f"fakestep: {req.seq_len}x{req.batch} build {res.build_s:.2f}s run {res.run_s:.2f}s cpu {res.cpu_s:.2f}s", file=sys.stderr)
        print(json.dumps(case(cfg, req, res, a.model)), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
