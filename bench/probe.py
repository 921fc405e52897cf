#!/usr/bin/env python3
"""canifinetune bench probe: a bounded training run that measures peak GPU memory.

The Go side (package bench) writes this file and a JSON configuration to a
temporary directory and runs:

    python3 probe.py --config CONFIG.json --result RESULT.json

The probe trains the configured model with the stock transformers / PEFT /
bitsandbytes code paths on synthetic tokens of exactly seq_len x batch for a
bounded number of optimizer updates, and reports what torch's caching
allocator saw. It ALWAYS reports a result, whatever happens (OOM, a missing
module, a bad configuration, Ctrl-C): the result is written atomically to the
--result path and also printed as the last stdout line, prefixed by
RESULT_PREFIX, so that a caller that lost the file can still read it.

The helpers above main() are pure (no torch, no CUDA) so that CI, which has
Python but no torch, can test them with `python3 -m unittest`.
"""

import json
import os
import platform
import sys
import time
import traceback

PROBE_SCHEMA = 1
RESULT_PREFIX = "CANIFINETUNE_PROBE_RESULT "

METHODS = ("full", "lora", "qlora")
PRECISIONS = ("bf16-mixed", "bf16-true", "fp32")
QUANT_SCHEMES = ("nf4",)
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_torch_forloop", "sgd", "adamw_8bit", "paged_adamw_8bit")
ATTN_IMPLS = ("sdpa", "eager", "flash_attention_2")
# Stages in the order a run reaches them; a failure reports the stage it was in.
STAGES = ("setup", "load", "forward", "backward", "optimizer", "done")

STATUS_SUCCESS = "success"
STATUS_OOM = "oom"
STATUS_CONFIG = "configuration_error"
STATUS_DEPENDENCY = "dependency_error"
STATUS_RUNTIME = "runtime_error"
STATUS_NOT_RUN = "not_run"

# Messages of allocation failures that do not raise torch.cuda.OutOfMemoryError:
# older torch raises a plain RuntimeError, cuBLAS reports its own workspace
# allocation failure, and bitsandbytes' paged optimizers report CUDA errors.
_OOM_MARKERS = (
    "out of memory",
    "cublas_status_alloc_failed",
    "cudaerrormemoryallocation",
)


# ---------------------------------------------------------------- pure helpers


def validate_config(cfg):
    """Return a list of problems with cfg (empty when it is usable).

    Each problem names the field and the bad value, so a configuration_error
    result says what to fix without a traceback.
    """
    problems = []
    if not isinstance(cfg, dict):
        return ["config: want a JSON object, got %s" % type(cfg).__name__]

    def want(field, allowed):
        v = cfg.get(field)
        if v not in allowed:
            problems.append("%s: bad value %r (want one of %s)" % (field, v, ", ".join(allowed)))

    if not isinstance(cfg.get("model"), str) or not cfg.get("model"):
        problems.append("model: want a model id or local directory, got %r" % (cfg.get("model"),))
    want("method", METHODS)
    want("precision", PRECISIONS)
    want("optimizer", OPTIMIZERS)
    want("attn", ATTN_IMPLS)
    for field in ("seq_len", "batch", "updates", "grad_accum"):
        v = cfg.get(field)
        if not _is_int(v) or v <= 0:
            problems.append("%s: bad value %r (want an integer > 0)" % (field, v))
    dev = cfg.get("device", 0)
    if not _is_int(dev) or dev < 0:
        problems.append("device: bad value %r (want a CUDA device index >= 0)" % (dev,))
    method = cfg.get("method")
    if method in ("lora", "qlora"):
        rank = cfg.get("rank")
        if not _is_int(rank) or rank <= 0:
            problems.append("rank: bad value %r (want an integer > 0 for %s)" % (rank, method))
        alpha = cfg.get("alpha")
        if alpha is not None and (not _is_int(alpha) or alpha <= 0):
            problems.append("alpha: bad value %r (want an integer > 0 or null)" % (alpha,))
        targets = cfg.get("targets")
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
            problems.append("targets: bad value %r (want module names or [\"all-linear\"])" % (targets,))
    quant = cfg.get("quant")
    if method == "qlora":
        if not isinstance(quant, dict) or quant.get("scheme") not in QUANT_SCHEMES:
            problems.append("quant: bad value %r (qlora wants {\"scheme\": \"nf4\", \"double_quant\": bool})" % (quant,))
        if cfg.get("precision") == "fp32":
            problems.append("precision: bad value 'fp32' for qlora (4-bit compute runs in bf16)")
    elif quant is not None:
        problems.append("quant: bad value %r for method %r (only qlora quantizes)" % (quant, method))
    return problems


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_oom(type_name, message):
    """Report whether an exception (by class name and message) is a CUDA allocation failure."""
    if type_name == "OutOfMemoryError":
        return True
    m = (message or "").lower()
    return any(marker in m for marker in _OOM_MARKERS)


def classify_exception(type_name, message, stage):
    """Map an exception raised at stage to a result status.

    A CUDA allocation failure is `oom` wherever it happens; a ValueError or
    KeyError while loading is the configuration's fault (PEFT raises ValueError
    for target modules the model lacks, transformers for unknown model types);
    anything else is a runtime_error with its message.
    """
    if is_oom(type_name, message):
        return STATUS_OOM
    if type_name == "KeyboardInterrupt":
        return STATUS_NOT_RUN
    if stage in ("setup", "load") and type_name in ("ValueError", "KeyError", "OSError", "FileNotFoundError"):
        return STATUS_CONFIG
    return STATUS_RUNTIME


def summarize_updates(updates):
    """Overall timing and peaks from per-update records.

    The mean step time leaves out the first update when there are more, because
    the first pays for CUDA kernel selection and allocator warm-up; tokens/s
    follows the same steps. Peaks are the maxima over all updates. A field no
    update reported stays absent, never zero.
    """
    out = {}
    if not updates:
        return out
    timed = updates[1:] if len(updates) > 1 else updates
    steps = [u["step_s"] for u in timed if u.get("step_s") is not None]
    toks = [u["tokens"] for u in timed if u.get("tokens") is not None]
    if steps:
        total = sum(steps)
        out["mean_step_s"] = total / len(steps)
        if toks and len(toks) == len(steps) and total > 0:
            out["tokens_per_s"] = sum(toks) / total
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_active_bytes"):
        vals = [u[key] for u in updates if u.get(key) is not None]
        if vals:
            out[key] = max(vals)
    return out


def summarize_optimizer_states(entries):
    """Group optimizer state tensors, given as (dtype_name, nbytes) pairs, by dtype.

    Returns {"states": [{"dtype", "tensors", "bytes"}...] sorted by dtype,
    "state_bytes": total}; the bytes are numel x element_size as allocated.
    """
    by = {}
    for dtype, nbytes in entries:
        d = by.setdefault(dtype, {"dtype": dtype, "tensors": 0, "bytes": 0})
        d["tensors"] += 1
        d["bytes"] += int(nbytes)
    states = [by[k] for k in sorted(by)]
    return {"states": states, "state_bytes": sum(s["bytes"] for s in states)}


def version_tuple(v):
    """Leading numeric parts of a version string: "4.56.0.dev0" -> (4, 56, 0)."""
    out = []
    for part in str(v).split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(out)


def dtype_kwarg(transformers_version):
    """The from_pretrained/from_config keyword for the weights' dtype.

    transformers 4.56 renamed torch_dtype to dtype, and 5.x warns on (or drops)
    the old name; older releases know only torch_dtype.
    """
    return "dtype" if version_tuple(transformers_version) >= (4, 56) else "torch_dtype"


def max_present(*values):
    """The maximum of the values that are not None, or None when none is known."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def new_result():
    """The skeleton every result starts from: not_run until the probe gets further."""
    return {
        "probe_schema": PROBE_SCHEMA,
        "status": STATUS_NOT_RUN,
        "stage": "setup",
        "completed_updates": 0,
        "software": {"python": platform.python_version()},
        "updates": [],
        "memory": {},
    }


def fail(result, status, stage, type_name, message, missing_module=None):
    """Record a failure in result (in place) and return it."""
    result["status"] = status
    result["stage"] = stage
    result["error_type"] = type_name
    result["error"] = _truncate(message, 2000)
    if missing_module:
        result["missing_module"] = missing_module
    return result


def finish_result(result, updates):
    """Fold the per-update records into the overall figures (in place)."""
    result["updates"] = updates
    result["completed_updates"] = len(updates)
    s = summarize_updates(updates)
    timing = {k: s[k] for k in ("mean_step_s", "tokens_per_s") if k in s}
    if timing:
        result["timing"] = dict(result.get("timing", {}), **timing)
    mem = result.setdefault("memory", {})
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_active_bytes"):
        v = max_present(mem.get(key), s.get(key))
        if v is not None:
            mem[key] = v
    return result


def _truncate(s, n):
    s = str(s)
    return s if len(s) <= n else s[: n // 2] + " … " + s[-n // 2 :]


def write_result(path, result, stream=None):
    """Write result atomically to path (if given) and as the last line of stream."""
    data = json.dumps(result, sort_keys=True)
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    stream = stream or sys.stdout
    stream.write("\n" + RESULT_PREFIX + data + "\n")
    stream.flush()


def parse_args(argv):
    """Parse --config PATH and --result PATH; return (config_path, result_path)."""
    config = result = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--config", "--result") and i + 1 < len(argv):
            if a == "--config":
                config = argv[i + 1]
            else:
                result = argv[i + 1]
            i += 2
            continue
        raise ValueError("unknown argument %r (want --config PATH --result PATH)" % a)
    if not config:
        raise ValueError("missing --config PATH")
    return config, result


def log(msg):
    sys.stderr.write("probe: %s\n" % msg)
    sys.stderr.flush()


# ---------------------------------------------------------------- the run (needs torch)


class Probe:
    """One bounded training run; fills self.result as it goes."""

    def __init__(self, cfg, result):
        self.cfg = cfg
        self.result = result
        self.stage = "setup"
        self.updates = []
        self.cleanup = []  # temporary checkpoints to delete when the probe ends

    def remove_temporaries(self):
        import shutil

        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)

    def set_stage(self, stage):
        self.stage = stage
        self.result["stage"] = stage

    def run(self):
        cfg = self.cfg
        import torch  # noqa: F401  (checked by main before)

        self.torch = torch
        sw = self.result["software"]
        sw["torch"] = torch.__version__
        sw["cuda"] = getattr(torch.version, "cuda", None)
        for mod in ("transformers", "peft", "bitsandbytes", "accelerate"):
            try:
                sw[mod] = __import__(mod).__version__
            except Exception:  # absent or broken: leave it out, never guess
                pass
        if not torch.cuda.is_available():
            return fail(self.result, STATUS_DEPENDENCY, "setup", "RuntimeError",
                        "torch.cuda.is_available() is False: no usable CUDA device", "cuda")
        needs = ["transformers"]
        if cfg["method"] in ("lora", "qlora"):
            needs.append("peft")
        if cfg["method"] == "qlora" or cfg["optimizer"] in ("adamw_8bit", "paged_adamw_8bit"):
            needs.append("bitsandbytes")
        for mod in needs:
            if mod not in sw:
                return fail(self.result, STATUS_DEPENDENCY, "setup", "ModuleNotFoundError",
                            "No module named %r (needed for method=%s optimizer=%s)"
                            % (mod, cfg["method"], cfg["optimizer"]), mod)

        dev = torch.device("cuda", cfg.get("device", 0))
        torch.cuda.set_device(dev)
        self.dev = dev
        self.record_gpu()
        mem = self.result["memory"]
        free, total = torch.cuda.mem_get_info(dev)
        mem["free_before_bytes"] = int(free)
        mem["device_total_bytes"] = int(total)

        self.set_stage("load")
        t0 = time.perf_counter()
        model = self.load_model()
        opt = self.make_optimizer(model)
        torch.cuda.synchronize(dev)
        self.result.setdefault("timing", {})["load_s"] = time.perf_counter() - t0
        mem["after_load_allocated_bytes"] = int(torch.cuda.memory_allocated(dev))
        mem["after_load_reserved_bytes"] = int(torch.cuda.memory_reserved(dev))
        mem["load_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(dev))
        mem["load_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(dev))
        # The overall peaks start from the load phase; each update then resets
        # the peak counters so that its own record is its own peak.
        mem["peak_allocated_bytes"] = mem["load_peak_allocated_bytes"]
        mem["peak_reserved_bytes"] = mem["load_peak_reserved_bytes"]
        mem["peak_active_bytes"] = self.active_peak()

        trace = cfg.get("trace")
        if trace:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                         profile_memory=True, record_shapes=True) as prof:
                self.train(model, opt)
            prof.export_chrome_trace(trace)
            self.result["trace"] = trace
        else:
            self.train(model, opt)

        self.record_optimizer(opt)
        self.set_stage("done")
        free, _ = torch.cuda.mem_get_info(dev)
        mem["free_after_bytes"] = int(free)
        self.result["status"] = STATUS_SUCCESS
        return self.result

    def active_peak(self):
        st = self.torch.cuda.memory_stats(self.dev)
        v = st.get("active_bytes.all.peak")
        return int(v) if v is not None else None

    def record_gpu(self):
        torch = self.torch
        idx = self.dev.index
        props = torch.cuda.get_device_properties(idx)
        gpu = {
            "index": idx,
            "name": torch.cuda.get_device_name(idx),
            "total_bytes": int(props.total_memory),
            "capability": "%d.%d" % (props.major, props.minor),
        }
        driver = nvidia_driver(idx)
        if driver:
            gpu["driver"] = driver
        self.result["gpu"] = gpu

    def load_model(self):
        cfg, torch = self.cfg, self.torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM

        method, precision = cfg["method"], cfg["precision"]
        # bf16-mixed keeps fp32 master weights and autocasts the forward;
        # bf16-true holds weights, grads and optimizer states in bf16.
        dtype = torch.bfloat16 if precision == "bf16-true" else torch.float32
        if method == "qlora":
            dtype = torch.bfloat16
        dkw = dtype_kwarg(transformers.__version__)
        kwargs = {dkw: dtype, "attn_implementation": cfg["attn"]}
        eff = self.result.setdefault("effective", {})
        eff["random_init"] = bool(cfg.get("random_init"))
        eff["autocast"] = "bf16" if precision == "bf16-mixed" else None

        src = cfg["model"]
        if cfg.get("random_init"):
            mcfg = AutoConfig.from_pretrained(src)
            if method == "qlora":
                # from_config cannot quantize: save a random bf16 checkpoint and
                # load it back through the stock 4-bit from_pretrained path.
                import tempfile

                tmp = tempfile.mkdtemp(prefix="canifinetune-probe-")
                self.cleanup.append(tmp)
                m = AutoModelForCausalLM.from_config(mcfg, **{dkw: torch.bfloat16})
                m.save_pretrained(tmp, safe_serialization=True)
                del m
                src = tmp
            else:
                # Build directly on the GPU: memory does not depend on weight values,
                # and a 7B fp32 model built on the CPU would take minutes.
                with torch.device(self.dev):
                    model = AutoModelForCausalLM.from_config(mcfg, **kwargs)
                # A transformers release that ignores the device context builds on
                # the CPU; move it (a no-op when it is already on the GPU).
                model = model.to(self.dev)
        if method == "qlora":
            q = cfg["quant"]
            kwargs["quantization_config"] = transformers.BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type=q["scheme"],
                bnb_4bit_use_double_quant=bool(q.get("double_quant")),
                bnb_4bit_compute_dtype=torch.bfloat16,
            )
            kwargs["device_map"] = {"": self.dev.index}
            model = AutoModelForCausalLM.from_pretrained(src, **kwargs)
        elif not cfg.get("random_init"):
            kwargs["device_map"] = {"": self.dev.index}
            model = AutoModelForCausalLM.from_pretrained(src, **kwargs)

        model.config.use_cache = False
        eff["model_type"] = getattr(model.config, "model_type", None)
        eff["vocab_size"] = getattr(model.config, "vocab_size", None)
        eff["attn_implementation"] = getattr(model.config, "_attn_implementation", cfg["attn"])
        eff["num_parameters"] = int(sum(p.numel() for p in model.parameters()))

        if cfg.get("grad_ckpt"):
            if method == "qlora":
                from peft import prepare_model_for_kbit_training

                model = prepare_model_for_kbit_training(
                    model, use_gradient_checkpointing=True,
                    gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            eff["use_reentrant"] = False
        elif method == "qlora":
            from peft import prepare_model_for_kbit_training

            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        eff["grad_ckpt"] = bool(cfg.get("grad_ckpt"))

        if method in ("lora", "qlora"):
            from peft import LoraConfig, get_peft_model

            targets = cfg["targets"]
            lcfg = LoraConfig(
                r=cfg["rank"],
                lora_alpha=cfg.get("alpha") or 2 * cfg["rank"],
                lora_dropout=0.0,
                target_modules="all-linear" if targets == ["all-linear"] else targets,
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(model, lcfg)
            tm = model.peft_config["default"].target_modules
            # PEFT rewrites "all-linear" into the set of module names it matched;
            # an unexpanded string must not be sorted into characters.
            eff["targets"] = [tm] if isinstance(tm, str) else sorted(tm)
            eff["lora_alpha"] = lcfg.lora_alpha
        model.train()
        trainable = [p for p in model.parameters() if p.requires_grad]
        eff["trainable_parameters"] = int(sum(p.numel() for p in trainable))
        eff["trainable_dtypes"] = sorted({str(p.dtype).replace("torch.", "") for p in trainable})
        eff["param_dtypes"] = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
        self.trainable = trainable
        return model

    def make_optimizer(self, model):
        cfg, torch = self.cfg, self.torch
        params = self.trainable
        name = cfg["optimizer"]
        lr = 1e-5
        if name == "adamw_torch":
            # HF Trainer's adamw_torch: torch AdamW with neither foreach nor
            # fused given, so torch picks foreach on CUDA. (Passing
            # fused=False alone turns foreach off too: torch then steps one
            # parameter at a time, which receipts before the "impl" field
            # record.)
            return torch.optim.AdamW(params, lr=lr)
        if name == "adamw_torch_fused":
            return torch.optim.AdamW(params, lr=lr, fused=True)
        if name == "adamw_torch_forloop":
            return torch.optim.AdamW(params, lr=lr, foreach=False)
        if name == "sgd":
            return torch.optim.SGD(params, lr=lr)
        import bitsandbytes as bnb

        if name == "adamw_8bit":
            return bnb.optim.AdamW8bit(params, lr=lr)
        return bnb.optim.PagedAdamW8bit(params, lr=lr)

    def train(self, model, opt):
        cfg, torch, dev = self.cfg, self.torch, self.dev
        b, s = cfg["batch"], cfg["seq_len"]
        vocab = self.result["effective"].get("vocab_size") or 32000
        gen = torch.Generator(device=dev).manual_seed(0)
        ids = torch.randint(0, vocab, (b, s), device=dev, generator=gen)
        tokens = b * s * cfg["grad_accum"]
        self.result["effective"]["tokens_per_update"] = tokens
        autocast = cfg["precision"] == "bf16-mixed"
        for u in range(cfg["updates"]):
            torch.cuda.reset_peak_memory_stats(dev)
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            loss_v = None
            for _ in range(cfg["grad_accum"]):
                self.set_stage("forward")
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                    out = model(input_ids=ids, labels=ids)
                loss = out.loss / cfg["grad_accum"]
                del out
                self.set_stage("backward")
                loss.backward()
                loss_v = float(loss.detach())
                del loss
            self.set_stage("optimizer")
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize(dev)
            dt = time.perf_counter() - t0
            rec = {
                "update": u + 1,
                "step_s": dt,
                "tokens": tokens,
                "tokens_per_s": tokens / dt if dt > 0 else None,
                "loss": loss_v,
                "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(dev)),
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)),
                "peak_active_bytes": self.active_peak(),
            }
            self.updates.append(rec)
            finish_result(self.result, self.updates)
            log("update %d/%d: %.3fs, peak reserved %.2f GiB"
                % (u + 1, cfg["updates"], dt, rec["peak_reserved_bytes"] / 2**30))

    def record_optimizer(self, opt):
        torch = self.torch
        entries = []
        seen = set()
        for st in opt.state.values():
            for v in st.values():
                # Scalars (torch AdamW's step) are not state memory worth a row;
                # bitsandbytes shares one quantization map among all parameters,
                # so each storage is counted once.
                if not torch.is_tensor(v) or v.numel() <= 1 or v.data_ptr() in seen:
                    continue
                seen.add(v.data_ptr())
                entries.append((str(v.dtype).replace("torch.", ""), v.numel() * v.element_size()))
        rec = summarize_optimizer_states(entries)
        rec["class"] = type(opt).__module__ + "." + type(opt).__name__
        impl = optimizer_impl(opt)
        if impl:
            rec["impl"] = impl
        self.result["optimizer"] = rec


def optimizer_impl(opt):
    """How a torch optimizer steps: "fused", "foreach" or "for-loop" as its
    step will decide it (torch/optim: _default_to_fused_or_foreach applies
    only when neither flag is given, and then picks foreach for CUDA
    tensors); "own" for optimizers outside torch.optim (bitsandbytes); None
    when the optimizer has no param_groups to read."""
    if not type(opt).__module__.startswith("torch.optim"):
        return "own"
    groups = getattr(opt, "param_groups", None)
    if not groups:
        return None
    g = groups[0]
    fused, foreach = g.get("fused"), g.get("foreach")
    if fused:
        return "fused"
    if foreach:
        return "foreach"
    if fused is None and foreach is None:
        params = [p for grp in opt.param_groups for p in grp["params"]]
        return "foreach" if params and all(p.is_cuda for p in params) else "for-loop"
    return "for-loop"


def nvidia_driver(index):
    """The NVIDIA driver version from nvidia-smi, or None when it cannot be asked."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(index)],
            capture_output=True, text=True, timeout=20,
        )
    except Exception:
        return None
    v = out.stdout.strip()
    return v if out.returncode == 0 and v else None


def main(argv):
    result = new_result()
    result_path = None
    try:
        config_path, result_path = parse_args(argv)
        with open(config_path) as f:
            cfg = json.load(f)
    except Exception as e:  # unreadable arguments or config: say which, never crash
        write_result(result_path, fail(result, STATUS_CONFIG, "setup", type(e).__name__, str(e)))
        return 0
    problems = validate_config(cfg)
    if problems:
        write_result(result_path, fail(result, STATUS_CONFIG, "setup", "ValueError", "; ".join(problems)))
        return 0
    try:
        import torch  # noqa: F401
    except ImportError as e:
        write_result(result_path, fail(result, STATUS_DEPENDENCY, "setup", type(e).__name__, str(e),
                                       getattr(e, "name", None) or "torch"))
        return 0
    probe = Probe(cfg, result)
    try:
        try:
            probe.run()
        finally:
            probe.remove_temporaries()
    except BaseException as e:  # KeyboardInterrupt (Ctrl-C, timeout) too: report, then exit
        name = type(e).__name__
        status = classify_exception(name, str(e), probe.stage)
        msg = str(e) or name
        if status == STATUS_RUNTIME:
            msg = msg + "\n" + _truncate(traceback.format_exc(), 4000)
        missing = getattr(e, "name", None) if isinstance(e, ImportError) else None
        if isinstance(e, ImportError):
            status = STATUS_DEPENDENCY
        fail(result, status, probe.stage, name, msg, missing)
        finish_result(result, probe.updates)
        try:
            torch = probe.torch
            mem = result["memory"]
            mem["at_failure_allocated_bytes"] = int(torch.cuda.memory_allocated(probe.dev))
            mem["at_failure_reserved_bytes"] = int(torch.cuda.memory_reserved(probe.dev))
            free, _ = torch.cuda.mem_get_info(probe.dev)
            mem["free_after_bytes"] = int(free)
        except Exception:
            pass
    write_result(result_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
