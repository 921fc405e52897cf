"""The fake-tensor oracle on the configurations of GPU bench receipts.

    venv=$(scripts/python-env.sh)
    "$venv/bin/python" scripts/oracle-vs-device.py evidence/device/h200-20261204

For every success receipt in DIR/receipts whose configuration the oracle
imitates, runs oracle/fakestep.py on the same request (the config.json the
probe built from, its method, precision, LoRA rank, alpha and targets as PEFT
expanded them, checkpointing, shape and optimizer as torch ran it) and writes
DIR/oracle.jsonl (the simulated rows, by receipt name) and the table in
DIR/oracle-vs-gpu.md: the oracle's peak live tensor bytes against the GPU's
max_memory_allocated. Receipts it refuses are listed with the reason.
"""

from __future__ import annotations

import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from oracle import fakestep  # noqa: E402


def request(r: dict) -> dict:
    c, e = r["config"], r.get("effective") or {}
    opt = c["optimizer"]
    impl = (r.get("optimizer") or {}).get("impl")
    if opt == "adamw_torch" and impl in (None, "for-loop"):
        opt = "adamw_torch_forloop"  # the probe's AdamW(fused=False) before it recorded impl
    req = {"method": c["method"], "precision": c["precision"], "seq_len": c["seq_len"], "batch": c["batch"],
           "grad_accum": c.get("grad_accum", 1), "grad_ckpt": "full" if c.get("grad_ckpt") else "none",
           "optimizer": opt, "attn": c.get("attn", "sdpa")}
    if c["method"] in ("lora", "qlora"):
        req.update(lora_rank=c["rank"], lora_alpha=e.get("lora_alpha") or c.get("alpha"),
                   lora_targets=e.get("targets") or c["targets"])
    if c["method"] == "qlora":
        q = c["quant"]
        req["quant"] = q["scheme"] + ("-dq" if q.get("double_quant") else "")
    return req


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = argv[0]
    rows, lines = [], []
    for p in sorted(glob.glob(os.path.join(d, "receipts", "*.json"))):
        r = json.load(open(p))
        name = os.path.basename(p)[:-5]
        if r["status"] != "success":
            continue
        cfgdir = os.path.join(ROOT, "scripts", "device-configs", os.path.basename(r["config"]["model"]))
        measured = r["measured"]["peak_allocated_bytes"]
        try:
            req = fakestep.Request.from_json(request(r))
            res = fakestep.simulate(cfgdir, req)
        except fakestep.NotSimulated as err:
            lines.append(f"| {name} | {measured / 2**30:.2f} | — | — | not simulated: {err} |")
            continue
        row = fakestep.case(cfgdir, req, res, model=r["config"]["model_id"])
        row["notes"] = f"receipt {r['id']}; " + row["notes"]
        rows.append(json.dumps(row, sort_keys=True))
        err = 100 * (res.peak_bytes - measured) / measured
        lines.append(f"| {name} | {measured / 2**30:.2f} | {res.peak_bytes / 2**30:.2f} | {err:+.2f} % | |")
        print(lines[-1], file=sys.stderr)
    with open(os.path.join(d, "oracle.jsonl"), "w") as f:
        f.write("".join(x + "\n" for x in rows))
    with open(os.path.join(d, "oracle-vs-gpu.md"), "w") as f:
        f.write("# The fake-tensor oracle against the GPU\n\n"
                "Written by `scripts/oracle-vs-device.py`: each success receipt's configuration through\n"
                "oracle/fakestep.py on the CPU (meta tensors), against the probe's `max_memory_allocated`\n"
                "on the GPU. The oracle counts live tensor storages rounded to 512 B; it does not count\n"
                "cuBLAS workspaces or other allocations torch makes outside tensors.\n\n"
                "| probe | GPU allocated GiB | oracle GiB | oracle error | |\n|---|---|---|---|---|\n")
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
