"""The estimator's allocated-level error on oracle cases, per family and setting.

    canifinetune validate evidence/oracle.jsonl --json | python3 oracle/score.py evidence/oracle.jsonl

Reads validate's JSON on stdin and the cases file (for each case's
architecture, checkpointing and attention) and prints, per model type and per
(model type, method, checkpointing, attention), the number of cases, the
median and 90th percentile of |error| and the worst error (signed: negative is
an under-estimate), with validate's definitions: error = (estimated −
simulated) / simulated, p90 by linear interpolation. Standard library only.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = {}
    with open(argv[1]) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows[r["id"]] = r
    report = json.load(sys.stdin)
    groups: dict[tuple, list[float]] = defaultdict(list)
    skipped = 0
    for c in report["cases"]:
        if c.get("status") != "ok" or c["id"] not in rows:
            skipped += 1
            continue
        r = rows[c["id"]]
        e = c["error_pct"]
        groups[(r["arch"], "*", "*", "*")].append(e)
        groups[(r["arch"], r["method"], r["grad_ckpt"], r["attn"])].append(e)
        groups[("all", "*", "*", "*")].append(e)
    print(f"{'model type':<12} {'method':<6} {'ckpt':<5} {'attn':<6} {'n':>4} {'median|e|%':>10} {'p90|e|%':>8} {'worst%':>8}")
    for k in sorted(groups, key=lambda k: (k[0] == "all", k)):
        es = groups[k]
        a = [abs(x) for x in es]
        worst = max(es, key=abs)
        print(f"{k[0]:<12} {k[1]:<6} {k[2]:<5} {k[3]:<6} {len(es):>4} {p(a, 0.5):>10.2f} {p(a, 0.9):>8.2f} {worst:>+8.2f}")
    if skipped:
        print(f"({skipped} cases not scored: unsupported by the estimator or not in {argv[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
