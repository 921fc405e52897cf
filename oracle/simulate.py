"""One oracle run for ``canifinetune estimate --simulate``.

The canifinetune binary embeds this file and fakestep.py, writes both to a
temporary directory with the request and the model's config.json, and runs

    python simulate.py --config DIR --request REQUEST.json [--model ID]

It prints exactly one line starting with ``CANIFINETUNE_SIMULATION `` and a
JSON object, and exits 0 whenever it could say what happened:

* ``status`` ``"ok"``: ``result`` holds the peaks in bytes (overall and per
  phase: forward, loss, backward, optimizer) and ``case`` the measurements
  row fakestep.py writes;
* ``"missing"``: torch, transformers or peft cannot be imported; ``missing``
  names them and ``import_errors`` says why;
* ``"not_simulated"``: the oracle refuses the request; ``reason`` says what it
  does not imitate;
* ``"error"``: the request or the run failed; ``reason`` says how.

``versions`` holds the versions of the libraries that imported, and
``python`` and ``python_version`` the interpreter. Only the standard library
is imported before the check, so a missing torch is reported, not a
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys

PREFIX = "CANIFINETUNE_SIMULATION "
MODULES = ("torch", "transformers", "peft")


def report(out: dict) -> int:
    sys.stdout.write(PREFIX + json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="simulate.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="directory holding config.json")
    ap.add_argument("--request", required=True, help="JSON file: one request (estimate --json's config block)")
    ap.add_argument("--model", help="model id for the case row")
    a = ap.parse_args(argv)
    out: dict = {"python": sys.executable, "python_version": sys.version.split()[0], "versions": {}}
    missing, errors = [], {}
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
            out["versions"][name] = getattr(mod, "__version__", "unknown")
        except Exception as e:  # ImportError, or a broken install raising anything at import
            missing.append(name)
            errors[name] = f"{type(e).__name__}: {e}"
    if missing:
        out.update(status="missing", missing=missing, import_errors=errors)
        return report(out)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fakestep

    try:
        with open(a.request) as f:
            raw = json.load(f)
        req = fakestep.Request.from_json(raw.get("config", raw) if isinstance(raw, dict) else raw)
        res = fakestep.simulate(a.config, req)
        case = fakestep.case(a.config, req, res, a.model)
    except fakestep.NotSimulated as e:
        out.update(status="not_simulated", reason=str(e))
        return report(out)
    except (ValueError, TypeError, OSError, fakestep.DataDependent) as e:
        out.update(status="error", reason=f"{type(e).__name__}: {e}")
        return report(out)
    out.update(status="ok", result=dataclasses.asdict(res), case=case)
    return report(out)


if __name__ == "__main__":
    sys.exit(main())
