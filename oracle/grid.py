"""A grid of oracle cases: models × method × checkpointing × attention × shapes.

    python -m oracle.grid [--models ORG/NAME,...] [--out evidence/oracle.jsonl] [--jobs 2]

Every combination of

    model           catalog models (default: one per family, see FAMILIES)
    method          full, lora (LoRA r16 on the attention projections)
    grad_ckpt       none, full
    attn            sdpa, eager
    seq_len         256 512 1024 2048 4096 8192
    batch           1 2 4 8
    grad_accum      1 4

at precision bf16-true with adamw_torch is simulated by fakestep.simulate.
Each model is built once per (method, checkpointing, attention) and run at
every shape. Any axis can be narrowed (--seq 256,1024 --batch 1,4 ...), so a
slice of the grid is the same command with fewer values. Rows go to --out as
JSON Lines in the measurements schema (simulated: true), sorted by id; an
existing file is replaced atomically. Requests the oracle refuses (MoE,
remote-code families) are counted and reported on stderr, not written.

--jobs N runs N models at once in separate processes (one per core).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

from oracle import fakestep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One model per dense family the catalog holds and transformers implements
# natively (MoE and remote-code families are refused by the oracle).
FAMILIES = [
    "meta-llama/Llama-3.2-1B",
    "Qwen/Qwen2.5-0.5B",
    "Qwen/Qwen3-0.6B",
    "google/gemma-2b",
    "google/gemma-2-2b",
    "google/gemma-3-1b-pt",
    "mistralai/Mistral-7B-v0.1",
    "microsoft/phi-1_5",
    "bigcode/gpt_bigcode-santacoder",
    "EleutherAI/pythia-1b",
    "openai-community/gpt2",
    "allenai/OLMo-2-1124-7B",
    "stabilityai/stablelm-3b-4e1t",
    "ibm-granite/granite-3.1-2b-base",
]

AXES = {
    "method": ["full", "lora"],
    "grad_ckpt": ["none", "full"],
    "attn": ["sdpa", "eager"],
    "seq": [256, 512, 1024, 2048, 4096, 8192],
    "batch": [1, 2, 4, 8],
    "accum": [1, 4],
}


def requests(axes: dict) -> list[list[fakestep.Request]]:
    """Requests grouped so that each group shares one built model."""
    groups = []
    for method, ckpt, attn in itertools.product(axes["method"], axes["grad_ckpt"], axes["attn"]):
        g = []
        for seq, batch, accum in itertools.product(axes["seq"], axes["batch"], axes["accum"]):
            r = fakestep.Request(method=method, precision="bf16-true", lora_rank=16, lora_targets=["attention"],
                                 seq_len=seq, batch=batch, grad_accum=accum, grad_ckpt=ckpt, attn=attn)
            r.check()
            g.append(r)
        groups.append(g)
    return groups


def run_model(model: str, axes: dict) -> tuple[list[dict], list[str], float]:
    """All cases of one model: rows, refusals, CPU seconds."""
    c0 = time.process_time()
    cfg = os.path.join(ROOT, "catalog", "models", model)
    rows, refused = [], []
    for group in requests(axes):
        try:
            built = fakestep.build(cfg, group[0])
        except fakestep.NotSimulated as e:
            refused.append(f"{model}: {e}")
            break  # the model itself is refused; every group would be
        for req in group:
            assert fakestep.build_key(req) == fakestep.build_key(group[0])
            try:
                res = fakestep.simulate(cfg, req, built=built)
            except (fakestep.NotSimulated, fakestep.DataDependent) as e:
                refused.append(f"{model} {req.method} ckpt {req.grad_ckpt} {req.attn} s{req.seq_len} b{req.batch}: {e}")
                continue
            rows.append(fakestep.case(cfg, req, res, model))
        del built
    return rows, refused, time.process_time() - c0


def write_rows(path: str, rows: list[dict]) -> None:
    rows = sorted(rows, key=lambda r: r["id"])
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".oracle-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=False) + "\n")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the grid is a committed file
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def words(s: str) -> list[str]:
    return [x for x in s.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oracle.grid", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=words, default=FAMILIES, help="catalog ids, comma-separated (default: one per family)")
    ap.add_argument("--method", type=words, default=AXES["method"])
    ap.add_argument("--grad-ckpt", type=words, default=AXES["grad_ckpt"])
    ap.add_argument("--attn", type=words, default=AXES["attn"])
    ap.add_argument("--seq", type=ints, default=AXES["seq"])
    ap.add_argument("--batch", type=ints, default=AXES["batch"])
    ap.add_argument("--accum", type=ints, default=AXES["accum"])
    ap.add_argument("--out", default=os.path.join(ROOT, "evidence", "oracle.jsonl"))
    ap.add_argument("--jobs", type=int, default=1, help="models simulated at once, one process each")
    a = ap.parse_args(argv)
    axes = {"method": a.method, "grad_ckpt": a.grad_ckpt, "attn": a.attn, "seq": a.seq, "batch": a.batch, "accum": a.accum}
    for m in a.models:
        if not os.path.isfile(os.path.join(ROOT, "catalog", "models", m, "config.json")):
            print(f"grid: {m}: not in catalog/models", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    rows, refused, cpu = [], [], 0.0
    if a.jobs > 1:
        with ProcessPoolExecutor(max_workers=a.jobs) as ex:
            results = list(ex.map(run_model, a.models, itertools.repeat(axes)))
    else:
        results = [run_model(m, axes) for m in a.models]
    for m, (r, ref, c) in zip(a.models, results):
        print(f"grid: {m}: {len(r)} cases, {len(ref)} refused, {c:.0f} CPU s", file=sys.stderr)
        rows += r
        refused += ref
        cpu += c
    for r in refused:
        print(f"grid: not simulated: {r}", file=sys.stderr)
    write_rows(a.out, rows)
    print(f"grid: {len(rows)} cases to {a.out} in {time.perf_counter() - t0:.0f} s wall, {cpu:.0f} CPU s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
