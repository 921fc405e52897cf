"""The committed grid of oracle cases, its regeneration and its CI check.

    python -m oracle.grid [--jobs 2] [--models ORG/NAME,...] [--out evidence/oracle.jsonl]
    python -m oracle.grid --methods qlora --merge   (one method's groups, merged into --out)
    python -m oracle.grid --precisions bf16-mixed --merge   (one precision's groups, likewise)
    python -m oracle.grid --check [--cases evidence/oracle.jsonl]

The grid (PLAN) is one catalog model per model family that transformers
implements natively, dense and MoE, each simulated by fakestep.simulate at

    method          full, lora (LoRA r16 on the attention projections),
                    qlora (the same adapters on a 4-bit base, dense models,
                    bf16-true and, on SDPA members, bf16-mixed; see
                    qlora_settings)
    grad_ckpt       none, full
    attn            sdpa, eager
    precision       bf16-true (every method x checkpointing x attention),
                    fp32 (full and lora, checkpointing full, sdpa),
                    bf16-mixed (dense members: full and lora x checkpointing,
                    the model's first attention; MoE members: lora x
                    checkpointing, after every other group)
    seq_len         256 512 1024 2048 4096 8192
    batch           1 2 4 8
    grad_accum      1, 4

with adamw_torch. Each (model, precision, method, checkpointing, attention)
group builds its model once and runs a fixed sample of shapes from the
seq_len x batch x grad_accum product, drawn by a generator seeded with the
model and group names (about one case in six with grad_accum 4, which costs
four forward/backward passes per step), so the plan, and the file, is the
same on every run. Rows go to --out as JSON Lines in the measurements schema
(simulated: true), sorted by id; an existing file is replaced atomically.
Requests the oracle refuses are reported on stderr and make the run fail.

--jobs N simulates N groups at once in separate processes (one per core):
the CI slice's groups first, then one group of every model per round, the
most expensive first. Each finished group's rows are appended to
OUT.partial as the run goes; --resume keeps them and simulates only the
groups not there yet (the result is the same file a single run writes).

--check re-simulates the CI slice (the first case of the SLICE_GROUPS of
the SLICE_MODELS and of their SLICE_EXTRA groups) and fails unless every row equals, byte for byte, the
committed row with the same id; a slice with no case compared fails too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import tempfile
import time
import types
from concurrent.futures import ProcessPoolExecutor

from oracle import fakestep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(ROOT, "evidence", "oracle.jsonl")

SEQ = [256, 512, 1024, 2048, 4096, 8192]
BATCH = [1, 2, 4, 8]
ACCUM4_SHARE = 6  # one case in about this many has grad_accum 4

# model -> (shapes per bf16-true group, shapes per fp32 group). One member per
# family, the smallest the catalog holds (Mistral, Falcon and OLMo-2 have
# only 7B members there; MoE: cost follows layers, so fewer cases for the
# deep ones).
PLAN = {
    "meta-llama/Llama-3.2-1B": (7, 4),
    "Qwen/Qwen2.5-0.5B": (6, 4),
    "Qwen/Qwen3-0.6B": (6, 4),
    "google/gemma-2b": (6, 4),
    "google/gemma-2-2b": (6, 4),
    "google/gemma-3-1b-pt": (6, 4),
    "mistralai/Mistral-7B-v0.1": (6, 4),
    "microsoft/phi-2": (6, 4),
    "microsoft/Phi-3-mini-4k-instruct": (6, 4),
    # No fp32 groups (and no QLoRA ones, whose residual stream is fp32):
    # santacoder's one key/value head reaches SDPA unrepeated (enable_gqa),
    # which in fp32 runs the math kernel, and its attention dropout there
    # takes ATen's unfused meta path (fakestep refuses it; NO_FP32_SDPA).
    "bigcode/gpt_bigcode-santacoder": (6, 0),
    "tiiuae/falcon-7b": (6, 4),
    "EleutherAI/pythia-1b": (7, 4),
    "openai-community/gpt2": (7, 4),
    "allenai/OLMo-2-1124-7B": (6, 4),
    "stabilityai/stablelm-3b-4e1t": (6, 4),
    "ibm-granite/granite-3.1-2b-base": (6, 4),
    # MoE, experts implementation grouped_mm (see fakestep.build)
    "ibm-granite/granite-3.0-1b-a400m-base": (4, 4),
    "Qwen/Qwen1.5-MoE-A2.7B": (4, 4),
    "deepseek-ai/DeepSeek-V2-Lite": (4, 0),
    "Qwen/Qwen3-30B-A3B": (2, 0),
    "mistralai/Mixtral-8x7B-v0.1": (1, 0),
}

# bf16-mixed (HF Trainer's default: fp32 weights, CUDA autocast to bf16)
# shapes per group, full and lora x checkpointing none/full, the first
# attention of the model (sdpa; eager where it is the only one). Dense
# members only: the MoE experts' grouped_mm is on no autocast list, so a
# full fine-tune under autocast hands it fp32 tokens and fp32 experts, a
# path not checked against CUDA's grouped_mm; the MoE members are left out
# of those groups. Their LoRA runs on a bf16 base, whose experts and tokens
# stay bf16 under autocast: the MoE members have two bf16-mixed LoRA groups
# (checkpointing none/full), after every other group (MOE_MIXED).
# These groups come after the others, so the earlier groups' drawn shapes
# and rows do not move.
MIXED_SHAPES = 2


def is_moe_member(model: str) -> bool:
    """Whether the catalog config of a PLAN member has experts (fakestep.is_moe)."""
    with open(os.path.join(ROOT, "catalog", "models", model, "config.json")) as f:
        return fakestep.is_moe(types.SimpleNamespace(**json.load(f)))


# transformers refuses SDPA for these (Gemma 2's attention-logit softcapping):
# their groups use eager attention, with twice the shapes.
EAGER_ONLY = {"google/gemma-2-2b"}

# The CI slice: small members of three families (dense GQA, dense with
# sliding-window attention, MoE), the first case of four of their groups
# (indices into groups(): bf16-true full/ckpt full/sdpa, lora/no ckpt/eager,
# lora/ckpt full/eager, fp32 full/ckpt full/sdpa), so that both methods,
# checkpointing settings, attention implementations and precisions are checked.
SLICE_MODELS = ["Qwen/Qwen2.5-0.5B", "google/gemma-3-1b-pt", "ibm-granite/granite-3.0-1b-a400m-base"]
SLICE_GROUPS = [2, 5, 7, 8]
# And the first case of more groups of the two dense members, so that every
# method and precision of the plan is checked (test_grid holds the slice to
# that): a bf16-mixed LoRA group with checkpointing (autocast re-entered by
# the recomputation) and a QLoRA group on each (nf4 with double quantization
# without checkpointing on Qwen2.5, nf4 with checkpointing on gemma-3), and
# on gemma-3 the fp32 LoRA group and a bf16-mixed full group (checkpointing);
# and QLoRA under autocast with checkpointing on Qwen2.5, and the MoE
# member's LoRA under autocast.
SLICE_EXTRA = {"Qwen/Qwen2.5-0.5B": [13, 14, 19], "google/gemma-3-1b-pt": [9, 11, 13, 17],
               "ibm-granite/granite-3.0-1b-a400m-base": [10]}


# QLoRA groups (oracle/qlora.py), after the others so that the others' drawn
# shapes and rows stay as they were: dense models only, bf16-loaded base with bf16
# compute, double quantization on and off, checkpointing none and full, the
# model's first attention implementation. MoE models are left out: their
# experts are 3-D parameters, not nn.Linear, so transformers does not
# quantize them and PEFT's kbit preparation casts them to fp32.
QLORA_SHAPES = 3
QLORA_QUANTS = ["nf4-dq", "nf4"]
# And, after those, QLoRA under HF Trainer's bf16 autocast (bf16-mixed over
# the bf16-loaded base), the most common QLoRA run: nf4 with double
# quantization, checkpointing none and full, on the members whose first
# attention is SDPA; then the same with eager attention on every member
# (appended after the others so that no earlier row moves; Gemma 2, eager
# only, has just these). Falcon is left out: transformers does not quantize
# its FalconLinear layers, so its "QLoRA" is LoRA over fp32 frozen weights
# that autocast casts per call, a path the estimator does not spell out.
QLORA_MIXED_QUANT = "nf4-dq"
NO_MIXED_QLORA = {"tiiuae/falcon-7b"}


# Models whose fp32 attention the oracle cannot run (see PLAN).
NO_FP32_SDPA = {"bigcode/gpt_bigcode-santacoder"}


def qlora_settings(model: str, attn: str) -> list[tuple]:
    if is_moe_member(model) or model in NO_FP32_SDPA:
        return []
    out = [("bf16-true", "qlora", c, attn, QLORA_SHAPES, q) for q in QLORA_QUANTS for c in ["none", "full"]]
    if attn == "sdpa" and model not in NO_MIXED_QLORA:
        out += [("bf16-mixed", "qlora", c, attn, QLORA_SHAPES, QLORA_MIXED_QUANT) for c in ["none", "full"]]
    if model not in NO_MIXED_QLORA:
        # Eager attention under autocast, on every member (appended: no earlier row moves).
        out += [("bf16-mixed", "qlora", c, "eager", QLORA_SHAPES, QLORA_MIXED_QUANT) for c in ["none", "full"]]
    return out


def groups(model: str) -> list[list[fakestep.Request]]:
    """The model's requests, grouped so that each group shares one built model."""
    n16, n32 = PLAN[model]
    attns = ["sdpa", "eager"]
    if model in EAGER_ONLY:
        attns, n16 = ["eager"], 2 * n16
    settings = [("bf16-true", m, c, a, n16) for m, c, a in itertools.product(["full", "lora"], ["none", "full"], attns)]
    settings += [("fp32", m, "full", attns[0], n32) for m in ["full", "lora"]] if n32 else []
    if not is_moe_member(model):
        settings += [("bf16-mixed", m, c, attns[0], MIXED_SHAPES) for m, c in itertools.product(["full", "lora"], ["none", "full"])]
    settings = [s + ("",) for s in settings]
    settings += qlora_settings(model, attns[0])
    if is_moe_member(model):
        # MOE_MIXED: LoRA under autocast on the bf16 base, last.
        settings += [("bf16-mixed", "lora", c, attns[0], MIXED_SHAPES, "") for c in ["none", "full"]]
    out = []
    for prec, method, ckpt, attn, n, quant in settings:
        seed = f"{model} {prec} {method} {ckpt} {attn}" + (f" {quant}" if quant else "")
        rng = random.Random(seed)
        shapes = [(s, b, 1) for s in SEQ for b in BATCH]
        rng.shuffle(shapes)
        picked = []
        for s, b, _ in shapes[:n]:
            picked.append((s, b, 4 if rng.randrange(ACCUM4_SHARE) == 0 else 1))
        g = []
        for s, b, a in picked:
            r = fakestep.Request(method=method, precision=prec, lora_rank=16, lora_targets=["attention"],
                                 seq_len=s, batch=b, grad_accum=a, grad_ckpt=ckpt, attn=attn,
                                 **({"quant": quant} if quant else {}))
            r.check()
            g.append(r)
        out.append(g)
    return out


def run_group(model: str, reqs: list[fakestep.Request]) -> tuple[list[dict], list[str], float]:
    """All cases of one group on one built model: rows, failures, CPU seconds."""
    c0 = time.process_time()
    cfg = os.path.join(ROOT, "catalog", "models", model)
    rows, failed = [], []
    try:
        built = fakestep.build(cfg, reqs[0])
    except Exception as e:  # noqa: BLE001 - reported, and the run fails
        r = reqs[0]
        return [], [f"{model} {r.precision} {r.method} ckpt {r.grad_ckpt} {r.attn}: build: {type(e).__name__}: {e}"], time.process_time() - c0
    for req in reqs:
        assert fakestep.build_key(req) == fakestep.build_key(reqs[0])
        try:
            res = fakestep.simulate(cfg, req, built=built)
        except Exception as e:  # noqa: BLE001
            failed.append(f"{model} {req.precision} {req.method} ckpt {req.grad_ckpt} {req.attn} s{req.seq_len} b{req.batch} a{req.grad_accum}: {type(e).__name__}: {e}")
            continue
        rows.append(fakestep.case(cfg, req, res, model))
    return rows, failed, time.process_time() - c0


def _cost(model: str) -> int:
    with open(os.path.join(ROOT, "catalog", "models", model, "config.json")) as f:
        c = json.load(f)
    return int(c.get("num_hidden_layers") or c.get("n_layer") or 1)


def run(units: list[tuple[str, list[fakestep.Request]]], jobs: int, progress: bool = False,
        partial: str | None = None) -> tuple[list[dict], list[str], float]:
    """Simulates the units; with partial, appends each finished group's rows
    to that file as it goes (what a stopped run leaves for --resume)."""
    # Round by round, one group of every model, the most expensive first: a
    # stopped run has covered every family, and the cores stay busy.
    # The groups of the CI slice go first.
    first = {fakestep.case_id(m, g[0]) for m, g in slice_units()}
    nth: dict[str, int] = {}
    order = []
    for u in units:
        nth[u[0]] = nth.get(u[0], -1) + 1
        order.append((fakestep.case_id(u[0], u[1][0]) not in first, nth[u[0]], -_cost(u[0]) * sum(r.grad_accum for r in u[1])))
    units = [u for _, u in sorted(zip(order, units), key=lambda x: x[0])]
    rows, failed, cpu = [], [], 0.0
    pf = open(partial, "a") if partial else None
    t0, done = time.perf_counter(), 0
    if jobs > 1:
        ex = ProcessPoolExecutor(max_workers=jobs)
        results = ex.map(run_group, [u[0] for u in units], [u[1] for u in units])
    else:
        ex = None
        results = (run_group(m, g) for m, g in units)
    try:
        for (m, g), (r, f, c) in zip(units, results):
            rows += r
            failed += f
            cpu += c
            done += 1
            if pf is not None:
                pf.writelines(line(x) + "\n" for x in r)
                pf.flush()
            if progress:
                print(f"grid: {done}/{len(units)} groups, {len(rows)} cases, {time.perf_counter() - t0:.0f} s: "
                      f"{m} {g[0].precision} {g[0].method}{' ' + g[0].quant if g[0].method == 'qlora' else ''} "
                      f"ckpt {g[0].grad_ckpt} {g[0].attn}: {len(r)} cases {c:.0f} CPU s",
                      file=sys.stderr, flush=True)
    finally:
        if ex is not None:
            ex.shutdown()
        if pf is not None:
            pf.close()
    return rows, failed, cpu


def line(row: dict) -> str:
    return json.dumps(row, sort_keys=False)


def write_rows(path: str, rows: list[dict]) -> None:
    rows = sorted(rows, key=lambda r: r["id"])
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".oracle-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w") as f:
            for r in rows:
                f.write(line(r) + "\n")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the grid is a committed file
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def slice_units() -> list[tuple[str, list[fakestep.Request]]]:
    return [(m, groups(m)[i][:1]) for m in SLICE_MODELS for i in SLICE_GROUPS + SLICE_EXTRA.get(m, [])]


def check(path: str, units: list[tuple[str, list[fakestep.Request]]], jobs: int) -> int:
    """Re-simulates units; 0 when every row equals the committed one byte for byte."""
    committed = {}
    with open(path) as f:
        for ln in f:
            if ln.strip():
                committed[json.loads(ln)["id"]] = ln.rstrip("\n")
    t0 = time.perf_counter()
    rows, failed, cpu = run(units, jobs)
    bad = list(failed)
    same = 0
    for r in rows:
        want = committed.get(r["id"])
        got = line(r)
        if want is None:
            bad.append(f"{r['id']}: not in {path}")
        elif want != got:
            bad.append(f"{r['id']}: differs from {path}\n  committed: {want}\n  simulated: {got}")
        else:
            same += 1
    want_n = sum(len(g) for _, g in units)
    if same != want_n and not bad:
        bad.append(f"{same} of {want_n} cases compared")
    for b in bad:
        print(f"grid check: {b}", file=sys.stderr)
    print(f"grid check: {same} of {want_n} cases equal the committed rows in {path} "
          f"({time.perf_counter() - t0:.0f} s wall, {cpu:.0f} CPU s)", file=sys.stderr)
    return 1 if bad or same == 0 else 0


def words(s: str) -> list[str]:
    return [x for x in s.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oracle.grid", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=words, default=list(PLAN), help="catalog ids from PLAN, comma-separated (default: all)")
    ap.add_argument("--out", default=CASES, help="where the rows go (default: evidence/oracle.jsonl)")
    ap.add_argument("--jobs", type=int, default=1, help="groups simulated at once, one process each")
    ap.add_argument("--resume", action="store_true", help="keep the cases a stopped run left in OUT.partial; simulate only the rest")
    ap.add_argument("--methods", type=words, default=None,
                    help="simulate only the groups of these methods (e.g. qlora), comma-separated; without --merge, --out then holds only their rows")
    ap.add_argument("--precisions", type=words, default=None,
                    help="simulate only the groups of these precisions (e.g. bf16-mixed), comma-separated; without --merge, --out then holds only their rows")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows already in --out and add or replace the simulated ones")
    ap.add_argument("--check", action="store_true", help="re-simulate the CI slice and compare with --cases")
    ap.add_argument("--cases", default=CASES, help="the committed rows --check compares with")
    a = ap.parse_args(argv)
    for m in a.models:
        if m not in PLAN or not os.path.isfile(os.path.join(ROOT, "catalog", "models", m, "config.json")):
            print(f"grid: {m}: not in the plan or not in catalog/models", file=sys.stderr)
            return 2
    if a.check:
        return check(a.cases, slice_units(), a.jobs)
    t0 = time.perf_counter()
    planned = [(m, g) for m in a.models for g in groups(m)]
    for flag, field, chosen in (("--methods", "method", a.methods), ("--precisions", "precision", a.precisions)):
        have = sorted({getattr(g[0], field) for _, g in planned})
        unknown = [x for x in chosen or [] if x not in have]
        if chosen is not None and (unknown or not chosen):
            print(f"grid: {flag} {','.join(chosen)!r}: the plan's groups of --models have {field} {', '.join(have)}", file=sys.stderr)
            return 2
    units = [(m, g) for m, g in planned
             if (a.methods is None or g[0].method in a.methods) and (a.precisions is None or g[0].precision in a.precisions)]
    if not units:
        print("grid: --methods and --precisions select no group of --models", file=sys.stderr)
        return 2
    partial = a.out + ".partial"
    kept: list[dict] = []
    if a.resume and os.path.exists(partial):
        with open(partial) as f:
            kept = [json.loads(x) for x in f if x.strip()]
        have = {r["id"] for r in kept}
        units = [(m, g) for m, g in units if not all(fakestep.case_id(m, r) in have for r in g)]
        print(f"grid: resuming: {len(kept)} cases from {partial}, {len(units)} groups to go", file=sys.stderr)
    elif os.path.exists(partial):
        os.unlink(partial)
    rows, failed, cpu = run(units, a.jobs, progress=True, partial=partial)
    want = {fakestep.case_id(m, r) for m in a.models for g in groups(m) for r in g}
    rows = list({r["id"]: r for r in kept + rows if r["id"] in want}.values())
    if a.merge and os.path.exists(a.out):
        with open(a.out) as f:
            old = [json.loads(x) for x in f if x.strip()]
        new = {r["id"] for r in rows}
        rows = [r for r in old if r["id"] not in new] + rows
    for f in failed:
        print(f"grid: failed: {f}", file=sys.stderr)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["model"]] = counts.get(r["model"], 0) + 1
    for m in a.models:
        print(f"grid: {m}: {counts.get(m, 0)} cases", file=sys.stderr)
    write_rows(a.out, rows)
    if not failed:
        os.unlink(partial)
    print(f"grid: {len(rows)} cases to {a.out} in {time.perf_counter() - t0:.0f} s wall, {cpu:.0f} CPU s, jobs {a.jobs}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
