"""The fake-tensor oracle on the configurations of GPU bench receipts.

    venv=$(scripts/python-env.sh)
    "$venv/bin/python" scripts/oracle-vs-device.py evidence/device/h200-20261204

For every measured case in DIR/cases.jsonl (bench --to-case of DIR's
receipts) that has a peak and whose configuration the oracle imitates, runs
oracle/fakestep.py on the same request (oracle/vsreal.py's request for a
case row: the optimizer as torch ran it, the LoRA targets as PEFT expanded
them) and writes DIR/oracle.jsonl (the simulated rows) and the table in
DIR/oracle-vs-gpu.md: the oracle's peak live tensor bytes against the GPU's
max_memory_allocated (from the receipt). Cases it refuses are listed with
the reason.
"""

from __future__ import annotations

import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from oracle import fakestep, vsreal  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = argv[0]
    receipts = {}
    for p in glob.glob(os.path.join(d, "receipts", "*.json")):
        r = json.load(open(p))
        receipts[r["id"]] = (os.path.basename(p)[:-5], r)
    rows, lines = [], []
    for case in sorted(vsreal.read_jsonl(os.path.join(d, "cases.jsonl")), key=lambda c: receipts[c["id"]][0]):
        name, r = receipts[case["id"]]
        if case["measured"].get("oom"):
            continue
        cfgdir = os.path.join(ROOT, "scripts", "device-configs", os.path.basename(r["config"]["model"]))
        measured = r["measured"]["peak_allocated_bytes"]
        try:
            req = fakestep.Request.from_json(vsreal.request(case))
            res = fakestep.simulate(cfgdir, req)
        except fakestep.NotSimulated as err:
            lines.append(f"| {name} | {measured / 2**30:.2f} | — | — | not simulated: {err} |")
            continue
        row = fakestep.case(cfgdir, req, res, model=case["model"])
        row["notes"] = f"receipt {r['id']}; " + row["notes"]
        rows.append(json.dumps(row, sort_keys=True))
        err = 100 * (res.peak_bytes - measured) / measured
        lines.append(f"| {name} | {measured / 2**30:.2f} | {res.peak_bytes / 2**30:.2f} | {err:+.2f} % | |")
        print(lines[-1], file=sys.stderr)
    vsreal.write_atomic(os.path.join(d, "oracle.jsonl"), "".join(x + "\n" for x in rows))
    vsreal.write_atomic(os.path.join(d, "oracle-vs-gpu.md"),
                        "# The fake-tensor oracle against the GPU\n\n"
                        "Written by `scripts/oracle-vs-device.py`: each measured case's configuration through\n"
                        "oracle/fakestep.py on the CPU (meta tensors), against the probe's `max_memory_allocated`\n"
                        "on the GPU. The oracle counts live tensor storages rounded to 512 B; it does not count\n"
                        "cuBLAS workspaces or other allocations torch makes outside tensors.\n\n"
                        "| probe | GPU allocated GiB | oracle GiB | oracle error | |\n|---|---|---|---|---|\n"
                        + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
