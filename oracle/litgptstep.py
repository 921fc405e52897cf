"""Fake-tensor oracle, second stack: LitGPT's own model, LoRA and training step.

The first stack (``oracle/fakestep.py``) imitates an HF Trainer + PEFT run.
This one runs LitGPT's code instead: ``litgpt.model.GPT`` (full fine-tuning)
or ``litgpt.lora.GPT`` (LoRA) built from LitGPT's own ``Config.from_name`` for
the model, with LitGPT's LoRA switches (query, key, value, projection, mlp,
head), rank, alpha and dropout, the precision handling of Lightning Fabric's
``bf16-true`` / ``16-true`` / ``32-true`` plugin (the module is created under
the plugin's default dtype and converted with ``convert_module``; the forward
runs in the plugin's ``forward_context``), LitGPT's loss
(``litgpt.utils.chunked_cross_entropy``; LoRA runs chunk the LM head by 128
positions as ``litgpt/finetune/lora.py`` does), and torch AdamW over
``model.parameters()`` as ``instantiate_torch_optimizer`` builds it. The
forward goes through what Fabric's module wrapper does around it: under
``bf16-true`` the plugin converts the output to the default dtype, so the
logits the loss sees are fp32 copies (four bytes per logit, and the loss's
log-softmax in fp32 too). The
training loop follows ``litgpt/finetune/{lora,full}.py``: the sanity-check
validation (two batches under ``no_grad``, full logits, unchunked loss) before
training, then micro-batches with ``loss / grad_accum`` backward, and every
``grad_accum`` micro-batches ``optimizer.step()`` and ``zero_grad()``.

Everything runs on ``meta`` tensors with the live-bytes accounting of
``oracle/fakestep.py`` (``LiveBytes``: every storage on the training device
counted once while alive, rounded up to 512 bytes) and the same CUDA SDPA
kernel choice (flash for bf16/fp16 without a mask, else memory-efficient).

Where the meta path differs from LitGPT on CUDA, the CUDA path is imitated:

* AdamW is built with ``foreach=True``: on CUDA parameters torch picks the
  foreach implementation by default; on meta parameters it would fall back
  to the per-parameter loop (same states, different temporaries).
* SDPA: as above (on meta torch would take the math path and save the
  seq x seq probabilities).
* Dropout (LoRA's, on the adapters' input): the fused CUDA kernel, which
  saves a bool mask; on meta ATen takes the unfused path and saves a noise
  tensor in the input's dtype.
* Micro-batches beyond the second of an optimizer step repeat the second's
  allocations exactly (same shapes; gradients accumulate in place), so the
  oracle runs at most two per step (``max_micro``) and scales the loss by the
  real ``grad_accum``; a test checks that 2 and 3 give the same peaks.
* Python lifetimes: ``fit()`` keeps ``logits`` (and ``loss``) from one
  iteration until the next forward has returned, so the previous
  micro-batch's logits are live through the next forward, and through the
  optimizer step; the oracle keeps them the same way.

QLoRA (``method: qlora``, ``quant`` nf4 / nf4-dq / fp4, ``bf16-true``,
optimizer ``paged_adamw_32bit``) follows ``--quantize bnb.<quant>``:

* Fabric's ``BitsandbytesPrecision(quant, bf16)`` (lightning 2.6.6,
  ``fabric/plugins/precision/bitsandbytes.py``): ``module_init_context``
  swaps the class ``torch.nn.Linear`` for its 4-bit layer while the model is
  built, and LitGPT passes no ``ignore_modules``, so every Linear is 4-bit:
  the projections, the LM head, and the frozen ``linear`` inside LitGPT's
  own LoRALinear / LoRAQKVLinear (the adapters are Parameters, bf16).
  ``_Linear4bit.quantize`` casts the weight to ``torch.half`` before
  ``quantize_4bit``, so the quantization state is fp16 and every matmul
  dequantizes to fp16 and then copies to bf16. Storage and matmul are
  ``oracle/qlora.py``'s (bitsandbytes 0.49.2, inside litgpt 0.5.13's range
  >=0.45.2,<0.50); ``bnb_saves_input`` swaps in MatMul4Bit as it was before
  bitsandbytes 0.43.2 (0.42.0, which LitGPT pinned in 2024, and 2023's
  releases): ``ctx.tensors = (A, B)`` keeps the matmul's input, and since it
  is a ctx attribute, not ``save_for_backward``, the backward does not free
  it; it lives as long as the graph, which fit() keeps through the next
  forward. Which bitsandbytes a measured row used is not recorded.
* The optimizer is bitsandbytes' PagedAdamW (``instantiate_bnb_optimizer``):
  fp32 states; those of parameters with at least 1e5 elements are in CUDA
  unified memory (``get_paged``: cudaMallocManaged + ``torch.frombuffer``),
  which ``torch.cuda.max_memory_allocated`` does not count, so they are left
  out (``paged_state_bytes`` reports them); smaller parameters' states are
  ``torch.zeros_like`` on the device and counted. The update is one kernel.
* litgpt 0.5.13's script then swaps the embedding for bitsandbytes'
  StableEmbedding (trainable weight and LayerNorm outside the optimizer,
  so their gradients stay; the old embedding stays alive in ``main()``);
  ``stable_embedding=False`` is the script before litgpt ae798aba
  (2024-10-04).

Not imitated (``NotSimulated``): ``bf16-mixed`` (Fabric's autocast plugin;
the HF stack imitates autocast), FSDP / several devices, the transient of loading and
quantizing a checkpoint (one fp16 weight at a time, before training), and
the text generation LitGPT runs at each evaluation interval (no grad, KV
cache of one sequence: far below the training peak for every case here).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import sys
import time
from typing import Any

import torch

from oracle import qlora
from oracle.fakestep import DataDependent, LiveBytes, NotSimulated, Request, _cuda_dropout, _cuda_sdpa

STACK = "litgpt"
PAGED = "paged_adamw_32bit"
QUANTS = ("nf4", "nf4-dq", "fp4")  # --quantize bnb.<quant> (fp4-dq is not in the request vocabulary)
# bitsandbytes' get_state_buffer: a paged optimizer state goes to CUDA unified
# memory only when the parameter has at least this many elements; smaller
# parameters get torch.zeros_like on the device (counted).
PAGED_MIN_NUMEL = 100_000
# litgpt 0.5.13's bitsandbytes range on Linux is >=0.45.2,<0.50: oracle/qlora.py's
# 0.49.2 MatMul4Bit (no activation saved). bitsandbytes before 0.43.2 (LitGPT
# pinned 0.42.0 from 2024-03-15 to 2024-12-28) kept the matmul's input in
# ctx.tensors until the backward: bnb_saves_input.
LITGPT_BNB = qlora.BNB_VERSION
PLUGIN_PRECISION = {"bf16-true": "bf16-true", "fp16-true": "16-true", "fp32": "32-true"}
LM_HEAD_CHUNK = 128  # litgpt/finetune/lora.py: model(input_ids, lm_head_chunk_size=128)

# LitGPT's LoRA switches for the target names a request may use: LitGPT's own
# (query, key, value, projection, mlp, head), scopes, and the HF module names
# the measurements schema records. A fused query_key_value module means
# LitGPT's default q and v slices (lora_query, lora_value), as LitGPT runs do.
SWITCHES = ("query", "key", "value", "projection", "mlp", "head")
TARGET_SWITCHES = {
    "query": ("query",), "q_proj": ("query",), "q": ("query",),
    "key": ("key",), "k_proj": ("key",), "k": ("key",),
    "value": ("value",), "v_proj": ("value",), "v": ("value",),
    "query_key_value": ("query", "value"), "qkv": ("query", "key", "value"), "qkv_proj": ("query", "key", "value"),
    "Wqkv": ("query", "key", "value"),
    "projection": ("projection",), "proj": ("projection",), "o_proj": ("projection",), "dense": ("projection",),
    "out_proj": ("projection",), "c_proj": ("projection",),
    "mlp": ("mlp",), "gate_proj": ("mlp",), "up_proj": ("mlp",), "down_proj": ("mlp",), "gate_up_proj": ("mlp",),
    "fc1": ("mlp",), "fc2": ("mlp",), "fc_1": ("mlp",), "fc_2": ("mlp",),
    "dense_h_to_4h": ("mlp",), "dense_4h_to_h": ("mlp",), "w1": ("mlp",), "w2": ("mlp",), "w3": ("mlp",),
    "head": ("head",), "lm_head": ("head",),
    "attention": ("query", "key", "value", "projection"),
    "all-linear": ("query", "key", "value", "projection", "mlp"),
    "all_linear": ("query", "key", "value", "projection", "mlp"),
    "all": ("query", "key", "value", "projection", "mlp", "head"),
}


def lora_switches(targets: list[str]) -> dict[str, bool]:
    """LitGPT's lora_<switch> flags for a request's target list."""
    on = set()
    for t in targets:
        k = t.strip()
        sw = TARGET_SWITCHES.get(k) or TARGET_SWITCHES.get(k.lower())
        if sw is None:
            raise ValueError(f"request field lora_targets: {t!r} names no LitGPT LoRA switch (known: {', '.join(sorted(TARGET_SWITCHES))})")
        on.update(sw)
    return {s: s in on for s in SWITCHES}


class LitRequest(Request):
    """A request to this stack: as fakestep.Request, plus bitsandbytes'
    PagedAdamW, which LitGPT's QLoRA always runs."""

    OPTIMIZERS = ("adamw_torch", PAGED)


def check(req: Request) -> None:
    """What this stack refuses beyond what fakestep.Request.check refuses."""
    if req.precision not in PLUGIN_PRECISION:
        # The HF stack imitates autocast; Fabric's mixed plugin is not imitated here.
        raise NotSimulated(f"precision {req.precision}: Fabric's autocast precision plugin is not imitated by the LitGPT stack")
    if req.method == "qlora":
        # litgpt/finetune/lora.py: with --quantize bnb.* the optimizer is
        # always instantiate_bnb_optimizer's bnb.optim.PagedAdamW (32-bit states).
        if req.optimizer != PAGED:
            raise NotSimulated(f"optimizer {req.optimizer!r} with qlora: LitGPT's QLoRA always runs bitsandbytes' PagedAdamW ({PAGED!r})")
        if req.quant not in QUANTS:
            raise NotSimulated(f"qlora quant {req.quant!r}: the LitGPT stack imitates {', '.join(QUANTS)} (Fabric's BitsandbytesPrecision)")
    elif req.optimizer != "adamw_torch":
        raise NotSimulated(f"optimizer {req.optimizer!r}: the LitGPT stack simulates torch AdamW (foreach)")
    if req.attn != "sdpa":
        raise NotSimulated(f"attn {req.attn!r}: LitGPT always calls SDPA (eager only where the model soft-caps logits)")


def _plugin(precision: str):
    """Lightning Fabric's precision plugin for the request's precision."""
    from lightning.fabric.plugins.precision import HalfPrecision, Precision

    p = PLUGIN_PRECISION[precision]
    return Precision() if p == "32-true" else HalfPrecision(p)


def config_name(name: str) -> str:
    """The LitGPT config for a model: its HF org/name or LitGPT name as is,
    else the part after the org (LitGPT names Meta-Llama-3.1-8B Llama-3.1-8B)."""
    from litgpt.config import configs, name_to_config

    if name in name_to_config or any(name in (c["hf_config"]["name"], c["hf_config"]["org"] + "/" + c["hf_config"]["name"]) for c in configs):
        return name
    short = name.rsplit("/", 1)[-1]
    if short in name_to_config:
        return short
    raise ValueError(f"model {name!r}: LitGPT {version_map()['litgpt']} has no config of that name")


class MatMul4BitSavesInput(qlora.MatMul4Bit):
    """MatMul4Bit of bitsandbytes before 0.43.2 (0.42.0's
    autograd/_functions.py): as 0.49.2's, but ``ctx.tensors = (A, B)`` keeps
    the matmul's input alive until the backward (bitsandbytes 9e753741,
    "fix QLoRA mem bug: delete useless buffered activation", removed it)."""

    @staticmethod
    def forward(ctx, A, B, bias, qs):
        out = qlora.MatMul4Bit.forward(ctx, A, B, bias, qs)
        if any(ctx.needs_input_grad[:2]):
            ctx.tensors = (A, B)
        return out


class Linear4bitSavesInput(qlora.Linear4bit):
    matmul = MatMul4BitSavesInput


def quantize_linears(model: torch.nn.Module, quant: str, dtype: torch.dtype, saves_input: bool) -> list[str]:
    """Fabric's BitsandbytesPrecision(quant, dtype) as LitGPT sets it up.

    ``module_init_context`` replaces the class ``torch.nn.Linear`` while the
    model is built (``ignore_modules`` is empty: LitGPT passes none), so every
    Linear becomes a 4-bit layer: the attention and MLP projections, the LM
    head, and the frozen ``linear`` inside LitGPT's LoRALinear /
    LoRAQKVLinear (the adapters are plain Parameters and stay in ``dtype``).
    Embeddings and norms are not Linear and stay in ``dtype``. The weight is
    quantized on load by ``_Linear4bit.quantize``, which casts it to
    ``torch.half`` first, so the quantization state's dtype (what
    dequantize_4bit returns) is fp16 and MatMul4Bit casts it to the input's
    bf16. ``convert_module`` sets ``compute_dtype`` to ``dtype``.
    """
    cls = Linear4bitSavesInput if saves_input else qlora.Linear4bit
    done = []

    def walk(mod: torch.nn.Module, prefix: str) -> None:
        for name, child in list(mod.named_children()):
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(child, torch.nn.Linear):
                w = torch.empty((child.out_features, child.in_features), dtype=torch.half, device="meta")
                new = cls(child.in_features, child.out_features, child.bias is not None, dtype, quant, w, child.bias)
                setattr(mod, name, new)
                done.append(full)
            else:
                walk(child, full)

    walk(model, "")
    return done


class StableEmbedding(torch.nn.Embedding):
    """bitsandbytes' nn.StableEmbedding: an embedding followed by a LayerNorm
    run in the default dtype (bf16 inside the plugin's forward context)."""

    def __init__(self, num, dim, device=None, dtype=None):
        super().__init__(num, dim, device=device, dtype=dtype)
        self.norm = torch.nn.LayerNorm(dim, device=device, dtype=dtype)

    def forward(self, input):
        emb = torch.nn.functional.embedding(input, self.weight, self.padding_idx, self.max_norm,
                                            self.norm_type, self.scale_grad_by_freq, self.sparse)
        emb = emb.to(torch.get_default_dtype())
        return self.norm(emb).to(self.weight.dtype)


class PagedAdamW:
    """bitsandbytes' optim.PagedAdamW (Optimizer2State, optim_bits 32,
    is_paged): on the first step of a parameter with a gradient, init_state
    makes two fp32 states with get_state_buffer, which for a parameter of at
    least 1e5 elements calls functional.get_paged: cudaMallocManaged memory
    wrapped by torch.frombuffer, outside torch's caching allocator, so
    torch.cuda.max_memory_allocated never counts it; smaller parameters get
    torch.zeros_like on the device (counted). The update is one CUDA kernel
    (optimizer_update_32bit) writing the parameter and states in place: no
    torch allocation. percentile_clipping 100 and max_unorm 0 (the
    defaults) allocate no gnorm/unorm vectors. zero_grad is torch's
    (set_to_none)."""

    def __init__(self, params):
        self.params = list(params)
        self.state: dict[torch.Tensor, dict[str, Any]] = {}
        self.paged_bytes = 0

    def step(self) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            st = self.state.get(p)
            if st is None:
                st = self.state[p] = {"step": 0}
                if p.numel() < PAGED_MIN_NUMEL:
                    st["state1"] = torch.zeros_like(p, dtype=torch.float32)
                    st["state2"] = torch.zeros_like(p, dtype=torch.float32)
                else:
                    self.paged_bytes += 2 * 4 * p.numel()  # unified memory, not a device tensor
            st["step"] += 1

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


@dataclasses.dataclass
class Built:
    model: torch.nn.Module
    plugin: Any
    config: Any
    switches: dict[str, bool]
    # QLoRA only: the parameters the optimizer was given (before the
    # embedding swap), what the finetune script keeps alive beside the model,
    # and which script / bitsandbytes behaviour was imitated.
    opt_params: list | None = None
    kept: list = dataclasses.field(default_factory=list)
    quantized: list = dataclasses.field(default_factory=list)
    stable_embedding: bool = False
    bnb_saves_input: bool = False


def build(name: str, req: Request, config_overrides: dict[str, Any] | None = None,
          stable_embedding: bool = True, bnb_saves_input: bool = False) -> Built:
    """The model as LitGPT's finetune script sets it up, on the meta device.

    name is a LitGPT config name or an HF org/name LitGPT knows;
    config_overrides replace Config fields (tests use a tiny model).

    QLoRA only: stable_embedding is litgpt 0.5.13's script (since litgpt
    ae798aba, 2024-10-04: the embedding swapped for bitsandbytes'
    StableEmbedding after the optimizer is built); bnb_saves_input imitates
    bitsandbytes before 0.43.2 (MatMul4Bit keeps its input) instead of the
    0.49.2 that litgpt 0.5.13's requirement range allows.
    """
    import litgpt.lora as lora
    import litgpt.model as full

    check(req)
    name = config_name(name)
    plugin = _plugin(req.precision)
    over = dict(config_overrides or {})
    switches: dict[str, bool] = {}
    lora_like = req.method in ("lora", "qlora")
    if lora_like:
        switches = lora_switches(req.lora_targets)
        over.update(
            lora_r=req.lora_rank,
            lora_alpha=req.lora_alpha if req.lora_alpha is not None else 16,
            lora_dropout=req.lora_dropout,
            **{f"lora_{k}": v for k, v in switches.items()},
        )
        cfg = lora.Config.from_name(name, **over)
    else:
        cfg = full.Config.from_name(name, **over)
    if req.seq_len > cfg.block_size:
        raise ValueError(f"request field seq_len: {req.seq_len} exceeds {cfg.name}'s block size {cfg.block_size}")
    # fabric.init_module(): created on the device under the plugin's dtype.
    with torch.device("meta"), plugin.module_init_context():
        model = (lora.GPT if lora_like else full.GPT)(cfg)
    quantized: list[str] = []
    if req.method == "qlora":
        # BitsandbytesPrecision's module_init_context: the Linear layers are
        # built as 4-bit layers (here replaced right after; same result).
        quantized = quantize_linears(model, req.quant, torch.bfloat16, bnb_saves_input)
    if lora_like:
        lora.mark_only_lora_as_trainable(model)
    opt_params, kept = None, []
    if req.method == "qlora":
        # BitsandbytesPrecision.convert_module casts nothing (the model was
        # built in bf16); the optimizer gets model.parameters() now.
        opt_params = list(model.parameters())
        if stable_embedding:
            # litgpt/finetune/lora.py after instantiate_bnb_optimizer: the
            # embedding becomes a StableEmbedding (weight and norm trainable,
            # as nn.Embedding/LayerNorm create them, but not in the optimizer,
            # so their gradients are never zeroed); main()'s local
            # old_embedding keeps the old weight alive through fit().
            old = model.transformer.wte
            new = StableEmbedding(old.num_embeddings, old.embedding_dim, device="meta", dtype=old.weight.dtype)
            model.transformer.wte = new
            kept.append(old)
    else:
        model = plugin.convert_module(model)  # fabric.setup_module
    if req.grad_ckpt == "full":
        # Block-level activation checkpointing, non-reentrant (what
        # Fabric's activation_checkpointing_policy={Block} applies).
        from torch.utils.checkpoint import checkpoint

        for blk in model.transformer.h:
            fwd = blk.forward
            blk.forward = lambda *a, _f=fwd, **k: checkpoint(_f, *a, use_reentrant=False, **k)
    elif req.grad_ckpt != "none":
        raise NotSimulated(f"grad_ckpt {req.grad_ckpt!r}")
    # fit(): model.max_seq_length = min(longest sample, train.max_seq_length);
    # a length other than the block size rebuilds the RoPE cache in fp32.
    model.max_seq_length = req.seq_len
    model.train()
    return Built(model, plugin, cfg, switches, opt_params, kept, quantized,
                 stable_embedding and req.method == "qlora", bnb_saves_input and req.method == "qlora")


@dataclasses.dataclass
class Result:
    peak_bytes: int
    phase_peak_bytes: dict[str, int]
    params_bytes: int
    trainable_params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int
    paged_state_bytes: int  # bitsandbytes' paged states: unified memory, not counted in the peak
    trainable_params: int
    total_params: int
    micro_batches_run: int
    later_seq_len: int | None  # the micro-batches after the first, when shorter
    build_s: float
    run_s: float
    cpu_s: float


class _CensusBytes(LiveBytes):
    """LiveBytes that records origins and, at each new overall peak, its
    phase, the operator that made it and what is live beside the model's
    parameters and buffers, by origin (the census's "peak")."""

    def __init__(self, params_of: torch.nn.Module) -> None:
        super().__init__()
        self.origin = {}
        self._model = params_of
        self.at_peak: dict[str, Any] = {}

    def track(self, t: torch.Tensor) -> None:
        before = self.peak
        super().track(t)
        if self.peak > before and self.phase not in ("setup", "validate"):
            skip = {p.untyped_storage()._cdata for p in self._model.parameters()}
            skip |= {b.untyped_storage()._cdata for b in self._model.buffers()}
            self.at_peak = {"phase": self.phase, "op": self._op, "bytes": self.peak, "live": self.by_origin(exclude=skip)}


@contextlib.contextmanager
def _cuda_path():
    F = torch.nn.functional
    old = F.scaled_dot_product_attention, F.dropout
    F.scaled_dot_product_attention, F.dropout = _cuda_sdpa, _cuda_dropout
    try:
        yield
    finally:
        F.scaled_dot_product_attention, F.dropout = old


def _fabric_forward(model: torch.nn.Module, plugin: Any, *args: Any, **kwargs: Any) -> Any:
    """The forward of the module fabric.setup_module returns (_FabricModule):
    inputs converted to the plugin's dtype, the forward under its context, and
    the output converted back to the default dtype, so under bf16-true the
    logits reach the loss in fp32."""
    args, kwargs = plugin.convert_input((args, kwargs))
    with plugin.forward_context():
        out = model(*args, **kwargs)
    return plugin.convert_output(out)


def simulate(name: str, req: Request, steps: int = 2, max_micro: int = 2, validate_iters: int = 2,
             built: Built | None = None, config_overrides: dict[str, Any] | None = None,
             later_seq_len: int | None = None, census: dict[str, Any] | None = None, **build_kw: Any) -> Result:
    """Runs LitGPT's sanity-check validation and `steps` optimizer steps.

    later_seq_len: the length of every micro-batch after the first (default
    the request's seq_len), for a run whose first batch alone is the longest
    (lit-gpt's resource-table script put the longest sample first).

    census, a dict, is filled (first training micro-batch) with what each
    block's forward leaves alive ("blocks": one {origin: bytes} per block),
    what the forward leaves alive after the last block ("head"), what the
    loss adds ("loss"), the live bytes at the end of the forward and of the
    loss ("live_forward", "live_loss"), and what is live at the step's peak
    ("peak")."""
    from litgpt.utils import chunked_cross_entropy

    c0, t0 = time.process_time(), time.perf_counter()
    b = built if built is not None else build(name, req, config_overrides, **build_kw)
    model, plugin = b.model, b.plugin
    t1 = time.perf_counter()
    live = _CensusBytes(params_of=model) if census is not None else LiveBytes()
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    for p in params:
        live.track(p)
    for buf in model.buffers():
        live.track(buf)
    for m in b.kept:
        for t in list(m.parameters()) + list(m.buffers()):
            live.track(t)
    if req.method == "qlora":
        # instantiate_bnb_optimizer: bnb.optim.PagedAdamW(model.parameters()).
        opt = PagedAdamW(b.opt_params)
    else:
        # instantiate_torch_optimizer("AdamW", model.parameters()); foreach as on CUDA.
        opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0, betas=(0.9, 0.95), foreach=True)
    micro = min(req.grad_accum, max_micro)
    grads_bytes = 0
    B, T = req.batch, req.seq_len
    with _cuda_path(), live:
        # validate(..., max_iters=2) under no_grad, eval mode, unchunked loss;
        # its locals die when it returns.
        live.set_phase("validate")
        model.eval()
        with torch.no_grad():
            logits = None
            for _ in range(validate_iters):
                ids = torch.zeros((B, T), dtype=torch.long, device="meta")
                targets = torch.zeros((B, T), dtype=torch.long, device="meta")
                logits = _fabric_forward(model, plugin, ids)
                loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:], chunk_size=0)
            del logits, loss, ids, targets
        model.train()
        # fit()'s loop variables (input_ids, targets, logits, loss) live on
        # from one iteration into the next: the previous micro-batch's logits
        # are only released when the next forward returns and is assigned.
        logits = loss = None
        cfirst = census is not None
        first = True
        for _ in range(steps):
            for _ in range(micro):
                live.set_phase("forward")
                if cfirst:
                    hooks, before, lastkeys = [], {}, [set(live.live)]
                    census["blocks"] = []

                    def pre(mod, _a, _before=before):
                        _before["k"] = set(live.live)

                    def post(mod, _a, _o, _before=before):
                        census["blocks"].append(live.by_origin(exclude=_before["k"]))
                        lastkeys[0] = set(live.live)

                    for blk in model.transformer.h:
                        hooks.append(blk.register_forward_pre_hook(pre))
                        hooks.append(blk.register_forward_hook(post))
                t = T if first or later_seq_len is None else later_seq_len
                first = False
                ids = torch.zeros((B, t), dtype=torch.long, device="meta")
                targets = torch.zeros((B, t), dtype=torch.long, device="meta")
                if req.method in ("lora", "qlora"):
                    logits = _fabric_forward(model, plugin, ids, lm_head_chunk_size=LM_HEAD_CHUNK)
                else:
                    logits = _fabric_forward(model, plugin, ids)
                if cfirst:
                    for hk in hooks:
                        hk.remove()
                    census["head"] = live.by_origin(exclude=lastkeys[0])
                    census["live_forward"] = live.cur
                    fwdkeys = set(live.live)
                live.set_phase("loss")
                if req.method in ("lora", "qlora"):
                    logits[-1] = logits[-1][..., :-1, :]
                    loss = chunked_cross_entropy(logits, targets[..., 1:])
                else:
                    loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])
                if cfirst:
                    census["loss"] = live.by_origin(exclude=fwdkeys)
                    census["live_loss"] = live.cur
                    cfirst = False
                live.set_phase("backward")
                plugin.backward(loss / req.grad_accum, model)
            grads_bytes = live.bytes_of(p.grad for p in trainable)
            live.set_phase("optimizer")
            opt.step()
            opt.zero_grad()
        del logits, loss, ids, targets
        live.set_phase("done")
    if census is not None:
        census["peak"] = live.at_peak
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    paged = getattr(opt, "paged_bytes", 0)
    phases = {k: v for k, v in live.phase_peak.items() if k in ("validate", "forward", "loss", "backward", "optimizer")}
    return Result(
        peak_bytes=live.peak,
        phase_peak_bytes=phases,
        params_bytes=live.bytes_of(params),
        trainable_params_bytes=live.bytes_of(trainable),
        grads_bytes=grads_bytes,
        optimizer_state_bytes=live.bytes_of(state),
        paged_state_bytes=paged,
        trainable_params=sum(p.numel() for p in trainable),
        total_params=sum(p.numel() for p in params),
        micro_batches_run=micro,
        later_seq_len=later_seq_len,
        build_s=t1 - t0,
        run_s=time.perf_counter() - t1,
        cpu_s=time.process_time() - c0,
    )


def version_map() -> dict[str, str]:
    import importlib.metadata as md

    return {"torch": torch.__version__, "litgpt": md.version("litgpt"), "lightning": md.version("lightning")}


def case(name: str, req: Request, res: Result, built: Built, mirrors: str | None = None,
         arch: str | None = None) -> dict[str, Any]:
    """The result as a row of the measurements schema, marked simulated.

    mirrors names the measured row whose configuration this one repeats: the
    id becomes oracle-<that id> and the notes say so.
    """
    vers = ", ".join(f"{k} {v}" for k, v in version_map().items())
    key = json.dumps(dataclasses.asdict(req), sort_keys=True)
    slug = name.replace("/", "-").lower()
    rid = f"oracle-{mirrors}" if mirrors else f"oracle-litgpt-{slug}-{req.method}-{req.precision}-s{req.seq_len}-b{req.batch}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
    phases = ", ".join(f"{k} {v / 2**30:.3f}" for k, v in res.phase_peak_bytes.items())
    dt = {"bf16-true": "bf16", "fp16-true": "fp16", "fp32": "fp32"}[req.precision]
    row = {
        "id": rid,
        "source": f"canifinetune fake-tensor oracle, LitGPT stack (oracle/litgptstep.py; {vers}): sanity-check validation and two training steps on meta tensors, live storages rounded to 512 B",
        "trust": "",
        "simulated": True,
        "model": name,
        "arch": arch or built.config.name,
        "method": req.method,
        "precision": req.precision,
        "quant": (
            {"scheme": "fp4" if req.quant == "fp4" else "nf4", "double_quant": req.quant == "nf4-dq",
             "compute_dtype": "bf16", "storage_dtype": "uint8"}
            if req.method == "qlora" else None
        ),
        "lora": (
            {"rank": req.lora_rank, "alpha": req.lora_alpha if req.lora_alpha is not None else 16,
             # the request's target names (the schema's HF module names,
             # which the estimator reads); the LitGPT switches they turn
             # on are in the notes.
             "targets": list(req.lora_targets), "extra_trainable": [], "dropout": req.lora_dropout}
            if req.method in ("lora", "qlora") else None
        ),
        "seq_len": req.seq_len,
        "seq_len_kind": "fixed",
        "batch": req.batch,
        "grad_accum": req.grad_accum,
        "grad_ckpt": req.grad_ckpt,
        "optimizer": req.optimizer,
        "optimizer_state_dtype": "fp32" if req.method == "qlora" else dt,
        "attn": "sdpa",
        "fused_ce": "none",
        "other_kernels": [],
        "framework": STACK,
        "gpu": {"name": None, "count": 1, "vram_gib": None},
        "sharding": {"strategy": "none", "cpu_offload": "none"},
        "measured": {"kind": "allocated", "gib": round(res.peak_bytes / 2**30, 4), "oom": False,
                     "original": f"{res.peak_bytes} bytes (simulated)"},
        "notes": (
            f"simulated, not measured: peak live tensor bytes on the training device; per phase GiB: {phases}; "
            f"params {res.params_bytes}, grads {res.grads_bytes}, optimizer states {res.optimizer_state_bytes} bytes; "
            f"LitGPT config {built.config.name}; LoRA switches {', '.join(k for k, v in built.switches.items() if v) or 'none'}; LoRA dropout {req.lora_dropout}; micro-batches run per step {res.micro_batches_run} of {req.grad_accum}; "
            + (f"the first micro-batch at {req.seq_len} tokens, the later ones at {res.later_seq_len}; " if res.later_seq_len else "")
            +
            "CUDA path imitated: SDPA flash (bf16/fp16, no mask) else memory-efficient kernel, fused dropout (bool mask), AdamW foreach; "
            "not counted: cuBLAS workspace, CUDA context, allocator caching"
        ),
    }
    if req.method == "qlora":
        bnb = "bitsandbytes before 0.43.2 (MatMul4Bit keeps its input)" if built.bnb_saves_input else f"bitsandbytes {LITGPT_BNB}"
        script = ("litgpt 0.5.13's finetune script (StableEmbedding swapped in after the optimizer)" if built.stable_embedding
                  else "LitGPT's finetune script before the StableEmbedding swap (litgpt ae798aba, 2024-10-04)")
        row["notes"] += (f"; QLoRA: Fabric's BitsandbytesPrecision({req.quant!r}, bf16) with {len(built.quantized)} Linear layers "
                         f"4-bit (LM head included), {bnb}'s Linear4bit/MatMul4Bit imitated (oracle/qlora.py), {script}; "
                         f"bitsandbytes PagedAdamW: {res.paged_state_bytes} bytes of states in CUDA unified memory, not counted")
    if mirrors:
        row["notes"] = f"mirrors the measured row {mirrors}; " + row["notes"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oracle.litgptstep", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="LitGPT config name or HF org/name LitGPT knows (e.g. meta-llama/Llama-2-7b-hf); a request object's own \"model\" field overrides it")
    ap.add_argument("request", help="JSON file: one request object or a list ('-' reads stdin)")
    ap.add_argument("--timing", action="store_true", help="print build/run/CPU seconds per case on stderr")
    ap.add_argument("--census", action="store_true",
                    help="print on stderr, per block, what its forward leaves alive by creating operator and dtype, then the head's and the loss's")
    ap.add_argument("--layers", type=int, default=0, help="override the config's n_layer (census of a few blocks)")
    a = ap.parse_args(argv)
    try:
        raw = json.load(sys.stdin if a.request == "-" else open(a.request))
    except (OSError, ValueError) as e:
        print(f"litgptstep: request {a.request}: {e}", file=sys.stderr)
        return 1
    rc = 0
    for i, d in enumerate(raw if isinstance(raw, list) else [raw]):
        try:
            name = d.get("model", a.model)
            req = LitRequest.from_json(d.get("config", d))
            # "script": build()'s QLoRA switches (stable_embedding,
            # bnb_saves_input), e.g. the code a dated measured row ran.
            script = {k: bool(v) for k, v in d.get("script", {}).items() if k in ("stable_embedding", "bnb_saves_input")}
            b = build(name, req, {"n_layer": a.layers} if a.layers else None, **script)
            cen: dict[str, Any] | None = {} if a.census else None
            res = simulate(name, req, built=b, census=cen)
            if cen is not None:
                print(json.dumps(cen, indent=1), file=sys.stderr)
        except NotSimulated as e:
            print(f"litgptstep: {a.request} request {i}: not simulated: {e}", file=sys.stderr)
            rc = 1
            continue
        except (ValueError, OSError, DataDependent) as e:
            print(f"litgptstep: {a.request} request {i}: {e}", file=sys.stderr)
            rc = 1
            continue
        if a.timing:
            print(f"litgptstep: {req.seq_len}x{req.batch} build {res.build_s:.2f}s run {res.run_s:.2f}s cpu {res.cpu_s:.2f}s", file=sys.stderr)
        print(json.dumps(case(name, req, res, b)), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
