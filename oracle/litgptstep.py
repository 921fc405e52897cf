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

Not imitated (``NotSimulated``): QLoRA (bitsandbytes' 4-bit layers and paged
8-bit optimizers are not faked), ``bf16-mixed`` (autocast does not act on
meta tensors), FSDP / several devices, and the text generation LitGPT runs at
each evaluation interval (no grad, KV cache of one sequence: far below the
training peak for every case here).
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

from oracle.fakestep import DataDependent, LiveBytes, NotSimulated, Request, _cuda_dropout, _cuda_sdpa

STACK = "litgpt"
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


def check(req: Request) -> None:
    """What this stack refuses beyond what fakestep.Request.check refuses
    (which accepts QLoRA and bf16-mixed: the HF stack imitates them)."""
    if req.method not in ("full", "lora"):
        raise NotSimulated(f"method {req.method!r}: the LitGPT stack simulates full and LoRA (bitsandbytes' 4-bit layers are imitated for the HF stack only)")
    if req.precision not in PLUGIN_PRECISION:
        raise NotSimulated(f"precision {req.precision}: the LitGPT stack simulates {', '.join(PLUGIN_PRECISION)} (Fabric's mixed-precision plugin is not imitated)")
    if req.optimizer != "adamw_torch":
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


@dataclasses.dataclass
class Built:
    model: torch.nn.Module
    plugin: Any
    config: Any
    switches: dict[str, bool]


def build(name: str, req: Request, config_overrides: dict[str, Any] | None = None) -> Built:
    """The model as LitGPT's finetune script sets it up, on the meta device.

    name is a LitGPT config name or an HF org/name LitGPT knows;
    config_overrides replace Config fields (tests use a tiny model).
    """
    import litgpt.lora as lora
    import litgpt.model as full

    check(req)
    name = config_name(name)
    plugin = _plugin(req.precision)
    over = dict(config_overrides or {})
    switches: dict[str, bool] = {}
    if req.method == "lora":
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
        model = (lora.GPT if req.method == "lora" else full.GPT)(cfg)
    if req.method == "lora":
        lora.mark_only_lora_as_trainable(model)
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
    return Built(model, plugin, cfg, switches)


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
    micro_batches_run: int
    build_s: float
    run_s: float
    cpu_s: float


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
             built: Built | None = None, config_overrides: dict[str, Any] | None = None) -> Result:
    """Runs LitGPT's sanity-check validation and `steps` optimizer steps."""
    from litgpt.utils import chunked_cross_entropy

    c0, t0 = time.process_time(), time.perf_counter()
    b = built if built is not None else build(name, req, config_overrides)
    model, plugin = b.model, b.plugin
    t1 = time.perf_counter()
    live = LiveBytes()
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    for p in params:
        live.track(p)
    for buf in model.buffers():
        live.track(buf)
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
        for _ in range(steps):
            for _ in range(micro):
                live.set_phase("forward")
                ids = torch.zeros((B, T), dtype=torch.long, device="meta")
                targets = torch.zeros((B, T), dtype=torch.long, device="meta")
                if req.method == "lora":
                    logits = _fabric_forward(model, plugin, ids, lm_head_chunk_size=LM_HEAD_CHUNK)
                else:
                    logits = _fabric_forward(model, plugin, ids)
                live.set_phase("loss")
                if req.method == "lora":
                    logits[-1] = logits[-1][..., :-1, :]
                    loss = chunked_cross_entropy(logits, targets[..., 1:])
                else:
                    loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])
                live.set_phase("backward")
                plugin.backward(loss / req.grad_accum, model)
            grads_bytes = live.bytes_of(p.grad for p in trainable)
            live.set_phase("optimizer")
            opt.step()
            opt.zero_grad()
        del logits, loss, ids, targets
        live.set_phase("done")
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    phases = {k: v for k, v in live.phase_peak.items() if k in ("validate", "forward", "loss", "backward", "optimizer")}
    return Result(
        peak_bytes=live.peak,
        phase_peak_bytes=phases,
        params_bytes=live.bytes_of(params),
        trainable_params_bytes=live.bytes_of(trainable),
        grads_bytes=grads_bytes,
        optimizer_state_bytes=live.bytes_of(state),
        trainable_params=sum(p.numel() for p in trainable),
        total_params=sum(p.numel() for p in params),
        micro_batches_run=micro,
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
        "quant": None,
        "lora": (
            {"rank": req.lora_rank, "alpha": req.lora_alpha if req.lora_alpha is not None else 16,
             "targets": [k for k, v in built.switches.items() if v], "extra_trainable": []}
            if req.method == "lora" else None
        ),
        "seq_len": req.seq_len,
        "seq_len_kind": "fixed",
        "batch": req.batch,
        "grad_accum": req.grad_accum,
        "grad_ckpt": req.grad_ckpt,
        "optimizer": "adamw_torch",
        "optimizer_state_dtype": dt,
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
            f"LitGPT config {built.config.name}; LoRA dropout {req.lora_dropout}; micro-batches run per step {res.micro_batches_run} of {req.grad_accum}; "
            "CUDA path imitated: SDPA flash (bf16/fp16, no mask) else memory-efficient kernel, fused dropout (bool mask), AdamW foreach; "
            "not counted: cuBLAS workspace, CUDA context, allocator caching"
        ),
    }
    if mirrors:
        row["notes"] = f"mirrors the measured row {mirrors}; " + row["notes"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oracle.litgptstep", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="LitGPT config name or HF org/name LitGPT knows (e.g. meta-llama/Llama-2-7b-hf)")
    ap.add_argument("request", help="JSON file: one request object or a list ('-' reads stdin)")
    ap.add_argument("--timing", action="store_true", help="print build/run/CPU seconds per case on stderr")
    a = ap.parse_args(argv)
    try:
        raw = json.load(sys.stdin if a.request == "-" else open(a.request))
    except (OSError, ValueError) as e:
        print(f"litgptstep: request {a.request}: {e}", file=sys.stderr)
        return 1
    rc = 0
    for i, d in enumerate(raw if isinstance(raw, list) else [raw]):
        try:
            req = Request.from_json(d.get("config", d))
            b = build(a.model, req)
            res = simulate(a.model, req, built=b)
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
        print(json.dumps(case(a.model, req, res, b)), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
